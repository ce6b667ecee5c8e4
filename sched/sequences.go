package sched

import (
	"math/bits"
	"slices"

	"github.com/kvroute/kvroute/wire"
)

// AddRequest books an active request on a dp rank, for a decision made
// elsewhere (another router replica, or a caller that chose the worker): its
// blocks become active there (reference-counted by hash) and the hint's
// effective prefill tokens join the rank's prefill load. isl and overlap are
// recorded as given; the scheduler does no token arithmetic on them. On a
// prefill rank it books a prefill leg (PrefillDone ends it), whose id may
// also have a decode booking.
// A duplicate id is ErrDuplicate, an unknown rank ErrUnknownWorker.
func (s *Scheduler) AddRequest(id uint64, worker wire.WorkerKey, blocks []wire.SeqHash, isl, overlap uint32, hint PrefillLoadHint, now int64) error {
	now = s.advance(now)
	if s.byID.get(id) != 0 || s.q.ids.get(id) != 0 {
		return ErrDuplicate
	}
	i, ok := s.slotOf[worker]
	if !ok {
		if s.pf != nil && s.pf.byID.get(id) == 0 {
			if _, ok := s.pf.slotOf[worker]; ok {
				return s.pf.AddRequest(id, worker, blocks, isl, overlap, hint, now)
			}
		}
		return ErrUnknownWorker
	}
	s.book(id, i, blocks, isl, overlap, hint, now, 0, 0, 0)
	s.checkInvariants()
	return nil
}

// book makes a request active on slot i. It does not allocate once the
// request table, its block lists and the block index have grown to the
// steady-state working set. The first cached blocks' vectors were looked up
// by countHeld in the same decision (s.vecCache), saving a lookup each, and
// slot i holds held of them. With held 0 each becomes active there without
// searching the block's holders. With deep (countHeld found the cached
// blocks nested and deep is slot i's record of its deepest held block), slot
// i holds exactly the first held blocks: their records are deep and its
// predecessors (holderRec.prev), and the rest are new there.
func (s *Scheduler) book(id uint64, i uint32, blocks []wire.SeqHash, isl, overlap uint32, hint PrefillLoadHint, now int64, cached, held int, deep uint32) {
	r := s.freeReqs
	if r != 0 {
		s.freeReqs = s.reqs[r].nextFree
	} else {
		if len(s.reqs) >= privBit { // private cells name the slot below privBit
			panic("sched: request slots exhausted")
		}
		s.reqs = append(s.reqs, request{})
		r = uint32(len(s.reqs) - 1)
	}
	rq := &s.reqs[r]
	holds, hashes := rq.holds[:0], rq.hashes[:0]
	*rq = request{id: id, slot: i, isl: isl, overlap: overlap, start: now, live: true, class: s.bookClass}
	s.running[s.bookClass.Rank()]++
	rq.hashes = hashes
	h, sl := &s.hot[i], &s.slots[i]
	reuse := s.cfg.AssumeKVReuse
	pred, prev := uint32(0), uint32(0)
	fresh := held == 0
	start := 0
	if deep != 0 && held <= cached {
		holds = s.chainHolds(holds, deep, held)
		if len(holds) == held {
			for _, id := range holds {
				s.blocks.recs[id].rc++
			}
			// Nesting means each later block followed the one before
			// already; the first may have followed another block elsewhere.
			s.blocks.notePred(&s.blocks.vecs[s.vecCache[0]], 0)
			start, fresh = held, true
			s.chained++
			pred, prev = s.vecCache[held-1], holds[held-1]
		}
	}
	// Three loops rather than one with a switch per block (cachegrind: the
	// switch and append cost more than the common blocks' bookkeeping).
	j := start
	if !reuse {
		for ; j < len(blocks); j++ {
			id, became := s.blocks.acquire(s.blocks.vec(s.rng.Uint64()), i, pred, prev)
			if became {
				h.active++
			}
			pred, prev = s.blocks.recs[id].vec, id
			holds = append(holds, id)
		}
	}
	// The active count is summed in a local and stored once: a store
	// through h per block cost more (cachegrind).
	added := int64(0)
	if fresh && s.cfg.ChainedHashes && j < cached {
		// Chained hashes repeat no block, so each is new on slot i:
		// acquireNew's search for an earlier reference is not needed.
		added = int64(cached - j)
		n0 := len(holds)
		holds = slices.Grow(holds, cached-j)[:n0+cached-j]
		for k, v := range s.vecCache[j:cached] {
			s.blocks.link(v, pred)
			id := s.blocks.add(v, i, prev)
			pred, prev = v, id
			holds[n0+k] = id
		}
		j = cached
	}
	for ; j < cached; j++ {
		v := s.vecCache[j]
		var id uint32
		var became bool
		if fresh {
			id, became = s.blocks.acquireNew(v, i, pred, prev)
		} else {
			id, became = s.blocks.acquire(v, i, pred, prev)
		}
		if became {
			added++
		}
		pred, prev = v, id
		holds = append(holds, id)
	}
	if j < len(blocks) && s.cfg.ChainedHashes {
		// Chained hashes: the rest is looked up by hash up to the first
		// block found nowhere. Every block after it is nowhere too (whoever
		// held one would hold its prefix), so it starts this request's
		// private stretch: the rest of the blocks, private, with one table
		// cell, its own (Config.ChainedHashes; promote).
		holds = slices.Grow(holds, len(blocks)-j)
		for ; j < len(blocks); j++ {
			k := uint64(blocks[j])
			found, cell := s.blocks.heads.find(k, s.blocks.vecs, s.reqs)
			if found&privBit != 0 { // another request's stretch
				found = s.promoteWalk(found&^privBit, k, blocks[j+1:])
			}
			if found == 0 {
				s.blocks.heads.put(cell, k, privBit|r)
				hashes = slices.Grow(hashes, len(blocks))[:len(blocks)]
				copy(hashes[j:], blocks[j:])
				rq.hashes = hashes
				n := len(blocks) - j
				rq.privLo, rq.npriv, rq.stretch = uint32(j), uint32(n), true
				holds = holds[:len(blocks)]
				clear(holds[j:])
				s.blocks.npriv += n
				added += int64(n)
				break
			}
			id, became := s.blocks.acquire(found, i, pred, prev)
			if became {
				added++
			}
			pred, prev = found, id
			holds = append(holds, id)
		}
	} else if j < len(blocks) {
		// The rest is looked up by hash. A block found nowhere becomes
		// private: its table cell names this request (privBit | r), and
		// it gets no vector or record until another lookup finds it
		// (promote). Most of a prompt's tail lives and dies so.
		hashes = slices.Grow(hashes, len(blocks))[:len(blocks)]
		rq.hashes = hashes
		holds = slices.Grow(holds, len(blocks)-j)
		for _, hash := range blocks[j:] {
			k := uint64(hash)
			found, cell := s.blocks.heads.find(k, s.blocks.vecs, s.reqs)
			if found&privBit != 0 {
				o := found &^ privBit
				found = s.promoteWalk(o, k, nil)
				if o == r { // a block repeated in this request
					// The previous block may have been promoted.
					if last := holds[len(holds)-1]; last != 0 {
						pred, prev = s.blocks.recs[last].vec, last
					}
				}
			}
			if found == 0 {
				s.blocks.heads.put(cell, k, privBit|r)
				if rq.npriv == 0 {
					rq.privLo = uint32(len(holds))
				}
				hashes[len(holds)] = hash
				holds = append(holds, 0)
				// A later block of this request may find this one:
				// privPos reads the request's holds up to its last
				// private block (the backing array is shared).
				rq.holds = holds
				rq.npriv++
				s.blocks.npriv++
				added++
				pred, prev = predMixed, 0
				continue
			}
			id, became := s.blocks.acquire(found, i, pred, prev)
			if became {
				added++
			}
			pred, prev = found, id
			holds = append(holds, id)
		}
	}
	h.active += added
	rq.holds = holds
	s.byID.set(id, r)

	// Per-slot list, for removal of the rank.
	rq.slNext = sl.reqHead
	if sl.reqHead != 0 {
		s.reqs[sl.reqHead].slPrev = r
	}
	sl.reqHead = r
	sl.nreq++

	// Expiry FIFO: now never decreases, so appending keeps it sorted.
	rq.exPrev = s.exTail
	if s.exTail != 0 {
		s.reqs[s.exTail].exNext = r
	} else {
		s.exHead = r
	}
	s.exTail = r
	s.active++

	if hint.InitialEffectiveTokens > 0 {
		rq.inPf = true
		rq.pfTokens = int64(hint.InitialEffectiveTokens)
		rq.pfDur = durNanos(hint.ExpectedDuration)
		h.pfSum += rq.pfTokens
		s.pfTotal += rq.pfTokens
		rq.pfPrev = sl.pfTail
		if sl.pfTail != 0 {
			s.reqs[sl.pfTail].pfNext = r
		} else {
			sl.pfHead = r
			s.setHead(i, r, now)
		}
		sl.pfTail = r
	}
	s.sync(i)
}

// chainHolds returns holds with the records of the first n cached blocks,
// following the links back from deep, or empty if a record is not the
// block's (which nesting rules out; the caller then searches).
func (s *Scheduler) chainHolds(holds []uint32, deep uint32, n int) []uint32 {
	holds = slices.Grow(holds[:0], n)[:n] // every entry is set below
	id := deep
	for k := n - 1; k >= 0; k-- {
		if id == 0 || s.blocks.recs[id].vec != s.vecCache[k] {
			return holds[:0]
		}
		holds[k] = id
		id = s.blocks.recs[id].prev
	}
	return holds
}

// setHead makes request r (0: none) the oldest in prefill on slot i, decaying
// from now.
func (s *Scheduler) setHead(i, r uint32, now int64) {
	sl := &s.slots[i]
	if r == 0 {
		sl.pfSince, sl.headTok, sl.headDur = 0, 0, 0
	} else {
		sl.pfSince, sl.headTok, sl.headDur = now, s.reqs[r].pfTokens, s.reqs[r].pfDur
	}
	s.hot[i].decaying = sl.headDur > 0
}

// MarkPrefillCompleted removes a request's prefill load (its first token has
// come back) and admits waiting requests if that freed a worker. If it was
// the oldest in prefill on its rank, the next oldest starts decaying now. It
// reports whether the request was active; an unknown id is not an error.
func (s *Scheduler) MarkPrefillCompleted(id uint64, now int64) bool {
	now = s.advance(now)
	r := s.byID.get(id)
	if r == 0 {
		return false
	}
	if s.reqs[r].inPf {
		s.endPrefill(r, now)
		s.drain(now)
	}
	s.checkInvariants()
	return true
}

// Free ends a request: its blocks and any prefill load leave its rank and
// waiting requests are admitted if that freed a worker. A waiting request is
// removed from the queue (Stats.Cancelled). A prefill booking still open
// (DecidePD) ends too. Idempotent: it reports whether the id was active or
// waiting.
func (s *Scheduler) Free(id uint64, now int64) bool {
	now = s.advance(now)
	if s.pf != nil && s.pf.byID.get(id) != 0 {
		s.pf.Free(id, now)
		if s.byID.get(id) == 0 && s.q.ids.get(id) == 0 {
			return true // its decode rank was removed
		}
	}
	if r := s.byID.get(id); r != 0 {
		s.freeReq(r, now)
		s.drain(now)
		s.checkInvariants()
		return true
	}
	s.shed.advance(now, s.q.len())
	if s.q.cancel(id) {
		s.stats.Cancelled++
		s.checkInvariants()
		return true
	}
	return false
}

// Tick force-frees the requests older than Config.Expiry (an EffectExpired
// each) and admits waiting requests that the passing of time (prefill decay)
// or the expiries made routable. Call it periodically.
func (s *Scheduler) Tick(now int64) {
	now = s.advance(now)
	if exp := int64(s.cfg.Expiry); exp > 0 {
		for s.exHead != 0 {
			r := s.exHead
			rq := &s.reqs[r]
			if now-rq.start <= exp {
				break
			}
			s.outbox = append(s.outbox, Effect{Kind: EffectExpired, ID: rq.id, Worker: s.slots[rq.slot].key, At: now})
			s.stats.Expirations++
			if s.pf != nil && s.pf.byID.get(rq.id) != 0 {
				s.pf.Free(rq.id, now)
			}
			s.freeReq(r, now)
		}
	}
	if s.cfg.SessionTTL > 0 {
		s.sess.expire(now, int64(s.cfg.SessionTTL))
	}
	s.drain(now)
	s.checkInvariants()
}

func (s *Scheduler) endPrefill(r uint32, now int64) {
	rq := &s.reqs[r]
	i := rq.slot
	sl := &s.slots[i]
	s.hot[i].pfSum -= rq.pfTokens
	s.pfTotal -= rq.pfTokens
	if rq.pfPrev != 0 {
		s.reqs[rq.pfPrev].pfNext = rq.pfNext
	} else {
		sl.pfHead = rq.pfNext
		s.setHead(i, sl.pfHead, now)
	}
	if rq.pfNext != 0 {
		s.reqs[rq.pfNext].pfPrev = rq.pfPrev
	} else {
		sl.pfTail = rq.pfPrev
	}
	rq.inPf = false
	rq.pfPrev, rq.pfNext = 0, 0
	s.sync(i)
}

func (s *Scheduler) freeReq(r uint32, now int64) {
	rq := &s.reqs[r]
	if rq.inPf {
		s.endPrefill(r, now)
	}
	s.running[rq.class.Rank()]--
	i := rq.slot
	h, sl := &s.hot[i], &s.slots[i]
	left := int64(0) // blocks that left the rank, stored once as in book
	if rq.npriv == 0 {
		for _, id := range rq.holds {
			if s.blocks.release(id) {
				left++
			}
		}
	} else if rq.stretch { // holds[privLo:] are private, one cell
		lo := rq.privLo
		recs := s.blocks.recs // release does not grow it
		for _, id := range rq.holds[:lo] {
			if rec := &recs[id]; rec.rc > 1 { // still held: release's first step, inline
				rec.rc--
			} else if s.blocks.release(id) {
				left++
			}
		}
		s.blocks.heads.del(uint64(rq.hashes[lo]), privBit|r)
		left += int64(rq.npriv)
		s.blocks.npriv -= int(rq.npriv)
	} else {
		left = int64(rq.npriv)
		for j, id := range rq.holds {
			if id == 0 {
				s.blocks.heads.del(uint64(rq.hashes[j]), privBit|r)
			} else if s.blocks.release(id) {
				left++
			}
		}
		s.blocks.npriv -= int(rq.npriv)
	}
	h.active -= left
	if rq.slPrev != 0 {
		s.reqs[rq.slPrev].slNext = rq.slNext
	} else {
		sl.reqHead = rq.slNext
	}
	if rq.slNext != 0 {
		s.reqs[rq.slNext].slPrev = rq.slPrev
	}
	sl.nreq--
	if rq.exPrev != 0 {
		s.reqs[rq.exPrev].exNext = rq.exNext
	} else {
		s.exHead = rq.exNext
	}
	if rq.exNext != 0 {
		s.reqs[rq.exNext].exPrev = rq.exPrev
	} else {
		s.exTail = rq.exPrev
	}
	s.sync(i)
	s.byID.del(rq.id)
	s.active--
	holds, hashes := rq.holds[:0], rq.hashes[:0]
	*rq = request{holds: holds, hashes: hashes, nextFree: s.freeReqs}
	s.freeReqs = r
}

// promote gives request r's private blocks up to position k (one of them)
// their vectors and holder records, exactly as booking them would have made
// them when they were found nowhere (book): one holder, r's slot, one
// reference; the predecessor is the request's previous block's vector (0 for
// the first: the private blocks before k are promoted too, so it exists),
// the record links to the request's previous record, and the table cells
// are repointed from the request to the vectors. A block booked right after
// a private one already has a mixed predecessor, as it would have had
// (link). Called when a lookup (countHeld, book) finds a private block, so
// every other path sees vectors only. The private blocks after k stay so: a
// family's shared prefix is promoted when the next request of the family
// finds it, its unshared tail is not.
func (s *Scheduler) promote(r uint32, k int) {
	rq := &s.reqs[r]
	b := &s.blocks
	slot := rq.slot
	n := uint32(0)
	for j := int(rq.privLo); j <= k; j++ {
		if rq.holds[j] != 0 {
			continue
		}
		pred, prev := uint32(0), uint32(0)
		if j > 0 {
			prev = rq.holds[j-1]
			pred = b.recs[prev].vec
		}
		hash := uint64(rq.hashes[j])
		v, nid := b.newSoleVec(hash, slot, pred, prev)
		if !rq.stretch || j == int(rq.privLo) {
			b.heads.repoint(hash, privBit|r, v)
		} else { // a stretch's block after its first has no cell
			b.heads.insert(hash, v)
		}
		rq.holds[j] = nid
		n++
	}
	b.npriv -= int(n)
	rq.npriv -= n
	if rq.npriv > 0 {
		j := k + 1
		for rq.holds[j] != 0 {
			j++
		}
		rq.privLo = uint32(j)
		if rq.stretch { // the stretch's new first block
			b.heads.insert(uint64(rq.hashes[j]), privBit|r)
		}
	}
	s.promotions++
}

// ceilMulDiv returns ⌈a·b / c⌉ for a, b ≥ 0, b < c, without overflow.
func ceilMulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, rem := bits.Div64(hi, lo, uint64(c))
	if rem != 0 {
		q++
	}
	return int64(q)
}
