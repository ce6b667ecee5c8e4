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
	d, st := s.route(r, ov, now, exp)
	switch st {
	case stRouted:
		return d
	case stNoWorkers:
		s.stats.Rejections++
		s.stats.RejectedNoWorkers++
		return Decision{ID: r.ID, Outcome: Rejected, Reason: ReasonNoWorkers}
	}
	if s.q.len() < s.cfg.QueueDepth {
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

// drain admits waiting requests, in queue order, that can now be routed.
// Once a request without restrictions finds every worker busy, the later ones
// without restrictions are skipped: busy-ness does not depend on the request.
func (s *Scheduler) drain(now int64) {
	if s.q.len() == 0 {
		return
	}
	kept := s.q.order[:0]
	blocked := false
	for _, e := range s.q.order {
		qe := &s.q.ents[e]
		if blocked && qe.unrestricted {
			kept = append(kept, e)
			continue
		}
		d, st := s.route(&qe.req, qe.overlaps, now, nil)
		switch st {
		case stRouted:
			s.stats.Admitted++
			s.emit(Effect{Kind: EffectAdmitted, ID: d.ID, Decision: d, At: now})
			s.q.release(e)
		case stNoWorkers:
			s.stats.Rejections++
			s.stats.RejectedNoWorkers++
			s.emit(Effect{Kind: EffectRejected, ID: qe.req.ID, Reason: ReasonNoWorkers, At: now})
			s.q.release(e)
		default:
			kept = append(kept, e)
			blocked = blocked || qe.unrestricted
		}
	}
	s.q.order = kept
}

type costMode uint8

const (
	costDefault costMode = iota
	costCredit
	costLeast
	costNone
)

// route picks a dp rank for r and books it, or reports why it cannot.
func (s *Scheduler) route(r *Request, ov []Overlap, now int64, exp *[]Candidate) (Decision, status) {
	gen := s.nextGen()
	restricted := false
	if r.Override.PinnedSet {
		restricted = true
		if i, ok := s.slotOf[r.Override.Pinned]; ok {
			s.slots[i].allowGen = gen
		}
	} else if len(r.Override.Allowed) > 0 {
		restricted = true
		for _, k := range r.Override.Allowed {
			if i, ok := s.slotOf[k]; ok {
				s.slots[i].allowGen = gen
			}
		}
	}
	for j := range ov {
		o := &ov[j]
		i, ok := s.slotOf[o.Worker]
		if !ok {
			continue
		}
		sl := &s.slots[i]
		sl.ovGen = gen
		sl.ovDev, sl.ovHost, sl.ovDisk, sl.ovTree = o.Device, o.Host, o.Disk, o.TreeSize
	}
	s.countHeld(r.Blocks, gen)

	mode, w := s.costParams(r)
	isl, nb := int64(r.ISL), int64(len(r.Blocks))
	cands, costs, deferred := s.cands[:0], s.costs[:0], s.deferred[:0]
	eligible := 0
	for i := range s.slots {
		sl := &s.slots[i]
		if !sl.live {
			continue
		}
		pf := sl.prefillAt(now)
		busy := sl.busy(pf)
		if !busy && sl.multi {
			s.workers[sl.worker].okGen = gen
		}
		if restricted && sl.allowGen != gen {
			continue
		}
		eligible++
		if busy {
			if sl.multi {
				deferred = append(deferred, uint32(i))
			}
			continue
		}
		cands = append(cands, uint32(i))
		costs = append(costs, s.cost(sl, mode, w, pf, isl, nb, gen))
	}
	// A busy rank stays a candidate while another rank of its worker is not.
	for _, i := range deferred {
		sl := &s.slots[i]
		if s.workers[sl.worker].okGen == gen {
			cands = append(cands, i)
			costs = append(costs, s.cost(sl, mode, w, sl.prefillAt(now), isl, nb, gen))
		}
	}
	s.cands, s.costs, s.deferred = cands, costs, deferred
	if len(cands) == 0 {
		if exp != nil {
			s.explain(exp, r, now, gen, restricted, -1)
		}
		if eligible == 0 {
			return Decision{}, stNoWorkers
		}
		return Decision{}, stBusy
	}

	k := s.choose(r, cands, costs, gen)
	i := cands[k]
	if exp != nil {
		s.explain(exp, r, now, gen, restricted, int(i))
	}
	sl := &s.slots[i]
	var overlap uint32
	if sl.ovGen == gen {
		overlap = sl.ovDev
	}
	eff := min(max(0, isl-int64(overlap)*s.bs), math.MaxUint32)
	hint := PrefillLoadHint{InitialEffectiveTokens: uint32(eff), ExpectedDuration: r.ExpectedPrefill}
	s.book(r.ID, i, r.Blocks, r.ISL, overlap, hint, now)
	sl.decisions++
	s.stats.Decisions++
	cost := costs[k]
	if mode == costNone {
		cost = 0
	}
	return Decision{ID: r.ID, Outcome: Routed, Worker: sl.key, Overlap: overlap, Cost: cost, PrefillTokens: uint32(eff)}, stRouted
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

// terms returns the cost's prefill and decode terms for a request on sl
// (raw prefill blocks in the credit form).
func (s *Scheduler) terms(sl *slotState, mode costMode, pf, isl, nb int64, gen uint32) (prefill, decode float64) {
	var held int64
	if sl.heldGen == gen {
		held = int64(sl.held)
	}
	decode = float64(sl.active + nb - held)
	if mode == costCredit {
		return float64(pf+isl) * s.invBS, decode
	}
	var ov int64
	if sl.ovGen == gen {
		ov = int64(sl.ovDev)
	}
	return float64(pf+max(0, isl-ov*s.bs)) * s.invBS, decode
}

func (s *Scheduler) cost(sl *slotState, mode costMode, w float64, pf, isl, nb int64, gen uint32) float64 {
	switch mode {
	case costLeast:
		return float64(sl.active) + float64(pf)*s.invBS
	case costNone:
		return 0
	}
	prefill, decode := s.terms(sl, mode, pf, isl, nb, gen)
	if mode == costCredit {
		var credit float64
		if sl.ovGen == gen {
			credit = s.cfg.OverlapCredit*float64(sl.ovDev) + s.cfg.HostHitWeight*float64(sl.ovHost) + s.cfg.DiskHitWeight*float64(sl.ovDisk)
		}
		return w*max(0, prefill-credit) + decode
	}
	return w*prefill + decode
}

// choose returns the index in cands of the chosen rank.
func (s *Scheduler) choose(r *Request, cands []uint32, costs []float64, gen uint32) int {
	if len(cands) == 1 {
		if s.cfg.Policy == PolicyRoundRobin {
			s.rrLast = int(cands[0])
		}
		return 0
	}
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
	case PolicyLeastLoaded:
		return s.argmin(costs, false, cands, gen)
	}
	t := s.cfg.Temperature
	if r.Override.TemperatureSet {
		t = r.Override.Temperature
	}
	if t > 0 {
		return s.softmax(costs, t)
	}
	return s.argmin(costs, true, cands, gen)
}

// argmin returns the lowest cost; ties go to the smallest tree (byTree),
// then to a seeded random pick.
func (s *Scheduler) argmin(costs []float64, byTree bool, cands []uint32, gen uint32) int {
	best := math.Inf(1)
	ties := s.ties[:0]
	for k, c := range costs {
		if c < best {
			best = c
			ties = append(ties[:0], uint32(k))
		} else if c == best {
			ties = append(ties, uint32(k))
		}
	}
	if len(ties) > 1 && byTree {
		minTree := uint32(math.MaxUint32)
		for _, k := range ties {
			minTree = min(minTree, s.treeOf(cands[k], gen))
		}
		n := 0
		for _, k := range ties {
			if s.treeOf(cands[k], gen) == minTree {
				ties[n] = k
				n++
			}
		}
		ties = ties[:n]
	}
	s.ties = ties
	if len(ties) == 1 {
		return int(ties[0])
	}
	return int(ties[s.rng.IntN(len(ties))])
}

func (s *Scheduler) treeOf(i uint32, gen uint32) uint32 {
	sl := &s.slots[i]
	if sl.ovGen == gen {
		return sl.ovTree
	}
	return sl.treeSize
}

// softmax samples an index with probability ∝ exp(−(cost − min) / range / t).
// Equal costs are uniform.
func (s *Scheduler) softmax(costs []float64, t float64) int {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, c := range costs {
		lo = min(lo, c)
		hi = max(hi, c)
	}
	if hi == lo {
		return s.rng.IntN(len(costs))
	}
	scale := 1 / ((hi - lo) * t)
	var sum float64
	for _, c := range costs {
		sum += math.Exp(-(c - lo) * scale)
	}
	u := s.rng.Float64() * sum
	var acc float64
	for k, c := range costs {
		acc += math.Exp(-(c - lo) * scale)
		if u < acc {
			return k
		}
	}
	return len(costs) - 1
}

// explain appends every live rank's terms, before the chosen one is booked.
func (s *Scheduler) explain(dst *[]Candidate, r *Request, now int64, gen uint32, restricted bool, chosen int) {
	mode, w := s.costParams(r)
	isl, nb := int64(r.ISL), int64(len(r.Blocks))
	for i := range s.slots {
		sl := &s.slots[i]
		if !sl.live {
			continue
		}
		pf := sl.prefillAt(now)
		busy := sl.busy(pf)
		c := Candidate{Worker: sl.key, ActiveBlocks: sl.active, PrefillTokens: pf, TreeSize: s.treeOf(uint32(i), gen), Busy: busy, Chosen: i == chosen}
		if sl.ovGen == gen {
			c.Overlap, c.Host, c.Disk = sl.ovDev, sl.ovHost, sl.ovDisk
		}
		if sl.heldGen == gen {
			c.NewBlocks = uint32(nb) - sl.held
		} else {
			c.NewBlocks = uint32(nb)
		}
		pm := mode
		if pm == costLeast || pm == costNone {
			pm = costDefault
		}
		c.PrefillBlocks, c.DecodeBlocks = s.terms(sl, pm, pf, isl, nb, gen)
		c.Cost = s.cost(sl, mode, w, pf, isl, nb, gen)
		switch {
		case restricted && sl.allowGen != gen:
			c.Excluded = ExcludedNotAllowed
		case busy && (!sl.multi || s.workers[sl.worker].okGen != gen):
			c.Excluded = ExcludedBusy
		}
		*dst = append(*dst, c)
	}
}
