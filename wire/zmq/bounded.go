package zmq

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
)

// DefaultMaxMessageBytes is the default of SubscriberConfig.MaxMessageBytes
// (--max-event-bytes): 16 MiB, far above a vLLM event batch (a batch of
// 1,000 Stored events of 16 blocks is ~300 KB) and far below a hostile
// peer's 200 MB frame.
const DefaultMaxMessageBytes = 16 << 20

// ErrTooLarge is the read error of a connection whose peer announced a
// ZMTP frame or message larger than the bound: the connection is closed
// before the frame is allocated (zmq4 allocates a frame's announced size
// at once) and the subscriber dials again.
var ErrTooLarge = errors.New("zmq: message larger than --max-event-bytes")

// zmtpGreeting is the size of the ZMTP 3 greeting, which precedes the
// frames.
const zmtpGreeting = 64

// boundedConn checks the ZMTP framing of what it reads: a frame or a
// multipart message larger than max fails the read (ErrTooLarge) before
// zmq4 sees its header. NULL security only (frames in the clear).
type boundedConn struct {
	net.Conn
	max     uint64
	tooBig  *atomic.Uint64 // the subscriber's counter, if any
	greet   int            // greeting bytes still to pass
	hdr     [9]byte        // the frame header being read
	hn      int            // bytes of hdr read
	body    uint64         // body bytes of the current frame still to pass
	msg     uint64         // bytes of the current message so far
	more    bool           // the current frame has the MORE flag
	tripped bool
}

func (c *boundedConn) Read(p []byte) (int, error) {
	if c.tripped {
		return 0, ErrTooLarge
	}
	n, err := c.Conn.Read(p)
	if c.scan(p[:n]) {
		c.tripped = true
		if c.tooBig != nil {
			c.tooBig.Add(1)
		}
		_ = c.Conn.Close()
		return 0, ErrTooLarge
	}
	return n, err
}

// scan advances the framing state over b and reports whether a frame or
// message exceeds max.
func (c *boundedConn) scan(b []byte) bool {
	for len(b) > 0 {
		switch {
		case c.greet > 0:
			k := min(c.greet, len(b))
			c.greet -= k
			b = b[k:]
		case c.body > 0:
			k := uint64(len(b))
			if k > c.body {
				k = c.body
			}
			c.body -= k
			b = b[k:]
		default:
			c.hdr[c.hn] = b[0]
			c.hn++
			b = b[1:]
			long := c.hdr[0]&0x02 != 0
			need := 2
			if long {
				need = 9
			}
			if c.hn < need {
				continue
			}
			size := uint64(c.hdr[1])
			if long {
				size = binary.BigEndian.Uint64(c.hdr[1:9])
			}
			if !c.more {
				c.msg = 0 // a new message starts with this frame
			}
			c.more = c.hdr[0]&0x01 != 0
			c.hn = 0
			if size > c.max || c.msg+size > c.max {
				return true
			}
			c.msg += size
			c.body = size
		}
	}
	return false
}

type oversizeKey struct{}

// boundedTransport dials TCP and wraps the connection in a boundedConn.
type boundedTransport struct{ max uint64 }

func (t boundedTransport) Dial(ctx context.Context, d transport.Dialer, addr string) (net.Conn, error) {
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	cnt, _ := ctx.Value(oversizeKey{}).(*atomic.Uint64)
	return &boundedConn{Conn: c, max: t.max, tooBig: cnt, greet: zmtpGreeting}, nil
}

func (t boundedTransport) Listen(ctx context.Context, addr string) (net.Listener, error) {
	return nil, errors.New("zmq: bounded transport only dials")
}

func (t boundedTransport) Addr(ep string) (string, error) { return ep, nil }

var bounded struct {
	sync.Mutex
	schemes map[uint64]string
}

// boundedEndpoint rewrites a tcp:// endpoint to the bounded transport of
// max bytes (registered with zmq4 on first use).
func boundedEndpoint(ep string, max uint64) (string, error) {
	const tcp = "tcp://"
	if len(ep) < len(tcp) || ep[:len(tcp)] != tcp {
		return ep, nil
	}
	bounded.Lock()
	defer bounded.Unlock()
	scheme, ok := bounded.schemes[max]
	if !ok {
		scheme = "tcp-max-" + strconv.FormatUint(max, 10)
		if err := zmq4.RegisterTransport(scheme, boundedTransport{max: max}); err != nil {
			return "", fmt.Errorf("zmq: register bounded transport: %w", err)
		}
		if bounded.schemes == nil {
			bounded.schemes = map[uint64]string{}
		}
		bounded.schemes[max] = scheme
	}
	return scheme + "://" + ep[len(tcp):], nil
}
