package ingest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/plane"
)

// DefaultSafeInterval is how often SubscribeLive samples the stream for its
// safe sequence (SafeSeq): one stream info request and one round trip to
// the server per interval.
const DefaultSafeInterval = time.Second

// MarkSubject is the subject of the catch-up markers SubscribeLive
// publishes into the KV-event stream (Subjects.KVEvents + ".mark"; the
// stream captures it, EnsureStream). A marker carries no events.
func MarkSubject(s plane.Subjects) string { return s.KVEvents + ".mark" }

// liveState is SubscribeLive's: the stream read for catch-up, the sampler
// of the safe sequence, and the catch-up in progress.
type liveState struct {
	in     *Ingest
	nc     *nats.Conn
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	subs   [2][]*nats.Subscription // per pipe (Dynamo: kv-events and kv_events; native)

	mu struct {
		sync.Mutex
		stream   jetstream.Stream
		catching bool // a catch-up goroutine runs
		again    bool // a reconnection happened during it: mark and replay once more
		from     uint64
	}
	catchUps, catchUpFailures atomic.Uint64
}

func (l *liveState) stop() {
	l.cancel()
	l.wg.Wait()
}

// SubscribeLive is the JetStream-backed live path (see the package doc):
// the events are taken from core NATS subscriptions, as SubscribeNATS does,
// while the stream (EnsureStream) keeps them; the stream is read only to
// catch up: from stream sequence from (0: no catch-up at start) at once,
// and after every NATS reconnection (CatchUp) from SafeSeq()+1. A catch-up
// holds the core messages (buffered, not applied), publishes a marker on
// MarkSubject and replays the stream from its start up to the marker's
// sequence, then applies the held messages: the event-id tracking drops
// what both paths delivered. Call it once, instead of SubscribeNATS and
// ConsumeJetStream; Close stops it. Config.AfterApply is called for the
// replayed messages (not for the core ones).
func (in *Ingest) SubscribeLive(nc *nats.Conn, stream jetstream.Stream, from uint64) error {
	if stream == nil {
		return errors.New("ingest: nil JetStream stream")
	}
	if err := in.lockForNATS(nc); err != nil {
		return err
	}
	defer in.mu.Unlock()
	dp, np := newPipe(in, SourceNATSDynamo), newPipe(in, SourceNATSNative)
	dp.hold, np.hold = from > 0, from > 0 // before the first message can arrive
	if err := in.subscribeLocked(nc, dp, np); err != nil {
		return err
	}
	l := &liveState{in: in, nc: nc}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.mu.stream = stream
	l.subs[0] = []*nats.Subscription{in.mu.dynSub}
	if in.mu.legacySub != nil {
		l.subs[0] = append(l.subs[0], in.mu.legacySub)
	}
	l.subs[1] = []*nats.Subscription{in.mu.natSub}
	in.mu.live = l
	l.wg.Add(1)
	go l.sample()
	if from > 0 {
		l.mu.catching, l.mu.from = true, from
		l.wg.Add(1)
		go l.catchUp()
	}
	return nil
}

// Hold makes the live path buffer its core messages instead of applying
// them, until the next catch-up ends (call it when the NATS connection is
// lost, before it reconnects: a message received after the reconnection
// must not be applied before the replay of what was published meanwhile).
// No-op without SubscribeLive.
func (in *Ingest) Hold() {
	in.mu.Lock()
	l, pipes := in.mu.live, [...]*pipe{in.mu.dynPipe, in.mu.natPipe}
	in.mu.Unlock()
	if l == nil {
		return
	}
	for _, p := range pipes {
		p.lock()
		p.hold = true
		p.mu.Unlock()
	}
}

// CatchUp starts a catch-up from SafeSeq()+1 (call it after the NATS
// connection came back; see SubscribeLive), or, if one is running, makes it
// replay once more up to a new marker. It reports whether the live path is
// on (false: SubscribeLive was not called).
func (in *Ingest) CatchUp() bool {
	in.mu.Lock()
	l := in.mu.live
	in.mu.Unlock()
	if l == nil {
		return false
	}
	in.Hold()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.catching {
		l.mu.again = true
		return true
	}
	l.mu.catching, l.mu.again, l.mu.from = true, false, in.safe.Load()+1
	l.wg.Add(1)
	go l.catchUp()
	return true
}

// SafeSeq returns the live path's safe stream sequence: every message the
// stream stored up to it has been handed to the sink (sampled every
// DefaultSafeInterval, and set to the marker's sequence after a catch-up).
// A snapshot captured now resumes from SafeSeq()+1; the messages after it
// that the snapshot already holds are dropped by the event-id tracking.
func (in *Ingest) SafeSeq() uint64 { return in.safe.Load() }

// CatchingUp reports whether a live catch-up is running (the core messages
// are held meanwhile).
func (in *Ingest) CatchingUp() bool {
	in.mu.Lock()
	l := in.mu.live
	in.mu.Unlock()
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.catching
}

// SetLiveStream replaces the stream the live path reads (a stream
// recreated after the server lost its store: its sequences start over, so
// SafeSeq restarts at 0). The events published while no stream existed
// are lost: every tracked key is marked as after a lost connection.
func (in *Ingest) SetLiveStream(stream jetstream.Stream) (int, error) {
	in.mu.Lock()
	l, pipes := in.mu.live, [...]*pipe{in.mu.dynPipe, in.mu.natPipe}
	in.mu.Unlock()
	if l == nil {
		return 0, errors.New("ingest: SetLiveStream without SubscribeLive")
	}
	l.mu.Lock()
	l.mu.stream = stream
	l.mu.Unlock()
	in.safe.Store(0)
	in.streamRestarts.Add(1)
	return markSuspect(pipes), nil
}

// catchUp is the catch-up goroutine: marker, replay up to it, release;
// again while a CatchUp asked for another round during the release.
func (l *liveState) catchUp() {
	defer l.wg.Done()
	for l.catchUpOnce() {
		l.in.Hold() // the release let core messages through: hold them again
	}
}

// catchUpOnce runs one catch-up and reports whether another is due (a
// CatchUp came after its last round had ended). The catch-up counts as
// running (CatchingUp) until the held messages are released.
func (l *liveState) catchUpOnce() bool {
	in := l.in
	l.catchUps.Add(1)
	l.mu.Lock()
	from, stream := l.mu.from, l.mu.stream
	l.mu.Unlock()
	var (
		cc      jetstream.ConsumeContext
		jp      *jsPipe
		barrier uint64
		err     error
	)
	for {
		if barrier, err = l.mark(); err != nil {
			break
		}
		if cc == nil && from <= barrier {
			in.mu.Lock()
			dyn, nat := in.mu.dynPipe, in.mu.natPipe
			in.mu.Unlock()
			cc, jp, err = in.consume(stream, from, dyn, nat, barrier)
			if err != nil {
				break
			}
		}
		if jp != nil {
			jp.stopAt.Store(barrier)
			for err == nil && in.seq.Load() < barrier {
				select {
				case <-jp.reached:
				case <-l.ctx.Done():
					err = l.ctx.Err()
				}
			}
		}
		if err != nil {
			break
		}
		l.mu.Lock()
		again := l.mu.again
		l.mu.again = false
		l.mu.Unlock()
		if !again {
			break
		}
	}
	if cc != nil {
		cc.Stop()
		select {
		case <-cc.Closed():
		case <-time.After(5 * time.Second):
		}
	}
	in.mu.Lock()
	pipes := [...]*pipe{in.mu.dynPipe, in.mu.natPipe}
	in.mu.Unlock()
	if err != nil {
		if l.ctx.Err() != nil {
			l.mu.Lock()
			l.mu.catching = false
			l.mu.Unlock()
			return false // closing
		}
		l.catchUpFailures.Add(1)
		marked := markSuspect(pipes)
		in.log.Error("ingest: catch-up from the KV-event stream failed: the events published while NATS was disconnected are lost, the workers are asked for them",
			"from_seq", from, "err", err, "tracked_worker_ranks", marked)
	} else if barrier > in.safe.Load() {
		in.safe.Store(barrier)
	}
	for _, p := range pipes {
		p.release()
	}
	if err == nil {
		in.log.Info("ingest: caught up from the KV-event stream; live on core NATS", "from_seq", from, "to_seq", barrier)
	}
	// Under l.mu: a CatchUp from now on starts a new catch-up; one that
	// came during the release (its Hold undone by it) asks for another
	// round here. After a failure the workers' recovery covers it.
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.again && err == nil {
		l.mu.again, l.mu.from = false, in.safe.Load()+1
		return true
	}
	l.mu.again, l.mu.catching = false, false
	return false
}

// mark publishes a marker into stream and returns its sequence: every
// message the server received before it (before the core subscriptions
// were live again) is stored below it, every later one reaches the core
// subscriptions (one server; see the package doc for a cluster).
func (l *liveState) mark() (uint64, error) {
	js, err := jetstream.New(l.nc)
	if err != nil {
		return 0, err
	}
	if err := l.nc.FlushTimeout(10 * time.Second); err != nil { // the subscriptions are live at the server
		return 0, fmt.Errorf("flush: %w", err)
	}
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(l.ctx, 10*time.Second)
		ack, err := js.Publish(ctx, MarkSubject(l.in.cfg.Subjects), nil)
		cancel()
		if err == nil {
			return ack.Sequence, nil
		}
		if attempt == 5 || l.ctx.Err() != nil {
			return 0, fmt.Errorf("publish the catch-up marker on %s: %w", MarkSubject(l.in.cfg.Subjects), err)
		}
		select { // a connection that just came back may still be settling
		case <-time.After(200 * time.Millisecond):
		case <-l.ctx.Done():
		}
	}
}

// release applies the messages held during a catch-up, in the order
// received (the id tracking drops those the replay applied), and ends the
// hold.
func (p *pipe) release() {
	if p == nil {
		return
	}
	p.lock()
	buf := p.buf
	for i, data := range buf {
		if p.closed {
			break
		}
		var err error
		if p.src == SourceNATSDynamo {
			err = wire.DecodeDynamoAny(&p.batch, data)
		} else {
			err = wire.DecodeNative(&p.batch, data)
		}
		p.decoded(err, len(buf)-i, 0) // coalesced like a queue of that length
		buf[i] = nil
	}
	if p.held > 0 {
		p.flush()
	}
	p.buf, p.hold = p.buf[:0], false
	p.mu.Unlock()
}

// buffer keeps a copy of a core message while the pipe holds (p.mu held).
func (p *pipe) buffer(data []byte) {
	if p.closed {
		return
	}
	if len(p.buf) >= p.in.cfg.PendingMsgs && p.in.cfg.PendingMsgs > 0 {
		p.c.droppedGone.Add(1) // its id never arrives: a gap, recovered from the worker
		p.in.liveBufDropped.Add(1)
		return
	}
	p.buf = append(p.buf, append([]byte(nil), data...))
	p.in.liveBuffered.Add(1)
}

func (in *Ingest) liveState() *liveState {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.mu.live
}

// sample advances the safe sequence: it notes the stream's last sequence L,
// makes a round trip to the server (every message stored up to L was sent
// to the core subscriptions before the reply) and the number of messages
// the subscriptions received; once the pipes applied that many, every
// message up to L is in the index and SafeSeq becomes L.
func (l *liveState) sample() {
	defer l.wg.Done()
	t := time.NewTicker(l.in.cfg.SafeInterval)
	defer t.Stop()
	var (
		pending bool
		age     int // ticks the pending sample has waited
		seq     uint64
		want    [2]uint64
	)
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		in := l.in
		in.mu.Lock()
		pipes := [...]*pipe{in.mu.dynPipe, in.mu.natPipe}
		in.mu.Unlock()
		if pending && pipes[0].applied.Load() >= want[0] && pipes[1].applied.Load() >= want[1] {
			if seq > in.safe.Load() {
				in.safe.Store(seq)
			}
			pending = false
		}
		if pending {
			// A message counted twice (moved from pending to delivered
			// between the two reads below) makes want unreachable until
			// more messages come; on an idle stream it never would: take
			// a fresh sample after a while.
			if age++; age < staleSampleTicks {
				continue
			}
			pending = false
		}
		if !l.nc.IsConnected() {
			continue
		}
		l.mu.Lock()
		stream, catching := l.mu.stream, l.mu.catching
		l.mu.Unlock()
		if catching {
			continue // it sets the safe sequence itself
		}
		ctx, cancel := context.WithTimeout(l.ctx, 5*time.Second)
		info, err := stream.Info(ctx)
		cancel()
		if err != nil || l.nc.FlushTimeout(5*time.Second) != nil {
			continue
		}
		for i, subs := range l.subs {
			want[i] = 0
			for _, s := range subs {
				// Pending first: a message moving to delivered in between
				// is counted twice, which only delays the sample.
				if n, _, err := s.Pending(); err == nil {
					want[i] += uint64(n)
				}
				if n, err := s.Delivered(); err == nil {
					want[i] += uint64(n)
				}
			}
		}
		seq, pending, age = info.State.LastSeq, true, 0
	}
}

// staleSampleTicks is how many sample intervals a safe-sequence sample
// waits for the pipes to apply what it counted before it is taken again.
const staleSampleTicks = 20

// LiveStats are the live path's counters (SubscribeLive).
type LiveStats struct {
	// SafeSeq is SafeSeq(); CatchingUp whether a catch-up runs.
	SafeSeq    uint64
	CatchingUp bool
	// CatchUps started and failed (the events published meanwhile were
	// then left to the workers' recovery); core messages Buffered while
	// catching up and dropped because the buffer was full.
	CatchUps, CatchUpFailures, Buffered, BufferDropped uint64
}

// LiveStats returns the live path's counters (zero without SubscribeLive).
func (in *Ingest) LiveStats() LiveStats {
	l := in.liveState()
	if l == nil {
		return LiveStats{}
	}
	l.mu.Lock()
	catching := l.mu.catching
	l.mu.Unlock()
	return LiveStats{SafeSeq: in.safe.Load(), CatchingUp: catching, CatchUps: l.catchUps.Load(),
		CatchUpFailures: l.catchUpFailures.Load(), Buffered: in.liveBuffered.Load(), BufferDropped: in.liveBufDropped.Load()}
}
