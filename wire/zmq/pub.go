package zmq

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/go-zeromq/zmq4"
)

// EndSeq is the sequence number that ends a replay stream (-1 as 8 bytes).
const EndSeq = ^uint64(0)

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	Endpoint       string // PUB bind address, e.g. tcp://127.0.0.1:5557
	ReplayEndpoint string // ROUTER bind address; empty disables replay
	Topic          string // first frame of every message, e.g. kv@1@model
	BufferSteps    int    // batches kept for replay (default 10000, as vLLM)
	Logger         *slog.Logger
}

// Publisher sends KV-event batches on a PUB socket and serves replays.
// Publish is goroutine-safe.
type Publisher struct {
	cfg       PublisherConfig
	pub       zmq4.Socket
	replay    zmq4.Socket
	cancel    context.CancelFunc
	done      chan struct{} // closed when the replay server has stopped
	closed    chan struct{} // closed by Close
	closeOnce sync.Once

	mu struct {
		sync.Mutex
		seq  uint64
		ring []entry // circular, len == BufferSteps once full
		next int
	}
}

type entry struct {
	seq     uint64
	payload []byte
}

// NewPublisher binds the PUB (and replay ROUTER) sockets.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if cfg.BufferSteps <= 0 {
		cfg.BufferSteps = 10000
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Publisher{cfg: cfg, cancel: cancel, done: make(chan struct{}), closed: make(chan struct{})}
	p.pub = zmq4.NewPub(ctx)
	if err := p.pub.Listen(cfg.Endpoint); err != nil {
		cancel()
		return nil, fmt.Errorf("zmq: bind PUB %s: %w", cfg.Endpoint, err)
	}
	if cfg.ReplayEndpoint == "" {
		close(p.done)
		return p, nil
	}
	p.replay = zmq4.NewRouter(ctx, zmq4.WithID(zmq4.SocketIdentity("kvroute-replay")))
	if err := p.replay.Listen(cfg.ReplayEndpoint); err != nil {
		cancel()
		p.pub.Close()
		return nil, fmt.Errorf("zmq: bind ROUTER %s: %w", cfg.ReplayEndpoint, err)
	}
	go p.serveReplay()
	return p, nil
}

// Addr is the bound PUB address (useful with port 0).
func (p *Publisher) Addr() string { return p.pub.Addr().String() }

// ReplayAddr is the bound replay address, or "" when replay is off.
func (p *Publisher) ReplayAddr() string {
	if p.replay == nil {
		return ""
	}
	return p.replay.Addr().String()
}

// Publish sends one batch with the next sequence number and keeps it for
// replay. payload is copied. It returns the sequence number used.
func (p *Publisher) Publish(payload []byte) (uint64, error) {
	return p.publish(payload, true)
}

// Skip consumes a sequence number and buffers the batch for replay without
// sending it live: the fault switch that simulates a dropped message.
func (p *Publisher) Skip(payload []byte) uint64 {
	seq, _ := p.publish(payload, false)
	return seq
}

func (p *Publisher) publish(payload []byte, send bool) (uint64, error) {
	buf := append([]byte(nil), payload...)
	p.mu.Lock()
	defer p.mu.Unlock()
	seq := p.mu.seq
	p.mu.seq++
	e := entry{seq: seq, payload: buf}
	if len(p.mu.ring) < p.cfg.BufferSteps {
		p.mu.ring = append(p.mu.ring, e)
	} else {
		p.mu.ring[p.mu.next] = e
		p.mu.next = (p.mu.next + 1) % len(p.mu.ring)
	}
	if !send {
		return seq, nil
	}
	var sb [8]byte
	binary.BigEndian.PutUint64(sb[:], seq)
	if err := p.pub.Send(zmq4.NewMsgFrom([]byte(p.cfg.Topic), sb[:], buf)); err != nil {
		return seq, fmt.Errorf("zmq: publish seq %d: %w", seq, err)
	}
	return seq, nil
}

// buffered returns the buffered batches with seq ≥ start, oldest first.
func (p *Publisher) buffered(start uint64) []entry {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []entry
	n := len(p.mu.ring)
	for i := 0; i < n; i++ {
		e := p.mu.ring[(p.mu.next+i)%n]
		if e.seq >= start {
			out = append(out, e)
		}
	}
	return out
}

func (p *Publisher) serveReplay() {
	defer close(p.done)
	for {
		msg, err := p.replay.Recv()
		if err != nil {
			select {
			case <-p.closed:
				return
			default:
			}
			if errors.Is(err, context.Canceled) {
				return
			}
			p.cfg.Logger.Warn("zmq replay: receive failed", "err", err)
			continue
		}
		f := msg.Frames
		if len(f) < 2 || len(f[len(f)-1]) != 8 {
			p.cfg.Logger.Warn("zmq replay: malformed request", "frames", len(f))
			continue
		}
		id := f[0]
		start := binary.BigEndian.Uint64(f[len(f)-1])
		topic := []byte(p.cfg.Topic)
		for _, e := range p.buffered(start) {
			var sb [8]byte
			binary.BigEndian.PutUint64(sb[:], e.seq)
			if err := p.replay.Send(zmq4.NewMsgFrom(id, nil, topic, sb[:], e.payload)); err != nil {
				p.cfg.Logger.Warn("zmq replay: send failed", "err", err)
				break
			}
		}
		var end [8]byte
		binary.BigEndian.PutUint64(end[:], EndSeq)
		_ = p.replay.Send(zmq4.NewMsgFrom(id, nil, nil, end[:], nil))
	}
}

// Close closes both sockets and waits for the replay server to stop.
func (p *Publisher) Close() error {
	var err error
	p.closeOnce.Do(func() {
		close(p.closed)
		p.cancel()
		err = p.pub.Close()
		if p.replay != nil {
			p.replay.Close()
		}
		<-p.done
	})
	return err
}
