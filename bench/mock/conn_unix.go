//go:build linux || darwin

package mock

import (
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// watchClose calls gone when the peer of conn closes it (EOF or reset)
// before stop is called; stop ends the watch and waits for it. It consumes
// nothing: it peeks, so bytes the client sends (a pipelined request) stay
// for the server, and the watch ends when some arrive (the client is there).
//
// Stopping leaves conn's read deadline in the past; the server sets its own
// before it reads again (fasthttp does when ReadTimeout or IdleTimeout is
// set, as the worker's are). Connections that are not sockets are not
// watched.
func watchClose(conn net.Conn, gone func()) (stop func()) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return func() {}
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return func() {}
	}
	var (
		mu      sync.Mutex
		stopped bool
		done    = make(chan struct{})
	)
	go func() {
		defer close(done)
		var buf [1]byte
		for {
			closed := false
			err := rc.Read(func(fd uintptr) bool {
				n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
				if err == syscall.EAGAIN || err == syscall.EINTR {
					return false // nothing yet: wait for readability
				}
				closed = n == 0 || err != nil // EOF, or reset
				return true
			})
			switch {
			case err == nil:
				if closed {
					gone()
				}
				return
			case !errors.Is(err, os.ErrDeadlineExceeded):
				return // the server closed the connection
			}
			// The server's request-read deadline passed while the request
			// runs, or stop set one: watch on without a deadline unless
			// stopped.
			mu.Lock()
			if stopped {
				mu.Unlock()
				return
			}
			conn.SetReadDeadline(time.Time{}) //nolint:errcheck // a closed conn ends the next Read
			mu.Unlock()
		}
	}()
	return func() {
		mu.Lock()
		stopped = true
		conn.SetReadDeadline(time.Unix(1, 0)) //nolint:errcheck // a closed conn has ended the watch
		mu.Unlock()
		<-done
	}
}
