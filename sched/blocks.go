package sched

import "slices"

// blockIndex reference-counts active blocks per dp rank. One table maps a
// sequence hash to its vector: the list of its holders, one per rank that
// has the block active, each with a holder record (its reference count, how
// many of the rank's active requests include the block). Counting how many
// of a request's blocks each rank already has active is then one table
// lookup per block and a scan of that block's holders, instead of a lookup
// per rank.
//
// Most blocks have one holder, kept inline in the vector header; further
// holders live in 64-byte chunks of seven, linked in a list, all from one
// pointer-free arena with a single free list, so the arena never fragments
// and a steady workload does not allocate. Order among holders is arbitrary
// (removal moves the last holder into the hole).
//
// A booking keeps the ids of the holder records it referenced, and a record
// knows its vector and its place in the list, so freeing a request touches
// each of its holders directly, whatever the block's holder count. A record
// also links to the record of the same rank's previous block in the booking
// that added it: while the block's predecessor is consistent (blockVec.pred)
// that record is alive and the same for every booking, so booking a rank
// that already holds a prefix of a chained request follows those links from
// the deepest one (countHeld notes it) instead of searching each block's
// holders. Only other cases (arbitrary hash lists, AddRequest) search the
// holder list (locate), as all bookings did before.
type blockIndex struct {
	heads    vecTable // hash → vector id
	vecs     []blockVec
	freeVecs uint32        // free vector list through child
	nfree    int           // free vectors
	recs     []holderRec   // [0] unused
	freeRecs uint32        // free record list through vec
	chunks   []holderChunk // [0] unused
	free     uint32        // free chunk list through next
	live     int           // (hash, slot) pairs with a record
	npriv    int           // private blocks (Scheduler.promote), also (hash, slot) pairs
}

// hentry is one holder in a vector's list: the slot and its record.
type hentry struct {
	slot uint32
	id   uint32
}

// holderRec is a (block, slot) pair's reference count and place.
type holderRec struct {
	vec  uint32
	rc   uint32
	pos  uint32 // 0: the vector's inline holder; else chunk<<3 | offset
	prev uint32 // the record before it in the booking that added it (0: first)
}

// holder is a (slot, reference count) pair, as appendHolders lists them.
type holder struct {
	slot uint32
	rc   uint32
}

type blockVec struct {
	hash       uint64
	first      hentry // holder 0
	n          uint32 // holders
	head, tail uint32 // chunks with holders 1..n-1
	// pred is the vector that preceded this one in every booking of it
	// since it became active (0: it was every booking's first block),
	// or predMixed once two bookings disagreed. While it is not mixed,
	// every rank holding this block holds pred too (the booking that
	// holds it here also holds pred), so the holders of the two are
	// nested, and equal when their counts are.
	pred uint32
	// child is the vector booked right after this one most recently: a
	// hint for countHeld's walk, checked against the next block's hash.
	child uint32
}

const predMixed = ^uint32(0)

const chunkHolders = 7

// holderChunk is one cache line: seven holders and the list links.
type holderChunk struct {
	hs         [chunkHolders]hentry
	prev, next uint32
}

func (b *blockIndex) init() {
	b.vecs = make([]blockVec, 1, 64)
	b.chunks = make([]holderChunk, 1, 16)
	b.recs = make([]holderRec, 1, 64)
	b.heads.grow() // cells for probe
}

// appendHolders appends the holders of vector v to dst.
func (b *blockIndex) appendHolders(dst []holder, v uint32) []holder {
	vec := &b.vecs[v]
	if vec.n == 0 {
		return dst
	}
	dst = append(dst, holder{vec.first.slot, b.recs[vec.first.id].rc})
	left := vec.n - 1
	for c := vec.head; c != 0 && left > 0; c = b.chunks[c].next {
		k := min(left, chunkHolders)
		for _, e := range b.chunks[c].hs[:k] {
			dst = append(dst, holder{e.slot, b.recs[e.id].rc})
		}
		left -= k
	}
	return dst
}

// vec returns the vector of hash, creating an empty one if absent.
func (b *blockIndex) vec(hash uint64) uint32 {
	found, cell := b.heads.find(hash, b.vecs, nil)
	if found != 0 {
		return found
	}
	v := b.newVec()
	b.vecs[v] = blockVec{hash: hash}
	b.heads.put(cell, hash, v)
	return v
}

// locate returns the record of slot among vector v's holders.
func (b *blockIndex) locate(vec *blockVec, slot uint32) (uint32, bool) {
	if vec.n == 0 {
		return 0, false
	}
	if vec.first.slot == slot {
		return vec.first.id, true
	}
	left := vec.n - 1
	for c := vec.head; left > 0; c = b.chunks[c].next {
		k := min(left, chunkHolders)
		for _, e := range b.chunks[c].hs[:k] {
			if e.slot == slot {
				return e.id, true
			}
		}
		left -= k
	}
	return 0, false
}

// holds reports whether slot has vector v active.
func (b *blockIndex) holds(v, slot uint32) bool {
	_, ok := b.locate(&b.vecs[v], slot)
	return ok
}

func (b *blockIndex) notePred(vec *blockVec, pred uint32) {
	if vec.n == 0 {
		vec.pred = pred
	} else if vec.pred != pred {
		vec.pred = predMixed
	}
}

// link notes v as the child of pred (0: none) and its predecessor. pred is
// predMixed after a private block (Scheduler.promote): that block's vector
// would be new, so v, already live, gets a mixed predecessor, as it would.
func (b *blockIndex) link(v, pred uint32) {
	b.notePred(&b.vecs[v], pred)
	if pred+1 > 1 { // neither 0 nor predMixed
		b.vecs[pred].child = v
	}
}

// acquire adds one reference to vector v (from vec or a lookup made earlier
// in the same call) on slot, booked right after vector pred (0: first block
// of its request) whose record on slot is prev. It returns the holder record
// and whether the block became active on the slot.
func (b *blockIndex) acquire(v, slot, pred, prev uint32) (uint32, bool) {
	b.link(v, pred)
	vec := &b.vecs[v]
	if id, ok := b.locate(vec, slot); ok {
		b.recs[id].rc++
		return id, false
	}
	return b.add(v, slot, prev), true
}

// acquireNew is acquire for a slot that held vector v before the booking
// in progress: if it holds v now, this booking added it (a block repeated in
// the request), as the last holder, since holders are only appended during
// a booking.
func (b *blockIndex) acquireNew(v, slot, pred, prev uint32) (uint32, bool) {
	b.link(v, pred)
	vec := &b.vecs[v]
	if vec.n > 0 {
		last := vec.first
		if vec.n > 1 {
			last = b.chunks[vec.tail].hs[(vec.n-2)%chunkHolders]
		}
		if last.slot == slot {
			b.recs[last.id].rc++
			return last.id, false
		}
	}
	return b.add(v, slot, prev), true
}

// acquireHash and vec know no private blocks (Scheduler.promote): vec
// serves bookings without KV reuse, which make none, and acquireHash the
// index's own tests; Scheduler.book looks hashes up itself.
//
// acquireHash is vec then acquire, for a block looked up by hash: when the
// hash is new, the vector is created with slot as its only holder directly
// (no holder search, no chunk), the common case of a prompt's unshared tail.
func (b *blockIndex) acquireHash(hash uint64, slot, pred, prev uint32) (v, id uint32, became bool) {
	found, cell := b.heads.find(hash, b.vecs, nil)
	if found != 0 {
		id, became = b.acquire(found, slot, pred, prev)
		return found, id, became
	}
	v, id = b.newSoleVec(hash, slot, pred, prev)
	b.heads.put(cell, hash, v)
	return v, id, true
}

// newSoleVec creates the vector of hash with slot as its only holder (a
// new record linked to prev, the rank's record of the previous block) and
// pred as its predecessor; the caller puts it in the hash table.
func (b *blockIndex) newSoleVec(hash uint64, slot, pred, prev uint32) (v, id uint32) {
	v = b.newVec()
	id = b.newRec()
	rec := &b.recs[id]
	rec.vec, rec.rc, rec.pos, rec.prev = v, 1, 0, prev
	// Field by field: a composite literal is built and copied (measured
	// with cachegrind: 25 instructions against 8).
	vec := &b.vecs[v]
	vec.hash, vec.first, vec.n, vec.head, vec.tail, vec.pred, vec.child = hash, hentry{slot, id}, 1, 0, 0, pred, 0
	if pred != 0 {
		b.vecs[pred].child = v
	}
	b.live++
	return v, id
}

// newVec takes a vector from the free list or the arena; the caller sets
// every field.
func (b *blockIndex) newVec() uint32 {
	if v := b.freeVecs; v != 0 {
		b.freeVecs = b.vecs[v].child
		b.nfree--
		return v
	}
	if len(b.vecs) >= privBit {
		panic("sched: block vector ids exhausted")
	}
	b.vecs = append(b.vecs, blockVec{})
	return uint32(len(b.vecs) - 1)
}

// newRec takes a holder record from the free list or the arena.
func (b *blockIndex) newRec() uint32 {
	id := b.freeRecs
	if id != 0 {
		b.freeRecs = b.recs[id].vec
		return id
	}
	// Double the arena: the count of holders drifts, and append's smaller
	// steps for large slices would reallocate at each new high-water mark
	// of a steady workload.
	if len(b.recs) == cap(b.recs) {
		b.recs = slices.Grow(b.recs, len(b.recs))
	}
	b.recs = append(b.recs, holderRec{})
	return uint32(len(b.recs) - 1)
}

// add appends slot, with a new record of one reference, to vector v's
// holders and returns the record; prev is the booking's previous record.
// Fields are set one by one and a new chunk's holders are not cleared (only
// the first n of a vector's holders are read): composite literals are built
// and copied (cachegrind).
func (b *blockIndex) add(v, slot, prev uint32) uint32 {
	id := b.newRec()
	vec := &b.vecs[v]
	k := vec.n
	pos := uint32(0)
	if k == 0 {
		vec.first = hentry{slot, id}
	} else {
		if (k-1)%chunkHolders == 0 {
			c := b.free
			if c != 0 {
				b.free = b.chunks[c].next
			} else {
				b.chunks = append(b.chunks, holderChunk{})
				c = uint32(len(b.chunks) - 1)
			}
			ch := &b.chunks[c]
			ch.prev, ch.next = vec.tail, 0
			if vec.tail != 0 {
				b.chunks[vec.tail].next = c
			} else {
				vec.head = c
			}
			vec.tail = c
		}
		o := (k - 1) % chunkHolders
		b.chunks[vec.tail].hs[o] = hentry{slot, id}
		pos = vec.tail<<3 | o
	}
	rec := &b.recs[id]
	rec.vec, rec.rc, rec.pos, rec.prev = v, 1, pos, prev
	vec.n++
	b.live++
	return id
}

func (b *blockIndex) entryAt(vec *blockVec, pos uint32) *hentry {
	if pos == 0 {
		return &vec.first
	}
	return &b.chunks[pos>>3].hs[pos&7]
}

// release drops one reference of holder record id and reports whether the
// block left the slot.
func (b *blockIndex) release(id uint32) bool {
	rec := &b.recs[id]
	rec.rc--
	if rec.rc > 0 {
		return false
	}
	v, pos := rec.vec, rec.pos
	vec := &b.vecs[v]
	hole := b.entryAt(vec, pos)
	rec.vec = b.freeRecs // a free record: rc 0, linked through vec
	b.freeRecs = id
	last := vec.n - 1
	if last > 0 {
		tc := vec.tail
		tail := &b.chunks[tc]
		j := (last - 1) % chunkHolders
		if lp := tc<<3 | j; lp != pos { // move the last holder into the hole
			moved := tail.hs[j]
			*hole = moved
			b.recs[moved.id].pos = pos
		}
		if j == 0 { // the tail chunk emptied: free it (add sets its links)
			vec.tail = tail.prev
			if vec.tail != 0 {
				b.chunks[vec.tail].next = 0
			} else {
				vec.head = 0
			}
			tail.next = b.free
			b.free = tc
		}
	}
	vec.n--
	b.live--
	if vec.n == 0 {
		// The other fields are left as they are: every allocation sets
		// them all, and a dead vector (n 0) is never read as live (the
		// child hints check n).
		b.heads.del(vec.hash, v)
		vec.child = b.freeVecs
		b.freeVecs = v
		b.nfree++
	}
	return true
}
