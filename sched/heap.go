package sched

import (
	"fmt"
	"math"
	"slices"
)

// The plain-rank heap (docs/decisions/0021-plain-rank-heap.md). A plain rank's cost (see slotScan) is
// w × (pf + isl) / block size + active + blocks in the default form (the
// credit form is the same with w = PrefillLoadScale, least-loaded is
// active + pf / block size): a request-independent key
// w × pf / block size + active plus a term common to every plain rank. The
// plain ranks sit in a binary min-heap on that key, updated in sync whenever
// a rank's load, limits or flags change; the other live ranks that the scan
// would consider (decaying, several ranks per worker, loads ≥ 2^32) sit in
// an unordered list. A decision reads the heap's smallest keys, the list and
// the ranks the request touches (overlap or held blocks), so it costs
// O(touched + slow + ties × log W) instead of O(W).
//
// Exactness. The scan compares the request's floating-point costs; the heap
// orders by a floating-point key. Both are within a few ulps of the same
// real value, so every plain rank whose cost can equal or beat the best one
// has a key within 1e-6 (relative) of the smallest untouched key: the heap
// path computes the exact cost, with the scan's arithmetic, for every plain
// rank in that band and keeps the same best cost and ties. The tie break
// (tree size, then the seeded RNG's position in the tie list) then picks the
// tie at that position of the list the scan builds, in rank order, by
// selection (breakTie).
//
// The heap path serves unrestricted argmin decisions whose weight is the
// configured one: PolicyKV at temperature ≤ 0 and PolicyLeastLoaded.
// Temperature sampling, round-robin and random (every candidate is needed),
// pinned or allowed-worker requests, and a per-request weight different from
// the configured one keep the scan.

type heapEnt struct {
	key  float64
	rank uint32
}

type plainHeap struct {
	on      bool
	w       float64 // the key's weight
	ents    []heapEnt
	pos     []int32 // rank → index+1 in ents, 0 when absent
	slow    []uint32
	slowPos []int32 // rank → index+1 in slow, 0 when absent
	stack   []int32 // decision scratch
}

func (s *Scheduler) initHeap() {
	h := &s.ph
	switch {
	case s.cfg.Policy == PolicyLeastLoaded:
		h.on, h.w = true, 1
	case s.cfg.Policy == PolicyKV && s.cfg.CreditCost:
		h.on, h.w = true, s.cfg.PrefillLoadScale
	case s.cfg.Policy == PolicyKV:
		h.on, h.w = true, s.cfg.Weight
	}
	if math.IsNaN(h.w) || math.IsInf(h.w, 0) || h.w < 0 {
		h.on = false
	}
}

// syncHeapWeight keys the heap by the weight the decisions use: while the
// prefill pool has ranks, most decisions are decode legs, weighted by
// Config.TransferWeight, so the heap takes that weight (aggregated
// decisions then scan); otherwise the cost's. Re-keying is O(ranks), on a
// change of pool only.
func (s *Scheduler) syncHeapWeight() {
	h := &s.ph
	if !h.on || s.cfg.Policy != PolicyKV {
		return
	}
	w := s.cfg.Weight
	if s.cfg.CreditCost {
		w = s.cfg.PrefillLoadScale
	}
	if s.PrefillRanks() > 0 {
		w = s.cfg.TransferWeight
	}
	if w == h.w {
		return
	}
	h.w = w
	for j := range h.ents {
		h.ents[j].key = s.heapKey(s.scan[h.ents[j].rank])
	}
	for j := len(h.ents)/2 - 1; j >= 0; j-- {
		h.down(j)
	}
}

func (s *Scheduler) heapKey(sc slotScan) float64 {
	return s.ph.w*float64(sc.pf)*s.invBS + float64(sc.active)
}

// place updates rank i's membership and key after its slotScan changed.
func (s *Scheduler) place(i uint32) {
	h := &s.ph
	if !h.on {
		return
	}
	for int(i) >= len(h.pos) {
		h.pos = append(h.pos, 0)
		h.slowPos = append(h.slowPos, 0)
	}
	sc := s.scan[i]
	f := sc.flags &^ fMarks
	if f == fLive {
		k := s.heapKey(sc)
		if p := h.pos[i]; p != 0 {
			if old := h.ents[p-1].key; k != old {
				h.ents[p-1].key = k
				if k < old {
					h.up(int(p - 1))
				} else {
					h.down(int(p - 1))
				}
			}
		} else {
			h.ents = append(h.ents, heapEnt{key: k, rank: i})
			h.pos[i] = int32(len(h.ents))
			h.up(len(h.ents) - 1)
		}
	} else if p := h.pos[i]; p != 0 {
		h.remove(int(p - 1))
	}
	if f&(fLive|fSlow) == fLive|fSlow {
		if h.slowPos[i] == 0 {
			h.slow = append(h.slow, i)
			h.slowPos[i] = int32(len(h.slow))
		}
	} else if p := h.slowPos[i]; p != 0 {
		last := h.slow[len(h.slow)-1]
		h.slow[p-1] = last
		h.slowPos[last] = p
		h.slow = h.slow[:len(h.slow)-1]
		h.slowPos[i] = 0
	}
}

func (h *plainHeap) swap(a, b int) {
	h.ents[a], h.ents[b] = h.ents[b], h.ents[a]
	h.pos[h.ents[a].rank] = int32(a + 1)
	h.pos[h.ents[b].rank] = int32(b + 1)
}

func (h *plainHeap) up(j int) {
	for j > 0 {
		p := (j - 1) / 2
		if h.ents[p].key <= h.ents[j].key {
			return
		}
		h.swap(p, j)
		j = p
	}
}

func (h *plainHeap) down(j int) {
	n := len(h.ents)
	for {
		l := 2*j + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h.ents[r].key < h.ents[l].key {
			m = r
		}
		if h.ents[j].key <= h.ents[m].key {
			return
		}
		h.swap(j, m)
		j = m
	}
}

func (h *plainHeap) remove(j int) {
	last := len(h.ents) - 1
	r := h.ents[j].rank
	if j != last {
		h.swap(j, last)
	}
	h.ents = h.ents[:last]
	h.pos[r] = 0
	if j != last {
		h.down(j)
		h.up(j)
	}
}

// heapUsable says whether the decision p can take the heap path.
func (s *Scheduler) heapUsable(p *pass) bool {
	if !s.ph.on || s.forceScan || !p.argmin {
		return false
	}
	switch p.in.mode {
	case costLeast:
		return true
	case costDefault:
		return s.cfg.Policy == PolicyKV && !s.cfg.CreditCost && p.in.w == s.ph.w
	case costCredit:
		return s.cfg.Policy == PolicyKV && s.cfg.CreditCost && p.in.w == s.ph.w
	}
	return false
}

// heapPlain is scanPlain's result for an unrestricted argmin decision
// without reading every rank (see the top of this file).
func (s *Scheduler) heapPlain(p *pass) {
	h := &s.ph
	s.heapUsed++
	// The ranks the scan sends through consider: the slow ones and the
	// plain ones the request touches.
	for _, i := range h.slow {
		s.consider(p, int(i))
	}
	// The smallest untouched key: only touched ranks can sit above it.
	kmin := math.Inf(1)
	st := h.stack[:0]
	if len(h.ents) > 0 {
		st = append(st, 0)
	}
	for len(st) > 0 {
		n := st[len(st)-1]
		st = st[:len(st)-1]
		e := h.ents[n]
		if e.key >= kmin {
			continue
		}
		if s.scan[e.rank].flags&fTouched == 0 {
			kmin = e.key
			continue
		}
		if l := 2*n + 1; int(l) < len(h.ents) {
			st = append(st, l)
			if l+1 < int32(len(h.ents)) {
				st = append(st, l+1)
			}
		}
	}
	if !math.IsInf(kmin, 1) {
		w, isl, nb, invBS, mode := p.in.w, p.in.isl, p.in.nb, s.invBS, p.in.mode
		common := float64(nb)
		if mode != costLeast {
			common += w * float64(isl) * invBS
		}
		lim := kmin + 1e-6*(math.Abs(kmin)+common+1)
		st = append(st[:0], 0)
		for len(st) > 0 {
			n := st[len(st)-1]
			st = st[:len(st)-1]
			e := h.ents[n]
			if e.key > lim {
				continue
			}
			if sc := &s.scan[e.rank]; sc.flags&fTouched == 0 {
				p.add(e.rank, plainCost(mode, w, invBS, int64(sc.pf), int64(sc.active), isl, nb))
			}
			if l := 2*n + 1; int(l) < len(h.ents) {
				st = append(st, l)
				if l+1 < int32(len(h.ents)) {
					st = append(st, l+1)
				}
			}
		}
	}
	h.stack = st
	// The plain ranks the request touches. One whose key less its held
	// blocks exceeds the smallest untouched key by more than the rounding
	// band costs more than that untouched rank (its cost is its key plus
	// the common term, less what its overlap and held blocks save), so it
	// cannot be among the best; only the others are costed. Ranks with an
	// overlap are always costed (an overlap lowers the prefill term).
	var cut float64
	prune := !math.IsInf(kmin, 1) && p.in.mode != costLeast
	if prune {
		cut = kmin + 1e-6*(math.Abs(kmin)+float64(p.in.nb)+p.in.w*float64(p.in.isl)*s.invBS+1)
		prune = !math.IsNaN(cut) && !math.IsInf(cut, 0)
	}
	w, isl, nb, invBS, mode := p.in.w, p.in.isl, p.in.nb, s.invBS, p.in.mode
	scan, heldBy, hw := s.scan, s.held, s.ph.w
	pruned := uint64(0)
	for _, i := range s.touched {
		sc := scan[i]
		if sc.flags != fLive|fTouched { // not plain, or with an overlap
			if sc.flags&^fMarks == fLive {
				s.consider(p, int(i))
			}
			continue
		}
		// Touched without an overlap: countHeld touched it, under this
		// decision's generation (checked with -tags invariants).
		held := int64(uint32(heldBy[i].gc))
		if invariantsEnabled && uint32(heldBy[i].gc>>32) != p.in.gen {
			panic(fmt.Sprintf("sched: rank %d touched without an overlap or a held count", i))
		}
		// Its heap key (heapKey), from the mirror.
		if prune && hw*float64(sc.pf)*invBS+float64(sc.active)-float64(held) > cut {
			pruned++
			continue
		}
		// Plain but for held blocks: Scheduler.cost from the mirror.
		p.add(i, heldCost(mode, w, invBS, int64(sc.pf), int64(sc.active), isl, nb, held))
	}
	s.heldPruned += pruned
	p.eligible = len(s.slotOf)
	// The scan reconsiders busy ranks in rank order (route orders the ties
	// when it breaks them).
	slices.Sort(p.deferred)
}

// checkHeap verifies the heap and the slow list against the slotScan mirror.
func (s *Scheduler) checkHeap() error {
	h := &s.ph
	if !h.on {
		return nil
	}
	for j, e := range h.ents {
		if h.pos[e.rank] != int32(j+1) {
			return fmt.Errorf("heap entry %d: rank %d position %d", j, e.rank, h.pos[e.rank])
		}
		if j > 0 && h.ents[(j-1)/2].key > e.key {
			return fmt.Errorf("heap entry %d: order broken", j)
		}
		if k := s.heapKey(s.scan[e.rank]); k != e.key {
			return fmt.Errorf("heap entry %d: rank %d key %v, want %v", j, e.rank, e.key, k)
		}
	}
	for j, r := range h.slow {
		if h.slowPos[r] != int32(j+1) {
			return fmt.Errorf("slow list %d: rank %d position %d", j, r, h.slowPos[r])
		}
	}
	for i := range s.scan {
		f := s.scan[i].flags &^ fMarks
		if (f == fLive) != (i < len(h.pos) && h.pos[i] != 0) {
			return fmt.Errorf("slot %d: in heap %v, plain %v", i, !(f == fLive), f == fLive)
		}
		slow := f&(fLive|fSlow) == fLive|fSlow
		if slow != (i < len(h.slowPos) && h.slowPos[i] != 0) {
			return fmt.Errorf("slot %d: in slow list %v, slow %v", i, !slow, slow)
		}
	}
	return nil
}
