package router

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/puzpuzpuz/xsync/v4"
	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/radix"
	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/openai"
	"github.com/kvroute/kvroute/wire/plane"
	"github.com/kvroute/kvroute/wire/proxy"
)

// Errors a decision can end with besides the scheduler's reasons.
var (
	ErrClosed       = errors.New("router: closed")
	ErrQueueFull    = errors.New("router: decision queue full")
	ErrQueueTimeout = errors.New("router: timed out waiting for a free worker")
	ErrNoWorkers    = errors.New("router: no workers")
	ErrAllBusy      = errors.New("router: all workers busy")
	ErrQueueWait    = errors.New("router: all workers busy and the predicted queue wait is over --max-queue-wait")
	ErrWorkerGone   = errors.New("router: worker left")
	// ErrEvicted: the request waited and a request of a higher priority
	// class (or of a tenant with less waiting) took its place in the full
	// queue.
	ErrEvicted = errors.New("router: evicted from the full queue by a request of a higher priority class")
)

// Publisher publishes a control-plane message (a NATS connection's Publish).
type Publisher func(subject string, data []byte) error

// Hooks let the service around the Router react to worker changes. They are
// called on the batcher goroutine and must not block for long.
type Hooks struct {
	// WorkerJoined is called when a registered worker joins or changes its
	// registration (e.g. to subscribe to its ZMQ events).
	WorkerJoined func(reg plane.Registration)
	// WorkerLeft is called when a registered worker leaves or expires.
	WorkerLeft func(id uint64)
	// IngestRunning reports whether KV-event ingest runs (for /ready). Nil
	// means it does (approximate mode needs none).
	IngestRunning func() bool
	// EventPlane reports why the event plane (the NATS connection carrying
	// registrations, load and KV events) is down, or nil while it is up
	// (for /ready). Nil: always up.
	EventPlane func() error
	// ControlPlane reports whether the connection that carries the
	// workers' heartbeats is up, and how many times it was lost so far.
	// While it is down, registered workers do not expire (their heartbeats
	// cannot arrive; they are still ejected by their HTTP health); after a
	// loss, expiry resumes with a fresh grace (plane.Registry.Renew). Nil:
	// always up.
	ControlPlane func() (up bool, losses uint64)
	// Publish sends AllWorkersBusy messages to the other replicas. Nil:
	// nothing is published.
	Publish Publisher
	// Metrics are extra writers appended to /metrics (e.g. the ingest's).
	Metrics []func(w io.Writer)
	// Repair, when set, asks a worker's dp rank for a dump of its cache
	// (recovery.Requester.Lost with recovery.DumpAll): its cached-token
	// reports show a stale index or missing events (package verify). It
	// must not block.
	Repair func(k wire.WorkerKey)
	// Lookup, when set, replaces the index for lookups and for recording
	// approximate-mode decisions (--use-remote-indexer: a node.RemoteIndex).
	// It is called on the batcher goroutine only.
	Lookup Lookup
}

// Lookup is an index the batcher looks prompts up in, other than the
// local one: a remote index (node.RemoteIndex). MatchBatch fills every
// request's Overlaps; on error the requests are routed with zero overlap
// (never an error to the client).
type Lookup interface {
	MatchBatch(reqs []shard.MatchRequest) error
	RecordDecision(worker wire.WorkerKey, local []wire.BlockHash, seq []wire.SeqHash) error
}

// Router is kvroute's router service: a batcher goroutine that owns the
// scheduler, looks requests up in the index in batches and decides them one
// by one, the worker table fed by static configuration and NATS
// registrations, and the HTTP handlers (Handler) that hash requests, wait
// for decisions and proxy to workers.
//
// All methods are goroutine-safe. The zero value is not usable; use New and
// Close it when done.
type Router struct {
	cfg   Config
	tmpls *openai.ChatTemplates // from cfg.ChatTemplate and ModelChatTemplates; nil: ChatML
	ix    *shard.Index
	s     *sched.Scheduler // owned by the batcher goroutine
	hooks Hooks
	proxy *proxy.Proxy
	// probeClient asks down workers' GET /health.
	probeClient *fasthttp.Client
	epoch       time.Time
	m           *metricSet
	verify      *verifier     // predictions against the engines' reports (verify.go)
	decisions   *decisionRing // recent decisions (decisions.go)

	in   chan *pending // handler → batcher
	ops  chan op       // prefill done, free
	ctl  chan func()   // control plane, run on the batcher
	stop chan struct{}
	done chan struct{}

	closed    atomic.Bool
	draining  atomic.Bool  // /ready answers 503 (shutdown began)
	throttled atomic.Int64 // end of the rejection window (router clock), 0 if never
	nworkers  atomic.Int32 // dp ranks in the scheduler
	table     atomic.Pointer[workerTable]
	nextID    atomic.Uint64
	routeIDs  *xsync.Map[string, uint64]      // /route request id → scheduler id
	srv       atomic.Pointer[fasthttp.Server] // the last Server(), for its connection counts
	budget    bodyBudget
	// syncInstance is this run's instance in replica-sync messages.
	syncInstance atomic.Uint64

	pool sync.Pool // *pending

	// owner guards the batcher-owned state: the batcher goroutine holds it
	// while it handles what it received, and a handler or notify that finds
	// it free does its own work under it (submit, notify), saving the
	// hand-offs to the batcher goroutine and back.
	owner sync.Mutex
	// Batcher-owned state (under owner).
	b batcherState

	ten *tenants // identity, the --tenants file, rate limits (tenants.go)
	tm  tenantMetrics
}

type batcherState struct {
	stopped  bool // the batcher has shut down: nothing may decide any more
	one      [1]*pending
	batch    []*pending
	mrs      []shard.MatchRequest
	reqs     []sched.Request
	ovs      [][]sched.Overlap
	decs     []sched.Decision
	pairs    []sched.PairDecision
	cands    []sched.Candidate
	effects  []sched.Effect
	waiting  map[uint64]*pending // queued in the scheduler
	routeOf  map[uint64]string   // /route bookings: scheduler id → request id
	registry *plane.Registry
	changes  []plane.Change
	workers  map[uint64]*workerInfo   // mutable table; snapshots are published
	down     map[uint64]*workerHealth // ejected workers, being probed
	treeBuf  []radix.Overlap
	sync     *syncer              // replica sync (Config.Sync), once started
	peers    map[string]*syncPeer // the other replicas' bookings
	// planeDown and planeLosses are what heartbeatsArrive last saw of
	// Hooks.ControlPlane.
	planeDown   bool
	planeLosses uint64
}

// op is a request lifecycle notification from a handler or a stream.
type op struct {
	kind opKind
	id   uint64
}

type opKind uint8

const (
	opPrefillDone opKind = iota + 1
	opFree
	opPrefillLegDone // a disaggregated request's prefill leg ended (pd.go)
)

// pending is one request on its way through the batcher. Handlers fill the
// input half, the batcher the output half, then signals done.
type pending struct {
	// input
	id       uint64
	routeID  string
	isl      uint32
	local    []wire.BlockHash
	seq      []wire.SeqHash
	mm       []uint64 // hashing scratch of multimodal requests
	mmBytes  []byte
	override sched.Override
	allowed  []wire.WorkerKey
	who      identity // tenant, class, session (tenants.go)
	explain  bool
	enq      int64
	deadline int64

	// output
	over  []radix.Overlap
	ovs   []sched.Overlap
	best  uint32
	dec   sched.Decision
	err   error
	cands []sched.Candidate
	done  chan struct{}
	lost  bool   // abandoned at shutdown: never pooled again
	buf   []byte // response scratch
	body  []byte // the body forwarded with token ids (--forward-token-ids)
	pd    pdPending

	// verification and the decision ring (verify.go, decisions.go)
	host     uint32 // host-tier blocks credited to the chosen rank
	seq0     uint64 // the decision ring's slot
	admitted bool   // decided from the waiting queue
	ubody    []byte // the body with stream_options.include_usage added
}

// New builds a Router over ix (which it does not own: close it after the
// Router). Start it with Start.
func New(cfg Config, ix *shard.Index, hooks Hooks) (*Router, error) {
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.ID == "" {
		cfg.ID = fmt.Sprintf("kvroute-%d-%08x", os.Getpid(), rand.Uint32())
	}
	// Every block list the router gives the scheduler is a prompt's chained
	// sequence hashes (wire.SequenceHashes, here or in a peer replica's
	// decision), so the scheduler may index a request's unshared blocks
	// once per stretch (sched.Config.ChainedHashes).
	cfg.Sched.ChainedHashes = true
	s, err := sched.New(cfg.Sched, cfg.Seed)
	if err != nil {
		return nil, err
	}
	r := &Router{
		cfg:   cfg,
		ix:    ix,
		s:     s,
		hooks: hooks,
		proxy: proxy.New(cfg.Proxy),
		probeClient: &fasthttp.Client{NoDefaultUserAgentHeader: true, MaxConnsPerHost: 4,
			ReadTimeout: cfg.ProbeTimeout, WriteTimeout: cfg.ProbeTimeout, MaxIdleConnDuration: time.Second},
		epoch:    time.Now(),
		in:       make(chan *pending, cfg.QueueSize),
		ops:      make(chan op, cfg.QueueSize),
		ctl:      make(chan func(), 256),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		routeIDs: xsync.NewMap[string, uint64](),
	}
	if cfg.ChatTemplate != nil || len(cfg.ModelChatTemplates) > 0 {
		r.tmpls = &openai.ChatTemplates{Default: cfg.ChatTemplate, ByModel: cfg.ModelChatTemplates}
	}
	r.m = newMetricSet(r)
	r.verify = newVerifier(cfg.Sched.BlockSize, cfg.VerifyRepairInterval)
	r.decisions = newDecisionRing(cfg.DecisionRing, cfg.DecisionSample, cfg.Logger)
	if err := r.initTenants(); err != nil {
		return nil, err
	}
	r.budget = bodyBudget{limit: cfg.MaxInflightBodyBytes, maxBody: int64(cfg.MaxBodyBytes), held: map[*fasthttp.RequestHeader]int64{}}
	r.pool.New = func() any { return &pending{done: make(chan struct{}, 1)} }
	r.b.waiting = map[uint64]*pending{}
	r.b.routeOf = map[uint64]string{}
	r.b.registry = plane.NewRegistry()
	r.b.registry.MaxWorkers = cfg.MaxWorkers
	r.b.workers = map[uint64]*workerInfo{}
	r.b.down = map[uint64]*workerHealth{}
	r.b.peers = map[string]*syncPeer{}
	for _, w := range cfg.Workers {
		r.addStatic(w)
	}
	r.publishTable()
	return r, nil
}

// Start starts the batcher goroutine, and asks static workers given no
// model which models they serve.
func (r *Router) Start() {
	go r.loop()
	go r.watchTenants()
	r.askModels()
}

// CutStreams ends the streams being proxied (see proxy.Proxy.CutStreams):
// their clients get an SSE error event. It waits at most timeout and
// returns how many streams are still running.
func (r *Router) CutStreams(timeout time.Duration) int64 { return r.proxy.CutStreams(timeout) }

// Close stops the batcher: requests waiting for a decision are answered
// with ErrClosed and the load of every active request is dropped. It does
// not close the index or any HTTP server. Idempotent.
func (r *Router) Close() error {
	if r.closed.Swap(true) {
		<-r.done
		return nil
	}
	close(r.stop)
	<-r.done
	if r.b.sync != nil { // the batcher has stopped: its state is ours
		r.b.sync.close()
	}
	return nil
}

// busy reports whether requests are in flight: bodies being read or
// handled, requests waiting for a worker, or booked load (streams
// included). A batcher that does not answer within a second counts as busy.
func (r *Router) busy() bool {
	if r.budget.inUse() > 0 {
		return true
	}
	var st sched.Stats
	if err := r.call(func() { st = r.s.Stats() }, time.Second); err != nil {
		return true
	}
	return st.Active > 0 || st.QueueDepth > 0
}

// now is the router's clock: nanoseconds since New (monotonic).
func (r *Router) now() int64 { return int64(time.Since(r.epoch)) }

func (r *Router) acquire() *pending {
	p := r.pool.Get().(*pending)
	p.id = r.nextID.Add(1)
	return p
}

func (r *Router) release(p *pending) {
	if p.lost {
		return
	}
	p.routeID = ""
	p.local = p.local[:0]
	p.seq = p.seq[:0]
	p.override = sched.Override{}
	p.who = identity{}
	p.allowed = p.allowed[:0]
	p.explain = false
	p.over = p.over[:0]
	p.ovs = p.ovs[:0]
	p.best = 0
	p.dec = sched.Decision{}
	p.err = nil
	p.cands = p.cands[:0]
	p.pd.reset()
	p.host, p.seq0, p.admitted = 0, 0, false
	r.pool.Put(p)
}

// submit queues p for a decision and waits for it; p.err is set when p was
// not routed (queue full, router closed, rejected, timed out).
func (r *Router) submit(p *pending) {
	if r.closed.Load() {
		p.err = ErrClosed
		return
	}
	p.enq = r.now()
	p.deadline = p.enq + int64(r.cfg.QueueTimeout)
	if r.owner.TryLock() {
		// The batcher is idle: decide p here, as the batcher would (ops
		// queued before p first), instead of waking it and waiting to be
		// woken (decision record 0044). A queued p is admitted later by
		// whoever holds owner, through p.done as usual.
		if r.b.stopped {
			r.owner.Unlock()
			p.err = ErrClosed
			return
		}
		r.drainOps()
		r.b.one[0] = p
		r.decide(r.b.one[:])
		r.b.one[0] = nil
		r.drainEffects()
		r.owner.Unlock()
	} else {
		select {
		case r.in <- p:
		default:
			p.err = ErrQueueFull
			return
		}
	}
	select {
	case <-p.done:
	case <-r.done:
		// The batcher stopped; it may or may not have seen p, so p's done
		// channel cannot be trusted again: drop p instead of pooling it.
		p.err = ErrClosed
		p.lost = true
	}
}

// notify sends a lifecycle op to the batcher. It blocks if the op queue is
// full (ops must not be lost: a lost free leaks load until expiry).
func (r *Router) notify(kind opKind, id uint64) {
	if r.owner.TryLock() { // the batcher is idle: apply it here, after those queued
		if !r.b.stopped {
			r.drainOps()
			r.applyOp(op{kind, id})
			r.drainEffects()
		}
		r.owner.Unlock()
		return
	}
	select {
	case r.ops <- op{kind, id}:
	case <-r.stop:
	}
}

// call runs f on the batcher goroutine and waits for it, at most timeout.
func (r *Router) call(f func(), timeout time.Duration) error {
	done := make(chan struct{})
	select {
	case r.ctl <- func() { f(); close(done) }:
	case <-r.stop:
		return ErrClosed
	case <-time.After(timeout):
		return errors.New("router: batcher busy")
	}
	select {
	case <-done:
		return nil
	case <-r.stop:
		return ErrClosed
	case <-time.After(timeout):
		return errors.New("router: batcher busy")
	}
}

// post runs f on the batcher goroutine without waiting.
func (r *Router) post(f func()) {
	select {
	case r.ctl <- f:
	case <-r.stop:
	}
}

// Throttled reports whether the all-workers-busy window is open and, if so,
// how long it stays open.
func (r *Router) Throttled() (bool, time.Duration) {
	until := r.throttled.Load()
	now := r.now()
	if until == 0 || now >= until {
		return false, 0
	}
	return true, time.Duration(until - now)
}

func (r *Router) loop() {
	defer close(r.done)
	tick := time.NewTicker(r.cfg.TickInterval)
	defer tick.Stop()
	for {
		select {
		case <-r.stop:
			r.owner.Lock()
			r.b.stopped = true
			r.shutdown()
			r.owner.Unlock()
			return
		case p := <-r.in:
			r.owner.Lock()
			r.drainOps()
			b := append(r.b.batch[:0], p)
		more:
			for len(b) < r.cfg.BatchMax {
				select {
				case p := <-r.in:
					b = append(b, p)
				default:
					break more
				}
			}
			r.b.batch = b
			r.decide(b)
		case o := <-r.ops:
			r.owner.Lock()
			r.applyOp(o)
			r.drainOps()
		case f := <-r.ctl:
			r.owner.Lock()
			f()
		case <-tick.C:
			r.owner.Lock()
			r.tick()
		}
		r.drainEffects()
		r.owner.Unlock()
	}
}

func (r *Router) drainOps() {
	for {
		select {
		case o := <-r.ops:
			r.applyOp(o)
		default:
			return
		}
	}
}

func (r *Router) applyOp(o op) {
	now := r.now()
	switch o.kind {
	case opPrefillDone:
		r.s.PrefillDone(o.id, now) // a P/D request's prefill booking, if any
		r.s.MarkPrefillCompleted(o.id, now)
		r.syncOp(plane.SyncPrefillDone, o.id)
	case opPrefillLegDone:
		r.s.PrefillDone(o.id, now)
	case opFree:
		r.s.Free(o.id, now)
		r.syncOp(plane.SyncFree, o.id)
		if rid, ok := r.b.routeOf[o.id]; ok {
			delete(r.b.routeOf, o.id)
			r.forgetRoute(rid, o.id)
		}
	}
}

// forgetRoute removes a /route booking's id unless it was reused since.
func (r *Router) forgetRoute(rid string, id uint64) {
	r.routeIDs.Compute(rid, func(old uint64, loaded bool) (uint64, xsync.ComputeOp) {
		if loaded && old == id {
			return 0, xsync.DeleteOp
		}
		return old, xsync.CancelOp
	})
}

// decide looks the batch up in the index, then decides it in order.
func (r *Router) decide(batch []*pending) {
	now := r.now()
	mrs := r.b.mrs[:0]
	for _, p := range batch {
		mrs = append(mrs, shard.MatchRequest{Hashes: p.local, Overlaps: p.over[:0]})
	}
	r.b.mrs = mrs
	var err error
	if r.hooks.Lookup != nil {
		err = r.hooks.Lookup.MatchBatch(mrs)
	} else {
		err = r.ix.MatchBatch(mrs)
	}
	if err != nil {
		for i := range mrs {
			mrs[i].Overlaps = mrs[i].Overlaps[:0]
		}
	}
	for i, p := range batch {
		p.over = mrs[i].Overlaps
		p.ovs = p.ovs[:0]
		p.best = 0
		for _, o := range p.over {
			p.ovs = append(p.ovs, sched.Overlap{Worker: o.Worker, Device: o.Blocks, Host: o.Host, Disk: o.Disk, TreeSize: o.TreeSize})
			if o.Blocks > p.best {
				p.best = o.Blocks
			}
		}
	}
	r.m.batchSize.Update(float64(len(batch)))
	if r.s.PrefillRanks() > 0 { // a P/D fleet: each request is one pair decision (pd.go)
		r.decidePairs(batch, now)
		return
	}
	// Runs of plain requests go to Decide together; explained ones alone.
	for i := 0; i < len(batch); {
		if batch[i].explain || r.decisions.sampled(batch[i].id) {
			p := batch[i]
			req := r.request(p)
			var d sched.Decision
			d, p.cands = r.s.DecideExplained(p.cands[:0], &req, p.ovs, now)
			r.outcome(p, d)
			i++
			continue
		}
		j := i
		reqs, ovs := r.b.reqs[:0], r.b.ovs[:0]
		for ; j < len(batch) && !batch[j].explain && !r.decisions.sampled(batch[j].id); j++ {
			reqs = append(reqs, r.request(batch[j]))
			ovs = append(ovs, batch[j].ovs)
		}
		r.b.reqs, r.b.ovs = reqs, ovs
		r.b.decs = r.s.Decide(r.b.decs[:0], reqs, ovs, now)
		for k, d := range r.b.decs {
			r.outcome(batch[i+k], d)
		}
		clear(ovs)
		i = j
	}
}

func (r *Router) request(p *pending) sched.Request {
	o := p.override
	if len(p.allowed) > 0 {
		o.Allowed = p.allowed
	}
	return sched.Request{ID: p.id, ISL: p.isl, Blocks: p.seq, Override: o, Tenant: p.who.tenant, Class: p.who.class, Session: p.who.session}
}

// outcome acts on a decision made for p.
func (r *Router) outcome(p *pending, d sched.Decision) {
	switch d.Outcome {
	case sched.Routed:
		r.routed(p, d)
	case sched.Queued:
		r.b.waiting[p.id] = p
		r.m.queued.Inc()
		r.tm.counter("kvroute_tenant_requests_total", &p.who, "queued").Inc()
	default:
		switch d.Reason {
		case sched.ReasonQueueFull:
			p.err = ErrAllBusy
		case sched.ReasonQueueWait:
			p.err = ErrQueueWait
			r.refuse(refQueueWait, "requests shed: every worker is busy and the predicted queue wait is over --max-queue-wait",
				"max_queue_wait", r.cfg.Sched.MaxQueueWait)
		case sched.ReasonDuplicate:
			p.err = fmt.Errorf("router: duplicate request id")
		default:
			p.err = ErrNoWorkers
		}
		r.m.rejected(d.Reason).Inc()
		p.dec = d
		r.decisions.record(p, d, ruleShed, false, time.Now().UnixNano())
		p.done <- struct{}{}
	}
}

func (r *Router) routed(p *pending, d sched.Decision) {
	p.dec = d
	if p.routeID != "" {
		r.b.routeOf[p.id] = p.routeID
	}
	if r.cfg.Approx && len(p.local) > 0 {
		if r.hooks.Lookup != nil {
			_ = r.hooks.Lookup.RecordDecision(d.Worker, p.local, p.seq)
		} else {
			_ = r.ix.RecordDecision(d.Worker, p.local, p.seq)
		}
	}
	now := r.now()
	r.m.decided(p, d, now)
	p.host = hostOf(p, d.Worker)
	p.seq0 = r.decisions.record(p, d, ruleOf(p), true, r.epoch.UnixNano()+now)
	r.syncBooked(p, d)
	p.done <- struct{}{}
}

func (r *Router) drainEffects() {
	if r.s.Pending() > 0 {
		r.b.effects = r.s.Drain(r.b.effects[:0])
		for _, e := range r.b.effects {
			r.effect(e)
		}
	}
	r.throttled.Store(r.s.RejectUntil())
	r.nworkers.Store(int32(r.s.Workers()))
}

func (r *Router) effect(e sched.Effect) {
	switch e.Kind {
	case sched.EffectAdmitted:
		if p, ok := r.b.waiting[e.ID]; ok {
			delete(r.b.waiting, e.ID)
			r.m.admitted.Inc()
			p.admitted = true
			r.routed(p, e.Decision)
		}
	case sched.EffectRejected:
		if p, ok := r.b.waiting[e.ID]; ok {
			delete(r.b.waiting, e.ID)
			p.err = ErrNoWorkers
			if e.Reason == sched.ReasonEvicted {
				p.err = ErrEvicted
			}
			r.m.rejected(e.Reason).Inc()
			p.done <- struct{}{}
		}
	case sched.EffectAllWorkersBusy:
		r.m.allBusy.Inc()
		if r.hooks.Publish != nil {
			msg := plane.Encode(plane.AllWorkersBusy{Router: r.cfg.ID, QueueDepth: e.QueueDepth, AtUnixNano: time.Now().UnixNano(),
				WindowMillis: r.cfg.Sched.RejectionWindow.Milliseconds()})
			if err := r.hooks.Publish(r.cfg.Subjects.AllBusy, msg); err != nil {
				r.m.publishErrors.Inc()
			}
		}
	case sched.EffectExpired:
		r.m.expired.Inc()
		r.syncOp(plane.SyncFree, e.ID)
		if rid, ok := r.b.routeOf[e.ID]; ok {
			delete(r.b.routeOf, e.ID)
			r.forgetRoute(rid, e.ID)
		}
	}
}

func (r *Router) tick() {
	now := r.now()
	r.s.Tick(now)
	// Requests that waited too long give up.
	for id, p := range r.b.waiting {
		if now >= p.deadline {
			delete(r.b.waiting, id)
			r.s.Free(id, now)
			p.err = ErrQueueTimeout
			r.m.queueTimeouts.Inc()
			p.done <- struct{}{}
		}
	}
	wall := time.Now()
	if r.heartbeatsArrive(wall) {
		r.b.changes = r.b.registry.Tick(wall, r.b.changes[:0])
		r.applyChanges()
	}
	if len(r.b.down) > 0 {
		r.forgetDown(wall)
	}
	if r.cfg.Approx {
		_, _ = r.ix.Tick(wall)
	}
	r.refreshTreeSizes()
	if len(r.b.peers) > 0 {
		r.expirePeers(now)
	}
}

// heartbeatsArrive reports whether the workers' heartbeats can arrive
// (Hooks.ControlPlane), so that missing ones mean the worker is gone. While
// the connection is down they cannot, and registered workers are kept: the
// router goes on routing to the workers it knew with the index it has, and
// a worker that really died is still ejected by its HTTP health. After a
// loss, every registered worker gets a fresh grace from now (its expiry,
// at least plane.ReconnectGrace: plane.Registry.Renew) before expiry
// resumes.
func (r *Router) heartbeatsArrive(wall time.Time) bool {
	if r.hooks.ControlPlane == nil {
		return true
	}
	up, losses := r.hooks.ControlPlane()
	if !up {
		if !r.b.planeDown {
			r.b.planeDown = true
			r.cfg.Logger.Warn("control plane down: registered workers are kept (no heartbeats can arrive) and still ejected by their HTTP health",
				"workers", r.b.registry.Len())
		}
		return false
	}
	if losses != r.b.planeLosses || r.b.planeDown {
		r.b.planeLosses, r.b.planeDown = losses, false
		r.b.registry.Renew(wall, plane.ReconnectGrace)
		r.cfg.Logger.Info("control plane back: heartbeat expiry resumes, each registered worker with a fresh grace",
			"workers", r.b.registry.Len(), "grace_heartbeats", plane.ExpiryFactor, "grace_at_least", plane.ReconnectGrace)
	}
	return true
}

// refreshTreeSizes copies the index's per-worker tree sizes into the
// scheduler, the tie-break for workers a request does not overlap.
func (r *Router) refreshTreeSizes() {
	ws, err := r.ix.Workers(r.b.treeBuf[:0])
	if err != nil {
		return
	}
	r.b.treeBuf = ws
	for _, w := range ws {
		_ = r.s.SetTreeSize(w.Worker, w.TreeSize)
	}
}

func (r *Router) shutdown() {
	for id, p := range r.b.waiting {
		delete(r.b.waiting, id)
		p.err = ErrClosed
		p.done <- struct{}{}
	}
	for {
		select {
		case p := <-r.in:
			p.err = ErrClosed
			p.done <- struct{}{}
		case f := <-r.ctl:
			f()
		default:
			return
		}
	}
}
