package sched

import "fmt"

// checkInvariants panics on a broken invariant when built with
// -tags invariants; otherwise it compiles to nothing.
func (s *Scheduler) checkInvariants() {
	if invariantsEnabled {
		if err := s.CheckInvariants(); err != nil {
			panic(err)
		}
	}
}

// CheckInvariants recomputes the scheduler's derived state from scratch and
// returns the first inconsistency: per-rank active blocks against the block
// index, reference counts against the requests' block lists, prefill sums and
// the oldest-prefill anchor against the prefill lists, the expiry order, the
// worker table and the queue order. It is O(state); for tests.
func (s *Scheduler) CheckInvariants() error {
	// Block index: list links, one entry per (hash, slot), counts.
	rc := make(map[uint32]uint32) // entry → references from requests
	activeBy := make(map[uint32]int64)
	reachable := 0
	for _, c := range s.blocks.heads.cells {
		if c.val == 0 {
			continue
		}
		seen := make(map[uint32]bool)
		prev := uint32(0)
		for e := c.val; e != 0; e = s.blocks.ents[e].next {
			ent := &s.blocks.ents[e]
			if ent.hash != c.key {
				return fmt.Errorf("block entry %d hash %x in list of %x", e, ent.hash, c.key)
			}
			if ent.prev != prev {
				return fmt.Errorf("block entry %d prev %d, want %d", e, ent.prev, prev)
			}
			if ent.rc == 0 {
				return fmt.Errorf("block entry %d has rc 0", e)
			}
			if seen[ent.slot] {
				return fmt.Errorf("hash %x has two entries for slot %d", c.key, ent.slot)
			}
			seen[ent.slot] = true
			if int(ent.slot) >= len(s.slots) || !s.slots[ent.slot].live {
				return fmt.Errorf("block entry %d on dead slot %d", e, ent.slot)
			}
			activeBy[ent.slot]++
			reachable++
			prev = e
		}
	}
	if reachable != s.blocks.live {
		return fmt.Errorf("block index: %d reachable entries, %d live", reachable, s.blocks.live)
	}
	freeEnts := 0
	for e := s.blocks.free; e != 0; e = s.blocks.ents[e].next {
		freeEnts++
		if freeEnts > len(s.blocks.ents) {
			return fmt.Errorf("block free list cycles")
		}
	}
	if freeEnts+s.blocks.live != len(s.blocks.ents)-1 {
		return fmt.Errorf("block entries: %d free + %d live != %d", freeEnts, s.blocks.live, len(s.blocks.ents)-1)
	}

	// Requests.
	live := 0
	for r := 1; r < len(s.reqs); r++ {
		rq := &s.reqs[r]
		if !rq.live {
			continue
		}
		live++
		if s.byID.get(rq.id) != uint32(r) {
			return fmt.Errorf("request %d (id %d) not indexed", r, rq.id)
		}
		if s.q.ids.get(rq.id) != 0 {
			return fmt.Errorf("request id %d both active and waiting", rq.id)
		}
		if int(rq.slot) >= len(s.slots) || !s.slots[rq.slot].live {
			return fmt.Errorf("request id %d on dead slot %d", rq.id, rq.slot)
		}
		for _, e := range rq.refs {
			if int(e) >= len(s.blocks.ents) || s.blocks.ents[e].rc == 0 || s.blocks.ents[e].slot != rq.slot {
				return fmt.Errorf("request id %d holds bad block entry %d", rq.id, e)
			}
			rc[e]++
		}
	}
	if live != s.active || live != s.byID.len() {
		return fmt.Errorf("%d live requests, active %d, indexed %d", live, s.active, s.byID.len())
	}
	for e, n := range rc {
		if s.blocks.ents[e].rc != n {
			return fmt.Errorf("block entry %d rc %d, %d references", e, s.blocks.ents[e].rc, n)
		}
	}
	if len(rc) != s.blocks.live {
		return fmt.Errorf("%d referenced entries, %d live", len(rc), s.blocks.live)
	}

	// Expiry FIFO: every live request once, by start time.
	n, prev, last := 0, uint32(0), int64(-1<<63)
	for r := s.exHead; r != 0; r = s.reqs[r].exNext {
		rq := &s.reqs[r]
		if !rq.live || rq.exPrev != prev || rq.start < last {
			return fmt.Errorf("expiry list broken at request id %d", rq.id)
		}
		n++
		prev, last = r, rq.start
	}
	if n != live || s.exTail != prev {
		return fmt.Errorf("expiry list has %d of %d requests", n, live)
	}

	// Slots.
	for i := range s.slots {
		sl := &s.slots[i]
		if !sl.live {
			if activeBy[uint32(i)] != 0 {
				return fmt.Errorf("dead slot %d holds blocks", i)
			}
			continue
		}
		if s.slotOf[sl.key] != uint32(i) {
			return fmt.Errorf("slot %d key %v not indexed", i, sl.key)
		}
		if sl.active != activeBy[uint32(i)] {
			return fmt.Errorf("slot %d (%v): active %d, index says %d", i, sl.key, sl.active, activeBy[uint32(i)])
		}
		nreq := 0
		prev := uint32(0)
		for r := sl.reqHead; r != 0; r = s.reqs[r].slNext {
			if s.reqs[r].slot != uint32(i) || s.reqs[r].slPrev != prev {
				return fmt.Errorf("slot %d request list broken", i)
			}
			nreq++
			prev = r
		}
		if nreq != sl.nreq {
			return fmt.Errorf("slot %d: %d requests listed, nreq %d", i, nreq, sl.nreq)
		}
		var sum int64
		prev = 0
		for r := sl.pfHead; r != 0; r = s.reqs[r].pfNext {
			rq := &s.reqs[r]
			if !rq.inPf || rq.slot != uint32(i) || rq.pfPrev != prev || rq.pfTokens <= 0 {
				return fmt.Errorf("slot %d prefill list broken at id %d", i, rq.id)
			}
			sum += rq.pfTokens
			prev = r
		}
		if sum != sl.pfSum || sl.pfTail != prev {
			return fmt.Errorf("slot %d: prefill sum %d, listed %d", i, sl.pfSum, sum)
		}
		if h := sl.pfHead; h != 0 {
			if sl.headTok != s.reqs[h].pfTokens || sl.headDur != s.reqs[h].pfDur {
				return fmt.Errorf("slot %d: prefill anchor does not match the oldest request", i)
			}
		} else if sl.headTok != 0 || sl.headDur != 0 {
			return fmt.Errorf("slot %d: prefill anchor without requests", i)
		}
		w := &s.workers[sl.worker]
		if !w.live || w.id != sl.key.Worker || sl.multi != (len(w.ranks) > 1) {
			return fmt.Errorf("slot %d: worker link broken", i)
		}
	}
	pfCount := 0
	for r := 1; r < len(s.reqs); r++ {
		if s.reqs[r].live && s.reqs[r].inPf {
			pfCount++
		}
	}
	listed := 0
	for i := range s.slots {
		for r := s.slots[i].pfHead; r != 0; r = s.reqs[r].pfNext {
			listed++
		}
	}
	if pfCount != listed {
		return fmt.Errorf("%d requests in prefill, %d listed", pfCount, listed)
	}
	if len(s.slotOf) != len(s.slots)-len(s.freeSlots) {
		return fmt.Errorf("%d ranks indexed, %d slots live", len(s.slotOf), len(s.slots)-len(s.freeSlots))
	}
	for id, w := range s.workerOf {
		ws := &s.workers[w]
		if !ws.live || ws.id != id || len(ws.ranks) == 0 {
			return fmt.Errorf("worker %d broken", id)
		}
		for _, r := range ws.ranks {
			if !s.slots[r].live || s.slots[r].worker != w {
				return fmt.Errorf("worker %d rank slot %d broken", id, r)
			}
		}
	}

	// Queue.
	if s.q.len() != s.q.ids.len() {
		return fmt.Errorf("queue: %d ordered, %d indexed", s.q.len(), s.q.ids.len())
	}
	if s.q.len() > s.cfg.QueueDepth {
		return fmt.Errorf("queue: %d waiting, depth %d", s.q.len(), s.cfg.QueueDepth)
	}
	for k, e := range s.q.order {
		if s.q.ids.get(s.q.ents[e].req.ID) != e {
			return fmt.Errorf("queue entry %d not indexed", e)
		}
		if k > 0 && s.q.less(e, s.q.order[k-1]) {
			return fmt.Errorf("queue out of %v order at %d", s.q.policy, k)
		}
	}
	return nil
}
