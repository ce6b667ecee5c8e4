package sched

// blockIndex reference-counts active blocks per dp rank. One table maps a
// sequence hash to its holders: (slot, reference count) pairs, one per rank
// that has the block active, the count being how many of its active requests
// include the block. Counting how many of a request's blocks each rank
// already has active is then one table lookup per block and a scan of that
// block's holders, instead of a lookup per rank.
//
// Most blocks have one holder, kept inline in the vector header; further
// holders live in 64-byte chunks of seven, linked in a list, all from one
// pointer-free arena with a single free list, so the arena never fragments
// and a steady workload does not allocate. Order among holders is arbitrary
// (removal moves the last holder into the hole).
//
// Finding a slot among a block's holders (booking, freeing, and the heap
// path's per-rank held count) looks at the inline holder and the first
// chunk; holders beyond those (a block active on more than eight ranks, e.g.
// a system prompt shared fleet-wide) are also indexed by (vector, slot) in
// pairs, which holds their chunk and offset, so finding one is a probe
// instead of a walk over every holder.
type blockIndex struct {
	heads    u64map // hash → vector id
	pairs    u64map // pairKey(vector, slot) → chunk<<3 | offset + 1, holders 8..n-1
	vecs     []blockVec
	freeVecs []uint32
	chunks   []holderChunk // [0] unused
	free     uint32        // free chunk list through next
	live     int           // (hash, slot) pairs
}

type holder struct {
	slot uint32
	rc   uint32
}

type blockVec struct {
	hash       uint64
	first      holder // holder 0
	n          uint32 // holders
	head, tail uint32 // chunks with holders 1..n-1
	// pred is the vector that preceded this one in every booking of it
	// since it became active (0: it was every booking's first block),
	// or predMixed once two bookings disagreed. While it is not mixed,
	// every rank holding this block holds pred too (the booking that
	// holds it here also holds pred), so the holders of the two are
	// nested, and equal when their counts are.
	pred uint32
}

const predMixed = ^uint32(0)

const chunkHolders = 7

// holderChunk is one cache line: seven holders and the list links.
type holderChunk struct {
	hs         [chunkHolders]holder
	prev, next uint32
}

func (b *blockIndex) init() {
	b.vecs = make([]blockVec, 1, 64)
	b.chunks = make([]holderChunk, 1, 16)
}

func pairKey(v, slot uint32) uint64 { return uint64(v)<<32 | uint64(slot) }

// appendHolders appends the holders of vector v to dst.
func (b *blockIndex) appendHolders(dst []holder, v uint32) []holder {
	vec := &b.vecs[v]
	if vec.n == 0 {
		return dst
	}
	dst = append(dst, vec.first)
	left := vec.n - 1
	for c := vec.head; c != 0 && left > 0; c = b.chunks[c].next {
		k := min(left, chunkHolders)
		dst = append(dst, b.chunks[c].hs[:k]...)
		left -= k
	}
	return dst
}

// vec returns the vector of hash, creating an empty one if absent.
func (b *blockIndex) vec(hash uint64) uint32 {
	ref, ok := b.heads.ref(hash)
	if ok {
		return *ref
	}
	var v uint32
	if n := len(b.freeVecs); n > 0 {
		v = b.freeVecs[n-1]
		b.freeVecs = b.freeVecs[:n-1]
	} else {
		b.vecs = append(b.vecs, blockVec{})
		v = uint32(len(b.vecs) - 1)
	}
	b.vecs[v] = blockVec{hash: hash}
	*ref = v
	return v
}

// locate finds slot among vector v's holders: c == 0 for the inline holder,
// else chunk c at offset o.
func (b *blockIndex) locate(v uint32, vec *blockVec, slot uint32) (c, o uint32, ok bool) {
	if vec.n == 0 {
		return 0, 0, false
	}
	if vec.first.slot == slot {
		return 0, 0, true
	}
	if vec.n == 1 {
		return 0, 0, false
	}
	hs := &b.chunks[vec.head].hs
	for j := range min(vec.n-1, chunkHolders) {
		if hs[j].slot == slot {
			return vec.head, j, true
		}
	}
	if vec.n > 1+chunkHolders {
		if x := b.pairs.get(pairKey(v, slot)); x != 0 {
			return (x - 1) >> 3, (x - 1) & 7, true
		}
	}
	return 0, 0, false
}

// holds reports whether slot has vector v active.
func (b *blockIndex) holds(v, slot uint32) bool {
	vec := &b.vecs[v]
	if vec.first.slot == slot && vec.n > 0 {
		return true
	}
	_, _, ok := b.locate(v, vec, slot)
	return ok
}

func (b *blockIndex) holderAt(vec *blockVec, c, o uint32) *holder {
	if c == 0 {
		return &vec.first
	}
	return &b.chunks[c].hs[o]
}

// acquire adds one reference to vector v (from vec or a lookup made earlier
// in the same call) on slot, booked right after vector pred (0: first block
// of its request), and reports whether the block became active on the slot.
func (b *blockIndex) acquire(v, slot, pred uint32) bool {
	vec := &b.vecs[v]
	if vec.n == 0 {
		vec.pred = pred
	} else if vec.pred != pred {
		vec.pred = predMixed
	}
	if c, o, ok := b.locate(v, vec, slot); ok {
		b.holderAt(vec, c, o).rc++
		return false
	}
	b.add(v, slot)
	return true
}

// acquireNew is acquire for a slot that held vector v before the booking
// in progress: if it holds v now, this booking added it (a block repeated in
// the request), as the last holder, since holders are only appended during
// a booking.
func (b *blockIndex) acquireNew(v, slot, pred uint32) bool {
	vec := &b.vecs[v]
	if vec.n == 0 {
		vec.pred = pred
	} else {
		if vec.pred != pred {
			vec.pred = predMixed
		}
		last := &vec.first
		if vec.n > 1 {
			last = &b.chunks[vec.tail].hs[(vec.n-2)%chunkHolders]
		}
		if last.slot == slot {
			last.rc++
			return false
		}
	}
	b.add(v, slot)
	return true
}

// add appends slot, with one reference, to vector v's holders.
func (b *blockIndex) add(v, slot uint32) {
	vec := &b.vecs[v]
	k := vec.n
	if k > 0 && (k-1)%chunkHolders == 0 {
		c := b.free
		if c != 0 {
			b.free = b.chunks[c].next
		} else {
			b.chunks = append(b.chunks, holderChunk{})
			c = uint32(len(b.chunks) - 1)
		}
		vec = &b.vecs[v]
		b.chunks[c] = holderChunk{prev: vec.tail}
		if vec.tail != 0 {
			b.chunks[vec.tail].next = c
		} else {
			vec.head = c
		}
		vec.tail = c
	}
	if k == 0 {
		vec.first = holder{slot: slot, rc: 1}
	} else {
		o := (k - 1) % chunkHolders
		b.chunks[vec.tail].hs[o] = holder{slot: slot, rc: 1}
		if k > chunkHolders {
			b.pairs.set(pairKey(v, slot), vec.tail<<3|o+1)
		}
	}
	vec.n++
	b.live++
}

// release drops one reference of vector v on slot and reports whether the
// block left the slot. The reference must exist.
func (b *blockIndex) release(v, slot uint32) bool {
	vec := &b.vecs[v]
	c, o, ok := b.locate(v, vec, slot)
	if !ok {
		panic("sched: release of a block reference that does not exist")
	}
	h := b.holderAt(vec, c, o)
	h.rc--
	if h.rc > 0 {
		return false
	}
	// Holders in chunks after the first are in pairs.
	if c != 0 && c != vec.head {
		b.pairs.del(pairKey(v, slot))
	}
	last := vec.n - 1
	if last == 0 {
		vec.first = holder{}
	} else {
		tc := vec.tail
		tail := &b.chunks[tc]
		j := (last - 1) % chunkHolders
		if tc != c || j != o { // move the last holder into the hole
			moved := tail.hs[j]
			*h = moved
			if tc != vec.head {
				b.pairs.del(pairKey(v, moved.slot))
			}
			if c != 0 && c != vec.head {
				b.pairs.set(pairKey(v, moved.slot), c<<3|o+1)
			}
		}
		tail.hs[j] = holder{}
		if j == 0 { // the tail chunk emptied
			vec.tail = tail.prev
			if vec.tail != 0 {
				b.chunks[vec.tail].next = 0
			} else {
				vec.head = 0
			}
			b.chunks[tc] = holderChunk{next: b.free}
			b.free = tc
		}
	}
	vec.n--
	b.live--
	if vec.n == 0 {
		b.heads.del(vec.hash)
		*vec = blockVec{}
		b.freeVecs = append(b.freeVecs, v)
	}
	return true
}
