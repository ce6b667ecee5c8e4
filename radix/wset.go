package radix

import (
	"slices"
	"unsafe"

	"github.com/kvroute/kvroute/wire"
)

// Worker sets (issue 17 §1). A node's set is a sorted array of members, each
// one uint32: the slot shifted left by memberShift, the slot's tier mask
// (tierBit bits) in the low bits. The arrays live in a per-tree pool of
// power-of-two size classes like the runs (setStore); the node-parallel
// setRef names a node's chunk and member count. A set costs what it holds:
// 4 bytes a member in a chunk at most 4× its size, plus 12 bytes a node,
// whatever the number of worker keys in the tree (a bitset over dense slots
// cost 8 bytes a node per 64 worker keys: 880 bytes a node at 7,000).
//
// The tier mask inside the member replaces the four per-tier bitsets: a
// device-only tree has every mask devBit, so comparing two sets' arrays
// compares both their workers and their tiers (the canonical form), and a
// copy copies both.

// setRef is node x's worker set: n members sorted by slot in chunk ref of
// class cls of the set pool; n == 0: empty, no chunk; n == 1: the member
// itself in ref, no chunk (most nodes of a large fleet have one holder, and
// Match then reads no second cache line).
type setRef struct {
	ref [1]uint32
	n   uint32
	cls uint8
}

const (
	memberShift = 4
	maskBits    = 1<<memberShift - 1
	// maxSlots bounds the slots a member can name (2^28 worker keys).
	maxSlots = 1 << (32 - memberShift)
	setBytes = int64(unsafe.Sizeof(setRef{}))
)

const (
	hostBit = 1 << wire.TierHost
	// active marks a Match level a member has not left yet (matchTiered).
	active = ^uint32(0)
)

// setStore keeps the members of every set in power-of-two size classes:
// class c holds chunks of 2^c members at [k<<c, (k+1)<<c) of m[c]. Free
// chunks are linked through m[c][k<<c] (1 + next, 0 = end).
type setStore struct {
	m    [numClasses][]uint32
	free [numClasses]uint32
	live [numClasses]uint32
}

func (p *setStore) bytes() int64 {
	var b int64
	for c := range numClasses {
		b += int64(cap(p.m[c])) * 4
	}
	return b
}

// allocSetChunk returns a chunk of class c; the caller writes its members
// (through wPool).
func (t *Tree) allocSetChunk(c uint8) uint32 {
	p := &t.pool
	p.live[c]++
	if f := p.free[c]; f != 0 {
		k := f - 1
		p.free[c] = p.m[c][int(k)<<c]
		return k
	}
	size := 1 << c
	l := len(p.m[c])
	p.m[c] = slices.Grow(p.m[c], size)[:l+size]
	return uint32(l >> c)
}

func (t *Tree) releaseSetChunk(c uint8, k uint32) {
	p := &t.pool
	p.live[c]--
	i := int(k) << c
	t.wPool(c, i, i+1)
	p.m[c][i] = p.free[c]
	p.free[c] = k + 1
}

// wSet returns &t.sets[x] for writing.
func (t *Tree) wSet(x uint32) *setRef {
	if t.cw != nil {
		t.cw.sets.Touch(t.sets, int(x))
	}
	return &t.sets[x]
}

// wPool precedes writes to elements [lo, hi) of the set pool's class c.
func (t *Tree) wPool(c uint8, lo, hi int) {
	if t.cw != nil {
		t.cw.pool[c].TouchRange(t.pool.m[c], lo, hi)
	}
}

// members returns x's set (sorted members; valid until the next mutation).
func (t *Tree) members(x uint32) []uint32 {
	r := &t.sets[x]
	if r.n <= 1 {
		return r.ref[:r.n]
	}
	base := int(r.ref[0]) << r.cls
	end := base + int(r.n)
	return t.pool.m[r.cls][base:end:end]
}

// find returns where slot s is or would go in x's set, and whether it is
// there.
func (t *Tree) find(x, s uint32) (int, bool) {
	m := t.members(x)
	key := s << memberShift
	lo, hi := 0, len(m)
	for lo < hi {
		h := int(uint(lo+hi) >> 1)
		if m[h] < key {
			lo = h + 1
		} else {
			hi = h
		}
	}
	return lo, lo < len(m) && m[lo]>>memberShift == s
}

func (t *Tree) has(x, s uint32) bool {
	_, ok := t.find(x, s)
	return ok
}

// maskOf returns the tiers in which slot s holds x's run (0 if it does not
// hold it).
func (t *Tree) maskOf(x, s uint32) uint8 {
	i, ok := t.find(x, s)
	if !ok {
		return 0
	}
	return uint8(t.members(x)[i] & maskBits)
}

// setBit adds slot s to x's set with the tiers of tb (a tierBit mask), or
// makes its tiers tb if it is there.
func (t *Tree) setBit(x, s uint32, tb uint8) {
	if s >= maxSlots {
		panic("radix: more than 2^28 worker slots")
	}
	i, ok := t.find(x, s)
	if ok {
		t.setMaskAt(x, i, tb)
		return
	}
	t.insertMember(x, i, s<<memberShift|uint32(tb))
}

// setTiers makes slot s's tier mask at x exactly m (s must hold x; m ≠ 0).
func (t *Tree) setTiers(x, s uint32, m uint8) {
	if i, ok := t.find(x, s); ok {
		t.setMaskAt(x, i, m)
	}
}

func (t *Tree) setMaskAt(x uint32, i int, m uint8) {
	r := &t.sets[x]
	if r.n == 1 {
		r = t.wSet(x)
		r.ref[0] = r.ref[0]&^maskBits | uint32(m)
		return
	}
	j := int(r.ref[0])<<r.cls + i
	t.wPool(r.cls, j, j+1)
	e := &t.pool.m[r.cls][j]
	*e = *e&^maskBits | uint32(m)
}

// clearBit removes slot s from x's set, in every tier.
func (t *Tree) clearBit(x, s uint32) {
	if i, ok := t.find(x, s); ok {
		t.removeMember(x, i)
	}
}

// insertMember inserts member e at index i of x's set, moving the set to a
// larger chunk when its chunk is full.
func (t *Tree) insertMember(x uint32, i int, e uint32) {
	r := t.sets[x]
	n := int(r.n)
	if n == 0 {
		*t.wSet(x) = setRef{ref: [1]uint32{e}, n: 1}
		return
	}
	if n == 1 || n == 1<<r.cls {
		c := classFor(n + 1)
		k := t.allocSetChunk(c)
		old := t.members(x) // after the allocation, which may move class c
		base := int(k) << c
		t.wPool(c, base, base+n+1)
		dst := t.pool.m[c][base : base+n+1]
		copy(dst, old[:i])
		dst[i] = e
		copy(dst[i+1:], old[i:])
		if n > 1 {
			t.releaseSetChunk(r.cls, r.ref[0])
		}
		*t.wSet(x) = setRef{ref: [1]uint32{k}, n: uint32(n + 1), cls: c}
		return
	}
	base := int(r.ref[0]) << r.cls
	t.wPool(r.cls, base+i, base+n+1)
	m := t.pool.m[r.cls][base : base+n+1]
	copy(m[i+1:], m[i:n])
	m[i] = e
	t.wSet(x).n++
}

// removeMember removes member i of x's set, moving the set to a smaller
// chunk when it fills a quarter or less of its chunk.
func (t *Tree) removeMember(x uint32, i int) {
	r := t.sets[x]
	n := int(r.n)
	if n == 1 {
		*t.wSet(x) = setRef{}
		return
	}
	if n == 2 {
		e := t.members(x)[1-i]
		t.releaseSetChunk(r.cls, r.ref[0])
		*t.wSet(x) = setRef{ref: [1]uint32{e}, n: 1}
		return
	}
	if r.cls > 0 && (n-1)*4 <= 1<<r.cls {
		c := classFor(n - 1)
		k := t.allocSetChunk(c)
		old := t.members(x)
		base := int(k) << c
		t.wPool(c, base, base+n-1)
		dst := t.pool.m[c][base : base+n-1]
		copy(dst, old[:i])
		copy(dst[i:], old[i+1:])
		t.releaseSetChunk(r.cls, r.ref[0])
		*t.wSet(x) = setRef{ref: [1]uint32{k}, n: uint32(n - 1), cls: c}
		return
	}
	base := int(r.ref[0]) << r.cls
	t.wPool(r.cls, base+i, base+n)
	m := t.pool.m[r.cls][base : base+n]
	copy(m[i:], m[i+1:])
	t.wSet(x).n--
}

// enableTiers marks the tree tiered: every member's mask is devBit so far,
// which is exactly "everything held so far is on the device".
func (t *Tree) enableTiers() {
	t.tiered = true
}

func (t *Tree) emptySet(x uint32) bool { return t.sets[x].n == 0 }

// sameSet reports whether x and y have the same workers in the same tiers.
func (t *Tree) sameSet(x, y uint32) bool {
	return t.sets[x].n == t.sets[y].n && slices.Equal(t.members(x), t.members(y))
}

// copySet gives y (whose set is empty) x's set.
func (t *Tree) copySet(y, x uint32) {
	t.clearSet(y)
	n := int(t.sets[x].n)
	if n <= 1 {
		*t.wSet(y) = t.sets[x]
		return
	}
	c := classFor(n)
	k := t.allocSetChunk(c)
	base := int(k) << c
	t.wPool(c, base, base+n)
	copy(t.pool.m[c][base:base+n], t.members(x))
	*t.wSet(y) = setRef{ref: [1]uint32{k}, n: uint32(n), cls: c}
}

// clearSet empties x's set.
func (t *Tree) clearSet(x uint32) {
	if r := t.sets[x]; r.n > 1 {
		t.releaseSetChunk(r.cls, r.ref[0])
		*t.wSet(x) = setRef{}
	} else if r.n == 1 {
		*t.wSet(x) = setRef{}
	}
}

// onlyMember reports whether slot s is the only worker in x's set.
func (t *Tree) onlyMember(x, s uint32) bool {
	return t.sets[x].n == 1 && t.members(x)[0]>>memberShift == s
}

// firstMember returns the lowest slot in x's set (x's set must not be
// empty).
func (t *Tree) firstMember(x uint32) uint32 {
	return t.members(x)[0] >> memberShift
}

// emitMembers appends an Overlap of depth blocks for each member of m. It
// grows dst once and writes each Overlap's fields in place: Overlap (32
// bytes, 5 fields) is too big for the compiler to keep in registers, so
// append(dst, Overlap{...}) built it in a stack temporary with narrow stores
// and copied it with 16-byte loads, which the store buffer cannot forward (a
// stall per load); that was the +30–49% of device-only Match after the tier
// fields were added (radix/doc.go).
func (t *Tree) emitMembers(dst []Overlap, m []uint32, depth int) []Overlap {
	n := len(dst)
	dst = slices.Grow(dst, len(m))[:n+len(m)]
	out := dst[n:]
	for i, e := range m {
		sl := &t.slots[e>>memberShift]
		o := &out[i]
		o.Worker = sl.key
		o.Blocks, o.Host, o.Disk = uint32(depth), 0, 0
		o.TreeSize = sl.eng.count()
	}
	return dst
}

// emitGone appends an Overlap of depth blocks for each member of a (a
// node's set) whose slot is not in b (its child's set, a subset of a).
func (t *Tree) emitGone(dst []Overlap, a, b []uint32, depth int) []Overlap {
	gone := len(a) - len(b)
	if gone <= 0 {
		return dst
	}
	if len(b) == 0 {
		return t.emitMembers(dst, a, depth)
	}
	n := len(dst)
	dst = slices.Grow(dst, gone)[:n+gone]
	out := dst[n:]
	j, k := 0, 0
	for _, e := range a {
		if j < len(b) && b[j]>>memberShift == e>>memberShift {
			j++
			continue
		}
		sl := &t.slots[e>>memberShift]
		o := &out[k]
		k++
		o.Worker = sl.key
		o.Blocks, o.Host, o.Disk = uint32(depth), 0, 0
		o.TreeSize = sl.eng.count()
		if k == len(out) {
			break // every member that leaves is out: the rest of a is b's
		}
	}
	return dst[:n+k]
}

// leaveLevels drops from the active members (act: indexes into out and
// first, in slot order) those that do not hold node x in a level's tiers,
// recording depth in that level's field of their Overlap, and returns the
// members still holding x in some tier. x's set is a subset of the active
// members (a worker holding a node holds its parent).
func (t *Tree) leaveLevels(out []Overlap, first, act []uint32, x uint32, depth int) []uint32 {
	cur := t.members(x)
	if len(cur) == len(act) && allOnDevice(cur) {
		return act // x holds every active member on the device: no level loses any
	}
	d := uint32(depth)
	j, k := 0, 0
	for _, i := range act {
		s := first[i] >> memberShift
		var m uint32
		if j < len(cur) && cur[j]>>memberShift == s {
			m = cur[j] & maskBits
			j++
		}
		o := &out[i]
		if m&devBit == 0 && o.Blocks == active {
			o.Blocks = d
		}
		if m&(devBit|hostBit) == 0 && o.Host == active {
			o.Host = d
		}
		if m == 0 {
			o.Disk = d
			continue
		}
		act[k] = i
		k++
	}
	return act[:k]
}

// allOnDevice reports whether every member of m holds its node on the
// device.
func allOnDevice(m []uint32) bool {
	for _, e := range m {
		if e&devBit == 0 {
			return false
		}
	}
	return true
}
