// Package handover lets two servers take turns on one listener: one that
// answers while a service starts (its port is open from the first moment)
// and the one that serves once it is up, without closing the port in
// between.
package handover

import (
	"net"
	"sync"
)

// Listener accepts from a listener on its own goroutine and hands each
// connection to whichever of its views asks first (View). Goroutine-safe.
// The zero value is not usable; call Share.
type Listener struct {
	ln    net.Listener
	conns chan net.Conn
	done  chan struct{} // closed when the accept loop ends (err is set)
	stop  chan struct{} // closed by Close
	once  sync.Once
	err   error
}

// Share starts accepting from ln. Close closes ln.
func Share(ln net.Listener) *Listener {
	l := &Listener{ln: ln, conns: make(chan net.Conn), done: make(chan struct{}), stop: make(chan struct{})}
	go l.loop()
	return l
}

func (l *Listener) loop() {
	defer close(l.done)
	for {
		c, err := l.ln.Accept()
		if err != nil {
			l.err = err
			return
		}
		select {
		case l.conns <- c:
		case <-l.stop:
			_ = c.Close()
			l.err = net.ErrClosed
			return
		}
	}
}

// View returns a listener that takes connections from l until it is
// closed; closing it leaves l open, so that the next view (a server
// started after the first one stopped) takes the connections that follow.
// A connection accepted while no view asks waits for the next one.
func (l *Listener) View() net.Listener { return &view{l: l, closed: make(chan struct{})} }

// Last returns a view whose Close closes l too: the last server's, so that
// its shutdown closes the port.
func (l *Listener) Last() net.Listener { return &view{l: l, closed: make(chan struct{}), last: true} }

// Close closes the shared listener: every view's Accept fails from then.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.stop)
		err = l.ln.Close()
	})
	return err
}

// Addr is the shared listener's address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

type view struct {
	l      *Listener
	closed chan struct{}
	once   sync.Once
	last   bool // Close closes l
}

func (v *view) Accept() (net.Conn, error) {
	select {
	case <-v.closed:
		return nil, net.ErrClosed
	default:
	}
	select {
	case c := <-v.l.conns:
		return c, nil
	case <-v.closed:
		return nil, net.ErrClosed
	case <-v.l.done:
		return nil, v.l.err
	}
}

func (v *view) Close() error {
	v.once.Do(func() { close(v.closed) })
	if v.last {
		return v.l.Close()
	}
	return nil
}

func (v *view) Addr() net.Addr { return v.l.ln.Addr() }
