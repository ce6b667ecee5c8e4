package proxy

import (
	"errors"
	"net"
	"time"
)

// ErrFirstByteTimeout is the error of a streamed Send whose worker accepted
// the request but sent no byte of its answer within Config.FirstByteTimeout.
// (fasthttp reports every timeout as fasthttp.ErrTimeout; on the streamed
// client, where the first-byte bound is the shortest deadline, Send reports
// a timeout as this error.)
var ErrFirstByteTimeout = errors.New("no answer within the first-byte timeout (--worker-first-byte-timeout)")

// ErrResponseTimeout is the error of a non-streamed Send whose worker
// accepted the request but sent no byte of its answer within
// Config.ResponseTimeout.
var ErrResponseTimeout = errors.New("no answer within the response timeout (--worker-response-timeout)")

// ErrClientDeadline is the error of a non-streamed SendDeadline whose
// client's deadline passed before the worker answered: the client has given
// up, and the worker may be healthy (a long generation).
var ErrClientDeadline = errors.New("no answer within the client's deadline")

// ErrAbandoned is the error of a Send that Abandon gave up on: the worker
// was taken out of routing while the request waited for its answer.
var ErrAbandoned = errors.New("request given up: the worker was taken out of routing before it answered")

// firstByteConn bounds the wait for the first byte of each answer on a
// keep-alive connection to a worker. The fasthttp client sets one read
// deadline per request (Config.ReadTimeout, long: it must let a generation
// run); a write (the next request) arms a shorter deadline, which the first
// byte read disarms, restoring the client's. The client uses a connection
// for one request at a time, so the fields need no lock.
//
// Each deadline change is a runtime timer update, so they are made only
// where a read depends on them: the armed deadline goes to the socket with
// the client's own SetReadDeadline, which follows the write, or before the
// next read; the client's is restored before a read that follows the first
// byte, so an answer read whole by its first read (a short non-streamed
// one) costs one deadline change instead of three. Decision record 0044.
type firstByteConn struct {
	net.Conn
	timeout  time.Duration
	armed    bool      // waiting for the first byte of an answer
	stale    bool      // the socket's read deadline is not earliest()
	deadline time.Time // the client's read deadline
	fbAt     time.Time // the armed first-byte deadline
}

func (c *firstByteConn) Write(b []byte) (int, error) {
	if !c.armed {
		c.armed, c.stale = true, true
		c.fbAt = time.Now().Add(c.timeout)
	}
	return c.Conn.Write(b)
}

func (c *firstByteConn) earliest() time.Time {
	if c.armed && (c.deadline.IsZero() || c.fbAt.Before(c.deadline)) {
		return c.fbAt
	}
	return c.deadline
}

func (c *firstByteConn) SetReadDeadline(t time.Time) error {
	c.deadline, c.stale = t, false
	return c.Conn.SetReadDeadline(c.earliest())
}

func (c *firstByteConn) SetDeadline(t time.Time) error {
	c.deadline, c.stale = t, false
	if err := c.Conn.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.Conn.SetReadDeadline(c.earliest())
}

func (c *firstByteConn) Read(b []byte) (int, error) {
	if c.stale {
		c.stale = false
		if err := c.Conn.SetReadDeadline(c.earliest()); err != nil {
			return 0, err
		}
	}
	n, err := c.Conn.Read(b)
	if c.armed && n > 0 {
		c.armed, c.stale = false, true // restored before the next read
	}
	return n, err
}
