package sched

import "math"

type status uint8

const (
	stRouted status = iota
	stBusy
	stNoWorkers
)

// Decide routes a batch of requests, one at a time in order, booking each
// decision before making the next (so a burst of siblings spreads as the
// load they add shows up). overlaps[i] are the index's overlaps for batch[i];
// overlaps may be nil (no overlap anywhere), otherwise it must have
// len(batch) entries. Waiting requests that have become routable are
// admitted first. One Decision per request is appended to dst.
//
// Deciding does not allocate once the scheduler's tables have reached their
// working size (AllocsPerRun tests guard it).
func (s *Scheduler) Decide(dst []Decision, batch []Request, overlaps [][]Overlap, now int64) []Decision {
	if overlaps != nil && len(overlaps) != len(batch) {
		panic("sched: Decide: len(overlaps) != len(batch)")
	}
	now = s.advance(now)
	s.drain(now)
	for i := range batch {
		var ov []Overlap
		if overlaps != nil {
			ov = overlaps[i]
		}
		dst = append(dst, s.decideNew(&batch[i], ov, now, nil))
	}
	s.checkInvariants()
	return dst
}

// DecideExplained routes one request like Decide and appends to dst an
// explanation: every dp rank in slot order with its overlap, prefill and
// decode terms, cost, busy state, exclusion and whether it was chosen.
func (s *Scheduler) DecideExplained(dst []Candidate, req *Request, overlaps []Overlap, now int64) (Decision, []Candidate) {
	now = s.advance(now)
	s.drain(now)
	d := s.decideNew(req, overlaps, now, &dst)
	s.checkInvariants()
	return d, dst
}

func (s *Scheduler) decideNew(r *Request, ov []Overlap, now int64, exp *[]Candidate) Decision {
	if s.byID.get(r.ID) != 0 || s.q.ids.get(r.ID) != 0 {
		s.stats.Rejections++
		s.stats.RejectedDuplicate++
		return Decision{ID: r.ID, Outcome: Rejected, Reason: ReasonDuplicate}
	}
	st := stBusy
	var d Decision
	if !s.holdForCache(r, ov, now) {
		d, st = s.route(r, ov, now, exp)
	}
	switch st {
	case stRouted:
		s.noteRouted(r)
		return d
	case stNoWorkers:
		s.stats.Rejections++
		s.stats.RejectedNoWorkers++
		return Decision{ID: r.ID, Outcome: Rejected, Reason: ReasonNoWorkers}
	}
	if n := s.q.len(); n >= s.cfg.QueueDepth && n > 0 {
		s.shed.advance(now, n)
		s.evictFor(r, now)
	}
	if n := s.q.len(); n < s.cfg.QueueDepth {
		s.shed.advance(now, n)
		if s.classShed(r) {
			s.stats.Rejections++
			s.stats.RejectedQueueWait++
			return Decision{ID: r.ID, Outcome: Rejected, Reason: ReasonQueueWait}
		}
		s.q.push(r, ov, now, s.bs)
		s.stats.Queued++
		return Decision{ID: r.ID, Outcome: Queued}
	}
	s.stats.Rejections++
	s.stats.RejectedQueueFull++
	s.latch(now)
	s.emit(Effect{Kind: EffectAllWorkersBusy, QueueDepth: s.q.len(), Count: 1, At: now})
	return Decision{ID: r.ID, Outcome: Rejected, Reason: ReasonQueueFull}
}

type costMode uint8

// plainCost is a plain rank's cost (no overlap, none of the request's
// blocks active on it) in each form: pf and active are the rank's prefill
// tokens and active blocks, isl and nb the request's prompt tokens and
// blocks. scanPlain and heapPlain both call it, so the heap's choice is the
// scan's bit for bit (TestHeapMatchesScan).
func plainCost(mode costMode, w, invBS float64, pf, active, isl, nb int64) float64 {
	switch mode {
	case costDefault:
		return w*float64(pf+isl)*invBS + float64(active+nb)
	case costCredit:
		return w*max(0, float64(pf+isl)*invBS) + float64(active+nb)
	case costLeast:
		return float64(active) + float64(pf)*invBS
	}
	return 0
}

// heldCost is Scheduler.cost for a plain rank the request touches only by
// held blocks (no overlap): the same arithmetic, in the same order, as cost
// and terms take for it, from the mirror's loads, so the heap path costs such
// ranks without reading slotHot (TestHeapMatchesScan compares it with the
// scan, which calls cost).
func heldCost(mode costMode, w, invBS float64, pf, active, isl, nb, held int64) float64 {
	switch mode {
	case costDefault:
		return w*(float64(pf+max(0, isl))*invBS) + float64(active+nb-held)
	case costCredit:
		prefill := float64(pf+isl) * invBS
		return w*max(0, prefill-0) + float64(active+nb-held)
	case costLeast:
		return float64(active) + float64(pf)*invBS
	}
	return 0
}

const (
	costDefault costMode = iota
	costCredit
	costLeast
	costNone
)

// costInput is what the cost of one rank depends on besides the rank.
type costInput struct {
	mode    costMode
	w       float64
	rw      float64 // a decode leg's weight of a booked request (Config.RunningWeight)
	isl, nb int64
	gen     uint32
}

// pass is the state of one decision's scan over the ranks.
type pass struct {
	in         costInput
	now        int64
	restricted bool
	keep       float64 // < 1: the request sees ranks busy at this fraction of their limits (Config.ClassHeadroom)
	argmin     bool
	eligible   int
	best       float64
	ties       []uint32 // argmin: ranks at the best cost so far
	cands      []uint32 // otherwise: every candidate, with its cost
	costs      []float64
	deferred   []uint32 // busy ranks of workers with several ranks
}

func (p *pass) add(i uint32, c float64) {
	switch {
	case !p.argmin:
		p.cands = append(p.cands, i)
		p.costs = append(p.costs, c)
	case c < p.best:
		p.best = c
		p.ties = append(p.ties[:0], i)
	case c == p.best:
		p.ties = append(p.ties, i)
	}
}

// consider is the general path for one live rank: decayed prefill, busy
// state (marking its worker as having a free rank), eligibility, cost.
func (s *Scheduler) consider(p *pass, i int) {
	h := &s.hot[i]
	pf := h.pfSum
	if h.decaying {
		pf = s.slots[i].decayed(pf, p.now)
	}
	busy := h.busy(pf)
	if p.keep < 1 && !busy {
		busy = h.busyAt(pf, p.keep)
	}
	if h.multi && !busy {
		s.workers[h.worker].okGen = p.in.gen
	}
	if p.restricted && h.allowGen != p.in.gen {
		return
	}
	p.eligible++
	if busy {
		if h.multi {
			p.deferred = append(p.deferred, uint32(i))
		}
		return
	}
	p.add(uint32(i), s.cost(i, pf, &p.in))
}

// route picks a dp rank for r and books it, or reports why it cannot.
//
// One pass over the ranks finds the candidates (live, eligible, and not
// busy, or busy but with another rank of their worker free) and their costs;
// the argmin policies keep only the best cost and its ties. Unrestricted
// argmin decisions read plain ranks from the compact slotScan mirror and
// send the others through consider.
func (s *Scheduler) route(r *Request, ov []Overlap, now int64, exp *[]Candidate) (Decision, status) {
	gen := s.nextGen()
	defer s.untouch()
	restricted := false
	if r.Override.PinnedSet {
		restricted = true
		if i, ok := s.lookup(r.Override.Pinned); ok {
			s.hot[i].allowGen = gen
		}
	} else if len(r.Override.Allowed) > 0 {
		restricted = true
		for _, k := range r.Override.Allowed {
			if i, ok := s.lookup(k); ok {
				s.hot[i].allowGen = gen
			}
		}
	}
	for j := range ov {
		o := &ov[j]
		i, ok := s.lookup(o.Worker)
		if !ok {
			continue
		}
		s.hot[i].ovGen, s.hot[i].ovDev = gen, o.Device
		sl := &s.slots[i]
		sl.ovHost, sl.ovDisk, sl.ovTree = o.Host, o.Disk, o.TreeSize
		s.touch(i)
		s.scan[i].flags |= fOverlap
	}
	if s.cfg.SessionTTL > 0 && r.Session != 0 {
		s.sessionCredit(r, now, gen)
	}
	s.countHeld(r.Blocks, gen)
	cached := s.vecN

	mode, w := s.costParams(r)
	p := pass{
		in:         costInput{mode: mode, w: w, isl: int64(r.ISL), nb: int64(len(r.Blocks)), gen: gen},
		now:        now,
		restricted: restricted,
		argmin:     s.cfg.Policy == PolicyLeastLoaded || (s.cfg.Policy == PolicyKV && s.temperature(r) <= 0),
		best:       math.Inf(1),
		ties:       s.ties[:0],
		cands:      s.cands[:0],
		costs:      s.costs[:0],
		deferred:   s.deferred[:0],
	}
	if s.decodeLeg && mode != costNone {
		p.in.rw = s.cfg.RunningWeight
	}
	p.keep = 1
	if s.cfg.ClassHeadroom > 0 && r.Class != ClassCritical {
		p.keep = 1 - s.cfg.ClassHeadroom
	}
	plain := !restricted && p.in.rw == 0 && p.keep == 1
	byHeap := plain && s.heapUsable(&p)
	switch {
	case byHeap:
		s.heapPlain(&p)
	case plain:
		s.scanPlain(&p)
	default:
		for i := range s.hot {
			if s.hot[i].live {
				s.consider(&p, i)
			}
		}
	}
	// A busy rank stays a candidate while another rank of its worker is not.
	// The heap path leaves its ties unordered: main counts those found before
	// the deferred ranks (the scan lists them in rank order, then the
	// deferred ones at the same cost in rank order).
	main, best := len(p.ties), p.best
	for _, i := range p.deferred {
		if s.workers[s.hot[i].worker].okGen == gen {
			p.add(i, s.cost(int(i), s.prefillAt(int(i), now), &p.in))
		}
	}
	if p.best < best {
		main = 0
	}
	if !byHeap {
		main = -1 // in scan order already
	}
	s.ties, s.cands, s.costs, s.deferred = p.ties, p.cands, p.costs, p.deferred

	chosen, cost := -1, 0.0
	switch {
	case p.argmin && len(p.ties) > 0:
		chosen, cost = s.breakTie(p.ties, main, s.cfg.Policy == PolicyKV, gen), p.best
	case !p.argmin && len(p.cands) > 0:
		k := s.choose(r, p.cands, p.costs)
		chosen, cost = int(p.cands[k]), p.costs[k]
	}
	if exp != nil {
		s.explain(exp, now, &p.in, restricted, chosen)
	}
	s.sess.slot = -1
	if chosen < 0 {
		if p.eligible == 0 {
			return Decision{}, stNoWorkers
		}
		return Decision{}, stBusy
	}

	i := uint32(chosen)
	var overlap uint32
	cachedTok := int64(0)
	if s.hot[i].ovGen == gen {
		overlap = s.hot[i].ovDev
		cachedTok = int64(overlap) * s.bs
		if sl := &s.slots[i]; sl.ovHost != 0 || sl.ovDisk != 0 {
			cachedTok = int64(math.Round(s.tieredBlocks(int64(overlap), sl) * float64(s.bs)))
		}
	}
	eff := min(max(0, p.in.isl-cachedTok), math.MaxUint32)
	hint := PrefillLoadHint{InitialEffectiveTokens: uint32(eff), ExpectedDuration: r.ExpectedPrefill}
	held, deep := int(s.heldOf(int(i), gen)), uint32(0)
	if held > 0 && s.nested {
		deep = s.held[i].deep
	}
	s.bookClass = r.Class
	s.book(r.ID, i, r.Blocks, r.ISL, overlap, hint, now, cached, held, deep)
	s.bookClass = ClassStandard
	if s.cfg.SessionTTL > 0 && r.Session != 0 {
		s.BindSession(r.Session, s.slots[i].key, uint32(len(r.Blocks)), now)
	}
	s.slots[i].decisions++
	s.stats.Decisions++
	if mode == costNone {
		cost = 0
	}
	return Decision{ID: r.ID, Outcome: Routed, Worker: s.slots[i].key, Overlap: overlap, Cost: cost, PrefillTokens: uint32(eff)}, stRouted
}

// scanPlain is the scan of an unrestricted request: a plain rank's cost is
// computed from the 12-byte mirror (it has no overlap and none of the
// request's blocks, so the default and credit forms reduce to
// w × (pf + isl) / block size + active + blocks); other live ranks go through
// consider. The arithmetic matches Scheduler.cost exactly, so ties are the
// same either way. The default argmin case, the hot loop at large fleet
// sizes (BenchmarkDecide), has its own loop: folding the other cases into it
// costs it a third of its speed at 7,000 ranks (measured).
func (s *Scheduler) scanPlain(p *pass) {
	if !p.argmin || p.in.mode != costDefault {
		s.scanPlainGeneral(p)
		return
	}
	w, isl, nb, invBS := p.in.w, p.in.isl, p.in.nb, s.invBS
	best, ties := p.best, p.ties
	for i := range s.scan {
		sc := &s.scan[i]
		if f := sc.flags; f != fLive {
			if f&fLive == 0 || f&(fBusy|fSlow) == fBusy {
				continue // dead, or busy as the only rank of its worker
			}
			p.best, p.ties = best, ties
			s.consider(p, i)
			best, ties = p.best, p.ties
			continue
		}
		c := w*float64(int64(sc.pf)+isl)*invBS + float64(int64(sc.active)+nb)
		if c < best {
			best = c
			ties = append(ties[:0], uint32(i))
		} else if c == best {
			ties = append(ties, uint32(i))
		}
	}
	p.best, p.ties = best, ties
	p.eligible = len(s.slotOf)
}

func (s *Scheduler) scanPlainGeneral(p *pass) {
	w, isl, nb, invBS, mode := p.in.w, p.in.isl, p.in.nb, s.invBS, p.in.mode
	for i := range s.scan {
		sc := &s.scan[i]
		if f := sc.flags; f != fLive {
			if f&fLive == 0 || f&(fBusy|fSlow) == fBusy {
				continue
			}
			s.consider(p, i)
			continue
		}
		p.add(uint32(i), plainCost(mode, w, invBS, int64(sc.pf), int64(sc.active), isl, nb))
	}
	p.eligible = len(s.slotOf)
}

func (s *Scheduler) temperature(r *Request) float64 {
	if r.Override.TemperatureSet {
		return r.Override.Temperature
	}
	return s.cfg.Temperature
}

func (s *Scheduler) costParams(r *Request) (costMode, float64) {
	switch s.cfg.Policy {
	case PolicyLeastLoaded:
		return costLeast, 0
	case PolicyRoundRobin, PolicyRandom:
		return costNone, 0
	}
	if s.cfg.CreditCost {
		w := s.cfg.PrefillLoadScale
		if r.Override.WeightSet {
			w = r.Override.Weight
		}
		return costCredit, w
	}
	w := s.cfg.Weight
	if r.Override.WeightSet {
		w = r.Override.Weight
	}
	return costDefault, w
}

// terms returns the cost's prefill and decode terms for the request on rank
// i with pf active prefill tokens (raw prefill blocks in the credit form).
func (s *Scheduler) terms(i int, pf int64, in *costInput, credit bool) (prefill, decode float64) {
	h := &s.hot[i]
	var held int64
	if v := s.held[i].gc; uint32(v>>32) == in.gen {
		held = int64(uint32(v))
	}
	decode = float64(h.active + in.nb - held)
	if credit {
		return float64(pf+in.isl) * s.invBS, decode
	}
	var ov int64
	if h.ovGen == in.gen {
		ov = int64(h.ovDev)
		if sl := &s.slots[i]; sl.ovHost != 0 || sl.ovDisk != 0 {
			cached := s.tieredBlocks(ov, sl)
			prefill = (float64(pf) + max(0, float64(in.isl)-cached*float64(s.bs))) * s.invBS
			if s.cfg.CacheAffinity > 1 {
				prefill -= (s.cfg.CacheAffinity - 1) * cached
			}
			return prefill, decode
		}
	}
	prefill = float64(pf+max(0, in.isl-ov*s.bs)) * s.invBS
	if s.cfg.CacheAffinity > 1 && ov > 0 {
		prefill -= (s.cfg.CacheAffinity - 1) * float64(ov)
	}
	return prefill, decode
}

// tieredBlocks is the default cost's cached blocks of a rank whose prefix
// extends beyond its device: device + HostHitWeight × host + DiskHitWeight
// × disk (the credit form's weights: an onload from host memory or disk is
// cheaper than recomputing, dearer than a device hit).
func (s *Scheduler) tieredBlocks(dev int64, sl *slotState) float64 {
	return float64(dev) + s.cfg.HostHitWeight*float64(sl.ovHost) + s.cfg.DiskHitWeight*float64(sl.ovDisk)
}

func (s *Scheduler) cost(i int, pf int64, in *costInput) float64 {
	switch in.mode {
	case costDefault:
		prefill, decode := s.terms(i, pf, in, false)
		return in.w*prefill + decode + s.runningTerm(i, in)
	case costLeast:
		return float64(s.hot[i].active) + float64(pf)*s.invBS + s.runningTerm(i, in)
	case costNone:
		return 0
	}
	prefill, decode := s.terms(i, pf, in, true)
	var credit float64
	if s.hot[i].ovGen == in.gen {
		sl := &s.slots[i]
		credit = s.cfg.OverlapCredit*float64(s.hot[i].ovDev) + s.cfg.HostHitWeight*float64(sl.ovHost) + s.cfg.DiskHitWeight*float64(sl.ovDisk)
	}
	return in.w*max(0, prefill-credit) + decode + s.runningTerm(i, in)
}

// runningTerm is a decode leg's Config.RunningWeight × the requests booked
// on rank i; 0 for every other decision.
func (s *Scheduler) runningTerm(i int, in *costInput) float64 {
	if in.rw == 0 {
		return 0
	}
	return in.rw * float64(s.slots[i].nreq)
}

// breakTie picks among ranks of equal lowest cost: the smallest tree
// (byTree), then a seeded random one. main < 0: ties are in the scan's order;
// otherwise ties[:main] and ties[main:] are each unordered, and the tie picked
// is the one the scan's list (each part in rank order) holds at the drawn
// position, found by selection rather than by sorting.
func (s *Scheduler) breakTie(ties []uint32, main int, byTree bool, gen uint32) int {
	if len(ties) > 1 && byTree {
		minTree := uint32(math.MaxUint32)
		for _, i := range ties {
			minTree = min(minTree, s.tieTree(i))
		}
		n, m := 0, main
		for k, i := range ties {
			if s.tieTree(i) == minTree {
				ties[n] = i
				n++
			} else if k < main {
				m--
			}
		}
		ties, main = ties[:n], m
	}
	if len(ties) == 1 {
		return int(ties[0])
	}
	k := s.rng.IntN(len(ties))
	if main < 0 {
		return int(ties[k])
	}
	if k < main {
		return int(selectKth(ties[:main], k))
	}
	return int(selectKth(ties[main:], k-main))
}

// tieTree is treeOf during a decision: a rank with an overlap is marked
// fOverlap in the mirror (exactly when its ovGen is the decision's), which
// the tie's costing has just read, so slotHot is not read.
func (s *Scheduler) tieTree(i uint32) uint32 {
	if s.scan[i].flags&fOverlap == 0 {
		return s.slots[i].treeSize
	}
	return s.slots[i].ovTree
}

// selectKth returns the k-th smallest of a (0-based), reordering a.
func selectKth(a []uint32, k int) uint32 {
	lo, hi := 0, len(a)-1
	for lo < hi {
		pivot := a[lo+(hi-lo)/2]
		i, j := lo, hi
		for i <= j {
			for a[i] < pivot {
				i++
			}
			for a[j] > pivot {
				j--
			}
			if i <= j {
				a[i], a[j] = a[j], a[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return a[k]
		}
	}
	return a[k]
}

// choose returns the index in cands of the rank chosen by round-robin,
// random or temperature sampling.
func (s *Scheduler) choose(r *Request, cands []uint32, costs []float64) int {
	switch s.cfg.Policy {
	case PolicyRandom:
		return s.rng.IntN(len(cands))
	case PolicyRoundRobin:
		next, first := -1, -1
		for k, i := range cands {
			if first < 0 || i < cands[first] {
				first = k
			}
			if int(i) > s.rrLast && (next < 0 || i < cands[next]) {
				next = k
			}
		}
		if next < 0 {
			next = first
		}
		s.rrLast = int(cands[next])
		return next
	}
	return s.softmax(costs, s.temperature(r))
}

func (s *Scheduler) treeOf(i uint32, gen uint32) uint32 {
	if s.hot[i].ovGen == gen {
		return s.slots[i].ovTree
	}
	return s.slots[i].treeSize
}

// softmax samples an index with probability ∝ exp(−(cost − min) / range / t).
// Equal costs are uniform.
func (s *Scheduler) softmax(costs []float64, t float64) int {
	if len(costs) == 1 {
		return 0
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, c := range costs {
		lo = min(lo, c)
		hi = max(hi, c)
	}
	if hi == lo {
		return s.rng.IntN(len(costs))
	}
	scale := 1 / ((hi - lo) * t)
	ws := s.weights[:0]
	var sum float64
	for _, c := range costs {
		e := math.Exp(-(c - lo) * scale)
		ws = append(ws, e)
		sum += e
	}
	s.weights = ws
	u := s.rng.Float64() * sum
	var acc float64
	for k, e := range ws {
		acc += e
		if u < acc {
			return k
		}
	}
	return len(costs) - 1
}

// explain appends every live rank's terms, before the chosen one is booked.
func (s *Scheduler) explain(dst *[]Candidate, now int64, in *costInput, restricted bool, chosen int) {
	gen := in.gen
	for i := range s.hot {
		h, sl := &s.hot[i], &s.slots[i]
		if !h.live {
			continue
		}
		pf := s.prefillAt(i, now)
		busy := h.busy(pf)
		c := Candidate{Worker: sl.key, ActiveBlocks: h.active, PrefillTokens: pf, TreeSize: s.treeOf(uint32(i), gen), Busy: busy, Chosen: i == chosen}
		if h.ovGen == gen {
			c.Overlap, c.Host, c.Disk = h.ovDev, sl.ovHost, sl.ovDisk
		}
		if int32(i) == s.sess.slot {
			c.Session = s.sess.credit
		}
		c.NewBlocks = uint32(in.nb) - s.heldOf(i, gen)
		c.PrefillBlocks, c.DecodeBlocks = s.terms(i, pf, in, in.mode == costCredit)
		c.Cost = s.cost(i, pf, in)
		switch {
		case restricted && h.allowGen != gen:
			c.Excluded = ExcludedNotAllowed
		case busy && (!h.multi || s.workers[h.worker].okGen != gen):
			c.Excluded = ExcludedBusy
		}
		*dst = append(*dst, c)
	}
}
