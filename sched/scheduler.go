package sched

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/kvroute/kvroute/wire"
)

// Scheduler is kvroute's deterministic scheduling core: the worker table,
// the active-sequence accounting, the cost function, busy detection, the
// waiting queue and the overload latch.
//
// It is not goroutine-safe: one goroutine owns it (the service's batcher).
// Its zero value is not usable; build it with New. It starts no goroutines,
// reads no clock and uses only its own seeded RNG: every method that depends
// on time takes now (nanoseconds since an epoch the caller chooses; a value
// smaller than one already seen is treated as the latest seen). Results that
// do not fit a return value go to the outbox, drained with Drain.
type Scheduler struct {
	cfg    Config
	bs     int64
	invBS  float64
	rng    *rand.Rand
	now    int64
	gen    uint32
	rrLast int // slot chosen last by round-robin, -1 none
	seed   uint64

	// The prefill-role ranks live in a scheduler of their own (pd.go), made
	// when the first one is added; nil in an aggregated fleet. inner marks
	// that scheduler. pfTotal is the sum of the ranks' prefill tokens
	// (undecayed), the pool's queue for Config.DisaggPolicy's load rule.
	pf      *Scheduler
	inner   bool
	pfTotal int64
	// decodeLeg is set while DecidePD routes a decode leg
	// (Config.RunningWeight applies).
	decodeLeg bool

	// Dp ranks ("slots") in three parallel arrays: hot holds what every
	// decision reads for every rank (one cache line each), held the
	// per-decision count of a request's blocks active there, slots the rest.
	scan      []slotScan
	hot       []slotHot
	held      []heldEnt // per rank: the current request's held blocks (countHeld)
	touched   []uint32  // ranks marked fTouched in the current decision
	slots     []slotState
	freeSlots []uint32
	slotOf    map[wire.WorkerKey]uint32
	fastSlot  u64map // mixKey(key) → slot+1, checked against the key; slotOf on a miss
	workers   []workerState
	workerOf  map[uint64]uint32
	freeWorks []uint32

	blocks blockIndex

	reqs     []request // [0] unused
	freeReqs uint32
	byID     u64map // id → request index
	exHead   uint32 // expiry FIFO, oldest first
	exTail   uint32
	active   int

	q    queue
	shed shedder // drain rate and early rejections (Config.MaxQueueWait)

	// running counts the active requests per class rank; book records
	// bookClass as the new request's class (classes.go).
	running   [numClasses]int
	bookClass Class
	sess      sessions // session bindings (sessions.go)

	outbox      []Effect
	rejectUntil int64
	stats       Stats

	// Per-decision scratch, sized with the slot table so deciding never
	// allocates.
	cands    []uint32
	costs    []float64
	deferred []uint32
	ties     []uint32
	weights  []float64 // softmax
	vecCache []uint32  // block vectors found by countHeld, by block position
	vecN     int       // how many of vecCache are valid for the current decision
	nested   bool      // each of them always followed the one before (blockVec.pred)

	ph         plainHeap // plain ranks by load (heap.go)
	forceScan  bool      // tests: decide by the scan even where the heap applies
	heapUsed   uint64    // decisions that took the heap path (tests)
	heldPruned uint64    // touched ranks the heap path did not cost (tests)
	chained    uint64    // bookings that found their held records by the links (tests)
	promotions uint64    // requests whose private blocks a lookup found (tests)
}

// slotScan mirrors the little of a dp rank that the common decision reads
// for every rank: 12 bytes, so 7,000 ranks stay within a core's L2 cache.
// (Mirroring the tree size here too, 16 bytes, was tried and dropped
// (docs/decisions/0022-scheduler-block-index.md): the temperature scan at 7,000 ranks measured +17% and +40%, not
// significant, against a few slotState reads per tie break.)
// A rank is "plain" when flags == fLive: live, not busy, not decaying, the
// only rank of its worker, loads below 2^32 and not touched by the current
// request (no overlap, none of its blocks active there). The cost of a plain
// rank depends only on active and pf; every other live rank goes through the
// general path (Scheduler.consider).
type slotScan struct {
	active uint32 // = slotHot.active unless fSlow
	pf     uint32 // = slotHot.pfSum unless fSlow
	flags  uint32
}

const (
	fLive    = 1 << iota
	fBusy    // over a threshold (meaningful when not fSlow)
	fSlow    // decaying, one of several ranks, or loads ≥ 2^32
	fTouched // the current request has an overlap or active blocks here
	fOverlap // the current request has an overlap here (with fTouched)

	fMarks = fTouched | fOverlap // per-decision marks
)

// heldEnt is a rank's count of the current request's blocks it holds, valid
// when gc>>32 is the decision's generation (gen<<32 | count), and its record
// of the deepest of them. One entry per rank, so countHeld's visit to a
// holder writes one line (the two were separate arrays).
type heldEnt struct {
	gc   uint64
	deep uint32
}

// slotHot is the authoritative load of a dp rank and the per-decision
// fields the general path reads. Pointer-free.
type slotHot struct {
	active   int64 // distinct active blocks
	pfSum    int64 // initial effective prefill tokens of requests in prefill
	decLimit int64 // busy when active (or reported used) > decLimit
	pfLimit  int64 // busy when prefill tokens > pfLimit
	worker   uint32
	ovGen    uint32 // ovDev (and the cold overlap fields) valid when == gen
	ovDev    uint32
	allowGen uint32 // eligible for a restricted request when == gen
	live     bool
	multi    bool // its worker has more than one rank
	usedBusy bool // the reported used blocks exceed decLimit
	decaying bool // the oldest prefill has an expected duration
}

// slotState is the rest of a dp rank.
type slotState struct {
	key      wire.WorkerKey
	capacity Capacity
	reported Load
	treeSize uint32

	pfHead uint32
	pfTail uint32
	// The oldest request in prefill decays from pfSince (when it became the
	// oldest) over headDur; headTok is its initial effective tokens.
	pfSince int64
	headTok int64
	headDur int64

	reqHead   uint32 // requests booked here (for removal)
	nreq      int
	decisions uint64

	ovHost, ovDisk, ovTree uint32 // with slotHot.ovGen
}

type workerState struct {
	id    uint64
	ranks []uint32
	okGen uint32 // some rank is not busy in decision gen
	live  bool
}

type request struct {
	id       uint64
	slot     uint32
	isl      uint32
	overlap  uint32
	start    int64
	pfTokens int64
	pfDur    int64
	inPf     bool
	live     bool
	pfPrev   uint32
	pfNext   uint32
	exPrev   uint32
	exNext   uint32
	slPrev   uint32
	slNext   uint32
	holds    []uint32       // holder records of its blocks (of random hashes without KV reuse); 0: private
	hashes   []wire.SeqHash // by block position: the hash of each private block (others unset)
	npriv    uint32         // private blocks (Scheduler.promote)
	privLo   uint32         // the position of the first private block, if any
	nextFree uint32
	// stretch: its private blocks are one stretch, privLo to the end,
	// with one table cell, privLo's (Config.ChainedHashes).
	stretch bool
	class   Class
}

// privPos returns the position of k among the request's private blocks, or
// -1.
func (rq *request) privPos(k uint64) int {
	if rq.npriv == 0 {
		return -1
	}
	// A stretch (request.stretch) is indexed by its first block alone, so
	// a lookup finds it at privLo, the loop's first step, unless another
	// hash of the stretch shares that block's fingerprint (then the
	// position found is that block's, as without stretches). A separate
	// test for stretches kept cellIs from inlining: find cost ~7
	// instructions more per call (cachegrind, DecideVariants reuse=false).
	for j := int(rq.privLo); j < len(rq.holds); j++ {
		if rq.holds[j] == 0 && uint64(rq.hashes[j]) == k {
			return j
		}
	}
	return -1
}

// New returns a Scheduler for cfg whose RNG (tie breaks, temperature
// sampling, random policy, random block hashes) is seeded with seed.
func New(cfg Config, seed uint64) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Scheduler{
		cfg:      cfg,
		bs:       int64(cfg.BlockSize),
		invBS:    1 / float64(cfg.BlockSize),
		rng:      rand.New(rand.NewPCG(seed, seed^0x6a09e667f3bcc909)),
		rrLast:   -1,
		seed:     seed,
		slotOf:   make(map[wire.WorkerKey]uint32),
		workerOf: make(map[uint64]uint32),
		reqs:     make([]request, 1, 64),
	}
	s.blocks.init()
	s.q.init(cfg.QueuePolicy)
	s.q.growTenants(0)
	s.sess.slot = -1
	s.shed.init(cfg.MaxQueueWait, seed)
	s.initHeap()
	return s, nil
}

// Config returns the scheduler's configuration.
func (s *Scheduler) Config() Config { return s.cfg }

func (s *Scheduler) advance(now int64) int64 {
	if now > s.now {
		s.now = now
	}
	return s.now
}

// ErrUnknownWorker is returned for a worker key the table does not hold.
var ErrUnknownWorker = errors.New("sched: unknown worker")

// ErrDuplicate is returned by AddRequest for an id already active or waiting.
var ErrDuplicate = errors.New("sched: duplicate request id")

// AddWorker adds a dp rank to the worker table, or updates its capacity if it
// is there, and admits waiting requests that can now be routed (at the latest
// time seen). A rank whose Capacity.Role is RolePrefill joins the prefill
// pool (DecidePD), out of reach of aggregated decisions; a rank changing
// role to or from it is removed from its old table first (its requests are
// dropped). Control plane: it may allocate.
func (s *Scheduler) AddWorker(key wire.WorkerKey, c Capacity) {
	if int(c.Role) >= len(roleNames) {
		panic(fmt.Sprintf("sched: AddWorker: capacity role %d", c.Role))
	}
	if !s.inner {
		if c.Role == RolePrefill {
			if _, ok := s.slotOf[key]; ok {
				s.RemoveRank(key, s.now)
			}
			s.prefillPool().AddWorker(key, c)
			s.syncHeapWeight()
			return
		}
		if s.pf != nil && s.pf.RemoveRank(key, s.now) {
			s.syncHeapWeight()
		}
	}
	if i, ok := s.slotOf[key]; ok {
		s.slots[i].capacity = c
		s.setLimits(i)
		s.drain(s.now)
		s.checkInvariants()
		return
	}
	w, ok := s.workerOf[key.Worker]
	if !ok {
		if n := len(s.freeWorks); n > 0 {
			w = s.freeWorks[n-1]
			s.freeWorks = s.freeWorks[:n-1]
		} else {
			s.workers = append(s.workers, workerState{})
			w = uint32(len(s.workers) - 1)
		}
		ranks := s.workers[w].ranks[:0]
		s.workers[w] = workerState{id: key.Worker, ranks: ranks, live: true}
		s.workerOf[key.Worker] = w
	}
	var i uint32
	if n := len(s.freeSlots); n > 0 {
		i = s.freeSlots[n-1]
		s.freeSlots = s.freeSlots[:n-1]
	} else {
		s.scan = append(s.scan, slotScan{})
		s.hot = append(s.hot, slotHot{})
		s.held = append(s.held, heldEnt{})
		s.slots = append(s.slots, slotState{})
		i = uint32(len(s.slots) - 1)
	}
	s.hot[i] = slotHot{worker: w, live: true}
	s.held[i] = heldEnt{}
	s.slots[i] = slotState{key: key, capacity: c}
	s.setLimits(i)
	s.slotOf[key] = i
	if s.fastSlot.get(mixKey(key)) == 0 {
		s.fastSlot.set(mixKey(key), i+1)
	}
	ws := &s.workers[w]
	ws.ranks = append(ws.ranks, i)
	s.setMulti(ws)
	if n := len(s.slots); cap(s.cands) < n {
		s.cands = make([]uint32, 0, 2*n)
		s.costs = make([]float64, 0, 2*n)
		s.deferred = make([]uint32, 0, 2*n)
		s.ties = make([]uint32, 0, 2*n)
		s.touched = make([]uint32, 0, 2*n)
		s.weights = make([]float64, 0, 2*n)
		s.ph.stack = make([]int32, 0, 2*n)
	}
	s.drain(s.now)
	s.checkInvariants()
}

func (s *Scheduler) setMulti(ws *workerState) {
	multi := len(ws.ranks) > 1
	for _, r := range ws.ranks {
		s.hot[r].multi = multi
		s.sync(r)
	}
}

// sync refreshes rank i's slotScan after its load, limits or flags changed.
// It keeps the plain-rank heap in step.
func (s *Scheduler) sync(i uint32) {
	s.scan[i] = s.scanOf(i)
	s.place(i)
}

func (s *Scheduler) scanOf(i uint32) slotScan {
	h := &s.hot[i]
	if !h.live {
		return slotScan{}
	}
	f := uint32(fLive) | s.scan[i].flags&fMarks
	if h.decaying || h.multi || h.active > math.MaxUint32 || h.pfSum > math.MaxUint32 {
		f |= fSlow
	}
	if h.busy(h.pfSum) {
		f |= fBusy
	}
	return slotScan{active: uint32(min(h.active, math.MaxUint32)), pf: uint32(min(h.pfSum, math.MaxUint32)), flags: f}
}

// touch marks rank i as touched by the current request (gen): it leaves the
// plain fast path. untouch clears the marks.
func (s *Scheduler) touch(i uint32) {
	if s.scan[i].flags&fTouched == 0 {
		s.scan[i].flags |= fTouched
		s.touched = append(s.touched, i)
	}
}

func (s *Scheduler) untouch() {
	// Locals: with s.scan in the loop, every store made Go reload it.
	scan, touched := s.scan, s.touched
	for _, i := range touched {
		if invariantsEnabled && scan[i].flags&fTouched == 0 {
			panic(fmt.Sprintf("sched: rank %d listed as touched twice, or not marked", i))
		}
		scan[i].flags &^= fMarks
	}
	s.touched = touched[:0]
}

func (s *Scheduler) setLimits(i uint32) {
	h, sl := &s.hot[i], &s.slots[i]
	h.decLimit = math.MaxInt64
	if f := s.cfg.BusyDecodeFrac; f > 0 && sl.capacity.TotalBlocks > 0 {
		h.decLimit = floorLimit(f * float64(sl.capacity.TotalBlocks))
	}
	h.pfLimit = math.MaxInt64
	if t := s.cfg.BusyPrefillTokens; t > 0 {
		h.pfLimit = t
	}
	if f := s.cfg.BusyPrefillFrac; f > 0 && sl.capacity.MaxBatchedTokens > 0 {
		h.pfLimit = min(h.pfLimit, floorLimit(f*float64(sl.capacity.MaxBatchedTokens)))
	}
	h.usedBusy = int64(min(sl.reported.UsedBlocks, math.MaxInt64)) > h.decLimit
	s.sync(i)
}

// floorLimit turns "value > x" for integer values into "value > floor(x)".
func floorLimit(x float64) int64 {
	if x >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(math.Floor(x))
}

// RemoveWorker removes every dp rank of a worker. Requests active on them are
// dropped (counted in Stats.Dropped; a later Free of their ids is a no-op);
// waiting requests that can no longer be routed anywhere are rejected through
// the outbox on the next queue pass. It reports whether the worker was known.
func (s *Scheduler) RemoveWorker(worker uint64, now int64) bool {
	inPool := s.pf != nil && s.pf.RemoveWorker(worker, now)
	if inPool {
		s.syncHeapWeight()
	}
	w, ok := s.workerOf[worker]
	if !ok {
		return inPool
	}
	for len(s.workers[w].ranks) > 0 {
		ranks := s.workers[w].ranks
		s.RemoveRank(s.slots[ranks[len(ranks)-1]].key, now)
	}
	return true
}

// RemoveRank removes one dp rank (see RemoveWorker). It reports whether the
// rank was known.
func (s *Scheduler) RemoveRank(key wire.WorkerKey, now int64) bool {
	now = s.advance(now)
	i, ok := s.slotOf[key]
	if !ok {
		if s.pf != nil && s.pf.RemoveRank(key, now) {
			s.syncHeapWeight()
			return true
		}
		return false
	}
	for s.slots[i].reqHead != 0 {
		s.freeReq(s.slots[i].reqHead, now)
		s.stats.Dropped++
	}
	w := s.hot[i].worker
	ws := &s.workers[w]
	for j, r := range ws.ranks {
		if r == i {
			ws.ranks = append(ws.ranks[:j], ws.ranks[j+1:]...)
			break
		}
	}
	s.setMulti(ws)
	if len(ws.ranks) == 0 {
		ws.live = false
		delete(s.workerOf, ws.id)
		s.freeWorks = append(s.freeWorks, w)
	}
	delete(s.slotOf, key)
	if s.fastSlot.get(mixKey(key)) == i+1 {
		s.fastSlot.del(mixKey(key))
	}
	s.hot[i] = slotHot{}
	s.sync(i) // not live: an empty mirror, out of the heap
	s.slots[i] = slotState{}
	s.freeSlots = append(s.freeSlots, i)
	if s.rrLast == int(i) {
		s.rrLast = -1
	}
	s.drain(now)
	s.checkInvariants()
	return true
}

// mixKey folds a worker key into 64 bits for fastSlot. Distinct keys can
// collide; lookup verifies and falls back to the map.
func mixKey(k wire.WorkerKey) uint64 {
	return k.Worker ^ (uint64(k.Dp)+1)*0xbf58476d1ce4e5b9
}

// lookup returns the slot of a dp rank. Decisions look up every overlap's
// key; the pointer-free table avoids hashing the 12-byte key in a Go map.
func (s *Scheduler) lookup(k wire.WorkerKey) (uint32, bool) {
	if v := s.fastSlot.get(mixKey(k)); v != 0 && s.slots[v-1].key == k {
		return v - 1, true
	}
	i, ok := s.slotOf[k]
	return i, ok
}

// ReportLoad records a dp rank's reported load (used KV blocks count toward
// busy detection) and admits waiting requests if that freed a worker.
func (s *Scheduler) ReportLoad(key wire.WorkerKey, l Load, now int64) error {
	now = s.advance(now)
	i, ok := s.slotOf[key]
	if !ok {
		if s.pf != nil {
			return s.pf.ReportLoad(key, l, now)
		}
		return ErrUnknownWorker
	}
	s.slots[i].reported = l
	s.setLimits(i)
	s.drain(now)
	s.checkInvariants()
	return nil
}

// SetTreeSize records the size of a rank's cached tree, the tie-break used
// when a request's overlaps do not mention the rank.
func (s *Scheduler) SetTreeSize(key wire.WorkerKey, blocks uint32) error {
	i, ok := s.slotOf[key]
	if !ok {
		if s.pf != nil {
			return s.pf.SetTreeSize(key, blocks)
		}
		return ErrUnknownWorker
	}
	s.slots[i].treeSize = blocks
	return nil
}

// Workers returns the number of dp ranks in the table, prefill ranks
// included.
func (s *Scheduler) Workers() int { return len(s.slotOf) + s.PrefillRanks() }

// prefillAt is rank i's active prefill tokens at now: the sum of the
// requests in prefill, with the oldest one's share decayed linearly over its
// expected duration since it became the oldest.
func (s *Scheduler) prefillAt(i int, now int64) int64 {
	h := &s.hot[i]
	if !h.decaying {
		return h.pfSum
	}
	return s.slots[i].decayed(h.pfSum, now)
}

func (sl *slotState) decayed(sum, now int64) int64 {
	elapsed := now - sl.pfSince
	if elapsed <= 0 {
		return sum
	}
	if elapsed >= sl.headDur {
		return sum - sl.headTok
	}
	return sum - sl.headTok + ceilMulDiv(sl.headTok, sl.headDur-elapsed, sl.headDur)
}

func (h *slotHot) busy(pf int64) bool {
	return h.active > h.decLimit || h.usedBusy || pf > h.pfLimit
}

// Throttled reports whether now falls in the rejection window opened by the
// latest AllWorkersBusy event: the HTTP layer answers 429 to new requests
// while it does.
func (s *Scheduler) Throttled(now int64) bool { return now < s.rejectUntil }

// RejectUntil is the end of the rejection window (0 if never opened).
func (s *Scheduler) RejectUntil() int64 { return s.rejectUntil }

// ObserveAllWorkersBusy extends the rejection window for an AllWorkersBusy
// event seen elsewhere (another router replica), at time at.
func (s *Scheduler) ObserveAllWorkersBusy(at int64) {
	s.latch(at)
}

func (s *Scheduler) latch(at int64) {
	if u := at + int64(s.cfg.RejectionWindow); u > s.rejectUntil {
		s.rejectUntil = u
	}
}

// Drain appends the pending effects to dst, in the order they happened, and
// empties the outbox. The outbox is unbounded: drain it after every call
// that can produce effects (Decide, Free, MarkPrefillCompleted, Tick,
// ReportLoad, RemoveRank).
func (s *Scheduler) Drain(dst []Effect) []Effect {
	dst = append(dst, s.outbox...)
	s.outbox = s.outbox[:0]
	return dst
}

// Pending returns the number of effects waiting in the outbox.
func (s *Scheduler) Pending() int { return len(s.outbox) }

func (s *Scheduler) emit(e Effect) {
	if e.Kind == EffectAllWorkersBusy {
		if n := len(s.outbox); n > 0 && s.outbox[n-1].Kind == EffectAllWorkersBusy {
			last := &s.outbox[n-1]
			last.Count += e.Count
			last.QueueDepth = e.QueueDepth
			last.At = e.At
			return
		}
		s.stats.AllWorkersBusy++
	}
	s.outbox = append(s.outbox, e)
}

// AppendWaiting appends the ids of the waiting requests to dst, in the order
// they will be admitted.
func (s *Scheduler) AppendWaiting(dst []uint64) []uint64 { return s.q.appendWaiting(dst) }

// Stats returns the counters.
func (s *Scheduler) Stats() Stats {
	st := s.stats
	st.QueueDepth = s.q.len()
	st.Active = s.active
	return st
}

// AppendLoads appends the read model of every dp rank, in slot order, to
// dst: active blocks, active prefill tokens at now, and how many of blocks
// (a request's sequence hashes) each already has active. The prefill ranks
// follow, in their pool's slot order (Capacity.Role says which they are).
func (s *Scheduler) AppendLoads(dst []WorkerLoad, blocks []wire.SeqHash, now int64) []WorkerLoad {
	gen := s.nextGen()
	s.countHeld(blocks, gen)
	s.untouch()
	for i := range s.hot {
		h := &s.hot[i]
		if h.live && !h.busy(s.prefillAt(i, now)) {
			s.workers[h.worker].okGen = gen
		}
	}
	for i := range s.hot {
		h, sl := &s.hot[i], &s.slots[i]
		if !h.live {
			continue
		}
		pf := s.prefillAt(i, now)
		held := s.heldOf(i, gen)
		dst = append(dst, WorkerLoad{
			Worker:        sl.key,
			Capacity:      sl.capacity,
			Reported:      sl.reported,
			ActiveBlocks:  h.active,
			PrefillTokens: pf,
			HeldBlocks:    held,
			NewBlocks:     uint32(len(blocks)) - held,
			Busy:          h.busy(pf),
			WorkerBusy:    s.workers[h.worker].okGen != gen,
			Requests:      sl.nreq,
			Decisions:     sl.decisions,
			TreeSize:      sl.treeSize,
		})
	}
	if s.pf != nil {
		dst = s.pf.AppendLoads(dst, blocks, now)
	}
	return dst
}

func (s *Scheduler) heldOf(i int, gen uint32) uint32 {
	if v := s.held[i].gc; uint32(v>>32) == gen {
		return uint32(v)
	}
	return 0
}

func (s *Scheduler) nextGen() uint32 {
	s.gen++
	if s.gen == 0 {
		for i := range s.hot {
			s.hot[i].ovGen, s.hot[i].allowGen = 0, 0
			s.held[i] = heldEnt{}
		}
		for i := range s.workers {
			s.workers[i].okGen = 0
		}
		s.gen = 1
	}
	s.vecN = 0
	return s.gen
}

// countHeld sets the held count (under gen) of every rank to how many of
// blocks it has active, and caches the blocks' vectors for booking. Blocks
// are chained sequence hashes, so the first hash no rank holds ends the walk.
//
// Consecutive blocks held by the same ranks are counted once: when block j's
// vector has always been booked right after block j−1's (blockVec.pred) and
// has as many holders, the two have the same holders, so a run of such
// blocks adds its length to each holder of its last block in one visit. A
// prefix shared by k ranks costs k visits instead of k per block; blocks
// without the property (arbitrary hashes, branch points) are counted one by
// one as before, so the counts are the same.
func (s *Scheduler) countHeld(blocks []wire.SeqHash, gen uint32) {
	if !s.cfg.AssumeKVReuse {
		return
	}
	if len(blocks) > cap(s.vecCache) {
		s.vecCache = make([]uint32, 0, 2*len(blocks))
	}
	g := uint64(gen) << 32
	bv := s.blocks.vecs
	vc := s.vecCache[:len(blocks)]
	prev, run := uint32(0), uint32(0)
	nested := true
	for j, h := range blocks {
		// The previous block's last child is usually this block: a
		// live vector with this hash is the one the table maps it to.
		v := uint32(0)
		if c := bv[prev].child; c != 0 && bv[c].hash == uint64(h) && bv[c].n > 0 {
			v = c
		} else {
			v = s.blocks.heads.probe(uint64(h), bv)
			if v&privBit != 0 {
				// A promotion may move the vectors: the rest of
				// the walk is countHeldFrom's, so this loop keeps
				// one slice (reloading it here cost ~6
				// instructions per block at 256 ranks, cachegrind).
				s.countHeldFrom(blocks, g, j, v, prev, run, nested)
				return
			}
		}
		if v == 0 {
			break
		}
		vc[j] = v
		s.vecN = j + 1
		follows := bv[v].pred == prev
		nested = nested && (j == 0 || follows)
		if run > 0 && follows && bv[v].n == bv[prev].n {
			run++
		} else {
			if run > 0 {
				s.holdRun(prev, g, run)
			}
			run = 1
		}
		prev = v
	}
	if run > 0 {
		s.holdRun(prev, g, run)
	}
	s.vecCache = vc
	s.nested = nested
}

// countHeldFrom is countHeld's walk from block j on, whose probe met the
// private cell priv; prev, run and nested are the walk's state there. It is
// the same walk, with the vectors reloaded after each promotion. The copy is
// on purpose: countHeld as a call of this walk from block 0 measured 13,792 →
// 13,920 instructions per decision at 8 ranks (cachegrind, BenchmarkDecide).
func (s *Scheduler) countHeldFrom(blocks []wire.SeqHash, g uint64, j int, priv, prev, run uint32, nested bool) {
	vc := s.vecCache[:len(blocks)]
	for ; j < len(blocks); j++ {
		h := blocks[j]
		v := priv
		priv = 0
		bv := s.blocks.vecs
		if v == 0 { // priv is the first block's cell, already probed
			if c := bv[prev].child; c != 0 && bv[c].hash == uint64(h) && bv[c].n > 0 {
				v = c
			} else {
				v = s.blocks.heads.probe(uint64(h), bv)
			}
		}
		if v&privBit != 0 {
			v = s.privateFound(v, uint64(h), blocks[j+1:])
			bv = s.blocks.vecs
		}
		if v == 0 {
			break
		}
		vc[j] = v
		s.vecN = j + 1
		follows := bv[v].pred == prev
		nested = nested && (j == 0 || follows)
		if run > 0 && follows && bv[v].n == bv[prev].n {
			run++
		} else {
			if run > 0 {
				s.holdRun(prev, g, run)
			}
			run = 1
		}
		prev = v
	}
	if run > 0 {
		s.holdRun(prev, g, run)
	}
	s.vecCache = vc
	s.nested = nested
}

// privateFound is the walk's lookup of hash h when the table's probe met a
// private cell of h's fingerprint: the exact lookup, and if h is another
// request's private block, its promotion (promoteWalk). It returns h's
// vector or 0.
func (s *Scheduler) privateFound(v uint32, h uint64, next []wire.SeqHash) uint32 {
	v = s.blocks.heads.get(h, s.blocks.vecs, s.reqs)
	if v&privBit != 0 {
		v = s.promoteWalk(v&^privBit, h, next)
	}
	return v
}

// promoteWalk promotes request o's private block of hash h, and the private
// blocks after it as long as they are the next of blocks (a shared prefix
// is found block by block), and returns h's vector.
func (s *Scheduler) promoteWalk(o uint32, h uint64, next []wire.SeqHash) uint32 {
	rq := &s.reqs[o]
	k0 := rq.privPos(h)
	k := k0
	for _, nh := range next {
		if k+1 >= len(rq.holds) || rq.holds[k+1] != 0 || rq.hashes[k+1] != nh {
			break
		}
		k++
	}
	s.promote(o, k)
	return s.blocks.recs[rq.holds[k0]].vec
}

// holdRun adds k held blocks to every holder of vector v and notes its
// record as the holder's deepest. The slices are held in locals: with the
// fields of s, every store in the loop made Go reload them (cachegrind).
func (s *Scheduler) holdRun(v uint32, g uint64, k uint32) {
	held, scan, touched := s.held, s.scan, s.touched
	chunks := s.blocks.chunks
	vec := &s.blocks.vecs[v]
	touched = holdOne(held, scan, touched, vec.first, g, k)
	left := vec.n - 1
	for c := vec.head; left > 0; c = chunks[c].next {
		n := min(left, chunkHolders)
		for _, p := range chunks[c].hs[:n] {
			touched = holdOne(held, scan, touched, p, g, k)
		}
		left -= n
	}
	s.touched = touched
}

// holdOne counts k more held blocks on holder p's slot under the generation
// g<<32, notes p's record as its deepest and marks the slot touched
// (Scheduler.touch), returning touched.
func holdOne(held []heldEnt, scan []slotScan, touched []uint32, p hentry, g uint64, k uint32) []uint32 {
	he := &held[p.slot]
	if gc := he.gc; gc&^0xffffffff == g {
		he.gc = gc + uint64(k)
	} else {
		he.gc = g | uint64(k)
		if sc := &scan[p.slot]; sc.flags&fTouched == 0 {
			sc.flags |= fTouched
			touched = append(touched, p.slot)
		}
	}
	he.deep = p.id
	return touched
}

func durNanos(d time.Duration) int64 {
	if d < 0 {
		return 0
	}
	return int64(d)
}
