package zmq

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
)

// Handler receives one batch. payload is valid only during the call.
// replayed says whether it came from the replay socket.
type Handler func(seq uint64, payload []byte, replayed bool)

// SubscriberConfig configures a Subscriber.
type SubscriberConfig struct {
	Endpoint       string        // the engine's PUB address, e.g. tcp://127.0.0.1:5557
	ReplayEndpoint string        // the engine's replay ROUTER address; empty: gaps are only counted
	Topic          string        // subscription prefix; "" receives every topic
	RetryInterval  time.Duration // between dial attempts (default 500ms)
	ReplayTimeout  time.Duration // wait for a replay reply (default 2s)
	// MaxMessageBytes bounds a frame and a multipart message, live or
	// replayed (--max-event-bytes): a connection announcing a larger one
	// is closed before it is read (counted in Oversized) and dialed
	// again. Default DefaultMaxMessageBytes.
	MaxMessageBytes int
	Logger          *slog.Logger
}

// SubscriberStats are a Subscriber's counters. Read them with Stats.
type SubscriberStats struct {
	Received   uint64 // live batches delivered
	Replayed   uint64 // batches delivered from the replay socket
	Gaps       uint64 // sequence gaps detected
	Lost       uint64 // batches missed and not recovered by replay
	Restarts   uint64 // sequence numbers went backwards (engine restarted)
	Reconnects uint64 // successful dials after the first
	Malformed  uint64 // messages with the wrong frame count or seq size
	Oversized  uint64 // connections closed at a frame or message over MaxMessageBytes
}

// Subscriber dials an engine's PUB socket and delivers its batches in order
// to a Handler from one goroutine. Its methods are goroutine-safe.
type Subscriber struct {
	cfg    SubscriberConfig
	h      Handler
	cancel context.CancelFunc
	done   chan struct{}

	received, replayed, gaps, lost, restarts, reconnects, malformed atomic.Uint64
	oversized                                                       atomic.Uint64
	connected                                                       atomic.Bool
}

// Subscribe starts a Subscriber; it keeps dialing until the engine is up.
func Subscribe(cfg SubscriberConfig, h Handler) *Subscriber {
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = 500 * time.Millisecond
	}
	if cfg.ReplayTimeout <= 0 {
		cfg.ReplayTimeout = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = DefaultMaxMessageBytes
	}
	s := &Subscriber{h: h, done: make(chan struct{})}
	for _, ep := range []*string{&cfg.Endpoint, &cfg.ReplayEndpoint} {
		if b, err := boundedEndpoint(*ep, uint64(cfg.MaxMessageBytes)); err == nil {
			*ep = b
		} else {
			cfg.Logger.Error("zmq: message size bound not applied", "err", err)
		}
	}
	s.cfg = cfg
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), oversizeKey{}, &s.oversized))
	s.cancel = cancel
	go s.run(ctx)
	return s
}

// Connected reports whether the SUB socket is currently dialed.
func (s *Subscriber) Connected() bool { return s.connected.Load() }

// Stats returns the counters.
func (s *Subscriber) Stats() SubscriberStats {
	return SubscriberStats{
		Received: s.received.Load(), Replayed: s.replayed.Load(), Gaps: s.gaps.Load(),
		Lost: s.lost.Load(), Restarts: s.restarts.Load(), Reconnects: s.reconnects.Load(),
		Malformed: s.malformed.Load(), Oversized: s.oversized.Load(),
	}
}

// Close stops the subscriber and waits for its goroutine.
func (s *Subscriber) Close() {
	s.cancel()
	<-s.done
}

func (s *Subscriber) run(ctx context.Context) {
	defer close(s.done)
	var (
		last    uint64
		haveSeq bool
		dials   int
		rp      *replayer
	)
	defer func() {
		if rp != nil {
			rp.close()
		}
	}()
	for ctx.Err() == nil {
		sub := zmq4.NewSub(ctx, zmq4.WithDialerRetry(s.cfg.RetryInterval), zmq4.WithDialerMaxRetries(0))
		if err := sub.Dial(s.cfg.Endpoint); err != nil {
			sub.Close()
			s.cfg.Logger.Debug("zmq: engine not reachable yet", "endpoint", s.cfg.Endpoint, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(s.cfg.RetryInterval):
			}
			continue
		}
		if err := sub.SetOption(zmq4.OptionSubscribe, s.cfg.Topic); err != nil {
			sub.Close()
			s.cfg.Logger.Error("zmq: subscribe", "err", err)
			return
		}
		if dials > 0 {
			s.reconnects.Add(1)
		}
		dials++
		fresh := true // the first batch on a new connection may come from a restarted engine
		s.connected.Store(true)
		s.cfg.Logger.Info("zmq: subscribed", "endpoint", s.cfg.Endpoint)
		for {
			msg, err := sub.Recv()
			if err != nil {
				break
			}
			f := msg.Frames
			if len(f) != 3 || len(f[1]) != 8 {
				s.malformed.Add(1)
				continue
			}
			seq := binary.BigEndian.Uint64(f[1])
			switch {
			case !haveSeq:
			case seq <= last:
				if !fresh && seq != 0 {
					continue // a duplicate
				}
				s.restarts.Add(1) // a new engine process numbers from 0 again
			case seq > last+1:
				s.gaps.Add(1)
				if s.cfg.ReplayEndpoint != "" {
					if rp == nil {
						rp = newReplayer(ctx, s.cfg)
					}
					last = rp.fill(last+1, seq, func(rs uint64, payload []byte) {
						s.replayed.Add(1)
						s.h(rs, payload, true)
					}, last)
				}
				if seq > last+1 {
					s.lost.Add(seq - last - 1)
					s.cfg.Logger.Warn("zmq: events lost", "endpoint", s.cfg.Endpoint, "from", last+1, "to", seq-1)
				}
			}
			haveSeq, last, fresh = true, seq, false
			s.received.Add(1)
			s.h(seq, f[2], false)
		}
		s.connected.Store(false)
		sub.Close()
	}
}

// replayer asks an engine's replay socket for missed batches.
type replayer struct {
	cfg  SubscriberConfig
	sock zmq4.Socket
	msgs chan zmq4.Msg
	once sync.Once
}

func newReplayer(ctx context.Context, cfg SubscriberConfig) *replayer {
	r := &replayer{cfg: cfg, msgs: make(chan zmq4.Msg, 64)}
	r.sock = zmq4.NewDealer(ctx, zmq4.WithDialerRetry(cfg.RetryInterval), zmq4.WithDialerMaxRetries(3))
	if err := r.sock.Dial(cfg.ReplayEndpoint); err != nil {
		cfg.Logger.Warn("zmq: replay socket not reachable", "endpoint", cfg.ReplayEndpoint, "err", err)
		r.sock.Close()
		r.sock = nil
		return r
	}
	go func() {
		for {
			m, err := r.sock.Recv()
			if err != nil {
				close(r.msgs)
				return
			}
			r.msgs <- m
		}
	}()
	return r
}

// fill requests batches [from, until) and delivers those after last in
// order; it returns the new last delivered sequence number.
func (r *replayer) fill(from, until uint64, deliver func(uint64, []byte), last uint64) uint64 {
	if r.sock == nil {
		return last
	}
	var sb [8]byte
	binary.BigEndian.PutUint64(sb[:], from)
	if err := r.sock.Send(zmq4.NewMsgFrom(nil, sb[:])); err != nil {
		r.cfg.Logger.Warn("zmq: replay request failed", "err", err)
		return last
	}
	timer := time.NewTimer(r.cfg.ReplayTimeout)
	defer timer.Stop()
	for {
		select {
		case m, ok := <-r.msgs:
			if !ok {
				return last
			}
			seq, payload, err := parseReplay(m.Frames)
			if err != nil {
				r.cfg.Logger.Warn("zmq: malformed replay reply", "err", err)
				continue
			}
			if seq == EndSeq {
				return last
			}
			if seq == last+1 && seq < until {
				deliver(seq, payload)
				last = seq
			}
		case <-timer.C:
			r.cfg.Logger.Warn("zmq: replay timed out", "from", from, "until", until)
			return last
		}
	}
}

// parseReplay accepts ["", topic, seq, payload] (vLLM) and ["", seq, payload]
// (SGLang, older vLLM), with or without the empty delimiter.
func parseReplay(f [][]byte) (uint64, []byte, error) {
	if len(f) > 0 && len(f[0]) == 0 && len(f) >= 3 {
		f = f[1:]
	}
	switch {
	case len(f) == 3 && len(f[1]) == 8:
		return binary.BigEndian.Uint64(f[1]), f[2], nil
	case len(f) == 2 && len(f[0]) == 8:
		return binary.BigEndian.Uint64(f[0]), f[1], nil
	}
	return 0, nil, fmt.Errorf("unexpected replay frames: %d", len(f))
}

func (r *replayer) close() {
	r.once.Do(func() {
		if r.sock != nil {
			r.sock.Close()
		}
	})
}
