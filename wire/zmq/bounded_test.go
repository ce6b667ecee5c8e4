package zmq

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestBoundedConnScan: a hostile 200 MB frame is refused from its header;
// frames and multipart messages within the bound pass, whatever the read
// boundaries.
func TestBoundedConnScan(t *testing.T) {
	frame := func(more bool, size int) []byte {
		var fl byte
		if more {
			fl |= 1
		}
		if size > 255 {
			h := make([]byte, 9)
			h[0] = fl | 2
			binary.BigEndian.PutUint64(h[1:], uint64(size))
			return h
		}
		return []byte{fl, byte(size)}
	}
	stream := func(parts ...[]byte) []byte {
		out := make([]byte, zmtpGreeting)
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	body := func(n int) []byte { return make([]byte, n) }
	ok := stream(frame(true, 5), body(5), frame(true, 8), body(8), frame(false, 300), body(300), frame(false, 1000), body(1000))
	huge := stream(frame(false, 10), body(10), frame(false, 200<<20))
	multi := stream(frame(true, 600), body(600), frame(false, 600))
	for _, c := range []struct {
		name string
		in   []byte
		want bool
	}{{"within", ok, false}, {"200 MB frame", huge, true}, {"message over the bound", multi, true}} {
		for _, step := range []int{1, 3, 7, len(c.in)} {
			bc := &boundedConn{max: 1024, greet: zmtpGreeting}
			got := false
			for i := 0; i < len(c.in) && !got; i += step {
				got = bc.scan(c.in[i:min(i+step, len(c.in))])
			}
			if got != c.want {
				t.Errorf("%s, reads of %d bytes: tripped %v, want %v", c.name, step, got, c.want)
			}
		}
	}
}

// TestSubscriberRefusesOversizedMessages: a real publisher's message over
// MaxMessageBytes is never delivered, the connection is counted and dialed
// again, and later messages flow.
func TestSubscriberRefusesOversizedMessages(t *testing.T) {
	pp := freePort(t)
	p, err := NewPublisher(PublisherConfig{Endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", pp), Topic: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := newCollector()
	s := Subscribe(SubscriberConfig{Endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", pp), Topic: "t",
		RetryInterval: 20 * time.Millisecond, MaxMessageBytes: 1024}, c.handle)
	defer s.Close()
	warm(t, p, c)
	mustPublish(t, p, strings.Repeat("x", 4096))
	deadline := time.Now().Add(10 * time.Second)
	for s.Stats().Oversized == 0 {
		if time.Now().After(deadline) {
			t.Fatal("oversized message not refused")
		}
		time.Sleep(5 * time.Millisecond)
	}
	warm(t, p, c)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, pl := range c.payloads {
		if len(pl) > 1024 {
			t.Fatalf("a %d-byte payload was delivered", len(pl))
		}
	}
}

// FuzzBoundedConnScan: the framing check sees any byte stream (after a
// greeting) the same whatever the read boundaries, and never trips before
// a frame header is complete.
func FuzzBoundedConnScan(f *testing.F) {
	f.Add([]byte{1, 5, 0, 0, 0, 0, 0, 0, 3, 'a', 'b', 'c'}, uint8(3))
	f.Add([]byte{2, 0, 0, 0, 0, 12, 0, 0, 0}, uint8(1))
	f.Fuzz(func(t *testing.T, frames []byte, step uint8) {
		in := append(make([]byte, zmtpGreeting), frames...)
		whole := (&boundedConn{max: 1024, greet: zmtpGreeting}).scan(in)
		s := int(step%32) + 1
		bc := &boundedConn{max: 1024, greet: zmtpGreeting}
		split := false
		for i := 0; i < len(in) && !split; i += s {
			split = bc.scan(in[i:min(i+s, len(in))])
		}
		if whole != split {
			t.Fatalf("whole %v, in reads of %d: %v", whole, s, split)
		}
		if whole && len(frames) < 2 {
			t.Fatal("tripped without a complete header")
		}
	})
}
