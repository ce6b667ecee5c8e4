package radix

import (
	"math/bits"
	"slices"
	"unsafe"

	"github.com/kvroute/kvroute/wire"
)

// rootID is the root node: it holds no blocks and is never freed. Index 0 is
// nil in every arena.
const rootID uint32 = 1

// node is one run of blocks that every worker in its set holds in full, with
// no branch inside it. Pointer-free (TestNoPointers) and 40 bytes
// (TestNodeSize): the GC never scans the arena.
type node struct {
	head   wire.BlockHash // local hash of the run's first block (a copy of run[0]; the child-table key)
	parent uint32
	first  uint32 // first child
	next   uint32 // next sibling; next free node while on the free list
	prev   uint32 // previous sibling
	nchild uint32
	n      uint32 // blocks in the run (0 only for the root)
	run    uint32 // the run's chunk: page<<runPageShift | offset (runStore)
	class  uint8
	live   bool
}

// block gives a block id's place: engine tables map to block ids, which stay
// fixed while runs are split, merged and moved.
type block struct {
	node uint32 // owning node; next free block while free
	off  uint32 // offset in the node's run; freeOff while free
}

const freeOff = ^uint32(0)

// Element sizes, for Stats().Bytes.
const (
	nodeBytes    = int64(unsafe.Sizeof(node{}))
	blockBytes   = int64(unsafe.Sizeof(block{}))
	slotRecBytes = int64(unsafe.Sizeof(slotRec{}))
)

// numClasses bounds run length at 2^31 blocks (n is a uint32; classFor(2^31)
// is 61).
const numClasses = 64

// runStore keeps every run's local hashes and block ids in chunks of size
// classes of 1, 2, 3, 4, 6, 8, 12, 16, … blocks (powers of two and 1.5×
// powers of two, runSize; half-steps instead of powers of two: a run wastes
// ≈1.2× instead of ≈1.4× its length, docs/decisions/0004-sparse-worker-sets.md).
// The chunks
// sit in pages (loc[p], ids[p]) of one class each: a page holds
// max(1, runPage/size) chunks (a full page of small chunks is 8 KiB of
// hashes and 4 KiB of ids, one capture page each), and a chunk's address is
// page<<runPageShift | offset, which is a node's run field. Growth never
// copies the arena: a class whose open page is full opens a fresh page, so
// an event pays for the pages of its own runs, not for a doubling of the
// class (docs/decisions/0006-paged-arenas.md). Only a class's first page grows, by
// doubling, up to full size, so a small tree stays small. Free chunks are
// linked through the first block id of the chunk (1 + the next one's
// address, 0 = end).
type runStore struct {
	loc [][]wire.BlockHash // pages; len = the blocks handed out in the page
	ids [][]uint32
	runMeta
}

// runMeta is the runs arena's scalar state (copied whole by captures and
// the Copier).
type runMeta struct {
	open [numClasses]uint32 // 1 + the page class c hands out chunks from, 0 = none yet
	free [numClasses]uint32 // 1 + the address of class c's first free chunk
	live [numClasses]uint32
}

const (
	runPageShift = 10
	runPage      = 1 << runPageShift // the blocks a page of small chunks holds
	runOffMask   = runPage - 1
)

// pageBlocks returns the blocks a full page of class c holds: whole
// chunks only, so a page of 384-block chunks holds two (768), not 1,024.
func pageBlocks(c uint8) int {
	size := runSize(c)
	return max(1, runPage/size) * size
}

// runSize returns the blocks a chunk of class c holds: 1, then 2^k for odd
// c = 2k-1 and 3·2^(k-2) for even c = 2k-2.
func runSize(c uint8) int {
	switch {
	case c == 0:
		return 1
	case c&1 == 1:
		return 1 << ((c + 1) / 2)
	}
	return 3 << (c/2 - 1)
}

// classFor returns the smallest class whose chunks hold n blocks.
func classFor(n int) uint8 {
	if n <= 1 {
		return 0
	}
	k := bits.Len(uint(n - 1)) // 2^(k-1) < n ≤ 2^k
	if k >= 2 && n <= 3<<(k-2) {
		return uint8(2*k - 2)
	}
	return uint8(2*k - 1)
}

// pow2Class returns the smallest power-of-two class holding n blocks (for
// the sparse sets' chunks).
func pow2Class(n int) uint8 {
	if n <= 1 {
		return 0
	}
	return uint8(bits.Len(uint(n - 1)))
}

// allocRun returns the address of a free chunk of class c.
func (t *Tree) allocRun(c uint8) uint32 {
	r := &t.runs
	r.live[c]++
	if f := r.free[c]; f != 0 {
		a := f - 1
		pg, off := a>>runPageShift, a&runOffMask
		r.free[c] = r.ids[pg][off]
		t.wRun(a, 0, 1)
		r.ids[pg][off] = 0
		return a
	}
	size := runSize(c)
	if o := r.open[c]; o != 0 {
		pg := o - 1
		l := len(r.loc[pg])
		if l+size <= cap(r.loc[pg]) {
			r.loc[pg], r.ids[pg] = r.loc[pg][:l+size], r.ids[pg][:l+size]
			return pg<<runPageShift | uint32(l)
		}
		if full := pageBlocks(c); l < full {
			// The class's first page, not yet full size: double it (a
			// replaced array, which a capture keeps as it was).
			n := min(full, 2*l)
			loc := make([]wire.BlockHash, l+size, n)
			ids := make([]uint32, l+size, n)
			copy(loc, r.loc[pg])
			copy(ids, r.ids[pg])
			r.loc[pg], r.ids[pg] = loc, ids
			return pg<<runPageShift | uint32(l)
		}
	}
	n := size // a class's first page starts with one chunk
	if r.open[c] != 0 {
		n = pageBlocks(c)
	}
	pg := uint32(len(r.loc))
	r.loc = append(r.loc, make([]wire.BlockHash, size, n))
	r.ids = append(r.ids, make([]uint32, size, n))
	r.open[c] = pg + 1
	return pg << runPageShift
}

// releaseRun frees the chunk of class c at address a.
func (t *Tree) releaseRun(c uint8, a uint32) {
	r := &t.runs
	r.live[c]--
	t.wRun(a, 0, 1)
	r.ids[a>>runPageShift][a&runOffMask] = r.free[c]
	r.free[c] = a + 1
}

// Write barriers (see Capture): each is called before a write to an arena
// element below the arena's length; with no capture in progress they cost
// one nil check.

// wNode returns &t.nodes[x] for writing.
func (t *Tree) wNode(x uint32) *node {
	if t.cw != nil {
		t.cw.nodes.Touch(t.nodes, int(x))
	}
	return &t.nodes[x]
}

// setBlock writes block record id.
func (t *Tree) setBlock(id uint32, b block) {
	ch := &t.blocks.c[id>>blockChunkShift]
	if t.cw != nil && int(id>>blockChunkShift) < len(t.cw.blocks) {
		t.cw.blocks[id>>blockChunkShift].Touch(*ch, int(id&blockMask))
	}
	(*ch)[id&blockMask] = b
}

// wSets precedes writes to t.sets[lo:hi].
func (t *Tree) wSets(lo, hi int) {
	if t.cw != nil {
		t.cw.sets.TouchRange(t.sets, lo, hi)
	}
}

// wTiers precedes writes to t.tiers[lo:hi].
func (t *Tree) wTiers(lo, hi int) {
	if t.cw != nil {
		t.cw.tiers.TouchRange(t.tiers, lo, hi)
	}
}

// wRun precedes writes to blocks [lo, hi) of the chunk at address a (local
// hashes and block ids).
func (t *Tree) wRun(a uint32, lo, hi int) {
	if cw := t.cw; cw != nil {
		pg, off := int(a>>runPageShift), int(a&runOffMask)
		if pg < len(cw.loc) {
			cw.loc[pg].TouchRange(t.runs.loc[pg], off+lo, off+hi)
			cw.ids[pg].TouchRange(t.runs.ids[pg], off+lo, off+hi)
		}
	}
}

func (r *runStore) bytes() int64 {
	var b int64
	for p := range r.loc {
		b += int64(cap(r.loc[p]))*8 + int64(cap(r.ids[p]))*4
	}
	return b
}

// blocks returns the blocks handed out in chunks (used or free).
func (r *runStore) blocks() int {
	n := 0
	for _, pg := range r.loc {
		n += len(pg)
	}
	return n
}

// runOf returns x's local hashes and block ids (length n).
func (t *Tree) runOf(x uint32) ([]wire.BlockHash, []uint32) {
	nd := &t.nodes[x]
	pg, off := nd.run>>runPageShift, int(nd.run&runOffMask)
	end := off + int(nd.n)
	return t.runs.loc[pg][off:end:end], t.runs.ids[pg][off:end:end]
}

// locOf returns x's local hashes (Match's half of runOf).
func (t *Tree) locOf(x uint32) []wire.BlockHash {
	nd := &t.nodes[x]
	off := int(nd.run & runOffMask)
	end := off + int(nd.n)
	return t.runs.loc[nd.run>>runPageShift][off:end:end]
}

// chunkOf returns x's whole chunk (length = capacity).
func (t *Tree) chunkOf(x uint32) ([]wire.BlockHash, []uint32) {
	nd := &t.nodes[x]
	pg, off := nd.run>>runPageShift, int(nd.run&runOffMask)
	end := off + runSize(nd.class)
	return t.runs.loc[pg][off:end:end], t.runs.ids[pg][off:end:end]
}

// moveRun moves x's run to a new chunk of class c (which must hold it).
func (t *Tree) moveRun(x uint32, c uint8) {
	k := t.allocRun(c)
	oldC, oldK := t.nodes[x].class, t.nodes[x].run
	loc, ids := t.runOf(x)
	t.wRun(k, 0, len(loc))
	pg, off := k>>runPageShift, int(k&runOffMask)
	copy(t.runs.loc[pg][off:], loc)
	copy(t.runs.ids[pg][off:], ids)
	t.releaseRun(oldC, oldK)
	nd := t.wNode(x)
	nd.class, nd.run = c, k
}

// ensureCap makes x's chunk hold at least need blocks.
func (t *Tree) ensureCap(x uint32, need int) {
	if need > runSize(t.nodes[x].class) {
		t.moveRun(x, classFor(need))
	}
}

// shrinkRun moves x's run to a smaller chunk when it fills a quarter or less
// of its chunk, so a run that was split does not pin its old capacity.
func (t *Tree) shrinkRun(x uint32) {
	nd := &t.nodes[x]
	if nd.class > 0 && int(nd.n)*4 <= runSize(nd.class) {
		t.moveRun(x, classFor(int(nd.n)))
	}
}

// allocNode returns a live node with zero fields and an empty worker set.
func (t *Tree) allocNode() uint32 {
	t.liveNodes++
	if id := t.freeNode; id != 0 {
		t.freeNode = t.nodes[id].next
		*t.wNode(id) = node{live: true}
		return id
	}
	t.nodes = append(t.nodes, node{live: true})
	hw := t.hdrWords()
	l := len(t.sets)
	t.sets = slices.Grow(t.sets, hw)[:l+hw]
	clear(t.sets[l:])
	if t.tiers != nil {
		l := len(t.tiers)
		t.tiers = slices.Grow(t.tiers, numTiers*hw)[:l+numTiers*hw]
		clear(t.tiers[l:])
	}
	return uint32(len(t.nodes) - 1)
}

// releaseNode puts x on the free list. Its run, blocks and links must already
// be released and its set empty.
func (t *Tree) releaseNode(x uint32) {
	t.liveNodes--
	*t.wNode(x) = node{next: t.freeNode}
	t.freeNode = x
}

func (t *Tree) allocBlock(x, off uint32) uint32 {
	t.liveBlocks++
	if id := t.freeBlock; id != 0 {
		t.freeBlock = t.blocks.at(id).node
		t.setBlock(id, block{node: x, off: off})
		return id
	}
	return t.blocks.push(block{node: x, off: off})
}

func (t *Tree) releaseBlock(id uint32) {
	t.liveBlocks--
	t.setBlock(id, block{node: t.freeBlock, off: freeOff})
	t.freeBlock = id
}

// Block records live in fixed chunks of blockChunk records (8 KiB, one
// copy-on-write page): chunk id>>blockChunkShift, record id&blockMask.
// Growth never copies the arena: a full last chunk is followed by a fresh
// one, so an event pays for the pages of its own records, not for a
// doubling of all of them (the block arena's doublings were the largest
// share of Apply's page faults: docs/decisions/0006-paged-arenas.md). Only the first chunk
// grows by doubling, up to blockChunk, so a small tree stays small.
const (
	blockChunkShift = 10
	blockChunk      = 1 << blockChunkShift
	blockMask       = blockChunk - 1
)

type blockArena struct {
	c [][]block // every chunk but the last holds blockChunk records
}

// at returns block record id.
func (a *blockArena) at(id uint32) block {
	return a.c[id>>blockChunkShift][id&blockMask]
}

// len returns the number of records (ids 0..len-1).
func (a *blockArena) len() int {
	n := len(a.c)
	if n == 0 {
		return 0
	}
	return (n-1)<<blockChunkShift + len(a.c[n-1])
}

// capBytes returns the bytes the chunks hold.
func (a *blockArena) capBytes() int64 {
	var n int
	for _, ch := range a.c {
		n += cap(ch)
	}
	return int64(n) * blockBytes
}

// push appends a record and returns its id.
func (a *blockArena) push(b block) uint32 {
	n := len(a.c)
	if n == 0 || len(a.c[n-1]) == blockChunk {
		size := blockChunk
		if n == 0 {
			size = 1
		}
		a.c = append(a.c, make([]block, 0, size))
		n++
	}
	last := a.c[n-1]
	if len(last) == cap(last) { // only a chunk not yet full size: double it
		g := make([]block, len(last), min(blockChunk, 2*cap(last)))
		copy(g, last)
		last = g
	}
	a.c[n-1] = append(last, b)
	return uint32((n-1)<<blockChunkShift + len(last))
}

// newBlockArena returns an arena holding record 0 (nil).
func newBlockArena() blockArena {
	return blockArena{c: [][]block{make([]block, 1)}}
}

// flat returns every record in one slice (for dumps and checks; allocates).
func (a *blockArena) flat() []block {
	out := make([]block, 0, a.len())
	for _, ch := range a.c {
		out = append(out, ch...)
	}
	return out
}

// Worker sets: t.w words per node, bit s = slot s; or, once t.sparse, a
// sparse set per node (sparse.go).

// hdrWords is the words per set in t.sets and t.tiers.
func (t *Tree) hdrWords() int {
	if t.sparse {
		return spStride
	}
	return t.w
}

// setWords returns x's set as t.w dense words: its own words, or for a
// sparse set a copy in buf (not for hot paths).
func (t *Tree) setWords(x uint32, buf []uint64) []uint64 {
	if t.sparse {
		return t.spDense(t.sets, int(x), buf[:t.w])
	}
	return t.setOf(x)
}

// tierWords is setWords for tier set k of x.
func (t *Tree) tierWords(x uint32, k int, buf []uint64) []uint64 {
	if t.sparse {
		return t.spDense(t.tiers, int(x)*numTiers+k, buf[:t.w])
	}
	return t.tierSet(x, k)
}

func (t *Tree) setOf(x uint32) []uint64 {
	i := int(x) * t.w
	return t.sets[i : i+t.w : i+t.w]
}

func (t *Tree) has(x, s uint32) bool {
	if t.sparse {
		return t.hasSparse(x, s)
	}
	return t.sets[int(x)*t.w+int(s>>6)]&(1<<(s&63)) != 0
}

func (t *Tree) hasSparse(x, s uint32) bool {
	return t.spWord(t.sets, int(x), s>>6)&(1<<(s&63)) != 0
}

// setBit adds slot s to x's set with the tiers of tb (a tierBit mask; it
// must be device-only while the tree has no tier sets).
func (t *Tree) setBit(x, s uint32, tb uint8) {
	if t.sparse {
		t.spSetBit(false, int(x), s)
		if t.tiers != nil {
			t.setTiers(x, s, tb)
		}
		return
	}
	i := int(x)*t.w + int(s>>6)
	t.wSets(i, i+1)
	t.sets[i] |= 1 << (s & 63)
	if t.tiers != nil {
		t.setTiers(x, s, tb)
	}
}

// clearBit removes slot s from x's set, in every tier.
func (t *Tree) clearBit(x, s uint32) {
	if t.sparse {
		t.spClearBit(false, int(x), s)
		if t.tiers != nil {
			t.setTiers(x, s, 0)
		}
		return
	}
	i := int(x)*t.w + int(s>>6)
	t.wSets(i, i+1)
	t.sets[i] &^= 1 << (s & 63)
	if t.tiers != nil {
		t.setTiers(x, s, 0)
	}
}

// Tier sets. A tree that has only ever seen device-tier events keeps none
// (t.tiers == nil: every held block is on the device, no memory is spent).
// The first event of another tier allocates them: per node, numTiers
// worker sets (bit s of group k = slot s holds the node's run in tier k),
// after the node's union set in the same layout, so that group k of x is
// tiers[(x*numTiers+k)*w:][:w]. The union set stays the OR of the groups.

const numTiers = 4

// tierBit returns the mask bit of tier k.
func tierBit(k wire.Tier) uint8 {
	if k >= numTiers {
		k = wire.TierExternal
	}
	return 1 << k
}

const devBit = 1 << wire.TierDevice

// tierSet returns x's set of tier k (the tree must have tier sets).
func (t *Tree) tierSet(x uint32, k int) []uint64 {
	i := (int(x)*numTiers + k) * t.w
	return t.tiers[i : i+t.w : i+t.w]
}

// maskOf returns the tiers in which slot s holds x's run (0 if it does not
// hold it).
func (t *Tree) maskOf(x, s uint32) uint8 {
	if !t.has(x, s) {
		return 0
	}
	if t.tiers == nil {
		return devBit
	}
	var m uint8
	if t.sparse {
		for k := range numTiers {
			if t.spWord(t.tiers, int(x)*numTiers+k, s>>6)&(1<<(s&63)) != 0 {
				m |= 1 << k
			}
		}
		return m
	}
	i, b := int(s>>6), uint64(1)<<(s&63)
	base := int(x) * numTiers * t.w
	for k := range numTiers {
		if t.tiers[base+k*t.w+i]&b != 0 {
			m |= 1 << k
		}
	}
	return m
}

// setTiers makes slot s's tier mask at x exactly m (the union set bit is the
// caller's).
func (t *Tree) setTiers(x, s uint32, m uint8) {
	if t.sparse {
		for k := range numTiers {
			if m&(1<<k) != 0 {
				t.spSetBit(true, int(x)*numTiers+k, s)
			} else {
				t.spClearBit(true, int(x)*numTiers+k, s)
			}
		}
		return
	}
	i, b := int(s>>6), uint64(1)<<(s&63)
	base := int(x) * numTiers * t.w
	t.wTiers(base, base+numTiers*t.w)
	for k := range numTiers {
		if m&(1<<k) != 0 {
			t.tiers[base+k*t.w+i] |= b
		} else {
			t.tiers[base+k*t.w+i] &^= b
		}
	}
}

// enableTiers allocates the tier sets: everything held so far is on the
// device.
func (t *Tree) enableTiers() {
	if t.sparse {
		t.tiers = make([]uint64, len(t.nodes)*numTiers*spStride, cap(t.nodes)*numTiers*spStride)
		for x := range t.nodes {
			t.spCopy(true, x*numTiers+int(wire.TierDevice), false, x)
		}
		t.act = make([]uint64, 7*t.w)
		return
	}
	t.tiers = make([]uint64, len(t.nodes)*numTiers*t.w, cap(t.nodes)*numTiers*t.w)
	for x := range t.nodes {
		copy(t.tierSet(uint32(x), int(wire.TierDevice)), t.setOf(uint32(x)))
	}
	t.act = make([]uint64, 3*t.w)
}

func (t *Tree) emptySet(x uint32) bool {
	if t.sparse {
		return spN(t.sets[int(x)*spStride+1]) == 0
	}
	for _, w := range t.setOf(x) {
		if w != 0 {
			return false
		}
	}
	return true
}

// sameSet reports whether x and y have the same workers in the same tiers.
func (t *Tree) sameSet(x, y uint32) bool {
	if t.sparse {
		if !t.spEqual(t.sets, int(x), int(y)) {
			return false
		}
		if t.tiers != nil {
			for k := range numTiers {
				if !t.spEqual(t.tiers, int(x)*numTiers+k, int(y)*numTiers+k) {
					return false
				}
			}
		}
		return true
	}
	a, b := t.setOf(x), t.setOf(y)
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	if t.tiers != nil {
		n := numTiers * t.w
		return slices.Equal(t.tiers[int(x)*n:int(x+1)*n], t.tiers[int(y)*n:int(y+1)*n])
	}
	return true
}

// copySet gives y x's set and tier sets.
func (t *Tree) copySet(y, x uint32) {
	if t.sparse {
		t.spCopy(false, int(y), false, int(x))
		if t.tiers != nil {
			for k := range numTiers {
				t.spCopy(true, int(y)*numTiers+k, true, int(x)*numTiers+k)
			}
		}
		return
	}
	t.wSets(int(y)*t.w, int(y+1)*t.w)
	copy(t.setOf(y), t.setOf(x))
	if t.tiers != nil {
		n := numTiers * t.w
		t.wTiers(int(y)*n, int(y+1)*n)
		copy(t.tiers[int(y)*n:int(y+1)*n], t.tiers[int(x)*n:int(x+1)*n])
	}
}

// clearSet empties x's set and tier sets.
func (t *Tree) clearSet(x uint32) {
	if t.sparse {
		t.spClear(false, int(x))
		if t.tiers != nil {
			for k := range numTiers {
				t.spClear(true, int(x)*numTiers+k)
			}
		}
		return
	}
	t.wSets(int(x)*t.w, int(x+1)*t.w)
	clear(t.setOf(x))
	if t.tiers != nil {
		n := numTiers * t.w
		t.wTiers(int(x)*n, int(x+1)*n)
		clear(t.tiers[int(x)*n : int(x+1)*n])
	}
}

// onlyMember reports whether slot s is the only worker in x's set.
func (t *Tree) onlyMember(x, s uint32) bool {
	if t.sparse {
		return t.onlyMemberSparse(x, s)
	}
	if t.w == 1 {
		return t.sets[x] == 1<<(s&63)
	}
	for i, w := range t.setOf(x) {
		want := uint64(0)
		if i == int(s>>6) {
			want = 1 << (s & 63)
		}
		if w != want {
			return false
		}
	}
	return true
}

// growWords widens every worker set so that slot s fits.
func (t *Tree) growWords(s uint32) {
	nw := t.w
	for int(s) >= 64*nw {
		nw *= 2
	}
	if nw > denseMax && !t.sparse {
		t.toSparse()
	}
	if t.sparse {
		t.w = nw
		if t.tiers != nil {
			t.act = make([]uint64, 7*nw)
		}
		return
	}
	ns := make([]uint64, len(t.nodes)*nw, cap(t.nodes)*nw)
	for x := range t.nodes {
		copy(ns[x*nw:], t.sets[x*t.w:(x+1)*t.w])
	}
	if t.tiers != nil {
		nt := make([]uint64, len(t.nodes)*numTiers*nw, cap(t.nodes)*numTiers*nw)
		for g := range len(t.nodes) * numTiers {
			copy(nt[g*nw:], t.tiers[g*t.w:(g+1)*t.w])
		}
		t.tiers = nt
		t.act = make([]uint64, 3*nw)
	}
	t.sets, t.w = ns, nw
}

// Children: a doubly linked sibling list per node (for traversal) and the
// per-tree edge table (for lookup).

// child returns x's child whose run starts with h, or 0.
func (t *Tree) child(x uint32, h wire.BlockHash) uint32 {
	nd := &t.nodes[x]
	switch nd.nchild {
	case 0:
		return 0
	case 1: // a single child needs no table probe
		if c := nd.first; t.nodes[c].head == h {
			return c
		}
		return 0
	}
	return t.children.get(x, h)
}

// link makes c (whose head is set) a child of p.
func (t *Tree) link(p, c uint32) {
	pn := t.wNode(p)
	cn := t.wNode(c)
	cn.parent, cn.prev, cn.next = p, 0, pn.first
	if pn.first != 0 {
		t.wNode(pn.first).prev = c
	}
	pn.first = c
	pn.nchild++
	t.children.put(p, cn.head, c)
}

// unlink detaches c from its parent.
func (t *Tree) unlink(c uint32) {
	cn := t.wNode(c)
	p := cn.parent
	t.children.del(p, cn.head)
	if cn.prev != 0 {
		t.wNode(cn.prev).next = cn.next
	} else {
		t.wNode(p).first = cn.next
	}
	if cn.next != 0 {
		t.wNode(cn.next).prev = cn.prev
	}
	cn.parent, cn.prev, cn.next = 0, 0, 0
	t.wNode(p).nchild--
}

// adoptChildren moves every child of from to to (which must have none).
func (t *Tree) adoptChildren(from, to uint32) {
	for c := t.nodes[from].first; c != 0; c = t.nodes[c].next {
		h := t.nodes[c].head
		t.children.del(from, h)
		t.wNode(c).parent = to
		t.children.put(to, h, c)
	}
	f, tn := t.wNode(from), t.wNode(to)
	tn.first, tn.nchild = f.first, f.nchild
	f.first, f.nchild = 0, 0
}

func (t *Tree) onlyMemberSparse(x, s uint32) bool {
	h0, h1 := spHdr(t.sets, int(x))
	return spN(h1) == 1 && uint32(h1>>32) == s>>6 && h0 == 1<<(s&63)
}
