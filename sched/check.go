package sched

import (
	"fmt"
	"math"
)

type holderKey struct {
	hash uint64
	slot uint32
}

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
	var pfTotal int64
	for i := range s.hot {
		pfTotal += s.hot[i].pfSum
	}
	if pfTotal != s.pfTotal {
		return fmt.Errorf("prefill total %d, the ranks' prefill sums add to %d", s.pfTotal, pfTotal)
	}
	if s.pf != nil {
		for k := range s.pf.slotOf {
			if _, ok := s.slotOf[k]; ok {
				return fmt.Errorf("rank %v in both the prefill pool and the table", k)
			}
		}
		if s.pf.q.len() != 0 {
			return fmt.Errorf("prefill pool: %d requests waiting", s.pf.q.len())
		}
		if err := s.pf.CheckInvariants(); err != nil {
			return fmt.Errorf("prefill pool: %w", err)
		}
	}
	if err := s.checkClasses(); err != nil {
		return err
	}
	// Block index: vectors, one holder per (hash, slot), counts.
	rc := make(map[holderKey]uint32) // (hash, slot) → references from requests
	activeBy := make(map[uint32]int64)
	pairs := 0
	vecsUsed := map[uint32]bool{}
	privCells := map[uint32]int{} // request slot → private cells
	for _, cell := range s.blocks.heads.cells {
		if cell == 0 {
			continue
		}
		if id := uint32(cell); id&privBit != 0 {
			r := id &^ privBit
			if int(r) >= len(s.reqs) || !s.reqs[r].live {
				return fmt.Errorf("block table cell %x: private block of a dead request", cell)
			}
			privCells[r]++
			continue
		}
		c := struct {
			key uint64
			val uint32
		}{s.blocks.vecs[uint32(cell)].hash, uint32(cell)}
		if int(c.val) >= len(s.blocks.vecs) {
			return fmt.Errorf("block table cell %x: vector out of range", cell)
		}
		if vecsUsed[c.val] {
			return fmt.Errorf("block vector %d indexed twice", c.val)
		}
		vecsUsed[c.val] = true
		vec := s.blocks.vecs[c.val]
		if uint32(cell>>32) != vtFingerprint(vec.hash) || !s.blocks.heads.indexedAs(vec.hash, c.val, s.blocks.vecs, s.reqs) {
			return fmt.Errorf("block vector %d of hash %x: indexed with fingerprint %x, lookup finds %d", c.val, vec.hash, uint32(cell>>32), s.blocks.heads.get(vec.hash, s.blocks.vecs, s.reqs))
		}
		nchunks := uint32(0)
		for ch := vec.head; ch != 0; ch = s.blocks.chunks[ch].next {
			nchunks++
		}
		if vec.n == 0 || nchunks != (vec.n-1+chunkHolders-1)/chunkHolders {
			return fmt.Errorf("block vector %d of %x: %d holders in %d chunks", c.val, c.key, vec.n, nchunks)
		}
		// Every holder's record points back at it.
		k := uint32(0)
		for ch := vec.head; ch != 0; ch = s.blocks.chunks[ch].next {
			for o := uint32(0); o < chunkHolders && k+1+o < vec.n; o++ {
				e := s.blocks.chunks[ch].hs[o]
				if err := s.checkRec(c.val, e, ch<<3|o); err != nil {
					return err
				}
			}
			k += chunkHolders
		}
		if err := s.checkRec(c.val, vec.first, 0); err != nil {
			return err
		}
		seen := make(map[uint32]bool)
		for _, p := range s.blocks.appendHolders(nil, c.val) {
			if p.rc == 0 {
				return fmt.Errorf("hash %x holder slot %d has rc 0", c.key, p.slot)
			}
			if seen[p.slot] {
				return fmt.Errorf("hash %x has two holders for slot %d", c.key, p.slot)
			}
			seen[p.slot] = true
			if int(p.slot) >= len(s.hot) || !s.hot[p.slot].live {
				return fmt.Errorf("hash %x held by dead slot %d", c.key, p.slot)
			}
			activeBy[p.slot]++
			pairs++
		}
	}
	freeRecs := 0
	for id := s.blocks.freeRecs; id != 0; id = s.blocks.recs[id].vec {
		if freeRecs++; freeRecs > len(s.blocks.recs) {
			return fmt.Errorf("holder record free list cycles")
		}
	}
	if freeRecs+s.blocks.live != len(s.blocks.recs)-1 {
		return fmt.Errorf("holder records: %d free + %d live != %d", freeRecs, s.blocks.live, len(s.blocks.recs)-1)
	}
	if pairs != s.blocks.live {
		return fmt.Errorf("block index: %d holders, %d counted live", pairs, s.blocks.live)
	}
	usedChunks := 0
	s.blocks.heads.each(func(v uint32) {
		if v&privBit != 0 {
			return
		}
		for ch := s.blocks.vecs[v].head; ch != 0; ch = s.blocks.chunks[ch].next {
			usedChunks++
		}
	})
	freeChunks := 0
	for ch := s.blocks.free; ch != 0; ch = s.blocks.chunks[ch].next {
		if freeChunks++; freeChunks > len(s.blocks.chunks) {
			return fmt.Errorf("chunk free list cycles")
		}
	}
	if usedChunks+freeChunks != len(s.blocks.chunks)-1 {
		return fmt.Errorf("holder chunks: %d used + %d free != %d", usedChunks, freeChunks, len(s.blocks.chunks)-1)
	}
	freeVecs := 0
	for v := s.blocks.freeVecs; v != 0; v = s.blocks.vecs[v].child {
		if vecsUsed[v] || s.blocks.vecs[v].n != 0 {
			return fmt.Errorf("block vector %d is free and in use", v)
		}
		if freeVecs++; freeVecs > len(s.blocks.vecs) {
			return fmt.Errorf("block vector free list cycles")
		}
	}
	if freeVecs != s.blocks.nfree || len(vecsUsed)+freeVecs != len(s.blocks.vecs)-1 {
		return fmt.Errorf("block vectors: %d used + %d free (%d counted) != %d", len(vecsUsed), freeVecs, s.blocks.nfree, len(s.blocks.vecs)-1)
	}

	// Requests.
	live, npriv := 0, 0
	stretchPriv := map[holderKey]bool{} // private blocks without a cell
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
		if int(rq.slot) >= len(s.hot) || !s.hot[rq.slot].live {
			return fmt.Errorf("request id %d on dead slot %d", rq.id, rq.slot)
		}
		rpriv := 0
		if rq.npriv > 0 && rq.stretch != s.cfg.ChainedHashes {
			return fmt.Errorf("request id %d: %d private blocks, stretch %v, chained hashes %v", rq.id, rq.npriv, rq.stretch, s.cfg.ChainedHashes)
		}
		for j, id := range rq.holds {
			if rq.stretch && rq.npriv > 0 && (id == 0) != (j >= int(rq.privLo)) {
				return fmt.Errorf("request id %d block %d: record %d, its private stretch starts at %d", rq.id, j, id, rq.privLo)
			}
			if id == 0 {
				// Private: indexed under its hash as this request's; in a
				// stretch only the first is, and chained hashes leave no
				// other block of that hash.
				h := uint64(rq.hashes[j])
				want := privBit | uint32(r)
				if rq.stretch && j > int(rq.privLo) {
					want = 0
					stretchPriv[holderKey{h, rq.slot}] = true
				}
				got := s.blocks.heads.get(h, s.blocks.vecs, s.reqs)
				if want == 0 && got == privBit|uint32(r) && vtFingerprint(h) == vtFingerprint(uint64(rq.hashes[rq.privLo])) {
					got = 0 // found through the first block's cell, sharing its fingerprint
				}
				if got != want {
					return fmt.Errorf("request id %d block %d: private hash %x, lookup finds %x, want %x", rq.id, j, h, got, want)
				}
				rc[holderKey{h, rq.slot}]++
				activeBy[rq.slot]++
				rpriv++
				continue
			}
			if int(id) >= len(s.blocks.recs) || s.blocks.recs[id].rc == 0 {
				return fmt.Errorf("request id %d holds dead holder record %d", rq.id, id)
			}
			v := s.blocks.recs[id].vec
			if int(v) >= len(s.blocks.vecs) || s.blocks.vecs[v].n == 0 {
				return fmt.Errorf("request id %d holds dead block vector %d", rq.id, v)
			}
			if e := s.blocks.entryAt(&s.blocks.vecs[v], s.blocks.recs[id].pos); e.slot != rq.slot || e.id != id {
				return fmt.Errorf("request id %d block %d: record %d is slot %d's, the request is on %d", rq.id, j, id, e.slot, rq.slot)
			}
			pred := uint32(0)
			if j > 0 && rq.holds[j-1] == 0 {
				pred = predMixed // after a private block (blockIndex.link)
			} else if j > 0 {
				pred = s.blocks.recs[rq.holds[j-1]].vec
			}
			if p := s.blocks.vecs[v].pred; p != predMixed && p != pred {
				return fmt.Errorf("request id %d block %d: vector %d says it follows %d, the request has %d", rq.id, j, v, p, pred)
			}
			if j > 0 && pred != predMixed && s.blocks.vecs[v].pred == pred && s.blocks.recs[id].prev != rq.holds[j-1] {
				return fmt.Errorf("request id %d block %d: record %d links to %d, the request's previous record is %d", rq.id, j, id, s.blocks.recs[id].prev, rq.holds[j-1])
			}
			rc[holderKey{s.blocks.vecs[v].hash, rq.slot}]++
		}
		cells := rpriv
		if rq.stretch && rpriv > 0 {
			cells = 1
		}
		if rpriv != int(rq.npriv) || cells != privCells[uint32(r)] {
			return fmt.Errorf("request id %d: %d private blocks, counted %d, %d table cells", rq.id, rpriv, rq.npriv, privCells[uint32(r)])
		}
		npriv += rpriv
	}
	if live != s.active || live != s.byID.len() {
		return fmt.Errorf("%d live requests, active %d, indexed %d", live, s.active, s.byID.len())
	}
	if npriv != s.blocks.npriv {
		return fmt.Errorf("%d private blocks, counted %d", npriv, s.blocks.npriv)
	}
	for k, n := range rc {
		v := s.blocks.heads.get(k.hash, s.blocks.vecs, s.reqs)
		var got uint32
		if v&privBit != 0 {
			if s.reqs[v&^privBit].slot == k.slot {
				got = 1
			}
		} else if v == 0 && stretchPriv[k] {
			got = 1
		} else if v != 0 {
			for _, p := range s.blocks.appendHolders(nil, v) {
				if p.slot == k.slot {
					got = p.rc
				}
			}
		}
		if got != n {
			return fmt.Errorf("hash %x on slot %d: rc %d, %d references", k.hash, k.slot, got, n)
		}
	}
	if len(rc) != s.blocks.live+s.blocks.npriv {
		return fmt.Errorf("%d referenced (hash, slot) pairs, %d live, %d private", len(rc), s.blocks.live, s.blocks.npriv)
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
	if len(s.touched) != 0 {
		return fmt.Errorf("%d ranks left touched", len(s.touched))
	}
	for i := range s.slots {
		h, sl := &s.hot[i], &s.slots[i]
		if !h.live {
			if activeBy[uint32(i)] != 0 {
				return fmt.Errorf("dead slot %d holds blocks", i)
			}
			continue
		}
		if s.slotOf[sl.key] != uint32(i) {
			return fmt.Errorf("slot %d key %v not indexed", i, sl.key)
		}
		if h.active != activeBy[uint32(i)] {
			return fmt.Errorf("slot %d (%v): active %d, index says %d", i, sl.key, h.active, activeBy[uint32(i)])
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
		if sum != h.pfSum || sl.pfTail != prev {
			return fmt.Errorf("slot %d: prefill sum %d, listed %d", i, h.pfSum, sum)
		}
		if h := sl.pfHead; h != 0 {
			if sl.headTok != s.reqs[h].pfTokens || sl.headDur != s.reqs[h].pfDur {
				return fmt.Errorf("slot %d: prefill anchor does not match the oldest request", i)
			}
		} else if sl.headTok != 0 || sl.headDur != 0 {
			return fmt.Errorf("slot %d: prefill anchor without requests", i)
		}
		if sc, want := s.scan[i], s.scanOf(uint32(i)); sc != want || sc.flags&fMarks != 0 {
			return fmt.Errorf("slot %d: scan mirror %+v, want %+v", i, sc, want)
		}
		if h.decaying != (sl.headDur > 0) {
			return fmt.Errorf("slot %d: decaying flag wrong", i)
		}
		w := &s.workers[h.worker]
		if !w.live || w.id != sl.key.Worker || h.multi != (len(w.ranks) > 1) {
			return fmt.Errorf("slot %d: worker link broken", i)
		}
		if h.usedBusy != (int64(min(sl.reported.UsedBlocks, math.MaxInt64)) > h.decLimit) {
			return fmt.Errorf("slot %d: usedBusy flag stale", i)
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
			if !s.hot[r].live || s.hot[r].worker != w {
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
	return s.checkHeap()
}

// checkRec verifies that holder e of vector v, at pos, has a live record
// that points back at it.
func (s *Scheduler) checkRec(v uint32, e hentry, pos uint32) error {
	if int(e.id) >= len(s.blocks.recs) {
		return fmt.Errorf("block vector %d: holder slot %d has record %d of %d", v, e.slot, e.id, len(s.blocks.recs))
	}
	r := s.blocks.recs[e.id]
	if r.rc == 0 || r.vec != v || r.pos != pos {
		return fmt.Errorf("block vector %d: holder slot %d at %d: record %+v", v, e.slot, pos, r)
	}
	return nil
}
