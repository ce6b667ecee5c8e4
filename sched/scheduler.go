package sched

import (
	"errors"
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

	slots     []slotState
	freeSlots []uint32
	slotOf    map[wire.WorkerKey]uint32
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

	q queue

	outbox      []Effect
	rejectUntil int64
	stats       Stats

	// Per-decision scratch, sized with the slot table so deciding never
	// allocates.
	cands    []uint32
	costs    []float64
	deferred []uint32
	ties     []uint32
}

// slotState is one dp rank. Pointer-free except for nothing: it is scanned
// once per decision, so it is kept compact and contiguous.
type slotState struct {
	key    wire.WorkerKey
	worker uint32 // index into workers
	live   bool
	multi  bool // its worker has more than one rank

	capacity Capacity
	reported Load
	treeSize uint32
	// decLimit and pfLimit are the busy thresholds in blocks and tokens:
	// busy when max(active, used) > decLimit or prefill > pfLimit.
	decLimit int64
	pfLimit  int64

	active int64 // distinct active blocks
	pfSum  int64 // initial effective prefill tokens of requests in prefill
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

	// Per-decision scratch, valid when the matching gen equals Scheduler.gen.
	ovGen, heldGen, allowGen uint32
	ovDev, ovHost, ovDisk    uint32
	ovTree, held             uint32
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
	refs     []uint32 // block entries held
	nextFree uint32
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
		slotOf:   make(map[wire.WorkerKey]uint32),
		workerOf: make(map[uint64]uint32),
		reqs:     make([]request, 1, 64),
	}
	s.blocks.init()
	s.q.init(cfg.QueuePolicy)
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
// is there. Control plane: it may allocate.
func (s *Scheduler) AddWorker(key wire.WorkerKey, c Capacity) {
	if i, ok := s.slotOf[key]; ok {
		s.slots[i].capacity = c
		s.setLimits(&s.slots[i])
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
		s.slots = append(s.slots, slotState{})
		i = uint32(len(s.slots) - 1)
	}
	s.slots[i] = slotState{key: key, worker: w, live: true, capacity: c}
	s.setLimits(&s.slots[i])
	s.slotOf[key] = i
	ws := &s.workers[w]
	ws.ranks = append(ws.ranks, i)
	multi := len(ws.ranks) > 1
	for _, r := range ws.ranks {
		s.slots[r].multi = multi
	}
	if n := len(s.slots); cap(s.cands) < n {
		s.cands = make([]uint32, 0, 2*n)
		s.costs = make([]float64, 0, 2*n)
		s.deferred = make([]uint32, 0, 2*n)
		s.ties = make([]uint32, 0, 2*n)
	}
	s.checkInvariants()
}

func (s *Scheduler) setLimits(sl *slotState) {
	sl.decLimit = math.MaxInt64
	if f := s.cfg.BusyDecodeFrac; f > 0 && sl.capacity.TotalBlocks > 0 {
		sl.decLimit = floorLimit(f * float64(sl.capacity.TotalBlocks))
	}
	sl.pfLimit = math.MaxInt64
	if t := s.cfg.BusyPrefillTokens; t > 0 {
		sl.pfLimit = t
	}
	if f := s.cfg.BusyPrefillFrac; f > 0 && sl.capacity.MaxBatchedTokens > 0 {
		sl.pfLimit = min(sl.pfLimit, floorLimit(f*float64(sl.capacity.MaxBatchedTokens)))
	}
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
	w, ok := s.workerOf[worker]
	if !ok {
		return false
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
		return false
	}
	sl := &s.slots[i]
	for sl.reqHead != 0 {
		s.freeReq(sl.reqHead, now)
		s.stats.Dropped++
	}
	w := sl.worker
	ws := &s.workers[w]
	for j, r := range ws.ranks {
		if r == i {
			ws.ranks = append(ws.ranks[:j], ws.ranks[j+1:]...)
			break
		}
	}
	multi := len(ws.ranks) > 1
	for _, r := range ws.ranks {
		s.slots[r].multi = multi
	}
	if len(ws.ranks) == 0 {
		ws.live = false
		delete(s.workerOf, ws.id)
		s.freeWorks = append(s.freeWorks, w)
	}
	delete(s.slotOf, key)
	*sl = slotState{}
	s.freeSlots = append(s.freeSlots, i)
	if s.rrLast == int(i) {
		s.rrLast = -1
	}
	s.drain(now)
	s.checkInvariants()
	return true
}

// ReportLoad records a dp rank's reported load (used KV blocks count toward
// busy detection) and admits waiting requests if that freed a worker.
func (s *Scheduler) ReportLoad(key wire.WorkerKey, l Load, now int64) error {
	now = s.advance(now)
	i, ok := s.slotOf[key]
	if !ok {
		return ErrUnknownWorker
	}
	s.slots[i].reported = l
	s.drain(now)
	s.checkInvariants()
	return nil
}

// SetTreeSize records the size of a rank's cached tree, the tie-break used
// when a request's overlaps do not mention the rank.
func (s *Scheduler) SetTreeSize(key wire.WorkerKey, blocks uint32) error {
	i, ok := s.slotOf[key]
	if !ok {
		return ErrUnknownWorker
	}
	s.slots[i].treeSize = blocks
	return nil
}

// Workers returns the number of dp ranks in the table.
func (s *Scheduler) Workers() int { return len(s.slotOf) }

// prefillAt is the slot's active prefill tokens at now: the sum of the
// requests in prefill, with the oldest one's share decayed linearly over its
// expected duration since it became the oldest.
func (sl *slotState) prefillAt(now int64) int64 {
	if sl.headDur <= 0 {
		return sl.pfSum
	}
	elapsed := now - sl.pfSince
	if elapsed <= 0 {
		return sl.pfSum
	}
	if elapsed >= sl.headDur {
		return sl.pfSum - sl.headTok
	}
	return sl.pfSum - sl.headTok + ceilMulDiv(sl.headTok, sl.headDur-elapsed, sl.headDur)
}

func (sl *slotState) busy(pf int64) bool {
	return max(sl.active, int64(min(sl.reported.UsedBlocks, math.MaxInt64))) > sl.decLimit || pf > sl.pfLimit
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
// empties the outbox.
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

// Stats returns the counters.
func (s *Scheduler) Stats() Stats {
	st := s.stats
	st.QueueDepth = s.q.len()
	st.Active = s.active
	return st
}

// AppendLoads appends the read model of every dp rank, in slot order, to
// dst: active blocks, active prefill tokens at now, and how many of blocks
// (a request's sequence hashes) each already has active.
func (s *Scheduler) AppendLoads(dst []WorkerLoad, blocks []wire.SeqHash, now int64) []WorkerLoad {
	gen := s.nextGen()
	s.countHeld(blocks, gen)
	for i := range s.slots {
		sl := &s.slots[i]
		if sl.live && !sl.busy(sl.prefillAt(now)) {
			s.workers[sl.worker].okGen = gen
		}
	}
	for i := range s.slots {
		sl := &s.slots[i]
		if !sl.live {
			continue
		}
		pf := sl.prefillAt(now)
		var held uint32
		if sl.heldGen == gen {
			held = sl.held
		}
		dst = append(dst, WorkerLoad{
			Worker:        sl.key,
			Capacity:      sl.capacity,
			Reported:      sl.reported,
			ActiveBlocks:  sl.active,
			PrefillTokens: pf,
			HeldBlocks:    held,
			NewBlocks:     uint32(len(blocks)) - held,
			Busy:          sl.busy(pf),
			WorkerBusy:    s.workers[sl.worker].okGen != gen,
			Requests:      sl.nreq,
			Decisions:     sl.decisions,
			TreeSize:      sl.treeSize,
		})
	}
	return dst
}

func (s *Scheduler) nextGen() uint32 {
	s.gen++
	if s.gen == 0 {
		for i := range s.slots {
			sl := &s.slots[i]
			sl.ovGen, sl.heldGen, sl.allowGen = 0, 0, 0
		}
		for i := range s.workers {
			s.workers[i].okGen = 0
		}
		s.gen = 1
	}
	return s.gen
}

// countHeld sets slot.held (under gen) to how many of blocks each slot has
// active. Blocks are chained sequence hashes, so the first hash no slot holds
// ends the walk.
func (s *Scheduler) countHeld(blocks []wire.SeqHash, gen uint32) {
	if !s.cfg.AssumeKVReuse {
		return
	}
	for _, h := range blocks {
		e := s.blocks.heads.get(uint64(h))
		if e == 0 {
			return
		}
		for ; e != 0; e = s.blocks.ents[e].next {
			sl := &s.slots[s.blocks.ents[e].slot]
			if sl.heldGen != gen {
				sl.heldGen = gen
				sl.held = 0
			}
			sl.held++
		}
	}
}

func durNanos(d time.Duration) int64 {
	if d < 0 {
		return 0
	}
	return int64(d)
}
