package ingest

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvroute/kvroute/wire"
)

// DispatchBuckets are the upper bounds of the dispatch-time histogram: the
// time one handler call (decode, id tracking, sink.Apply) takes. Read only.
var DispatchBuckets = [...]time.Duration{
	time.Microsecond, 4 * time.Microsecond, 16 * time.Microsecond, 64 * time.Microsecond,
	256 * time.Microsecond, time.Millisecond, 4 * time.Millisecond, 16 * time.Millisecond,
	64 * time.Millisecond, 256 * time.Millisecond,
}

// counters are one source's counters: atomics added once per message (not
// per event or block), read at scrape time. Padded so that two sources'
// handler goroutines do not share a cache line.
type counters struct {
	messages, events, blocks                              atomic.Uint64
	malformed, rejected, sizeMismatches, ignored          atomic.Uint64
	otherGroups                                           atomic.Uint64
	duplicates, gaps, missing, restarts, firsts, sinkErrs atomic.Uint64
	missingBatches, unknown                               atomic.Uint64
	droppedGone                                           atomic.Uint64 // Dropped of closed subscriptions
	dispatchNanos, dispatchMax                            atomic.Uint64
	buckets                                               [len(DispatchBuckets) + 1]atomic.Uint64
	_                                                     [64]byte
}

func (c *counters) snapshot(s *SourceStats) {
	s.Messages, s.Events, s.Blocks = c.messages.Load(), c.events.Load(), c.blocks.Load()
	s.Malformed, s.Rejected = c.malformed.Load(), c.rejected.Load()
	s.SizeMismatches, s.Ignored, s.OtherGroups = c.sizeMismatches.Load(), c.ignored.Load(), c.otherGroups.Load()
	s.Duplicates, s.Gaps, s.MissingEvents = c.duplicates.Load(), c.gaps.Load(), c.missing.Load()
	s.MissingBatches, s.Unknown = c.missingBatches.Load(), c.unknown.Load()
	s.Restarts, s.FirstSightings, s.SinkErrors = c.restarts.Load(), c.firsts.Load(), c.sinkErrs.Load()
	s.DispatchSum, s.DispatchMax = time.Duration(c.dispatchNanos.Load()), time.Duration(c.dispatchMax.Load())
	for i := range c.buckets {
		s.Buckets[i] = c.buckets[i].Load()
		s.DispatchCount += s.Buckets[i]
	}
}

// observe records one handler call of duration d.
func (c *counters) observe(d time.Duration) {
	if d < 0 {
		d = 0
	}
	i := 0
	for i < len(DispatchBuckets) && d > DispatchBuckets[i] {
		i++
	}
	c.buckets[i].Add(1)
	c.dispatchNanos.Add(uint64(d))
	for {
		m := c.dispatchMax.Load()
		if uint64(d) <= m || c.dispatchMax.CompareAndSwap(m, uint64(d)) {
			return
		}
	}
}

// pipe is one receiving goroutine's state: a NATS subscription's or a ZMQ
// subscriber's. mu is held for the whole handler call, so that Close and
// Forget (rare, from other goroutines) wait for a call in progress; the
// handler goroutine is its only regular user, so it is uncontended.
type pipe struct {
	in  *Ingest
	src Source
	c   *counters

	mu       sync.Mutex
	closed   bool
	trackIDs bool // NATS: check event ids; ZMQ checks sequence numbers instead
	tr       tracker
	batch    wire.Batch
	// held counts the messages decoded into batch and not yet handed to the
	// sink (coalescing, see onDynamo); heldSeq is the stream sequence of
	// the last of them on the JetStream path (0: none).
	held    int
	heldSeq uint64
	// Live catch-up (SubscribeLive): while hold is set, the core callbacks
	// copy their messages into buf (at most Config.PendingMsgs; beyond,
	// dropped and counted) instead of decoding them; release applies them.
	// applied counts the core messages handed to the sink (the safe
	// sequence's sampler compares it with the subscriptions' deliveries).
	hold    bool
	buf     [][]byte
	applied atomic.Uint64

	// ZMQ only.
	zw      ZMQWorker
	dec     *wire.VLLMDecoder
	haveSeq bool   // lastSeq is set
	lastSeq uint64 // sequence number of the last well-formed batch
}

func newPipe(in *Ingest, src Source) *pipe {
	p := &pipe{in: in, src: src, c: &in.src[src], tr: newTracker(), trackIDs: src != SourceZMQ}
	p.seed(in.cfg.Tracked)
	return p
}

// close marks the pipe closed after waiting for a handler call in progress
// (and handing the events it held to the sink).
func (p *pipe) close() {
	p.lock()
	p.closed = true
	p.mu.Unlock()
}

// lock locks p.mu for a caller other than the pipe's handler and first
// hands the events held by coalescing to the sink, so that the caller sees
// every message received so far applied (as without coalescing). On the
// JetStream path LastSeq advances to the held messages' last sequence;
// Config.AfterApply is not called (it runs on the handler goroutine with
// the next message).
func (p *pipe) lock() {
	p.mu.Lock()
	if p.held > 0 {
		p.flush()
	}
}

// Coalescing. A NATS callback that finds more messages of its subscription
// already queued in the client (Subscription.Pending above 1: the current
// one counts until it returns) decodes its message into the batch and
// returns without handing it to the sink; the next callback appends to the
// same batch, and the first that finds the queue empty, or the batch at
// coalesceMsgs messages or coalesceEvents events, hands them all to the
// sink in one Apply. Under load this turns one shard hand-off (a work item,
// a queue push, often a wake-up of the shard's goroutine) per message into
// one per batch; an idle subscription delivers each message at once, as
// before. A held message always has a successor on its way (the queued
// one), and every other user of the pipe flushes first (lock), so held
// events are never stranded. The JetStream path does the same with the
// stream's own count of pending messages (the reply subject's last token).
const (
	coalesceMsgs   = 64
	coalesceEvents = 1024
)

// more reports whether the pipe should hold the message just decoded:
// another is queued behind it (pending > 1, the current one included) and
// the batch has room.
func (p *pipe) more(pending int) bool {
	return pending > 1 && p.held < coalesceMsgs && len(p.batch.Events) < coalesceEvents
}

// subPending returns the messages queued for m's subscription, the current
// one included (0: unknown).
func subPending(m *nats.Msg) int {
	if m.Sub == nil {
		return 0
	}
	n, _, err := m.Sub.Pending()
	if err != nil {
		return 0
	}
	return n
}

// onDynamo is the callback of the Dynamo subjects (the event plane's
// kv-events, msgpack or JSON, and the legacy kv_events, JSON).
func (p *pipe) onDynamo(m *nats.Msg) {
	start := time.Now()
	p.mu.Lock()
	if p.hold {
		p.buffer(m.Data)
	} else if !p.closed {
		p.decoded(wire.DecodeDynamoAny(&p.batch, m.Data), subPending(m), 0)
	}
	p.mu.Unlock()
	p.c.observe(time.Since(start))
}

// onNative is the callback of the native subject.
func (p *pipe) onNative(m *nats.Msg) {
	start := time.Now()
	p.mu.Lock()
	if p.hold {
		p.buffer(m.Data)
	} else if !p.closed {
		p.decoded(wire.DecodeNative(&p.batch, m.Data), subPending(m), 0)
	}
	p.mu.Unlock()
	p.c.observe(time.Since(start))
}

// decoded takes one message decoded (appended) into the batch, with the
// decoder's message-level error err (its events are then not in the batch),
// pending as subPending, and its stream sequence seq (0: core NATS). It
// holds the message or flushes the batch. It reports whether it flushed.
func (p *pipe) decoded(err error, pending int, seq uint64) bool {
	p.held++
	if seq != 0 {
		p.heldSeq = seq
	}
	if err != nil {
		p.c.malformed.Add(1)
		p.in.malformed(p.src, p.zw.key(), err)
	}
	if p.more(pending) {
		return false
	}
	p.flush()
	return true
}

// flush hands the held messages' events to the sink (deliver), resets the
// batch, and on the JetStream path advances LastSeq.
func (p *pipe) flush() {
	p.deliver()
	p.c.messages.Add(uint64(p.held)) // after the sink has them: a reader that sees them counted can Flush the index
	p.batch.Reset()
	if p.heldSeq != 0 {
		p.in.seq.Store(p.heldSeq)
		p.heldSeq = 0
	} else {
		p.applied.Add(uint64(p.held))
	}
	p.held = 0
}

// deliver filters the batch's events through the id tracker and hands the
// rest to the sink. The batch holds the events of p.held messages (a
// malformed message contributes none; the decoders leave the batch as they
// found it); the caller counts the messages after it.
func (p *pipe) deliver() {
	c := p.c
	b := &p.batch
	if b.Rejected > 0 {
		p.rejected()
	}
	if b.Ignored > 0 {
		c.ignored.Add(uint64(b.Ignored))
	}
	if b.OtherGroups > 0 {
		c.otherGroups.Add(uint64(b.OtherGroups))
	}
	evs := b.Events
	n, blocks := 0, 0
	var dups, restarts, unknown uint64
	admit := p.in.cfg.Admit
	if !p.trackIDs {
		admit = nil // ZMQ: subscribed for a known worker
	}
	lastWorker, lastOK := uint64(0), false
	for i := range evs {
		ev := &evs[i]
		if admit != nil {
			if w := ev.Worker.Worker; w != lastWorker || i == 0 {
				lastWorker, lastOK = w, admit(w)
			}
			if !lastOK {
				unknown++
				continue
			}
		}
		v, missing := vApply, uint64(0)
		if p.trackIDs {
			v, missing = p.tr.check(ev.Worker, ev.ID, ev.Kind)
		}
		switch v {
		case vDuplicate:
			dups++
			if !p.hold { // a live catch-up's replay and release expect them: counted, not logged
				p.in.duplicate(p.src, ev.Worker, ev.ID, p.tr.lastID(ev.Worker))
			}
			continue
		case vGap:
			p.in.gap(p.src, ev.Worker, ev.ID-missing, ev.ID, false)
		case vRestart:
			restarts++
		case vRestartGap:
			restarts++
			p.in.gap(p.src, ev.Worker, 1, ev.ID, false)
		case vFirst:
			c.firsts.Add(1)
			p.in.lostAfter(ev.Worker, 0)
		}
		if n != i {
			evs[n] = evs[i]
		}
		n++
		blocks += len(ev.Blocks)
	}
	if dups > 0 {
		c.duplicates.Add(dups)
	}
	if restarts > 0 {
		c.restarts.Add(restarts)
	}
	if unknown > 0 {
		c.unknown.Add(unknown)
	}
	if n == 0 {
		return
	}
	if err := p.in.sink.Apply(evs[:n]); err != nil {
		c.sinkErrs.Add(uint64(p.held))
		p.in.sinkError(p.src, err)
		return
	}
	c.events.Add(uint64(n))
	c.blocks.Add(uint64(blocks))
}

// rejected counts and reports the events the decoder rejected (slow path).
func (p *pipe) rejected() {
	b := &p.batch
	p.c.rejected.Add(uint64(b.Rejected))
	k := p.zw.key()
	if b.SizeMismatches > 0 {
		p.c.sizeMismatches.Add(uint64(b.SizeMismatches))
		if sup, ok := p.in.lim.allow(probSizeMismatch, p.src, k); ok {
			// b.Err names the engine's size when it is the mismatch.
			p.in.log.Error("ingest: KV events rejected: the engine's block size differs from --block-size",
				"source", p.src.String(), "worker", k.Worker, "dp_rank", k.Dp,
				"configured_block_size", p.in.cfg.BlockSize, "events", b.SizeMismatches,
				"first_error", errString(b.Err), "suppressed_since_last_log", sup)
		}
		if b.Rejected == b.SizeMismatches {
			return
		}
	}
	if sup, ok := p.in.lim.allow(probRejected, p.src, k); ok {
		p.in.log.Warn("ingest: invalid KV events dropped",
			"source", p.src.String(), "worker", k.Worker, "dp_rank", k.Dp,
			"events", b.Rejected-b.SizeMismatches, "first_error", errString(b.Err),
			"suppressed_since_last_log", sup)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
