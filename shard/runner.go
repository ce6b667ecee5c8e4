package shard

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/puzpuzpuz/xsync/v4"

	"github.com/kvroute/kvroute/internal/cpuset"
	"github.com/kvroute/kvroute/radix"
	"github.com/kvroute/kvroute/wire"
)

// ErrClosed is returned by calls made after (or racing with) Close.
var ErrClosed = errors.New("shard: closed")

// Runner defaults.
const (
	// DefaultQueueSize is the event queue capacity, in work items (one
	// Index.Apply batch, decision or control call each).
	DefaultQueueSize = 256
	// DefaultLookupQueueSize is the lookup queue capacity, in lookup batches.
	DefaultLookupQueueSize = 256
	// DefaultStepBlocks bounds the event work done between two looks at the
	// lookup queue: events are applied until this many blocks (an event
	// counts as at least one) have been processed. It bounds the latency a
	// saturated event stream adds to queued lookups (Stats, Gaps; Match
	// with QueuedLookups): at the ~3.5M blocks/s one core applies
	// (BenchmarkCoreApply), 256 blocks is ~75 µs, and a look at an empty
	// lookup queue costs one atomic load, so smaller steps cost no
	// measurable throughput (BenchmarkMatchUnderLoad, step=64..1024). A
	// Match waiting on the core ends a step sooner (lookupStepBlocks).
	DefaultStepBlocks = 256
	// spinTries is how many times a Match caller (and the runner, taking the
	// core back) tries the core's lock before parking in mu.Lock (which
	// spins briefly itself): ~0.1–0.5 µs, enough for a hand-off between two
	// running threads. A 20 µs spin was worse on the shared 2-vCPU machine
	// (trace replay, 256 workers: lower ops/s in 3 of 3 interleaved runs
	// against 64 tries), where the lock holder is often preempted and a
	// spinning waiter takes CPU from it.
	spinTries = 64
	// lookupStepBlocks is the event work (blocks; an event counts as at
	// least one) the runner does between two hand-offs of the core to
	// waiting lookup callers (Runner.credit; counted since the last
	// hand-off, not since the step began, so a lookup that arrives after
	// an idle spell or a long stretch of writes waits for the current
	// event only): the writes' share when lookups come back to back. Each
	// hand-off costs about one Match plus two cache-line transfers of the
	// lock, so steps much shorter than this cost ingest throughput
	// (BenchmarkMatchUnderLoad).
	lookupStepBlocks = 32
)

// RunnerConfig configures a Runner. It is a plain value that NewRunner
// copies; the zero value is valid: no pinning, default queue sizes and step.
type RunnerConfig struct {
	// CPUs the shard's OS thread is pinned to with sched_setaffinity; empty
	// means no pinning. If pinning fails (not permitted, CPU offline or
	// outside the container's cpuset, non-Linux), the runner runs unpinned
	// and PinError reports why.
	CPUs []int
	// QueueSize and LookupQueueSize are the capacities of the event and
	// lookup queues (rounded up to a power of two). A producer that finds a
	// queue full waits for room; nothing is dropped.
	QueueSize, LookupQueueSize int
	// StepBlocks bounds the event work between lookup checks
	// (DefaultStepBlocks).
	StepBlocks int
	// QueuedLookups answers Match and MatchBatch on the runner's goroutine,
	// from the lookup queue between steps (every shard in parallel),
	// instead of on the caller's goroutine under the core's lock. Kept for comparison (BenchmarkMatchUnderLoad) and for many
	// shards with large batches, where the parallel answers may win.
	QueuedLookups bool
	// LockOSThread locks the goroutine to its OS thread even when no CPUs
	// are configured (pinning always locks: affinity belongs to a thread).
	// Off by default, by measurement: locking turns every wake-up of an
	// idle shard into an OS thread hand-off; an idle single Match round
	// trip measured ~14-40 µs locked against ~1 µs unlocked
	// (BenchmarkIndexMatch/.../single vs .../single-unlocked, 2-vCPU VM),
	// and the trace replay at W=256, B=512 ran at 2.0M block ops/s locked
	// against 13.7M unlocked, Match p50 27 µs against 1.9 µs.
	LockOSThread bool

	id    int       // index of this runner's slot in lookup results
	works *workPool // shared with the Index; nil: the runner's own
}

// Runner is the goroutine shell around one Core: a goroutine locked to an OS
// thread (when pinned or RunnerConfig.LockOSThread; pinned to RunnerConfig.CPUs
// when set) that applies queued event
// work in bounded steps and answers queued lookup batches between steps, so
// lookups never wait behind a long write queue. Both inbound queues are
// bounded lock-free MPSC queues with a one-slot doorbell; an idle runner
// parks on the doorbell.
//
// Matches do not go through the queue (unless RunnerConfig.QueuedLookups):
// the caller takes the core's lock and runs Core.Match itself, so a lookup
// never waits for the runner's goroutine to be scheduled or woken. The
// runner holds the lock for one step at a time, lets it go in every quiet
// stretch of the events it applies (radix.Tree.SetQuiet: the engine-table
// work that no Match reads, most of an event's time), and ends a step after
// the current event when a caller is waiting for it, so a lookup waits for
// at most the busy part of one event (measurements:
// docs/decisions/0008-lookups-on-the-callers-goroutine.md, 0009-quiet-stretches.md).
//
// Runner's methods are goroutine-safe. The zero value is not usable; create
// one with NewRunner and Start it. After Start, the Core belongs to the
// runner's goroutine and to lookups holding mu: reach it only through Do.
type Runner struct {
	core *Core
	cfg  RunnerConfig

	// mu guards core: the runner holds it for each step and each batch of
	// queued lookups (lockStep), a Match caller for its matches (lockLookup).
	mu sync.Mutex
	// Lookup callers that found mu taken count themselves in arrived, and
	// in entered once they hold it. While arrived != entered the runner
	// ends its step after the current event once it has applied
	// lookupStepBlocks since callers last took mu (credit), and after each
	// step lets in every caller that had arrived by then (a ticket
	// hand-off: later arrivals wait for the next step, so writes are never
	// starved).
	_       [cacheLine]byte
	arrived atomic.Uint64
	entered atomic.Uint64
	writer  atomic.Bool // the runner waits for mu: lookups leave it the lock
	_       [cacheLine - 17]byte
	// Lookup callers, and the runner's steps, that gave up spinning and
	// waited in mu.Lock (ShardStats.LookupParks, RunnerParks): slow path
	// only, so on their own cache line, away from arrived and entered.
	lookupParks, runnerParks atomic.Uint64
	_                        [cacheLine - 16]byte
	spin                     bool       // more than one P: spinning on mu can succeed
	quiet                    func(bool) // the tree's quiet hook in event steps (quietHook)

	evq  *queue[work]
	lkq  *queue[lookup]
	bell chan struct{} // one-slot doorbell: work was queued
	// evSpace and lkSpace are one-slot "room again" signals for producers
	// waiting on a full queue.
	evSpace, lkSpace chan struct{}

	stopping atomic.Bool
	stop     chan struct{}
	ready    chan struct{} // closed once the goroutine has pinned itself
	done     chan struct{} // closed when the goroutine has returned
	started  bool

	// Written by producers, on the full-queue slow path only.
	stalls atomic.Uint64

	// Owned by the runner goroutine.
	cur        *work
	evHW, lkHW int
	stepBlocks int // event work of the last step (blocks; an item counts as one at least)
	// credit is the event work (blocks) applied since lookup callers last
	// took the core from the runner (lookupStepBlocks once it has idled):
	// a step ends for a waiting lookup after the current event once
	// credit reaches lookupStepBlocks.
	credit int
	// quietShared counts quiet stretches at whose end a lookup caller held
	// the core (it matched while the event was applied).
	quietShared uint64
	copyDue     int // budget of the capture copy step due before the next event step (capture.pace)
	pinned      []int
	pinErr      error
}

// NewRunner returns a Runner that will own core. It does not start it.
func NewRunner(core *Core, cfg RunnerConfig) *Runner {
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = DefaultQueueSize
	}
	if cfg.LookupQueueSize <= 0 {
		cfg.LookupQueueSize = DefaultLookupQueueSize
	}
	if cfg.StepBlocks <= 0 {
		cfg.StepBlocks = DefaultStepBlocks
	}
	cfg.CPUs = slices.Clone(cfg.CPUs)
	if cfg.works == nil {
		cfg.works = newWorkPool(cfg.QueueSize + 2)
	}
	r := &Runner{
		core:    core,
		cfg:     cfg,
		spin:    runtime.GOMAXPROCS(0) > 1,
		evq:     newQueue[work](cfg.QueueSize),
		lkq:     newQueue[lookup](cfg.LookupQueueSize),
		bell:    make(chan struct{}, 1),
		evSpace: make(chan struct{}, 1),
		lkSpace: make(chan struct{}, 1),
		stop:    make(chan struct{}),
		ready:   make(chan struct{}),
		done:    make(chan struct{}),
	}
	r.quiet = r.quietHook
	return r
}

// quietHook is the tree's quiet hook (radix.Tree.SetQuiet) during event
// steps: in a quiet stretch the runner lets the core go, so a Match caller
// need not wait for the event (most of a Stored event's time is its
// engine-table work, which no Match reads), and takes it back after.
func (r *Runner) quietHook(quiet bool) {
	if quiet {
		r.mu.Unlock()
		return
	}
	if !r.mu.TryLock() {
		r.quietShared++ // a Match holds the core: it ran in the stretch
		r.lockStep()
	}
}

// Start starts the runner's goroutine and returns once it has locked its OS
// thread and attempted pinning. Calling Start twice panics.
func (r *Runner) Start() {
	if r.started {
		panic("shard: Runner started twice")
	}
	r.started = true
	go r.run()
	<-r.ready
}

// PinError reports why pinning to RunnerConfig.CPUs failed, or nil if it
// succeeded or was not configured. Valid after Start.
func (r *Runner) PinError() error {
	<-r.ready
	return r.pinErr
}

// Close stops the runner and waits for its goroutine to return. Work still
// queued is discarded; callers waiting on it get ErrClosed. Close is
// idempotent.
func (r *Runner) Close() {
	if !r.stopping.CompareAndSwap(false, true) {
		<-r.done
		return
	}
	close(r.stop)
	if r.started {
		<-r.done
	} else {
		close(r.done)
	}
}

// Do runs fn on the runner's goroutine after every work item queued before
// it (events, decisions, ticks) and waits for it to return. fn may use the
// Core freely but must not retain it or slices it returns.
func (r *Runner) Do(fn func(*Core)) error {
	if r.stopping.Load() {
		return ErrClosed
	}
	wt := newWaiter(1)
	w := r.cfg.works.get()
	w.kind, w.fn, w.waiter = wkFunc, func(_ int, c *Core) { fn(c) }, wt
	if err := r.pushWork(w); err != nil {
		return err
	}
	return wt.wait(r.done)
}

func (r *Runner) run() {
	defer close(r.done)
	// The goroutine never unlocks: when it returns, its thread exits with
	// it, so the pinned affinity never leaks to other goroutines.
	if len(r.cfg.CPUs) > 0 || r.cfg.LockOSThread {
		runtime.LockOSThread()
	}
	r.pin()
	close(r.ready)
	for !r.stopping.Load() {
		busy := r.serveLookups()
		if r.cur == nil {
			if r.cur = r.evq.tryPop(); r.cur != nil {
				r.evHW = max(r.evHW, r.evq.depthAfterPop())
				signal(r.evSpace)
			}
		}
		if cc := r.core.cap; cc != nil && cc.reader {
			// A snapshot capture whose reader takes the pages: no copy
			// steps (the shard copies only what it writes first); once
			// the reader has them all (it rings the bell), detach.
			if cc.readDone.Load() {
				r.lockStep()
				fin := cc.complete(r.core)
				r.mu.Unlock()
				if fin {
					cc.arrive()
				}
			}
		}
		if cc := r.core.cap; cc != nil && !cc.reader && (r.cur == nil || r.copyDue > 0) {
			// A snapshot capture in progress: a copy step, paced while
			// events are queued (capture.pace: the budget the event steps
			// earned), a full one at once when none are; lookups get the
			// core between steps of either kind (the copy step reads the
			// arenas under the core's lock, as event steps write them).
			budget := cc.budget
			if r.cur != nil {
				budget = r.copyDue
			}
			r.copyDue = 0
			r.lockStep()
			t0 := time.Now()
			done := cc.stepBytes(r.core, budget)
			d := time.Since(t0)
			r.mu.Unlock()
			cc.st.Steps++
			cc.st.LongestStep = max(cc.st.LongestStep, d)
			if done {
				cc.arrive()
			}
			r.yieldToLookups()
			busy = true
		} else if w := r.cur; w != nil {
			r.lockStep()
			var done bool
			if cc := r.core.cap; cc != nil {
				done = r.timedStep(w, cc)
			} else {
				done = r.step(w)
			}
			r.mu.Unlock()
			if done {
				r.cur = nil
				r.finish(w)
			}
			r.yieldToLookups()
			busy = true
		}
		if !busy {
			r.credit = lookupStepBlocks // idle: no lookup waits behind writes
			select {
			case <-r.bell:
			case <-r.stop:
				return
			}
		}
	}
}

// timedStep is step while a capture is in progress, measuring the event
// step with its write-barrier copies; it reports whether w is finished.
func (r *Runner) timedStep(w *work, cc *capture) bool {
	t0 := time.Now()
	fin := r.step(w)
	if !cc.reader {
		r.copyDue = cc.pace(r.stepBlocks)
	}
	if w.kind == wkEvents {
		cc.st.EventSteps++
		cc.st.LongestEventStep = max(cc.st.LongestEventStep, time.Since(t0))
	}
	return fin
}

func (r *Runner) pin() {
	if len(r.cfg.CPUs) == 0 {
		return
	}
	if err := pinThread(r.cfg.CPUs); err != nil {
		r.pinErr = fmt.Errorf("shard %d: pinning to CPUs %s: %w", r.cfg.id, cpuset.Format(r.cfg.CPUs), err)
		return
	}
	r.pinned = r.cfg.CPUs
}

// serveLookups answers at most one queue's worth of lookup batches (so a
// stream of lookups cannot starve event work) and reports whether it did any.
func (r *Runner) serveLookups() bool {
	if r.lkq.len() == 0 {
		return false
	}
	r.lockStep()
	n := 0
	for ; n < r.lkq.cap(); n++ {
		lk := r.lkq.tryPop()
		if lk == nil {
			break
		}
		r.lkHW = max(r.lkHW, r.lkq.depthAfterPop())
		signal(r.lkSpace)
		r.serve(lk)
	}
	r.mu.Unlock()
	return n > 0
}

// lockLookup takes mu for a lookup caller: at once if it is free and the
// runner is not waiting for it; else the caller counts itself in arrived
// (so the runner cuts its step short and lets it in) and waits.
func (r *Runner) lockLookup() {
	if !r.writer.Load() && r.mu.TryLock() {
		return
	}
	r.arrived.Add(1)
	if r.spinLock(true) {
		r.lookupParks.Add(1)
	}
	r.entered.Add(1)
}

// lockStep takes mu for the runner's next step. Lookup callers that arrive
// while it waits do not take the lock first (they wait for the next cut):
// without that, a caller matching in a loop would starve the writes.
func (r *Runner) lockStep() {
	if r.mu.TryLock() {
		return
	}
	r.writer.Store(true)
	if r.spinLock(false) {
		r.runnerParks.Add(1)
	}
	r.writer.Store(false)
}

// spinLock takes mu after up to spinTries tries (when another P can be
// running the holder), else parked in mu.Lock, and reports whether it went
// to mu.Lock. A lookup caller (lookup) leaves the lock to the runner while
// the runner waits for it.
func (r *Runner) spinLock(lookup bool) (parked bool) {
	if r.spin {
		for range spinTries {
			if !(lookup && r.writer.Load()) && r.mu.TryLock() {
				return false
			}
		}
	}
	r.mu.Lock()
	return true
}

// yieldToLookups lets every lookup caller that has arrived take mu before
// the runner takes it back for its next step: without this the runner,
// still running, would win the race for the lock it just released. Those
// callers are spinning or parked in mu.Lock, which the runner's Unlock
// woke (onto this P: Gosched runs it), so the wait is short and bounded.
func (r *Runner) yieldToLookups() {
	a := r.arrived.Load()
	if r.entered.Load() < a {
		r.credit = 0
	}
	for r.entered.Load() < a {
		runtime.Gosched()
	}
}

// lookupsWaiting reports whether a lookup caller is waiting for mu.
func (r *Runner) lookupsWaiting() bool { return r.arrived.Load() != r.entered.Load() }

// match appends to dst the overlaps of this runner's core for hashes, on
// the caller's goroutine.
func (r *Runner) match(dst []radix.Overlap, hashes []wire.BlockHash) []radix.Overlap {
	r.lockLookup()
	dst = r.core.Match(dst, hashes)
	r.core.cnt.LookupBatches++
	r.mu.Unlock()
	return dst
}

// matchBatch appends this runner's overlaps to every request, on the
// caller's goroutine, holding the core for the whole batch.
func (r *Runner) matchBatch(reqs []MatchRequest) {
	r.lockLookup()
	c := r.core
	for i := range reqs {
		reqs[i].Overlaps = c.Match(reqs[i].Overlaps, reqs[i].Hashes)
	}
	c.cnt.LookupBatches++
	r.mu.Unlock()
}

func (r *Runner) serve(lk *lookup) {
	c := r.core
	switch lk.kind {
	case lkMatch:
		p := &lk.per[r.cfg.id]
		p.res, p.offs = p.res[:0], p.offs[:0]
		for i := range lk.reqs {
			p.res = c.Match(p.res, lk.reqs[i].Hashes)
			p.offs = append(p.offs, uint32(len(p.res)))
		}
		c.cnt.LookupBatches++
	case lkWorkers:
		p := &lk.per[r.cfg.id]
		p.res = c.Workers(p.res[:0])
	case lkFunc:
		lk.fn(r.cfg.id, c)
	}
	lk.waiter.arrive()
}

// step does at most one step of w and reports whether w is finished.
func (r *Runner) step(w *work) bool {
	c := r.core
	r.stepBlocks = 1
	switch w.kind {
	case wkEvents:
		if w.pos == 0 {
			c.cnt.EventBatches++
		}
		budget := r.cfg.StepBlocks
		i := w.pos
		c.tree.SetQuiet(r.quiet)
		defer c.tree.SetQuiet(nil)
		for ; i < len(w.events) && budget > 0; i++ {
			ev := &w.events[i]
			c.applyEvent(ev)
			budget -= 1 + len(ev.Blocks)
			r.credit += 1 + len(ev.Blocks)
			if r.credit >= lookupStepBlocks && r.lookupsWaiting() {
				i++ // a lookup waits for the core: end the step here
				break
			}
		}
		w.pos = i
		r.stepBlocks = r.cfg.StepBlocks - budget
		return i == len(w.events)
	case wkRecord:
		_ = c.RecordDecision(w.key, w.local, w.seq, w.now) // lengths checked by the producer; tree errors are counted
	case wkFunc:
		w.fn(r.cfg.id, c)
	case wkStep:
		return w.stepFn(c)
	}
	return true
}

func (r *Runner) finish(w *work) {
	wt := w.waiter
	r.cfg.works.put(w)
	if wt != nil {
		wt.arrive()
	}
}

// pushWork queues w on the event queue, waiting while it is full.
func (r *Runner) pushWork(w *work) error {
	if r.evq.tryPush(w) {
		signal(r.bell)
		return nil
	}
	return r.pushWorkSlow(w)
}

func (r *Runner) pushWorkSlow(w *work) error {
	r.stalls.Add(1)
	for {
		signal(r.bell)
		select {
		case <-r.evSpace:
		case <-r.done:
			return ErrClosed
		}
		if r.evq.tryPush(w) {
			signal(r.bell)
			// Pass the wake-up on: another producer may be waiting for
			// room that is still there.
			if r.evq.len() < r.evq.cap() {
				signal(r.evSpace)
			}
			return nil
		}
	}
}

// pushLookup queues lk on the lookup queue, waiting while it is full.
func (r *Runner) pushLookup(lk *lookup) error {
	if r.lkq.tryPush(lk) {
		signal(r.bell)
		return nil
	}
	return r.pushLookupSlow(lk)
}

func (r *Runner) pushLookupSlow(lk *lookup) error {
	r.stalls.Add(1)
	for {
		signal(r.bell)
		select {
		case <-r.lkSpace:
		case <-r.done:
			return ErrClosed
		}
		if r.lkq.tryPush(lk) {
			signal(r.bell)
			if r.lkq.len() < r.lkq.cap() {
				signal(r.lkSpace)
			}
			return nil
		}
	}
}

// signal does a non-blocking send on a one-slot channel. When the slot is
// already full this is a lock-free check.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// waiter counts down the shards working on one call and wakes the caller
// when the last is done.
type waiter struct {
	pending atomic.Int32
	done    chan struct{}
}

func newWaiter(n int) *waiter {
	w := &waiter{done: make(chan struct{}, 1)}
	w.pending.Store(int32(n))
	return w
}

func (w *waiter) arrive() {
	if w.pending.Add(-1) == 0 {
		w.done <- struct{}{}
	}
}

// wait waits for the last arrival, or returns ErrClosed once stopped is closed.
func (w *waiter) wait(stopped <-chan struct{}) error {
	select {
	case <-w.done:
		return nil
	case <-stopped:
		select {
		case <-w.done:
			return nil
		default:
			return ErrClosed
		}
	}
}

type workKind uint8

const (
	wkEvents workKind = iota
	wkRecord
	wkFunc
	wkStep // stepFn until it returns true, serving lookups between calls
)

// work is one item of a runner's event queue. Event batches own copies of
// their blocks and LoRA names (one append each per event), so the caller's
// buffers are free as soon as Index.Apply returns.
type work struct {
	kind workKind

	// wkEvents
	events     []wire.Event
	blocks     []wire.Block
	lora       []byte
	boff, loff []uint32
	pos        int // next event to apply

	// wkRecord
	key   wire.WorkerKey
	local []wire.BlockHash
	seq   []wire.SeqHash
	now   time.Duration

	// wkFunc
	fn func(shard int, c *Core)

	// wkStep: called once per step until it returns true; the event work
	// queued behind it waits, lookups are served between calls
	stepFn func(c *Core) bool

	waiter *waiter // arrived at when the work is finished, if set
}

// maxPooledBlocks bounds the block capacity a pooled work keeps, so one huge
// batch does not pin its buffer forever.
const maxPooledBlocks = 1 << 16

// workPool is a free list of work items shared by an Index's producers (who
// take) and runners (who give back). A lock-free bounded queue rather than a
// sync.Pool: items are freed on the shard's P and taken on the producer's,
// which sync.Pool's per-P caches turn into misses and allocations.
type workPool struct {
	free *xsync.MPMCQueue[*work]
}

func newWorkPool(capacity int) *workPool {
	return &workPool{free: xsync.NewMPMCQueue[*work](capacity)}
}

func (p *workPool) get() *work {
	if w, ok := p.free.TryDequeue(); ok {
		return w
	}
	return new(work)
}

func (p *workPool) put(w *work) {
	clear(w.events) // drop the views into w.blocks and w.lora
	if cap(w.blocks) > maxPooledBlocks {
		*w = work{}
	} else {
		*w = work{
			events: w.events[:0], blocks: w.blocks[:0], lora: w.lora[:0],
			boff: w.boff[:0], loff: w.loff[:0], local: w.local[:0], seq: w.seq[:0],
		}
	}
	p.free.TryEnqueue(w) // full: let the GC have it
}

// add appends a copy of ev, its blocks and LoRA name to the batch.
func (w *work) add(ev *wire.Event) {
	w.boff = append(w.boff, uint32(len(w.blocks)))
	w.blocks = append(w.blocks, ev.Blocks...)
	w.loff = append(w.loff, uint32(len(w.lora)))
	w.lora = append(w.lora, ev.LoRA...)
	w.events = append(w.events, *ev)
}

// seal points every event's Blocks and LoRA into the batch's own buffers
// (they cannot be set in add: appends may move the buffers).
func (w *work) seal() {
	w.boff = append(w.boff, uint32(len(w.blocks)))
	w.loff = append(w.loff, uint32(len(w.lora)))
	for i := range w.events {
		ev := &w.events[i]
		b0, b1 := w.boff[i], w.boff[i+1]
		ev.Blocks = w.blocks[b0:b1:b1]
		ev.LoRA = nil
		if l0, l1 := w.loff[i], w.loff[i+1]; l1 > l0 {
			ev.LoRA = w.lora[l0:l1:l1]
		}
	}
}

type lookupKind uint8

const (
	lkMatch lookupKind = iota
	lkWorkers
	lkFunc
)

// lookup is one item of a runner's lookup queue, broadcast to every shard.
// Each shard writes only its own per[] slot.
type lookup struct {
	kind lookupKind
	reqs []MatchRequest
	one  [1]MatchRequest
	per  []perShard
	fn   func(shard int, c *Core)
	waiter
}

type perShard struct {
	res  []radix.Overlap
	offs []uint32
	_    [cacheLine - 48]byte // one shard per cache line
}

// lookupPool pools lookups for one Index (per Index, so every pooled
// lookup's channel and per-shard slots belong to that Index). A bounded
// lock-free free list, as workPool, not a sync.Pool: a GC empties a
// sync.Pool, and every lookup then grows its per-shard result buffers
// again (TestBatcherAllocs counted 9-15 allocations per decide round when
// a collection fell inside it).
type lookupPool struct {
	free   *xsync.MPMCQueue[*lookup]
	shards int
}

func newLookupPool(shards int) lookupPool {
	return lookupPool{free: xsync.NewMPMCQueue[*lookup](lookupPoolSize), shards: shards}
}

// lookupPoolSize bounds the free lookups kept (concurrent lookups beyond it
// allocate).
const lookupPoolSize = 256

func (p *lookupPool) get() *lookup {
	lk, ok := p.free.TryDequeue()
	if !ok {
		lk = &lookup{waiter: waiter{done: make(chan struct{}, 1)}, per: make([]perShard, p.shards)}
	}
	lk.pending.Store(int32(p.shards))
	return lk
}

func (p *lookupPool) put(lk *lookup) {
	lk.reqs, lk.one[0], lk.fn = nil, MatchRequest{}, nil
	for i := range lk.per {
		p := &lk.per[i]
		if cap(p.res) > maxPooledBlocks {
			p.res = nil
		}
		if cap(p.offs) > maxPooledBlocks {
			p.offs = nil
		}
	}
	p.free.TryEnqueue(lk) // full: let the GC have it
}
