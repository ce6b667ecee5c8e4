package zmq

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

type collector struct {
	mu       sync.Mutex
	seqs     []uint64
	payloads []string
	replayed int
	ch       chan struct{}
}

func newCollector() *collector { return &collector{ch: make(chan struct{}, 1024)} }

func (c *collector) handle(seq uint64, p []byte, replayed bool) {
	c.mu.Lock()
	c.seqs = append(c.seqs, seq)
	c.payloads = append(c.payloads, string(p))
	if replayed {
		c.replayed++
	}
	c.mu.Unlock()
	c.ch <- struct{}{}
}

func (c *collector) wait(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		got := len(c.seqs)
		c.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-c.ch:
		case <-deadline:
			t.Fatalf("timed out with %d of %d batches", got, n)
		}
	}
}

// warm publishes probe batches until the subscriber sees one (PUB/SUB drops
// messages sent before the subscription reaches the publisher).
func warm(t *testing.T, p *Publisher, c *collector) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := p.Publish([]byte("probe")); err != nil {
			t.Fatal(err)
		}
		select {
		case <-c.ch:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatal("subscriber never received a probe")
}

func TestPublishSubscribeReplay(t *testing.T) {
	pp, rp := freePort(t), freePort(t)
	p, err := NewPublisher(PublisherConfig{
		Endpoint:       fmt.Sprintf("tcp://127.0.0.1:%d", pp),
		ReplayEndpoint: fmt.Sprintf("tcp://127.0.0.1:%d", rp),
		Topic:          "kv@1@m",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := newCollector()
	s := Subscribe(SubscriberConfig{
		Endpoint:       fmt.Sprintf("tcp://127.0.0.1:%d", pp),
		ReplayEndpoint: fmt.Sprintf("tcp://127.0.0.1:%d", rp),
		Topic:          "kv@",
		RetryInterval:  20 * time.Millisecond,
	}, c.handle)
	defer s.Close()
	warm(t, p, c)
	c.mu.Lock()
	base := len(c.seqs)
	c.mu.Unlock()

	// a, then b and c are "dropped" on the live socket, then d: the
	// subscriber must replay b and c before delivering d.
	mustPublish(t, p, "a")
	p.Skip([]byte("b"))
	p.Skip([]byte("c"))
	mustPublish(t, p, "d")
	c.wait(t, base+4)
	c.mu.Lock()
	got := c.payloads[len(c.payloads)-4:]
	seqs := c.seqs[len(c.seqs)-4:]
	replayed := c.replayed
	c.mu.Unlock()
	if fmt.Sprint(got) != "[a b c d]" {
		t.Fatalf("order %v, want [a b c d]", got)
	}
	for i := 1; i < 4; i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Fatalf("sequence numbers not contiguous: %v", seqs)
		}
	}
	st := s.Stats()
	if st.Gaps != 1 || st.Lost != 0 || replayed != 2 || st.Replayed != 2 {
		t.Fatalf("stats %+v replayed %d, want one gap, two replayed, none lost", st, replayed)
	}
}

func TestGapWithoutReplayIsCounted(t *testing.T) {
	pp := freePort(t)
	p, err := NewPublisher(PublisherConfig{Endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", pp), Topic: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := newCollector()
	s := Subscribe(SubscriberConfig{Endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", pp), RetryInterval: 20 * time.Millisecond}, c.handle)
	defer s.Close()
	warm(t, p, c)
	p.Skip([]byte("x"))
	p.Skip([]byte("y"))
	mustPublish(t, p, "z")
	deadline := time.Now().Add(10 * time.Second)
	for s.Stats().Lost != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v, want 2 lost", s.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSubscriberDialsEngineThatStartsLater(t *testing.T) {
	pp := freePort(t)
	ep := fmt.Sprintf("tcp://127.0.0.1:%d", pp)
	c := newCollector()
	s := Subscribe(SubscriberConfig{Endpoint: ep, RetryInterval: 20 * time.Millisecond}, c.handle)
	defer s.Close()
	time.Sleep(100 * time.Millisecond) // the engine is not up: dials fail meanwhile
	if s.Connected() {
		t.Fatal("connected to nothing")
	}
	p, err := NewPublisher(PublisherConfig{Endpoint: ep, Topic: "t"})
	if err != nil {
		t.Fatal(err)
	}
	warm(t, p, c)
	p.Close()

	// The engine restarts: a new process numbers from 0 again.
	p2, err := NewPublisher(PublisherConfig{Endpoint: ep, Topic: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	warm(t, p2, c)
	if st := s.Stats(); st.Received < 2 || st.Restarts < 1 {
		t.Fatalf("stats %+v", st)
	}
}

func mustPublish(t *testing.T, p *Publisher, s string) {
	t.Helper()
	if _, err := p.Publish([]byte(s)); err != nil {
		t.Fatal(err)
	}
}

func TestParseReplay(t *testing.T) {
	seq := []byte{0, 0, 0, 0, 0, 0, 0, 7}
	for _, f := range [][][]byte{
		{{}, []byte("topic"), seq, []byte("p")},
		{{}, seq, []byte("p")},
		{[]byte("topic"), seq, []byte("p")},
		{seq, []byte("p")},
	} {
		s, p, err := parseReplay(f)
		if err != nil || s != 7 || string(p) != "p" {
			t.Fatalf("%q: %d %q %v", f, s, p, err)
		}
	}
	if _, _, err := parseReplay([][]byte{{1}}); err == nil {
		t.Fatal("malformed reply accepted")
	}
}
