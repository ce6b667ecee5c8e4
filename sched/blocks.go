package sched

// blockIndex reference-counts active blocks per dp rank. One table maps a
// sequence hash to a doubly linked list of entries, one per rank that has the
// block active, each with its reference count (how many active requests on
// that rank include the block). Counting how many of a request's blocks each
// rank already has active is then one table lookup per block, visiting only
// the ranks that hold it, rather than a lookup per rank.
//
// Entries live in one pointer-free slice with a free list; index 0 is nil.
type blockIndex struct {
	heads u64map // hash → first entry
	ents  []blockEntry
	free  uint32 // free list through next
	live  int
}

type blockEntry struct {
	hash       uint64
	slot       uint32
	rc         uint32
	prev, next uint32
}

func (b *blockIndex) init() {
	b.ents = make([]blockEntry, 1, 64)
}

// acquire adds one reference to hash on slot and returns its entry and
// whether the block became active on the slot.
func (b *blockIndex) acquire(hash uint64, slot uint32) (uint32, bool) {
	head := b.heads.get(hash)
	for e := head; e != 0; e = b.ents[e].next {
		if b.ents[e].slot == slot {
			b.ents[e].rc++
			return e, false
		}
	}
	var e uint32
	if b.free != 0 {
		e = b.free
		b.free = b.ents[e].next
	} else {
		b.ents = append(b.ents, blockEntry{})
		e = uint32(len(b.ents) - 1)
	}
	b.ents[e] = blockEntry{hash: hash, slot: slot, rc: 1, next: head}
	if head != 0 {
		b.ents[head].prev = e
	}
	b.heads.set(hash, e)
	b.live++
	return e, true
}

// release drops one reference of entry e and reports whether the block left
// its slot.
func (b *blockIndex) release(e uint32) bool {
	ent := &b.ents[e]
	ent.rc--
	if ent.rc > 0 {
		return false
	}
	prev, next := ent.prev, ent.next
	if prev != 0 {
		b.ents[prev].next = next
	} else if next != 0 {
		b.heads.set(ent.hash, next)
	} else {
		b.heads.del(ent.hash)
	}
	if next != 0 {
		b.ents[next].prev = prev
	}
	*ent = blockEntry{next: b.free}
	b.free = e
	b.live--
	return true
}
