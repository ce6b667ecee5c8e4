package shard

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
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
	// counts as at least one) have been processed. It bounds the lookup
	// latency added by a saturated event stream: at the ~3.5M blocks/s one
	// core applies (BenchmarkCoreApply), 256 blocks is ~75 µs, and a look at
	// an empty lookup queue costs one atomic load, so smaller steps cost no
	// measurable throughput (BenchmarkMatchUnderLoad, step=64..1024).
	DefaultStepBlocks = 256
)

// captureEvery is the number of event steps a Runner takes between two
// copy steps of a snapshot capture while events are queued: the write
// barrier copies the pages the events write, so the background copy can
// yield to ingest. A saturated shard applied 0.26× the events while a
// capture was in progress with a copy step after every event step, 0.47×
// with one after every 4 (BenchmarkSnapshot/capture-stalls, ingest-ratio);
// a capture then lasts longer (41 copy steps instead of 69 at 256 KiB: the
// barrier copies more of the pages).
const captureEvery = 4

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
// Runner's methods are goroutine-safe. The zero value is not usable; create
// one with NewRunner and Start it. After Start, the Core belongs to the
// runner's goroutine: reach it only through Do.
type Runner struct {
	core *Core
	cfg  RunnerConfig

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
	evSteps    int // event steps since the last capture copy step
	pinned     []int
	pinErr     error
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
	return &Runner{
		core:    core,
		cfg:     cfg,
		evq:     newQueue[work](cfg.QueueSize),
		lkq:     newQueue[lookup](cfg.LookupQueueSize),
		bell:    make(chan struct{}, 1),
		evSpace: make(chan struct{}, 1),
		lkSpace: make(chan struct{}, 1),
		stop:    make(chan struct{}),
		ready:   make(chan struct{}),
		done:    make(chan struct{}),
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
		if cc := r.core.cap; cc != nil && (r.cur == nil || r.evSteps >= captureEvery) {
			// A snapshot capture in progress: one copy step, after every
			// captureEvery event steps while events are queued and at
			// once when none are; lookups are served before the next
			// step of either kind.
			r.evSteps = 0
			t0 := time.Now()
			done := cc.step(r.core)
			cc.st.Steps++
			cc.st.LongestStep = max(cc.st.LongestStep, time.Since(t0))
			if done {
				cc.arrive()
			}
			busy = true
		} else if w := r.cur; w != nil {
			if cc != nil {
				r.timedStep(w, cc)
			} else if r.step(w) {
				r.cur = nil
				r.finish(w)
			}
			busy = true
		}
		if !busy {
			select {
			case <-r.bell:
			case <-r.stop:
				return
			}
		}
	}
}

// timedStep is step while a capture is in progress, measuring the event
// step with its write-barrier copies.
func (r *Runner) timedStep(w *work, cc *capture) {
	t0 := time.Now()
	fin := r.step(w)
	r.evSteps++
	if w.kind == wkEvents {
		cc.st.EventSteps++
		cc.st.LongestEventStep = max(cc.st.LongestEventStep, time.Since(t0))
	}
	if fin {
		r.cur = nil
		r.finish(w)
	}
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
	return n > 0
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
	switch w.kind {
	case wkEvents:
		if w.pos == 0 {
			c.cnt.EventBatches++
		}
		budget := r.cfg.StepBlocks
		i := w.pos
		for ; i < len(w.events) && budget > 0; i++ {
			ev := &w.events[i]
			c.applyEvent(ev)
			budget -= 1 + len(ev.Blocks)
		}
		w.pos = i
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
