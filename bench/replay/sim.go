package replay

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/kvroute/kvroute/bench/engine"
	"github.com/kvroute/kvroute/radix"
	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire"
)

// ErrStalled is returned when an engine holds requests but cannot schedule
// any of them (a bug in the engine model or an impossible configuration).
var ErrStalled = errors.New("replay: engine stalled")

// Simulate replays w through the fleet of cfg with policy p: a deterministic
// discrete-event simulation on a virtual clock (see the package doc). It
// returns the Result; the same inputs give the same Result (WallS aside).
func Simulate(w *Workload, cfg Config, p Policy) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	cfg = cfg.withDefaults()
	if cfg.Fleet.BlockSize != w.BlockSize {
		return Result{}, fmt.Errorf("%w: workload hashed at block size %d, fleet block size %d", ErrConfig, w.BlockSize, cfg.Fleet.BlockSize)
	}
	start := time.Now() // the run's cost, for WallS; the simulation reads no clock
	s, err := newSim(w, cfg, p)
	if err != nil {
		return Result{}, err
	}
	if err := s.run(); err != nil {
		return Result{}, err
	}
	r := s.result()
	r.WallS = time.Since(start).Seconds()
	return r, nil
}

// Event kinds, in the order simultaneous events are processed.
const (
	evStepEnd uint8 = iota + 1
	evSync
	evArrival
)

type event struct {
	at   time.Duration
	seq  uint64
	kind uint8
	idx  int32 // rank (evStepEnd), request (evArrival) or sync op (evSync)
}

func (a *event) less(b *event) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	return a.seq < b.seq
}

// agenda is a simulation's pending work: timed events on a heap, and
// KV-event deliveries in a FIFO (a constant delay keeps it in time order).
// A delivery due at an event's time goes first. Not goroutine-safe; the
// zero value is empty.
type agenda struct {
	heap  eventHeap
	seq   uint64
	fifo  []*delivery
	fhead int
	spare []*delivery // delivered, for reuse
}

func (a *agenda) push(at time.Duration, kind uint8, idx int32) {
	a.seq++
	a.heap.push(event{at: at, seq: a.seq, kind: kind, idx: idx})
}

// newDelivery is a delivery of a copy of evs to rank r, from the spares
// when one is there.
func (a *agenda) newDelivery(r int32, evs []wire.Event) *delivery {
	var d *delivery
	if n := len(a.spare); n > 0 {
		d, a.spare = a.spare[n-1], a.spare[:n-1]
	} else {
		d = &delivery{}
	}
	d.rank = r
	d.events, d.blocks = d.events[:0], d.blocks[:0]
	for i := range evs {
		d.blocks = append(d.blocks, evs[i].Blocks...)
	}
	off := 0
	for i := range evs {
		ev := evs[i]
		n := len(ev.Blocks)
		ev.Blocks = d.blocks[off : off+n : off+n]
		off += n
		d.events = append(d.events, ev)
	}
	return d
}

// take removes the earliest item: a delivery (d != nil) or else an event.
// ok is false once no event is left (deliveries still queued then are
// dropped with the run).
func (a *agenda) take() (ev event, d *delivery, ok bool) {
	if len(a.heap) == 0 {
		return event{}, nil, false
	}
	if a.fhead < len(a.fifo) && a.fifo[a.fhead].at <= a.heap[0].at {
		d = a.fifo[a.fhead]
		a.fifo[a.fhead] = nil
		a.fhead++
		if a.fhead == len(a.fifo) {
			a.fifo, a.fhead = a.fifo[:0], 0
		}
		return event{}, d, true
	}
	return a.heap.pop(), nil, true
}

// eventHeap is a binary min-heap of events.
type eventHeap []event

func (h *eventHeap) push(e event) {
	*h = append(*h, e)
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if !q[i].less(&q[p]) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *eventHeap) pop() event {
	q := *h
	top := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q = q[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && q[l].less(&q[m]) {
			m = l
		}
		if r < n && q[r].less(&q[m]) {
			m = r
		}
		if m == i {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	*h = q
	return top
}

// syncOp is one replica's booking, prefill completion or free on its way
// to the other replicas' schedulers.
type syncOp struct {
	kind uint8 // syncBook, syncPrefill, syncFree
	req  int32
	d    sched.Decision
}

const (
	syncBook uint8 = iota + 1
	syncPrefill
	syncFree
)

// delivery is one engine step's KV events on their way to the index.
type delivery struct {
	at     time.Duration
	rank   int32
	events []wire.Event
	blocks []wire.Block
}

// Request states.
const (
	stNew uint8 = iota
	stQueued
	stRouted
	stDone
	stRejected
)

type sim struct {
	w   *Workload
	cfg Config
	pol Policy

	sch     *sched.Scheduler   // replica 0's, the only one by default
	schs    []*sched.Scheduler // one per router replica (Config.Routers)
	syncs   []syncOp           // replica-sync ops on their way (evSync's idx)
	core    *shard.Core        // nil unless the policy uses an index
	events  bool               // KV events feed the index
	engines []*engine.Engine
	keys    []wire.WorkerKey
	rankOf  map[wire.WorkerKey]int32

	stepping   []bool
	stepEffect [][]engine.Effect // effects of each rank's current step
	stepEvents []*delivery       // events of each rank's current step
	lastLoad   []time.Duration
	loaded     []bool

	agenda
	now     time.Duration
	nextTic time.Duration

	state    []uint8
	arrive   []time.Duration
	admitted []time.Duration
	first    []time.Duration
	finish   []time.Duration
	cached   []int32
	hostTok  []int32 // of cached, onloaded from the host tier
	best     []int32 // tokens: longest cached prefix on any rank at dispatch (-1: no exact index)
	routed   []int32 // and on the rank chosen
	output   []int32
	rank     []int32
	queued   []bool
	tooLong  []bool
	next     []int32 // next turn of the same session waiting on this one, -1 if none

	// scratch
	batch    [1]sched.Request
	ovBatch  [1][]sched.Overlap
	radixOv  []radix.Overlap
	decs     []sched.Decision
	effects  []sched.Effect
	peakWait int
	expired  int
	ended    int // requests finished or rejected since the last progress call
}

func newSim(w *Workload, cfg Config, p Policy) (*sim, error) {
	sc := cfg.Sched
	sc.Policy = p.Sched
	// The workload's block lists are chained sequence hashes
	// (wire.SequenceHashes), as the router's are: the scheduler runs as
	// the router configures it (sched.Config.ChainedHashes).
	sc.ChainedHashes = true
	if cfg.Tenants != nil {
		cfg.Tenants = cfg.Tenants.resolve(w.Trace)
	}
	if cfg.Tenants != nil && cfg.Tenants.Sessions && sc.SessionTTL == 0 {
		sc.SessionTTL = 5 * time.Minute
	}
	var schs []*sched.Scheduler
	for r := range max(cfg.Routers, 1) {
		sch, err := sched.New(sc, cfg.Seed+uint64(r))
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrConfig, err)
		}
		schs = append(schs, sch)
		if cfg.Tenants != nil {
			for k, t := range cfg.Tenants.Tenants {
				if err := sch.SetTenant(uint32(k+1), t.Weight); err != nil {
					return nil, fmt.Errorf("%w: %v", ErrConfig, err)
				}
			}
		}
	}
	sch := schs[0]
	f := cfg.Fleet
	n := w.Len()
	s := &sim{
		w: w, cfg: cfg, pol: p, sch: sch, schs: schs,
		rankOf:   make(map[wire.WorkerKey]int32, f.Ranks()),
		state:    make([]uint8, n),
		arrive:   make([]time.Duration, n),
		admitted: make([]time.Duration, n),
		first:    make([]time.Duration, n),
		finish:   make([]time.Duration, n),
		cached:   make([]int32, n),
		hostTok:  make([]int32, n),
		best:     make([]int32, n),
		routed:   make([]int32, n),
		output:   make([]int32, n),
		rank:     make([]int32, n),
		queued:   make([]bool, n),
		tooLong:  make([]bool, n),
		next:     make([]int32, n),
	}
	perf := PolyPerf(f.PrefillPoly, f.DecodePoly)
	if p.UsesIndex() {
		s.core = shard.NewCore(shard.CoreConfig{Approx: cfg.Approx})
		s.events = !p.Approx
	}
	for wk := range f.Workers {
		for dp := range f.DPRanks {
			k := wire.WorkerKey{Worker: uint64(wk + 1), Dp: uint32(dp)}
			s.rankOf[k] = int32(len(s.keys))
			s.keys = append(s.keys, k)
			s.engines = append(s.engines, engine.New(engine.Config{
				Worker: k, Capacity: f.KVBlocks, BlockSize: f.BlockSize, MaxNumSeqs: f.MaxNumSeqs,
				MaxBatchedTokens: f.MaxBatchedTokens, Speedup: f.EngineSpeedup, Perf: perf,
				HostCapacity: f.HostKVBlocks, HostBlockTime: engine.HostBlockTime(f.BlockSize, f.HostGBps),
			}))
			for _, sch := range schs {
				sch.AddWorker(k, sched.Capacity{TotalBlocks: uint64(f.KVBlocks), MaxBatchedTokens: uint64(f.MaxBatchedTokens)})
			}
		}
	}
	r := f.Ranks()
	s.stepping = make([]bool, r)
	s.stepEffect = make([][]engine.Effect, r)
	s.stepEvents = make([]*delivery, r)
	s.lastLoad = make([]time.Duration, r)
	s.loaded = make([]bool, r)
	for i := range s.rank {
		s.rank[i] = -1
		s.next[i] = -1
		s.best[i] = -1
	}
	// Static arrivals go on the heap now; a session turn without a
	// timestamp waits for its previous turn to end.
	for i := range n {
		req := &w.Trace.Requests[i]
		if pv := w.prev[i]; pv >= 0 && !req.HasTime {
			s.next[pv] = int32(i)
			continue
		}
		s.push(s.scale(w.arrival[i]), evArrival, int32(i))
	}
	return s, nil
}

// scale compresses a trace time by the speedup.
func (s *sim) scale(d time.Duration) time.Duration { return scaleBy(d, s.cfg.Speedup) }

// scaleBy compresses a trace time by speedup.
func scaleBy(d time.Duration, speedup float64) time.Duration {
	if speedup == 1 {
		return d
	}
	return time.Duration(float64(d) / speedup)
}

func (s *sim) run() error {
	for {
		ev, d, ok := s.take()
		if !ok {
			break
		}
		if d != nil {
			if err := s.advance(d.at); err != nil {
				return err
			}
			s.deliver(d)
			continue
		}
		if err := s.advance(ev.at); err != nil {
			return err
		}
		var err error
		switch ev.kind {
		case evStepEnd:
			err = s.stepEnd(ev.idx)
		case evArrival:
			err = s.arrival(ev.idx)
		case evSync:
			err = s.applySync(ev.idx)
		}
		if err != nil {
			return err
		}
	}
	s.progress(true)
	return nil
}

// advance moves the clock to t and runs the periodic ticks that are due.
func (s *sim) advance(t time.Duration) error {
	s.now = t
	if t < s.nextTic {
		return nil
	}
	s.nextTic = t + s.cfg.TickInterval
	for _, sch := range s.schs {
		sch.Tick(int64(t))
	}
	if s.pol.Approx {
		s.core.Tick(t)
	}
	return s.drain()
}

func (s *sim) progress(final bool) {
	if s.cfg.Progress != nil && s.ended > 0 && (final || s.ended >= 64) {
		s.cfg.Progress(s.ended)
		s.ended = 0
	}
}

func (s *sim) arrival(i int32) error {
	w := s.w
	s.arrive[i] = s.now
	req := &w.Trace.Requests[i]
	s.batch[0] = sched.Request{ID: uint64(i) + 1, ISL: uint32(req.InputLength), Blocks: w.Seq(int(i))}
	if m := s.cfg.Tenants; m != nil {
		s.batch[0].Class, s.batch[0].Tenant = m.classOf(int(i)), m.tenantOf(int(i))
		if m.Sessions && req.Session != "" {
			s.batch[0].Session = xxh3.HashString(req.Session) | 1
		}
	}
	var ov [][]sched.Overlap
	if s.core != nil {
		s.radixOv = s.core.Match(s.radixOv[:0], w.Local(int(i)))
		o := s.ovBatch[0][:0]
		var most uint32
		for _, r := range s.radixOv {
			o = append(o, sched.Overlap{Worker: r.Worker, Device: r.Blocks, Host: r.Host, Disk: r.Disk, TreeSize: r.TreeSize})
			if s.pol.Sticky && r.Blocks+r.Host > most {
				most = r.Blocks + r.Host
				s.batch[0].Override = sched.Override{Pinned: r.Worker, PinnedSet: true}
			}
		}
		s.ovBatch[0] = o
		ov = s.ovBatch[:]
	}
	s.decs = s.owner(i).Decide(s.decs[:0], s.batch[:], ov, int64(s.now))
	d := s.decs[0]
	// Requests admitted from the queue by this Decide came first.
	if err := s.drain(); err != nil {
		return err
	}
	switch d.Outcome {
	case sched.Routed:
		s.admitted[i] = s.now
		if err := s.route(i, d); err != nil {
			return err
		}
	case sched.Queued:
		s.state[i] = stQueued
		s.queued[i] = true
	default:
		s.reject(i)
	}
	return s.drain()
}

// drain acts on the schedulers' outboxes until they are empty.
func (s *sim) drain() error {
	for again := true; again; {
		again = false
		for r, sch := range s.schs {
			for sch.Pending() > 0 {
				again = true
				s.effects = sch.Drain(s.effects[:0])
				for _, e := range s.effects {
					i := int32(e.ID - 1)
					if r != s.ownerIndex(i) {
						continue // another replica's booking expired here
					}
					switch e.Kind {
					case sched.EffectAdmitted:
						s.admitted[i] = s.now
						if err := s.route(i, e.Decision); err != nil {
							return err
						}
					case sched.EffectRejected:
						s.reject(i)
					case sched.EffectExpired:
						s.expired++
					}
				}
			}
		}
	}
	return nil
}

// ownerIndex is the replica request i arrives at; owner its scheduler.
func (s *sim) ownerIndex(i int32) int { return int(i) % len(s.schs) }

func (s *sim) owner(i int32) *sched.Scheduler { return s.schs[s.ownerIndex(i)] }

// publish sends a booking, prefill completion or free of request i to the
// other replicas, SyncDelay from now (nothing with one replica or no sync).
func (s *sim) publish(kind uint8, i int32, d sched.Decision) {
	if len(s.schs) < 2 || s.cfg.SyncDelay < 0 {
		return
	}
	s.syncs = append(s.syncs, syncOp{kind: kind, req: i, d: d})
	s.push(s.now+s.cfg.SyncDelay, evSync, int32(len(s.syncs)-1))
}

// applySync applies a sync op to every replica but its owner.
func (s *sim) applySync(k int32) error {
	op := s.syncs[k]
	i := op.req
	id := uint64(i) + 1
	now := int64(s.now)
	for r, sch := range s.schs {
		if r == s.ownerIndex(i) {
			continue
		}
		switch op.kind {
		case syncBook:
			req := &s.w.Trace.Requests[i]
			hint := sched.PrefillLoadHint{InitialEffectiveTokens: op.d.PrefillTokens}
			_ = sch.AddRequest(id, op.d.Worker, s.w.Seq(int(i)), uint32(req.InputLength), op.d.Overlap, hint, now)
		case syncPrefill:
			sch.MarkPrefillCompleted(id, now)
		case syncFree:
			sch.Free(id, now)
		}
	}
	return s.drain()
}

// route submits request i to the engine of the worker key d chose.
func (s *sim) route(i int32, d sched.Decision) error {
	k := d.Worker
	r, ok := s.rankOf[k]
	if !ok {
		return fmt.Errorf("replay: scheduler chose unknown worker %v", k)
	}
	w := s.w
	req := &w.Trace.Requests[i]
	if s.pol.Approx {
		if err := s.core.RecordDecision(k, w.Local(int(i)), w.Seq(int(i)), s.now); err != nil {
			return err
		}
		for _, sch := range s.schs {
			if err := sch.SetTreeSize(k, s.core.TreeSize(k)); err != nil {
				return err
			}
		}
	}
	s.rank[i] = r
	if s.events {
		s.dispatchOverlap(i, k)
	}
	err := s.engines[r].Submit(engine.Request{
		ID: uint64(i) + 1, Prompt: w.Local(int(i)), PromptTokens: req.InputLength, MaxTokens: max(req.OutputLength, 1),
	}, s.now)
	if errors.Is(err, engine.ErrTooLong) {
		s.owner(i).Free(uint64(i)+1, int64(s.now))
		s.tooLong[i] = true
		s.reject(i)
		return nil
	}
	if err != nil {
		return fmt.Errorf("replay: request %d: %w", i, err)
	}
	s.state[i] = stRouted
	s.publish(syncBook, i, d)
	if !s.stepping[r] {
		return s.startStep(r)
	}
	return nil
}

// dispatchOverlap records, for Result.BestHitRatio and RoutedHitRatio, the
// longest cached prefix of request i's prompt (device + host, capped as the
// engine caps a hit) on any rank and on k, the rank chosen.
func (s *sim) dispatchOverlap(i int32, k wire.WorkerKey) {
	local := s.w.Local(int(i))
	limit := uint32((s.w.Trace.Requests[i].InputLength - 1) / s.w.BlockSize)
	s.radixOv = s.core.Match(s.radixOv[:0], local)
	var best, got uint32
	for _, o := range s.radixOv {
		n := min(o.Blocks+o.Host, limit)
		best = max(best, n)
		if o.Worker == k {
			got = n
		}
	}
	bs := uint32(s.w.BlockSize)
	s.best[i], s.routed[i] = int32(best*bs), int32(got*bs)
}

func (s *sim) reject(i int32) {
	s.state[i] = stRejected
	s.finish[i] = s.now
	s.ended++
	s.progress(false)
	s.followUp(i)
}

// followUp schedules the next turn of i's session, if it waits on i.
func (s *sim) followUp(i int32) {
	if n := s.next[i]; n >= 0 {
		s.push(s.now+s.scale(s.w.Trace.Requests[n].Delay), evArrival, n)
	}
}

// startStep runs one engine step of rank r at now and schedules its end.
func (s *sim) startStep(r int32) error {
	e := s.engines[r]
	steps := e.Stats().Steps
	d := e.Step(s.now)
	if e.Stats().Steps == steps {
		if e.Idle() {
			s.stepping[r] = false
			return nil
		}
		return fmt.Errorf("%w: worker %v at %v: %d effects", ErrStalled, s.keys[r], s.now, len(e.Effects()))
	}
	s.stepping[r] = true
	s.stepEffect[r] = append(s.stepEffect[r][:0], e.Effects()...)
	if evs := e.Events(); s.events && len(evs) > 0 {
		s.stepEvents[r] = s.newDelivery(r, evs)
	}
	e.Reset()
	if wt, _ := e.Load(); wt > s.peakWait {
		s.peakWait = wt
	}
	s.push(s.now+max(d, 1), evStepEnd, r)
	return nil
}

// newDelivery copies a step's events (the engine's views die at Reset).
func (s *sim) stepEnd(r int32) error {
	now := s.now
	for _, ef := range s.stepEffect[r] {
		i := int32(ef.Request - 1)
		switch ef.Kind {
		case engine.FirstToken:
			s.first[i] = ef.At
			s.cached[i], s.hostTok[i] = int32(ef.CachedTokens), int32(ef.HostTokens)
			s.owner(i).MarkPrefillCompleted(ef.Request, int64(now))
			s.publish(syncPrefill, i, sched.Decision{})
		case engine.Finished:
			s.finish[i] = ef.At
			s.output[i] = int32(ef.OutputTokens)
			s.state[i] = stDone
			s.owner(i).Free(ef.Request, int64(now))
			s.publish(syncFree, i, sched.Decision{})
			s.ended++
			s.followUp(i)
		}
	}
	s.stepEffect[r] = s.stepEffect[r][:0]
	if d := s.stepEvents[r]; d != nil {
		s.stepEvents[r] = nil
		d.at = now + s.cfg.EventDelay
		s.fifo = append(s.fifo, d)
	}
	e := s.engines[r]
	if !s.loaded[r] || now-s.lastLoad[r] >= s.cfg.LoadInterval {
		s.loaded[r], s.lastLoad[r] = true, now
		used, _ := e.KV().Usage()
		wt, _ := e.Load()
		for _, sch := range s.schs {
			if err := sch.ReportLoad(s.keys[r], sched.Load{UsedBlocks: uint64(used), Waiting: uint64(wt)}, int64(now)); err != nil {
				return err
			}
		}
	}
	s.progress(false)
	if err := s.drain(); err != nil {
		return err
	}
	s.stepping[r] = false
	if !e.Idle() {
		return s.startStep(r)
	}
	return nil
}

// deliver applies one step's KV events to the index.
func (s *sim) deliver(d *delivery) {
	s.core.Apply(d.events)
	k := s.keys[d.rank]
	for _, sch := range s.schs {
		if err := sch.SetTreeSize(k, s.core.TreeSize(k)); err != nil {
			panic(err) // every rank is in the scheduler's table
		}
	}
	s.spare = append(s.spare, d)
}

func (s *sim) result() Result {
	w := s.w
	labels := make([]string, s.cfg.Fleet.Workers)
	for i := range labels {
		labels[i] = strconv.Itoa(i + 1)
	}
	recs := make([]record, w.Len())
	for i := range recs {
		req := &w.Trace.Requests[i]
		c := &recs[i]
		c.arrive = s.arrive[i]
		c.prompt = req.InputLength
		c.worker = -1
		c.best, c.routed = int(s.best[i]), int(s.routed[i])
		c.bucket = w.bucketOf(w.arrival[i])
		if r := s.rank[i]; r >= 0 {
			c.worker = int(s.keys[r].Worker - 1)
		}
		c.queued = s.queued[i]
		if c.queued && s.admitted[i] >= s.arrive[i] {
			c.queueWait = s.admitted[i] - s.arrive[i]
		}
		switch s.state[i] {
		case stDone:
			c.done, c.hasFirst = true, true
			c.first, c.finish = s.first[i], s.finish[i]
			c.cached, c.host, c.output = int(s.cached[i]), int(s.hostTok[i]), int(s.output[i])
		case stRejected:
			c.rejected, c.tooLong = true, s.tooLong[i]
		}
	}
	res := summarize(recs, labels, s.scale(w.span), w.achievable)
	res.Policy = s.pol.Name
	res.Speedup = s.cfg.Speedup
	if s.cfg.Tenants != nil {
		res.Groups = s.cfg.Tenants.groups(recs)
	}
	res.PeakWaiting = s.peakWait
	res.Expired = s.expired
	for _, e := range s.engines {
		res.Preemptions += int(e.Stats().Preemptions)
	}
	return res
}
