package linger

import (
	"io"
	"net"
	"sync/atomic"
	"time"
)

// Config bounds a lingering close. Zero fields take the defaults noted.
type Config struct {
	// MaxBytes is the most a lingering close reads and discards. Default 64 MiB.
	MaxBytes int64
	// Timeout bounds a lingering close. Default 10 s.
	Timeout time.Duration
}

// Listen wraps ln: its connections are *Conn. The listener is as
// goroutine-safe as ln.
func Listen(ln net.Listener, cfg Config) net.Listener {
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 64 << 20
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	return &listener{Listener: ln, cfg: cfg}
}

type listener struct {
	net.Listener
	cfg Config
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &Conn{Conn: c, cfg: &l.cfg}, nil
}

// Conn is a connection accepted by a Listen listener. Its methods are
// goroutine-safe as net.Conn's are.
type Conn struct {
	net.Conn
	cfg    *Config
	linger atomic.Bool
}

// OnClose makes the next Close lingering (see the package doc).
func (c *Conn) OnClose() { c.linger.Store(true) }

// Close closes the connection; after OnClose, it shuts the write side and
// closes the socket in the background once the peer has stopped sending,
// MaxBytes were discarded, or Timeout passed.
func (c *Conn) Close() error {
	if !c.linger.Swap(false) {
		return c.Conn.Close()
	}
	cw, ok := c.Conn.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return c.Conn.Close()
	}
	go func() {
		_ = c.Conn.SetReadDeadline(time.Now().Add(c.cfg.Timeout))
		_, _ = io.CopyN(io.Discard, c.Conn, c.cfg.MaxBytes)
		_ = c.Conn.Close()
	}()
	return nil
}

// Set makes c's next Close lingering if c is a *Conn; it reports whether
// it was.
func Set(c net.Conn) bool {
	lc, ok := c.(*Conn)
	if ok {
		lc.OnClose()
	}
	return ok
}
