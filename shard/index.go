package shard

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/puzpuzpuz/xsync/v4"

	"github.com/kvroute/kvroute/radix"
	"github.com/kvroute/kvroute/wire"
)

// DefaultTickInterval is how often an Index expires approximate-mode blocks
// on its own when Config.TickInterval is zero.
const DefaultTickInterval = time.Second

// Config configures an Index. It is a plain value that NewIndex copies; the
// zero value is valid: one unpinned shard with default queues and
// approximate-mode settings.
type Config struct {
	// Shards is the number of shards (goroutines, each owning one tree and
	// locked to an OS thread). Default 1. Keep it below GOMAXPROCS: a shard
	// under a saturated event stream never yields its P, and the producers
	// and lookup callers need Ps too (with 2 shards on 2 Ps,
	// BenchmarkMatchUnderLoad's p99 reaches tens of milliseconds). NewIndex
	// logs a warning otherwise.
	Shards int
	// CPUs, when not empty, pins shard i to CPU CPUs[i % len(CPUs)] (see
	// internal/cpuset.Parse for the "0-3,8" list syntax). Where pinning is
	// not permitted the shards run unpinned and one warning is logged.
	CPUs []int
	// QueueSize, LookupQueueSize, StepBlocks and LockOSThread configure
	// every shard's Runner (see RunnerConfig).
	QueueSize, LookupQueueSize, StepBlocks int
	LockOSThread                           bool
	// QueuedLookups answers Match and MatchBatch on the shards' goroutines
	// (RunnerConfig.QueuedLookups) instead of on the caller's.
	QueuedLookups bool
	// Core configures every shard's Core. Approx.MaxBlocks is the cap for
	// the whole index and is split evenly across shards.
	Core CoreConfig
	// TickInterval is how often the Index expires approximate-mode blocks
	// by itself (calling Tick with the current time). Zero means
	// DefaultTickInterval; negative disables it (call Tick yourself).
	TickInterval time.Duration
	// BlockSize is the engines' block size in tokens, recorded in snapshots;
	// Restore refuses a snapshot taken at another block size (0: unknown,
	// not checked).
	BlockSize int
	// CaptureCopySteps makes each shard copy a capture's pages itself, in
	// steps between event steps (paced by CaptureBytesPerBlock), instead of
	// a reader goroutine per shard taking the pages
	// the shard has not copied (Capture). Kept for comparison
	// (BenchmarkSnapshot/capture-stalls/perBlock=N) and for a machine with
	// no CPU to spare for the readers.
	CaptureCopySteps bool
	// CaptureStepBytes bounds the bytes a shard copies per capture step
	// (with CaptureCopySteps, and while a shard finishes an earlier capture
	// before the next); lookups are served between steps. Default
	// DefaultCaptureStepBytes.
	CaptureStepBytes int
	// CaptureBytesPerBlock paces a capture's copy steps while events are
	// queued (CaptureCopySteps): a shard copies about this many bytes per
	// block of event work it applies (the write barrier's page copies
	// included), in steps of at most CaptureStepBytes; with no events queued
	// it copies step after step. Lower costs ingest less while a capture
	// runs and makes the capture last longer. Default
	// DefaultCaptureBytesPerBlock.
	CaptureBytesPerBlock int
	// Logger receives NewIndex's warnings (pinning failed, shards >=
	// GOMAXPROCS). Default slog.Default().
	Logger *slog.Logger
}

// MatchRequest is one request of a MatchBatch: the local block hashes of the
// request's prompt and the overlaps found, appended to Overlaps. Both slices
// are the caller's: Hashes is read by the shards only while MatchBatch runs,
// and Overlaps is appended to, never retained. The zero value is an empty
// request (it matches nothing).
type MatchRequest struct {
	Hashes   []wire.BlockHash
	Overlaps []radix.Overlap
}

// ShardStats is one shard's state and counters: a plain value copied out of
// the shard (CPUs is a fresh slice), safe to keep and share.
type ShardStats struct {
	Shard int
	// CPUs the shard's thread is pinned to; nil when unpinned.
	CPUs []int
	// Workers assigned to the shard (worker ids, not dp ranks) and not
	// removed since.
	Workers int
	Tree    radix.Stats
	// ApproxBlocks is the number of (worker, block) entries recorded in
	// approximate mode.
	ApproxBlocks int
	Counters
	// PendingGaps is the number of gap notices waiting in the outbox.
	PendingGaps int
	// Queue depth high-water marks (items), and the number of times a
	// producer found a queue full and waited (backpressure).
	EventQueueHighWater, LookupQueueHighWater int
	// EventQueueDepth is the number of event batches queued behind the
	// shard when the stats were read: its lag, in batches.
	EventQueueDepth int
	ProducerStalls  uint64
	// How lookups met the runner (Match and MatchBatch on the caller's
	// goroutine): LookupWaits counts lookup calls that found the shard's
	// core taken (outside an event's quiet stretches) and waited for it,
	// LookupParks those of them whose short
	// spin failed so that they waited in the mutex (asleep unless it came
	// free within the mutex's own brief spin; woken by the runner's
	// unlock); RunnerParks counts the runner's steps that found lookup
	// callers holding the core and waited for them in the mutex.
	LookupWaits, LookupParks, RunnerParks uint64
}

// Sum returns the field-wise total of stats (Shard is -1, CPUs the union).
func Sum(stats []ShardStats) ShardStats {
	t := ShardStats{Shard: -1}
	for i := range stats {
		s := &stats[i]
		t.CPUs = append(t.CPUs, s.CPUs...)
		t.Workers += s.Workers
		t.Tree.Nodes += s.Tree.Nodes
		t.Tree.Entries += s.Tree.Entries
		t.Tree.Workers += s.Tree.Workers
		t.Tree.Blocks += s.Tree.Blocks
		t.Tree.Bytes += s.Tree.Bytes
		t.ApproxBlocks += s.ApproxBlocks
		t.Counters.Add(&s.Counters)
		t.PendingGaps += s.PendingGaps
		t.EventQueueHighWater = max(t.EventQueueHighWater, s.EventQueueHighWater)
		t.LookupQueueHighWater = max(t.LookupQueueHighWater, s.LookupQueueHighWater)
		t.EventQueueDepth += s.EventQueueDepth
		t.ProducerStalls += s.ProducerStalls
		t.LookupWaits += s.LookupWaits
		t.LookupParks += s.LookupParks
		t.RunnerParks += s.RunnerParks
	}
	slices.Sort(t.CPUs)
	t.CPUs = slices.Compact(t.CPUs)
	return t
}

// Index is the goroutine-safe, sharded KV-cache index: a set of Runners, each
// owning a Core, plus the table that assigns workers to shards.
//
// A worker id is assigned to the shard with the fewest assigned worker ids
// (ties: lowest shard) the first time it is seen, by an event or by a
// recorded decision; all its dp ranks live on that shard, so Cleared and
// RemoveWorker are shard-local. The assignment is kept for the Index's
// lifetime (a removed worker that comes back returns to its shard), so a
// worker never moves and its events stay in order.
//
// Writes (Apply, RecordDecision) are asynchronous: they return once queued.
// Calls that return a result (RemoveWorker, Tick, Dump, Flush,
// CheckInvariants) run after every write queued before them on the shards
// involved. Lookups (Match, MatchBatch, Workers, TreeSize, Stats, Gaps)
// overtake queued writes: a shard answers them between bounded steps of
// event work, and Match and MatchBatch also inside an event's quiet
// stretches (radix.Tree.SetQuiet), where they see the event part-applied.
// Call Flush first to read your own writes.
//
// All methods are goroutine-safe. The zero value is not usable; create one
// with NewIndex and Close it when done. After Close every method returns
// ErrClosed.
type Index struct {
	cfg     Config
	runners []*Runner
	stopped chan struct{} // closed when every runner has returned
	closed  atomic.Bool
	epoch   time.Time // approximate-mode clock origin (monotonic)

	assign *xsync.Map[uint64, assignment] // worker id → shard; read lock-free
	mu     struct {
		sync.Mutex
		load []int // live worker ids per shard
	}

	lookups lookupPool
	works   *workPool

	tickStop chan struct{}
	tickDone chan struct{}
}

type assignment struct {
	shard int32
	live  bool // false after RemoveWorker, until seen again
}

// NewIndex starts an Index's shards (and its approximate-mode ticker).
func NewIndex(cfg Config) (*Index, error) {
	if cfg.Shards <= 0 {
		cfg.Shards = 1
	}
	if cfg.Shards > 1<<16 {
		return nil, fmt.Errorf("shard: %d shards is too many", cfg.Shards)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.TickInterval == 0 {
		cfg.TickInterval = DefaultTickInterval
	}
	cfg.CPUs = slices.Clone(cfg.CPUs)
	ccfg := cfg.Core
	ccfg.Approx = ccfg.Approx.withDefaults()
	ccfg.Approx.MaxBlocks = max(1, (ccfg.Approx.MaxBlocks+cfg.Shards-1)/cfg.Shards)

	ix := &Index{
		cfg:     cfg,
		stopped: make(chan struct{}),
		epoch:   time.Now(),
		assign:  xsync.NewMap[uint64, assignment](),
	}
	ix.mu.load = make([]int, cfg.Shards)
	ix.lookups = newLookupPool(cfg.Shards)
	qs := cfg.QueueSize
	if qs <= 0 {
		qs = DefaultQueueSize
	}
	ix.works = newWorkPool(cfg.Shards*(qs+2) + 64)
	var pinErrs []error
	for i := range cfg.Shards {
		rc := RunnerConfig{
			QueueSize:       cfg.QueueSize,
			LookupQueueSize: cfg.LookupQueueSize,
			StepBlocks:      cfg.StepBlocks,
			LockOSThread:    cfg.LockOSThread,
			QueuedLookups:   cfg.QueuedLookups,
			id:              i,
			works:           ix.works,
		}
		if len(cfg.CPUs) > 0 {
			rc.CPUs = []int{cfg.CPUs[i%len(cfg.CPUs)]}
		}
		r := NewRunner(NewCore(ccfg), rc)
		r.Start()
		if err := r.PinError(); err != nil {
			pinErrs = append(pinErrs, err)
		}
		ix.runners = append(ix.runners, r)
	}
	if procs := runtime.GOMAXPROCS(0); cfg.Shards >= procs {
		cfg.Logger.Warn("shard: as many shards as GOMAXPROCS; a busy shard holds its P, leaving producers and lookups to wait for preemption",
			"shards", cfg.Shards, "gomaxprocs", procs)
	}
	if len(pinErrs) > 0 {
		cfg.Logger.Warn("shard: CPU pinning not permitted; shards run unpinned",
			"failed", len(pinErrs), "shards", cfg.Shards, "err", errors.Join(pinErrs...))
	}
	if cfg.TickInterval > 0 {
		ix.tickStop, ix.tickDone = make(chan struct{}), make(chan struct{})
		go ix.ticker(cfg.TickInterval)
	}
	return ix, nil
}

func (ix *Index) ticker(every time.Duration) {
	defer close(ix.tickDone)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case now := <-t.C:
			if _, err := ix.Tick(now); err != nil {
				return
			}
		case <-ix.tickStop:
			return
		}
	}
}

// Close stops the ticker and every shard and waits for their goroutines.
// Queued work is discarded. Close is idempotent.
func (ix *Index) Close() error {
	if !ix.closed.CompareAndSwap(false, true) {
		<-ix.stopped
		return nil
	}
	if ix.tickStop != nil {
		close(ix.tickStop)
		<-ix.tickDone
	}
	for _, r := range ix.runners {
		r.Close()
	}
	close(ix.stopped)
	return nil
}

// Shards returns the number of shards.
func (ix *Index) Shards() int { return len(ix.runners) }

// ShardOf returns the shard worker id is assigned to, if it has been seen.
func (ix *Index) ShardOf(worker uint64) (int, bool) {
	a, ok := ix.assign.Load(worker)
	return int(a.shard), ok
}

// shardOf returns worker's shard, assigning it on first sight.
func (ix *Index) shardOf(worker uint64) int {
	if a, ok := ix.assign.Load(worker); ok && a.live {
		return int(a.shard)
	}
	return ix.shardOfSlow(worker)
}

func (ix *Index) shardOfSlow(worker uint64) int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	a, ok := ix.assign.Load(worker)
	if !ok {
		a.shard = 0
		for s, n := range ix.mu.load {
			if n < ix.mu.load[a.shard] {
				a.shard = int32(s)
			}
		}
	}
	if !a.live {
		a.live = true
		ix.mu.load[a.shard]++
		ix.assign.Store(worker, a)
	}
	return int(a.shard)
}

// maxStackShards is the shard count up to which Apply keeps its per-shard
// batch pointers on the stack.
const maxStackShards = 16

// Apply queues events for their workers' shards and returns; each shard
// applies its events in the order given. Apply copies each event's Blocks
// and LoRA into a pooled per-shard batch (one append per event, no per-block
// allocation), so the caller may reuse its buffers as soon as Apply returns.
// When a shard's queue is full Apply waits for room: events are never
// dropped. Outcomes are counted per shard (Stats); gaps go to Gaps.
func (ix *Index) Apply(events []wire.Event) error {
	if ix.closed.Load() {
		return ErrClosed
	}
	if len(events) == 0 {
		return nil
	}
	var stack [maxStackShards]*work
	batches := stack[:0]
	if len(ix.runners) <= maxStackShards {
		batches = stack[:len(ix.runners)]
	} else {
		batches = make([]*work, len(ix.runners))
	}
	lastWorker, lastShard := events[0].Worker.Worker, ix.shardOf(events[0].Worker.Worker)
	for i := range events {
		ev := &events[i]
		if ev.Worker.Worker != lastWorker {
			lastWorker, lastShard = ev.Worker.Worker, ix.shardOf(ev.Worker.Worker)
		}
		w := batches[lastShard]
		if w == nil {
			w = ix.works.get()
			w.kind = wkEvents
			batches[lastShard] = w
		}
		w.add(ev)
	}
	var err error
	for s, w := range batches {
		if w == nil {
			continue
		}
		w.seal()
		if err == nil {
			err = ix.runners[s].pushWork(w)
		} else {
			ix.works.put(w)
		}
	}
	return err
}

// RecordDecision records, in approximate mode, that a request with the given
// local and sequence block hashes was routed to worker, at the current time
// (see Core.RecordDecision). The slices must have equal lengths
// (ErrLengthMismatch); they are copied, so the caller may reuse them at once.
// The worker is assigned a shard on first sight, as by an event.
func (ix *Index) RecordDecision(worker wire.WorkerKey, local []wire.BlockHash, seq []wire.SeqHash) error {
	return ix.RecordDecisionAt(worker, local, seq, time.Now())
}

// RecordDecisionAt is RecordDecision at time now.
func (ix *Index) RecordDecisionAt(worker wire.WorkerKey, local []wire.BlockHash, seq []wire.SeqHash, now time.Time) error {
	if len(local) != len(seq) {
		return fmt.Errorf("%w: %d local, %d sequence", ErrLengthMismatch, len(local), len(seq))
	}
	if ix.closed.Load() {
		return ErrClosed
	}
	w := ix.works.get()
	w.kind, w.key, w.now = wkRecord, worker, now.Sub(ix.epoch)
	w.local = append(w.local, local...)
	w.seq = append(w.seq, seq...)
	return ix.runners[ix.shardOf(worker.Worker)].pushWork(w)
}

// Tick expires approximate-mode blocks whose TTL ended at or before now on
// every shard and returns how many were removed. An Index calls it every
// Config.TickInterval by itself unless that is negative.
func (ix *Index) Tick(now time.Time) (int, error) {
	d := now.Sub(ix.epoch)
	n := make([]int, len(ix.runners))
	err := ix.ordered(func(s int, c *Core) { n[s] = c.Tick(d) })
	total := 0
	for _, x := range n {
		total += x
	}
	return total, err
}

// Flush waits until every shard has processed everything queued before it.
func (ix *Index) Flush() error {
	return ix.ordered(func(int, *Core) {})
}

// RemoveWorker removes every dp rank of worker from its shard, after the
// events queued for it, and returns the number of blocks removed. The
// worker keeps its shard assignment but no longer counts toward the
// shard's load. An unknown worker removes nothing.
func (ix *Index) RemoveWorker(worker uint64) (int, error) {
	if ix.closed.Load() {
		return 0, ErrClosed
	}
	a, ok := ix.assign.Load(worker)
	if !ok {
		return 0, nil
	}
	var n int
	if err := ix.runners[a.shard].Do(func(c *Core) { n = c.RemoveWorker(worker) }); err != nil {
		return 0, err
	}
	ix.mu.Lock()
	if a, ok := ix.assign.Load(worker); ok && a.live {
		a.live = false
		ix.mu.load[a.shard]--
		ix.assign.Store(worker, a)
	}
	ix.mu.Unlock()
	return n, nil
}

// SetCap bounds the blocks the index holds for each dp rank of worker
// (Core.SetCap), after the events queued before it; 0 removes the bound.
// The worker is assigned a shard on first sight, as by an event.
func (ix *Index) SetCap(worker uint64, blocks uint32) error {
	if ix.closed.Load() {
		return ErrClosed
	}
	return ix.runners[ix.shardOf(worker)].Do(func(c *Core) { c.SetCap(worker, blocks) })
}

// RemoveDpRank removes one worker key from its shard, after the events
// queued for it, and returns the number of blocks removed.
func (ix *Index) RemoveDpRank(k wire.WorkerKey) (int, error) {
	if ix.closed.Load() {
		return 0, ErrClosed
	}
	a, ok := ix.assign.Load(k.Worker)
	if !ok {
		return 0, nil
	}
	var n int
	err := ix.runners[a.shard].Do(func(c *Core) { n = c.RemoveDpRank(k) })
	return n, err
}

// ordered runs fn on every shard after the work queued before it and waits.
func (ix *Index) ordered(fn func(shard int, c *Core)) error {
	if ix.closed.Load() {
		return ErrClosed
	}
	wt := newWaiter(len(ix.runners))
	for _, r := range ix.runners {
		w := ix.works.get()
		w.kind, w.fn, w.waiter = wkFunc, fn, wt
		if err := r.pushWork(w); err != nil {
			return err
		}
	}
	return wt.wait(ix.stopped)
}

// Dump appends Stored events that rebuild every shard's tree, after the
// work queued before it. Their Blocks are freshly allocated and owned by the
// caller (radix.Tree.Dump's contract).
func (ix *Index) Dump(dst []wire.Event) ([]wire.Event, error) {
	per := make([][]wire.Event, len(ix.runners))
	err := ix.ordered(func(s int, c *Core) { per[s] = c.Dump(nil) })
	if err != nil {
		return dst, err
	}
	for _, evs := range per {
		dst = append(dst, evs...)
	}
	return dst, nil
}

// CheckInvariants checks every shard's Core (tree and approximate-mode
// bookkeeping) after the work queued before it.
func (ix *Index) CheckInvariants() error {
	errs := make([]error, len(ix.runners))
	if err := ix.ordered(func(s int, c *Core) {
		if err := c.CheckInvariants(); err != nil {
			errs[s] = fmt.Errorf("shard %d: %w", s, err)
		}
	}); err != nil {
		return err
	}
	return errors.Join(errs...)
}

// broadcast queues lk on every shard's lookup queue and waits for all. On
// error lk must not be reused (a shard may still write to it).
func (ix *Index) broadcast(lk *lookup) error {
	if ix.closed.Load() {
		return ErrClosed
	}
	for _, r := range ix.runners {
		if err := r.pushLookup(lk); err != nil {
			return err
		}
	}
	return lk.wait(ix.stopped)
}

// Match appends to dst the overlap of every worker holding at least the
// first of hashes, from every shard in shard order. It runs on the caller's
// goroutine, taking each shard's core in turn between two of its events or
// in a quiet stretch of one (its worker then holds part of the event's
// blocks; Config.QueuedLookups: one lookup broadcast the shards answer
// between steps). hashes is not retained. Amortized, Match does not
// allocate.
func (ix *Index) Match(dst []radix.Overlap, hashes []wire.BlockHash) ([]radix.Overlap, error) {
	if ix.closed.Load() {
		return dst, ErrClosed
	}
	if !ix.cfg.QueuedLookups {
		for _, r := range ix.runners {
			dst = r.match(dst, hashes)
		}
		return dst, nil
	}
	lk := ix.lookups.get()
	lk.kind = lkMatch
	lk.one[0].Hashes = hashes
	lk.reqs = lk.one[:]
	if err := ix.broadcast(lk); err != nil {
		return dst, err
	}
	for s := range ix.runners {
		dst = append(dst, lk.per[s].res...)
	}
	ix.lookups.put(lk)
	return dst, nil
}

// MatchBatch matches every request, shard by shard, each shard's core taken
// once for the whole batch (as Match, on the caller's goroutine, or with
// Config.QueuedLookups one broadcast), and appends each request's overlaps
// to its Overlaps. Amortized, MatchBatch does not allocate beyond growing
// Overlaps.
func (ix *Index) MatchBatch(reqs []MatchRequest) error {
	if len(reqs) == 0 {
		return nil
	}
	if ix.closed.Load() {
		return ErrClosed
	}
	if !ix.cfg.QueuedLookups {
		for _, r := range ix.runners {
			r.matchBatch(reqs)
		}
		return nil
	}
	lk := ix.lookups.get()
	lk.kind = lkMatch
	lk.reqs = reqs
	if err := ix.broadcast(lk); err != nil {
		return err
	}
	for s := range ix.runners {
		p := &lk.per[s]
		start := uint32(0)
		for i := range reqs {
			end := p.offs[i]
			reqs[i].Overlaps = append(reqs[i].Overlaps, p.res[start:end]...)
			start = end
		}
	}
	ix.lookups.put(lk)
	return nil
}

// Workers appends every worker key of every shard with its tree size
// (Blocks = 0), for tie-breaking on tree size. Amortized, it does not
// allocate.
func (ix *Index) Workers(dst []radix.Overlap) ([]radix.Overlap, error) {
	lk := ix.lookups.get()
	lk.kind = lkWorkers
	if err := ix.broadcast(lk); err != nil {
		return dst, err
	}
	for s := range ix.runners {
		dst = append(dst, lk.per[s].res...)
	}
	ix.lookups.put(lk)
	return dst, nil
}

// lookupFunc runs fn on every shard as a lookup (ahead of queued writes).
func (ix *Index) lookupFunc(fn func(shard int, c *Core)) error {
	lk := ix.lookups.get()
	lk.kind, lk.fn = lkFunc, fn
	if err := ix.broadcast(lk); err != nil {
		return err
	}
	ix.lookups.put(lk)
	return nil
}

// TreeSize returns the number of blocks the index holds for k (0 if unknown).
func (ix *Index) TreeSize(k wire.WorkerKey) (uint32, error) {
	if ix.closed.Load() {
		return 0, ErrClosed
	}
	a, ok := ix.assign.Load(k.Worker)
	if !ok {
		return 0, nil
	}
	var n uint32
	err := ix.lookupFunc(func(s int, c *Core) {
		if s == int(a.shard) {
			n = c.TreeSize(k)
		}
	})
	return n, err
}

// Stats appends every shard's stats to dst, read by each shard's goroutine
// between steps (lookup priority: it does not wait for queued writes).
func (ix *Index) Stats(dst []ShardStats) ([]ShardStats, error) {
	out := make([]ShardStats, len(ix.runners))
	err := ix.lookupFunc(func(s int, c *Core) {
		r := ix.runners[s]
		out[s] = ShardStats{
			Shard:                s,
			CPUs:                 slices.Clone(r.pinned),
			Tree:                 c.TreeStats(),
			ApproxBlocks:         c.ApproxBlocks(),
			Counters:             c.Counters(),
			PendingGaps:          len(c.gaps),
			EventQueueHighWater:  r.evHW,
			LookupQueueHighWater: r.lkHW,
			EventQueueDepth:      r.evq.len(),
			ProducerStalls:       r.stalls.Load(),
			LookupWaits:          r.arrived.Load(),
			LookupParks:          r.lookupParks.Load(),
			RunnerParks:          r.runnerParks.Load(),
		}
	})
	if err != nil {
		return dst, err
	}
	ix.mu.Lock()
	for s := range out {
		out[s].Workers = ix.mu.load[s]
	}
	ix.mu.Unlock()
	return append(dst, out...), nil
}

// Gaps drains every shard's gap outbox into dst (shard by shard, oldest
// first within a shard).
func (ix *Index) Gaps(dst []Gap) ([]Gap, error) {
	per := make([][]Gap, len(ix.runners))
	if err := ix.lookupFunc(func(s int, c *Core) { per[s] = c.Gaps(nil) }); err != nil {
		return dst, err
	}
	for _, g := range per {
		dst = append(dst, g...)
	}
	return dst, nil
}
