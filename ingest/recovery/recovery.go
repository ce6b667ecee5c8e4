package recovery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/nats-io/nats.go"

	"github.com/kvroute/kvroute/ingest"
	"github.com/kvroute/kvroute/internal/promtext"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/plane"
)

// DumpAll as the after of a request asks for a full dump: it is newer than
// any id a worker has, and a worker answers an after it cannot serve from its
// ring with a dump.
const DumpAll = math.MaxUint64

// Index is the part of *shard.Index recovery writes to.
type Index interface {
	// Apply queues events, in order with the live events.
	Apply(events []wire.Event) error
	// Replace makes events the whole content of k, atomically for lookups.
	Replace(k wire.WorkerKey, events []wire.Event) error
}

// Tracker is the part of *ingest.Ingest recovery synchronizes with.
type Tracker interface {
	Resync(k wire.WorkerKey, fn func(last uint64) (at uint64, set bool))
	Tracked(dst []ingest.TrackedKey) []ingest.TrackedKey
}

// Config configures a Requester (plain data; zero fields take the defaults).
type Config struct {
	Subjects    plane.Subjects
	Concurrency int           // requests in flight at most; default 4
	Timeout     time.Duration // for a whole answer (all its chunks); default 5 s
	MinBackoff  time.Duration // after a failure, doubling per attempt; default 100 ms
	MaxBackoff  time.Duration // default 10 s
	Attempts    int           // per request before giving up until the next sweep; default 8
	// Interval is how often every tracked worker key is probed for events
	// after its last id (the loss of a worker's last events shows no gap:
	// no later event arrives). Default 10 s; negative: no sweep.
	Interval time.Duration
	// SweepWhen, if set, gates the periodic sweep: it is skipped while
	// SweepWhen returns false (the node: while ingest replays the KV-event
	// stream at start, the workers' ids run ahead of the replay without any
	// loss, and probing them would only fetch dumps the replay makes
	// redundant). Sweep is not gated.
	SweepWhen func() bool
	Logger    *slog.Logger
}

func (c *Config) defaults() {
	if c.Concurrency <= 0 {
		c.Concurrency = 4
	}
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Second
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = 100 * time.Millisecond
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 10 * time.Second
	}
	if c.Attempts <= 0 {
		c.Attempts = 8
	}
	if c.Interval == 0 {
		c.Interval = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// item is one worker key's pending recovery (guarded by Requester.mu).
type item struct {
	after     uint64 // ask for the events after this id (DumpAll: a dump)
	queued    bool   // wants a request
	inflight  bool
	attempts  int
	stale     int // answers in a row that live events had overtaken
	notBefore time.Time
}

// Requester asks workers for the KV events the index lacks and applies the
// answers (see the package doc). Its methods are goroutine-safe; create one
// with Start and Close it.
type Requester struct {
	cfg Config
	nc  *nats.Conn
	ix  Index
	tr  Tracker

	ctx      context.Context // canceled by Close: ends the requests in flight
	cancel   context.CancelFunc
	wake     chan struct{}
	sweepNow chan struct{}
	stop     chan struct{}
	done     chan struct{}
	wg       sync.WaitGroup

	mu struct {
		sync.Mutex
		items  map[wire.WorkerKey]*item
		epochs map[wire.WorkerKey]uint64
		failed map[wire.WorkerKey]bool // gave up: the next sweep asks for a dump
	}

	requests, events, eventAnswers, dumps, dumpBlocks, nothing atomic.Uint64
	timeouts, errs, applyErrs, stale, gaveUp                   atomic.Uint64
	inflight                                                   atomic.Int64
}

// Start starts a Requester's dispatcher (and sweep).
func Start(cfg Config, nc *nats.Conn, ix Index, tr Tracker) (*Requester, error) {
	cfg.defaults()
	if nc == nil || ix == nil || tr == nil {
		return nil, errors.New("recovery: a NATS connection, an index and a tracker are needed")
	}
	if cfg.Subjects.Recover == "" {
		return nil, errors.New("recovery: Subjects.Recover is empty (use plane.SubjectsFor)")
	}
	r := &Requester{cfg: cfg, nc: nc, ix: ix, tr: tr,
		wake: make(chan struct{}, 1), sweepNow: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.mu.items = make(map[wire.WorkerKey]*item)
	r.mu.epochs = make(map[wire.WorkerKey]uint64)
	r.mu.failed = make(map[wire.WorkerKey]bool)
	go r.dispatch()
	return r, nil
}

// Lost asks for the events of k after id after (0: all; DumpAll: a dump). It
// never blocks (it may be called from ingest's receiving goroutine, see
// ingest.Ingest.SetLostHook). Requests for a key are de-duplicated: one is
// in flight at a time, and one more is kept for the smallest after asked
// meanwhile.
func (r *Requester) Lost(k wire.WorkerKey, after uint64) {
	r.mu.Lock()
	it := r.mu.items[k]
	if it == nil {
		it = &item{after: after}
		r.mu.items[k] = it
	} else if !it.queued || after < it.after {
		it.after = after
	}
	it.queued = true
	r.mu.Unlock()
	r.ring()
}

// Joined probes a worker that joined (or came back) for the events after the
// last id the ingest tracked for each of its ranks (all of them if none).
func (r *Requester) Joined(worker uint64, ranks []uint32) {
	last := map[wire.WorkerKey]uint64{}
	for _, t := range r.tr.Tracked(nil) {
		last[t.Worker] = max(last[t.Worker], t.Last)
	}
	if len(ranks) == 0 {
		ranks = []uint32{0}
	}
	for _, dp := range ranks {
		k := wire.WorkerKey{Worker: worker, Dp: dp}
		r.Lost(k, last[k])
	}
}

// Forget drops pending work and state of every rank of worker (it left).
func (r *Requester) Forget(worker uint64) {
	r.mu.Lock()
	for k, it := range r.mu.items {
		if k.Worker == worker && !it.inflight {
			delete(r.mu.items, k)
		}
	}
	for k := range r.mu.epochs {
		if k.Worker == worker {
			delete(r.mu.epochs, k)
			delete(r.mu.failed, k)
		}
	}
	r.mu.Unlock()
}

// Close stops the dispatcher and waits for the requests in flight.
func (r *Requester) Close() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
		r.cancel()
	}
	<-r.done
	r.wg.Wait()
}

func (r *Requester) ring() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Pending returns the number of worker keys with a recovery queued or in
// flight.
func (r *Requester) Pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.mu.items)
}

// dispatch starts ready requests within the concurrency bound, sleeps until
// the next backoff ends, a request ends or Lost rings, and sweeps.
func (r *Requester) dispatch() {
	defer close(r.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var sweep <-chan time.Time
	if r.cfg.Interval > 0 {
		t := time.NewTicker(r.cfg.Interval)
		defer t.Stop()
		sweep = t.C
	}
	for {
		next := r.startReady(time.Now())
		if !next.IsZero() {
			timer.Reset(time.Until(next))
		}
		select {
		case <-r.stop:
			return
		case <-r.wake:
		case <-timer.C:
		case <-sweep:
			if r.cfg.SweepWhen == nil || r.cfg.SweepWhen() {
				r.sweep()
			}
		case <-r.sweepNow:
			r.sweep()
		}
		timer.Stop()
	}
}

// startReady starts what may start and returns when the earliest backoff
// ends (zero: none waiting).
func (r *Requester) startReady(now time.Time) time.Time {
	var next time.Time
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, it := range r.mu.items {
		if !it.queued || it.inflight {
			continue
		}
		if it.notBefore.After(now) {
			if next.IsZero() || it.notBefore.Before(next) {
				next = it.notBefore
			}
			continue
		}
		if r.inflight.Load() >= int64(r.cfg.Concurrency) {
			return next
		}
		it.inflight, it.queued = true, false
		r.inflight.Add(1)
		r.wg.Add(1)
		go r.run(k, it.after, r.mu.epochs[k])
	}
	return next
}

// Sweep probes every tracked worker key now, as the periodic sweep does
// (after a NATS reconnection, say). It does not block.
func (r *Requester) Sweep() {
	select {
	case r.sweepNow <- struct{}{}:
	default:
	}
}

// sweep probes every tracked key after its last id, and asks for a dump of
// the keys given up on.
func (r *Requester) sweep() {
	for _, t := range r.tr.Tracked(nil) {
		r.mu.Lock()
		failed := r.mu.failed[t.Worker]
		r.mu.Unlock()
		if failed {
			r.Lost(t.Worker, DumpAll)
		} else {
			r.Lost(t.Worker, t.Last)
		}
	}
}

// run does one request and records its outcome.
func (r *Requester) run(k wire.WorkerKey, after, epoch uint64) {
	defer r.wg.Done()
	again, redo, err := r.recover(k, after, epoch)
	r.inflight.Add(-1)
	r.mu.Lock()
	it := r.mu.items[k]
	switch {
	case again == againAfter:
		// A dump older than live events already applied replaced their
		// effects: the index is consistent at redo only. Every request
		// queued meanwhile asked for events after some id above redo (a
		// gap the live stream showed), so it must now start at redo.
		if !it.queued || redo < it.after {
			it.after = redo
		}
		it.inflight, it.queued, it.attempts, it.stale = false, true, 0, 0
		delete(r.mu.failed, k)
	case err != nil:
		it.attempts++
		if it.attempts >= r.cfg.Attempts {
			r.gaveUp.Add(1)
			r.mu.failed[k] = true
			r.cfg.Logger.Warn("recovery: giving up on a worker until the next sweep; the index may differ from its cache",
				"worker", k.Worker, "dp_rank", k.Dp, "attempts", it.attempts, "err", err)
			if !it.queued {
				delete(r.mu.items, k)
				break
			}
			it.attempts = 0
		}
		it.queued = true
		if after < it.after {
			it.after = after
		}
		back := r.cfg.MinBackoff << min(it.attempts, 20)
		it.notBefore = time.Now().Add(min(back, r.cfg.MaxBackoff))
		it.inflight = false
	case again == againSame && it.stale < 2:
		it.stale++
		it.inflight, it.queued, it.attempts = false, true, 0
		it.after = min(it.after, after)
	case again != againNone:
		it.inflight, it.queued, it.after, it.attempts, it.stale = false, true, DumpAll, 0, 0
	default:
		delete(r.mu.failed, k)
		if it.queued {
			it.inflight, it.attempts, it.stale = false, 0, 0
		} else {
			delete(r.mu.items, k)
		}
	}
	r.mu.Unlock()
	r.ring()
}

var errTimeout = errors.New("recovery: no complete answer in time")

// What to do after an answer that could not be applied.
type againKind uint8

const (
	againNone  againKind = iota
	againSame            // live events overtook the answer: ask again from the same id
	againDump            // the worker restarted: ask for a dump
	againAfter           // a dump was applied under live events newer than it: ask for the events after it
)

// recover asks k's worker for its events after id after and applies the
// answer. again: the answer cannot be applied (live events overtook it, or
// the worker restarted: its ids or epoch moved back) and what to ask next;
// againAfter (a dump was applied, but live events after it had been applied
// before it and were replaced) comes with redo, the dump's id, after which
// the events are to be asked for.
func (r *Requester) recover(k wire.WorkerKey, after, epoch uint64) (again againKind, redo uint64, err error) {
	r.requests.Add(1)
	inbox := r.nc.NewRespInbox()
	sub, err := r.nc.SubscribeSync(inbox)
	if err != nil {
		r.errs.Add(1)
		return againNone, 0, fmt.Errorf("subscribe to the reply inbox: %w", err)
	}
	defer sub.Unsubscribe() //nolint:errcheck // best effort
	if err := r.nc.PublishRequest(r.cfg.Subjects.RecoverSubject(k.Worker), inbox, plane.AppendRecoverRequest(nil, plane.RecoverRequest{Worker: k, After: after})); err != nil {
		r.errs.Add(1)
		return againNone, 0, fmt.Errorf("publish the request: %w", err)
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.cfg.Timeout)
	defer cancel()
	var (
		head  plane.RecoverReply
		batch wire.Batch
		msgs  [][]byte // kept: the batch's events point into them
	)
	for chunk := uint32(0); ; chunk++ {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			r.timeouts.Add(1)
			return againNone, 0, fmt.Errorf("%w (chunk %d): %w", errTimeout, chunk, err)
		}
		h, body, err := plane.DecodeRecoverReply(m.Data)
		if err == nil && h.Kind == plane.RecoverError {
			err = fmt.Errorf("worker answered: %s", body)
		}
		if err == nil && (h.Chunk != chunk || h.Worker != k || (chunk > 0 && (h.Kind != head.Kind || h.At != head.At || h.Epoch != head.Epoch))) {
			err = fmt.Errorf("chunk %d of worker %+v (kind %d at %d) does not continue chunk %d", h.Chunk, h.Worker, h.Kind, h.At, chunk)
		}
		if err == nil {
			err = wire.DecodeNative(&batch, body)
		}
		if err != nil {
			r.errs.Add(1)
			return againNone, 0, err
		}
		msgs = append(msgs, m.Data)
		head = h
		if h.Last {
			break
		}
	}
	if head.Kind == plane.RecoverEvents && after != 0 && after != DumpAll && epoch != 0 && head.Epoch != epoch {
		r.cfg.Logger.Debug("recovery: answer from another epoch", "worker", k.Worker, "after", after, "at", head.At)
		r.stale.Add(1)
		return againDump, 0, nil // the worker restarted since: its ids name other events
	}
	evs := batch.Events
	var applyErr error
	again = againSame
	overtaken := false
	r.tr.Resync(k, func(last uint64) (uint64, bool) {
		if head.Kind == plane.RecoverEvents && head.At < last {
			// Live events after the answer's last were applied first (the
			// answer left before them and arrived after): ask again. If
			// that repeats, the worker's ids went back (a restart): the
			// caller asks for a dump.
			return 0, false
		}
		if head.Kind == plane.RecoverDump {
			// A dump below last replaces the effects of the live events
			// after it (published after the answer, applied before it);
			// they are not sent again, so they are asked for next. (Were
			// the dump refused instead, it could be overtaken again and
			// again under steady traffic; and a restarted worker's dump
			// is legitimately below last.)
			overtaken = head.At < last
			applyErr = r.ix.Replace(k, evs)
		} else if len(evs) > 0 {
			applyErr = r.ix.Apply(evs)
		}
		if applyErr != nil {
			return 0, false
		}
		again = againNone
		// At 0 (the worker has published nothing since it started) drops
		// the tracking: a dump at 0 below last (a restarted worker, or a
		// tracking restored from a snapshot of an earlier run of the
		// fleet) would otherwise be overtaken by the same last again and
		// again, a request loop without backoff.
		return head.At, true
	})
	_ = msgs
	switch {
	case applyErr != nil:
		r.applyErrs.Add(1)
		return againNone, 0, fmt.Errorf("apply: %w", applyErr)
	case again != againNone:
		r.cfg.Logger.Debug("recovery: answer overtaken by live events", "worker", k.Worker, "after", after, "at", head.At)
		r.stale.Add(1)
		return again, 0, nil
	}
	r.mu.Lock()
	r.mu.epochs[k] = head.Epoch
	r.mu.Unlock()
	if overtaken {
		again, redo = againAfter, head.At
	}
	switch {
	case head.Kind == plane.RecoverDump:
		r.dumps.Add(1)
		n := 0
		for i := range evs {
			n += len(evs[i].Blocks)
		}
		r.dumpBlocks.Add(uint64(n))
	case len(evs) == 0:
		r.nothing.Add(1)
	default:
		r.eventAnswers.Add(1)
		r.events.Add(uint64(len(evs)))
	}
	return again, redo, nil
}

// Stats are a Requester's counters (see MetricFamilies).
type Stats struct {
	Requests, EventAnswers, Events, Dumps, DumpBlocks, Nothing uint64
	Timeouts, Errors, ApplyErrors, Stale, GaveUp               uint64
}

// Stats returns the counters.
func (r *Requester) Stats() Stats {
	return Stats{
		Requests: r.requests.Load(), EventAnswers: r.eventAnswers.Load(), Events: r.events.Load(),
		Dumps: r.dumps.Load(), DumpBlocks: r.dumpBlocks.Load(), Nothing: r.nothing.Load(),
		Timeouts: r.timeouts.Load(), Errors: r.errs.Load(), ApplyErrors: r.applyErrs.Load(),
		Stale: r.stale.Load(), GaveUp: r.gaveUp.Load(),
	}
}

// MetricFamilies declares the families WriteMetrics writes, for a
// promtext.Registry.
var MetricFamilies = []promtext.Family{
	{Name: "kvroute_recovery_requests_total", Type: promtext.Counter, Help: "KV recovery requests sent to workers"},
	{Name: "kvroute_recovery_answers_total", Type: promtext.Counter, Help: "KV recovery answers applied, by kind: events (missing events replayed), dump (the worker's whole cache), nothing (nothing was missing)"},
	{Name: "kvroute_recovery_events_total", Type: promtext.Counter, Help: "KV events recovered from workers' rings and applied"},
	{Name: "kvroute_recovery_dump_blocks_total", Type: promtext.Counter, Help: "Blocks in the cache dumps applied"},
	{Name: "kvroute_recovery_failures_total", Type: promtext.Counter, Help: "KV recovery requests that failed, by reason: timeout (no complete answer), error (bad or error answer, NATS error), apply (the index refused), stale (the worker restarted meanwhile), gave_up (attempts exhausted)"},
	{Name: "kvroute_recovery_in_flight", Type: promtext.Gauge, Help: "KV recovery requests in flight"},
	{Name: "kvroute_recovery_pending", Type: promtext.Gauge, Help: "Worker ranks with a KV recovery queued or in flight"},
}

// WriteMetrics writes the requester's metrics (MetricFamilies).
func (r *Requester) WriteMetrics(w io.Writer) {
	metrics.WriteCounterUint64(w, "kvroute_recovery_requests_total", r.requests.Load())
	metrics.WriteCounterUint64(w, `kvroute_recovery_answers_total{kind="events"}`, r.eventAnswers.Load())
	metrics.WriteCounterUint64(w, `kvroute_recovery_answers_total{kind="dump"}`, r.dumps.Load())
	metrics.WriteCounterUint64(w, `kvroute_recovery_answers_total{kind="nothing"}`, r.nothing.Load())
	metrics.WriteCounterUint64(w, "kvroute_recovery_events_total", r.events.Load())
	metrics.WriteCounterUint64(w, "kvroute_recovery_dump_blocks_total", r.dumpBlocks.Load())
	for _, f := range []struct {
		reason string
		v      *atomic.Uint64
	}{{"timeout", &r.timeouts}, {"error", &r.errs}, {"apply", &r.applyErrs}, {"stale", &r.stale}, {"gave_up", &r.gaveUp}} {
		metrics.WriteCounterUint64(w, `kvroute_recovery_failures_total{reason="`+f.reason+`"}`, f.v.Load())
	}
	metrics.WriteGaugeUint64(w, "kvroute_recovery_in_flight", uint64(max(r.inflight.Load(), 0)))
	metrics.WriteGaugeUint64(w, "kvroute_recovery_pending", uint64(r.Pending()))
}
