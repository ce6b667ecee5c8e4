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
type blockIndex struct {
	heads    u64map // hash → vector id
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
}

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

// at returns holder k (0 ≤ k < n) of vec.
func (b *blockIndex) at(vec *blockVec, k uint32) *holder {
	if k == 0 {
		return &vec.first
	}
	c := vec.head
	for k--; k >= chunkHolders; k -= chunkHolders {
		c = b.chunks[c].next
	}
	return &b.chunks[c].hs[k]
}

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

// find returns the index of slot among vec's holders, or vec.n.
func (b *blockIndex) find(vec *blockVec, slot uint32) uint32 {
	if vec.n == 0 {
		return 0
	}
	if vec.first.slot == slot {
		return 0
	}
	k := uint32(1)
	for c := vec.head; c != 0 && k < vec.n; c = b.chunks[c].next {
		hs := &b.chunks[c].hs
		for j := 0; j < chunkHolders && k < vec.n; j++ {
			if hs[j].slot == slot {
				return k
			}
			k++
		}
	}
	return vec.n
}

// acquire adds one reference to vector v (from vec or a lookup made earlier
// in the same call) on slot, and reports whether the block became active on
// the slot.
func (b *blockIndex) acquire(v, slot uint32) bool {
	vec := &b.vecs[v]
	if k := b.find(vec, slot); k < vec.n {
		b.at(vec, k).rc++
		return false
	}
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
		b.chunks[vec.tail].hs[(k-1)%chunkHolders] = holder{slot: slot, rc: 1}
	}
	vec.n++
	b.live++
	return true
}

// release drops one reference of vector v on slot and reports whether the
// block left the slot. The reference must exist.
func (b *blockIndex) release(v, slot uint32) bool {
	vec := &b.vecs[v]
	k := b.find(vec, slot)
	if k == vec.n {
		panic("sched: release of a block reference that does not exist")
	}
	h := b.at(vec, k)
	h.rc--
	if h.rc > 0 {
		return false
	}
	last := vec.n - 1
	if last == 0 {
		vec.first = holder{}
	} else {
		tail := &b.chunks[vec.tail]
		j := (last - 1) % chunkHolders
		*h = tail.hs[j]
		tail.hs[j] = holder{}
		if j == 0 { // the tail chunk emptied
			c := vec.tail
			vec.tail = tail.prev
			if vec.tail != 0 {
				b.chunks[vec.tail].next = 0
			} else {
				vec.head = 0
			}
			b.chunks[c] = holderChunk{next: b.free}
			b.free = c
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
