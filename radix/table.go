package radix

import (
	"encoding/binary"
	"math/bits"

	"github.com/kvroute/kvroute/internal/cow"
	"github.com/kvroute/kvroute/wire"
)

// Open-addressing tables with linear probing and backward-shift deletion (no
// tombstones, so churn never degrades probe lengths). Capacities are any
// integer ≥ minTableCap, not powers of two: the home slot is the high word of
// mix(key)·cap ("fastrange"), which lets a table grow by 1.5× instead of 2×
// and keeps the average load near 2/3 (memory figures:
// docs/decisions/0002-per-worker-engine-tables.md, 0004-sparse-worker-sets.md).

const (
	minTableCap = 8
	// Tables never shrink below shrinkFloor slots (3 KiB for an engine
	// table), so a worker whose size swings between a few and a few hundred
	// blocks does not reallocate its table on every swing.
	shrinkFloor = 256
	// A table grows when an insert would take it above 4/5 full and shrinks
	// when a delete takes it below 1/5; both resize to 1.5× / 2.5× the count,
	// so a table that just resized needs many operations to resize again.
	maxLoadNum, maxLoadDen = 4, 5
	minLoadDen             = 5
)

// mix is Fibonacci hashing: multiplying by 2^64/φ spreads every input bit into
// the high word, which home() uses. Engine hashes may be small integers.
func mix(k uint64) uint64 { return k * 0x9E3779B97F4A7C15 }

func home(k uint64, n int) int {
	hi, _ := bits.Mul64(mix(k), uint64(n))
	return int(hi)
}

// movable reports whether an entry with home h sitting at j may move back to
// the hole at i: it may unless h lies cyclically in (i, j].
func movable(h, i, j int) bool {
	if j > i {
		return h <= i || h > j
	}
	return h <= i && h > j
}

// engineTable maps one worker's engine hashes to block ids: linear probing
// over 12-byte entries (the key in two 32-bit halves next to the value), with
// a control byte per slot (0 = empty, else 0x80 | 7 bits of the hash) that a
// probe scans eight at a time (SWAR), so a lookup compares keys only on a
// fingerprint match and finds the end of its cluster without a branch per
// slot. 13 bytes a slot; docs/decisions/0002-per-worker-engine-tables.md has
// the measurements against plain linear probing and Go maps.
type engineTable struct {
	ctrl  []uint8 // len(e) + groupLen: the first groupLen bytes are mirrored at the end
	e     []engEntry
	count uint32
	cw    *engCow // the capture in progress, if any (Tree.BeginCapture)
}

type engEntry struct {
	lo, hi uint32 // engine hash
	val    uint32 // block id
}

const (
	groupLen = 8
	lsbs     = 0x0101010101010101
	msbs     = 0x8080808080808080
)

func (e *engEntry) key() wire.EngineHash { return wire.EngineHash(uint64(e.hi)<<32 | uint64(e.lo)) }

func (e *engEntry) is(k wire.EngineHash) bool {
	return e.lo == uint32(k) && e.hi == uint32(k>>32)
}

// probe returns k's home slot and control byte.
func probe(k wire.EngineHash, n int) (int, uint8) {
	h := mix(uint64(k))
	hi, _ := bits.Mul64(h, uint64(n))
	return int(hi), ctrlByte(h)
}

// ctrlByte is the control byte of a key whose mix is h: 0x80 | 7 bits of h.
func ctrlByte(h uint64) uint8 { return uint8(h>>24) | 0x80 }

// group loads the eight control bytes from slot i on.
func (m *engineTable) group(i int) uint64 {
	return binary.LittleEndian.Uint64(m.ctrl[i : i+groupLen])
}

// setCtrl sets slot i's control byte. The common case (no capture, a slot
// past the mirrored first group) is one store and inlines.
func (m *engineTable) setCtrl(i int, c uint8) {
	if m.cw == nil && i >= groupLen {
		m.ctrl[i] = c
		return
	}
	m.setCtrlSlow(i, c)
}

func (m *engineTable) setCtrlSlow(i int, c uint8) {
	if m.cw != nil {
		m.cw.ctrl.Touch(m.ctrl, i)
	}
	m.ctrl[i] = c
	if i < groupLen {
		if m.cw != nil {
			m.cw.ctrl.Touch(m.ctrl, len(m.e)+i)
		}
		m.ctrl[len(m.e)+i] = c
	}
}

// wE is the write barrier for entry i (see Capture).
func (m *engineTable) wE(i int) *engEntry {
	if m.cw != nil {
		m.cw.e.Touch(m.e, i)
	}
	return &m.e[i]
}

// find returns k's slot, or -1 and the first empty slot of its probe
// sequence.
func (m *engineTable) find(k wire.EngineHash) (int, int) {
	n := len(m.e)
	i, fp := probe(k, n)
	// The home slot alone settles most probes (the load stays below 7/8).
	switch c := m.ctrl[i]; {
	case c == 0:
		return -1, i
	case c == fp && m.e[i].is(k):
		return i, -1
	}
	pat := lsbs * uint64(fp)
	for {
		w := m.group(i)
		x := w ^ pat
		match := (x - lsbs) &^ x & msbs // may flag a byte after a real match: keys are checked
		empty := ^w & msbs
		if empty != 0 {
			match &= (empty & -empty) - 1 // only slots before the first empty
		}
		for ; match != 0; match &= match - 1 {
			j := i + bits.TrailingZeros64(match)>>3
			if j >= n {
				j -= n
			}
			if m.e[j].is(k) {
				return j, -1
			}
		}
		if empty != 0 {
			j := i + bits.TrailingZeros64(empty)>>3
			if j >= n {
				j -= n
			}
			return -1, j
		}
		if i += groupLen; i >= n {
			i -= n
		}
	}
}

func (m *engineTable) get(k wire.EngineHash) uint32 {
	if len(m.e) == 0 {
		return 0
	}
	if j, _ := m.find(k); j >= 0 {
		return m.e[j].val
	}
	return 0
}

// touch loads the control group and entry of every key's home slot and
// returns a value the caller must keep (so the loads stay): the loads are
// independent, so the CPU overlaps their cache misses, and the probes that
// follow find the lines in cache.
func (m *engineTable) touch(blks []wire.Block) uint32 {
	n := len(m.e)
	if n == 0 {
		return 0
	}
	var sum uint32
	for i := range blks {
		j, _ := probe(blks[i].Engine, n)
		sum += uint32(m.ctrl[j]) + m.e[j].val
	}
	return sum
}

// insertNew adds k→v and reports true, or reports false if k is present. A
// resize takes and returns its arrays through p (the tree's pool; nil: none).
func (m *engineTable) insertNew(p *engPool, k wire.EngineHash, v uint32) bool {
	if (int(m.count)+1)*engMaxLoadDen > len(m.e)*engMaxLoadNum {
		m.resize(p, engGrowCap(int(m.count)+1))
	}
	j, free := m.find(k)
	if j >= 0 {
		return false
	}
	*m.wE(free) = engEntry{lo: uint32(k), hi: uint32(k >> 32), val: v}
	m.setCtrl(free, ctrlByte(mix(uint64(k))))
	m.count++
	return true
}

// reserve grows the table, in one resize, to the class it would reach by
// inserting k more keys one at a time (the smallest class that holds
// count+k under the maximum load), so an event that adds k blocks to a
// worker resizes its table at most once instead of once per class it
// passes (a new worker's first 41-block event went 8 → 14 → 22 → 35 → 54
// slots, four rehashes and four fresh arrays;
// docs/decisions/0005-engine-table-growth.md). The
// table ends in the same class as without it, so memory is unchanged;
// callers pass an upper bound of the keys they insert (fewer are inserted
// only on a conflict, an error path).
func (m *engineTable) reserve(p *engPool, k int) {
	if need := int(m.count) + k; need*engMaxLoadDen > len(m.e)*engMaxLoadNum {
		m.resize(p, (need*engMaxLoadDen+engMaxLoadNum-1)/engMaxLoadNum)
	}
}

// del removes k and returns its value, or 0 if k is absent.
func (m *engineTable) del(p *engPool, k wire.EngineHash) uint32 {
	if len(m.e) == 0 {
		return 0
	}
	j, _ := m.find(k)
	if j < 0 {
		return 0
	}
	v := m.e[j].val
	m.delAt(j)
	if m.shrinkDue() {
		m.shrink(p)
	}
	return v
}

// delAt empties slot i and shifts the rest of its cluster back.
func (m *engineTable) delAt(i int) {
	if m.cw != nil {
		m.delAtCapturing(i)
		return
	}
	// No capture: plain stores, so the loop makes no calls and keeps its
	// state in registers.
	e, ctrl := m.e, m.ctrl
	n := len(e)
	j := i
	for {
		if j++; j == n {
			j = 0
		}
		c := ctrl[j]
		if c == 0 {
			break
		}
		if h, _ := probe(e[j].key(), n); movable(h, i, j) {
			e[i] = e[j]
			ctrl[i] = c
			if i < groupLen {
				ctrl[n+i] = c
			}
			i = j
		}
	}
	e[i] = engEntry{}
	ctrl[i] = 0
	if i < groupLen {
		ctrl[n+i] = 0
	}
	m.count--
}

// delAtCapturing is delAt through the write barriers.
func (m *engineTable) delAtCapturing(i int) {
	e, ctrl := m.e, m.ctrl[:len(m.e)]
	n := len(e)
	j := i
	for {
		if j++; j == n {
			j = 0
		}
		c := ctrl[j]
		if c == 0 {
			break
		}
		if h, _ := probe(e[j].key(), n); movable(h, i, j) {
			*m.wE(i) = e[j]
			m.setCtrl(i, c)
			i = j
		}
	}
	*m.wE(i) = engEntry{}
	m.setCtrl(i, 0)
	m.count--
}

// shrinkDue reports whether the table is under its minimum load; it
// inlines, so a deletion that does not shrink makes no call.
func (m *engineTable) shrinkDue() bool {
	return len(m.e) > engShrinkFloor && int(m.count)*minLoadDen < len(m.e)
}

func (m *engineTable) shrink(p *engPool) {
	m.resize(p, max(engShrinkFloor, shrinkCap(int(m.count))))
}

// engShrinkFloor is shrinkFloor rounded up to a class (302 slots): a
// shrink rounds its capacity up to a class, so with the floor itself below
// the class a table of that class under 1/5 load would "shrink" to its own
// size again at every deletion. Above the floor a shrink's target (under
// half the length) rounds to a class below the length (classes are 1.53×
// apart), so every shrink shrinks.
var engShrinkFloor = engClasses[engClassOf(shrinkFloor)]

// filter deletes every entry for which keep returns false and returns how
// many it deleted. Entries shifted back over the wrap point may be visited
// twice, which is harmless because keep is a pure predicate.
func (m *engineTable) filter(p *engPool, keep func(wire.EngineHash, uint32) bool) int {
	deleted := 0
	for i := 0; i < len(m.e); {
		if m.ctrl[i] != 0 && !keep(m.e[i].key(), m.e[i].val) {
			m.delAt(i)
			deleted++
			continue
		}
		i++
	}
	if m.shrinkDue() {
		m.shrink(p)
	}
	return deleted
}

// resize rehashes into arrays of n slots rounded up to a class, taken from
// p, and gives p the old arrays unless a capture still reads them.
func (m *engineTable) resize(p *engPool, n int) {
	oldC, oldE := m.ctrl, m.e
	m.e, m.ctrl = p.get(engClasses[engClassOf(n)])
	for i, c := range oldC[:len(oldE)] {
		if c == 0 {
			continue
		}
		k := oldE[i].key()
		_, free := m.find(k)
		*m.wE(free) = oldE[i]
		m.setCtrl(free, c)
	}
	m.release(p, oldE, oldC)
}

// release hands arrays the table no longer uses to p. Arrays a capture in
// progress covers (cw set: the table's arrays at BeginCapture, or ones it
// took since) go to the garbage collector instead, so the capture's copies
// read them unchanged: only the live count drops.
func (m *engineTable) release(p *engPool, e []engEntry, ctrl []uint8) {
	if p == nil || len(e) == 0 {
		return
	}
	if m.cw != nil {
		p.drop(e, ctrl)
		return
	}
	p.put(e, ctrl)
}

func (m *engineTable) bytes() int64 { return arraysBytes(m.e, m.ctrl) }

// arraysBytes is the memory of a table's pair of arrays.
func arraysBytes(e []engEntry, ctrl []uint8) int64 { return int64(cap(e))*12 + int64(cap(ctrl)) }

// classBytes is the memory of a class's pair of arrays of n slots.
func classBytes(n int) int64 { return int64(n)*13 + groupLen }

// growCap is the capacity a table takes when count entries no longer fit:
// 2× the count, so the load after growing is 1/2 and the table grows 1.6×
// per resize (4/5 ÷ 1/2). At 1.5× (load 2/3) it grew only 1.2× per resize
// and moved every entry ~6 times while filling: 45% of the CPU profile of
// the 7,000-worker trace replay was in engineTable.resize.
func growCap(count int) int { return max(minTableCap, 2*count) }

// Engine tables fill to 7/8 and grow to 7/4 of their count (load 4/7 after
// growing, 1.53× per resize): their average load is ≈0.71 instead of ≈0.64
// with the 4/5 and 2× of the other tables (docs/decisions/0004-sparse-worker-sets.md).
const engMaxLoadNum, engMaxLoadDen = 7, 8

func engGrowCap(count int) int { return max(minTableCap, count*7/4) }

// shrinkCap leaves a shrunk table 2/5 full, well away from both thresholds.
func shrinkCap(count int) int { return max(minTableCap, count*5/2) }

// Engine-table arrays are recycled through a per-tree free list (engPool,
// Tree.pool) by size class: a table that grows frees an array of the class
// below, which the next table to reach that class takes instead of fresh
// memory (fresh pages fault on this VM, and the rehash's first stores into
// them were half of engineTable.resize's time:
// docs/decisions/0005-engine-table-growth.md).
//
// Capacities are the classes of engClasses: the growth chain from
// minTableCap (a table grows from class c to engGrowCap of the first count
// that does not fit c, which is the next class), and a shrink rounds its
// capacity up to a class. So every table array of a tree is one of the
// classes and any freed array fits a later request of its class exactly.
var engClasses = func() []int {
	cs := []int{minTableCap}
	for c := minTableCap; c < 1<<33; {
		c = engGrowCap(c*engMaxLoadNum/engMaxLoadDen + 1)
		cs = append(cs, c)
	}
	return cs
}()

// engClassOf returns the index of the smallest class ≥ n.
func engClassOf(n int) int {
	lo, hi := 0, len(engClasses)-1
	for lo < hi {
		if mid := (lo + hi) / 2; engClasses[mid] < n {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// engArrays is one table's pair of arrays.
type engArrays struct {
	e    []engEntry
	ctrl []uint8
}

const engArraysBytes = 48

// engPoolDen bounds a pool: the arrays it holds stay below 1/engPoolDen of
// the bytes of the tree's live tables (live), so recycling adds at most that
// fraction to the tables' memory; an array that would exceed it is dropped
// to the garbage collector as before. 1/8 cost 2.3 B per entry at 7,000
// workers (30.6 → 32.8, over the 32 bytes per entry aimed at) and 1/16 1.3;
// 1/32 costs 0.7 and measured as fast
// (docs/decisions/0005-engine-table-growth.md).
const engPoolDen = 32

// engPooling is a test switch: false keeps every pool empty, so benchmarks
// compare recycling against fresh arrays in one binary.
var engPooling = true

// engPool is a tree's free list of engine-table arrays by size class. Its
// bytes are counted in Stats (Tree.bytes), and an emptied tree's reset drops
// it with every other arena. Arrays under a capture (engineTable.cw set:
// the capture reads them until it completes) are never put in it.
type engPool struct {
	free   [][]engArrays // by class index; nil until the first put
	held   int64         // bytes of the arrays in free
	live   int64         // bytes of the tree's live tables' arrays
	reused int           // arrays handed out again (tests)
}

// get returns zeroed arrays of n slots, recycled if the pool has some.
func (p *engPool) get(n int) ([]engEntry, []uint8) {
	if p != nil {
		p.live += classBytes(n)
		if c := engClassOf(n); c < len(p.free) && engClasses[c] == n {
			if l := p.free[c]; len(l) > 0 {
				a := l[len(l)-1]
				l[len(l)-1] = engArrays{}
				p.free[c] = l[:len(l)-1]
				p.held -= classBytes(n)
				clear(a.e)
				clear(a.ctrl)
				p.reused++
				return a.e, a.ctrl
			}
		}
	}
	return make([]engEntry, n), make([]uint8, n+groupLen)
}

// put takes a table's arrays back (the table no longer uses them) and
// keeps them for reuse if the bound allows.
func (p *engPool) put(e []engEntry, ctrl []uint8) {
	b := arraysBytes(e, ctrl)
	p.live -= b
	c := engClassOf(len(e))
	if engClasses[c] != len(e) || cap(e) != len(e) || len(ctrl) != len(e)+groupLen || cap(ctrl) != len(ctrl) {
		p.trim() // not a class's arrays (resize makes none such)
		return
	}
	if (p.held+b)*engPoolDen > p.live || !engPooling {
		p.trim()
		return
	}
	if p.free == nil {
		p.free = make([][]engArrays, len(engClasses))
	}
	p.free[c] = append(p.free[c], engArrays{e, ctrl})
	p.held += b
}

// drop accounts for arrays that leave the tree without entering the pool.
func (p *engPool) drop(e []engEntry, ctrl []uint8) {
	p.live -= arraysBytes(e, ctrl)
	p.trim()
}

// trim drops pooled arrays, largest class first, until the pool is within
// its bound again (the live tables shrank or went).
func (p *engPool) trim() {
	for c := len(p.free) - 1; c >= 0 && p.held*engPoolDen > p.live; c-- {
		l := p.free[c]
		for len(l) > 0 && p.held*engPoolDen > p.live {
			p.held -= classBytes(len(l[len(l)-1].e))
			l[len(l)-1] = engArrays{}
			l = l[:len(l)-1]
		}
		p.free[c] = l
	}
}

// bytes is the pool's memory: the arrays it holds and its lists.
func (p *engPool) bytes() int64 {
	b := p.held + int64(cap(p.free))*24
	for _, l := range p.free {
		b += int64(cap(l)) * engArraysBytes
	}
	return b
}

// childEntry is one edge of the tree: (parent, head of the child's run) → child.
type childEntry struct {
	head   wire.BlockHash
	parent uint32
	child  uint32 // 0 = empty slot
}

// childTable is the per-tree edge table, consulted for nodes with two or more
// children (a node with one child is checked directly).
type childTable struct {
	e     []childEntry
	count int
	cw    *cow.Slice[childEntry] // the capture in progress, if any
}

func childKey(parent uint32, head wire.BlockHash) uint64 {
	return uint64(head) ^ uint64(parent)*0xFF51AFD7ED558CCD
}

func (m *childTable) get(parent uint32, head wire.BlockHash) uint32 {
	n := len(m.e)
	if n == 0 {
		return 0
	}
	i := home(childKey(parent, head), n)
	for {
		e := &m.e[i]
		if e.child == 0 {
			return 0
		}
		if e.head == head && e.parent == parent {
			return e.child
		}
		if i++; i == n {
			i = 0
		}
	}
}

// put adds or replaces the edge (parent, head) → child.
func (m *childTable) put(parent uint32, head wire.BlockHash, child uint32) {
	if (m.count+1)*maxLoadDen > len(m.e)*maxLoadNum {
		m.resize(growCap(m.count + 1))
	}
	n := len(m.e)
	i := home(childKey(parent, head), n)
	for {
		e := &m.e[i]
		if e.child == 0 {
			e = m.wE(i)
			*e = childEntry{head: head, parent: parent, child: child}
			m.count++
			return
		}
		if e.head == head && e.parent == parent {
			m.wE(i).child = child
			return
		}
		if i++; i == n {
			i = 0
		}
	}
}

// del removes the edge (parent, head) and reports whether it was present.
func (m *childTable) del(parent uint32, head wire.BlockHash) bool {
	n := len(m.e)
	if n == 0 {
		return false
	}
	i := home(childKey(parent, head), n)
	for {
		e := &m.e[i]
		if e.child == 0 {
			return false
		}
		if e.head == head && e.parent == parent {
			break
		}
		if i++; i == n {
			i = 0
		}
	}
	j := i
	for {
		if j++; j == n {
			j = 0
		}
		if m.e[j].child == 0 {
			break
		}
		if movable(home(childKey(m.e[j].parent, m.e[j].head), n), i, j) {
			*m.wE(i) = m.e[j]
			i = j
		}
	}
	*m.wE(i) = childEntry{}
	m.count--
	if len(m.e) > shrinkFloor && m.count*minLoadDen < len(m.e) {
		m.resize(max(shrinkFloor, shrinkCap(m.count)))
	}
	return true
}

// wE is the write barrier for entry i (see Capture).
func (m *childTable) wE(i int) *childEntry {
	if m.cw != nil {
		m.cw.Touch(m.e, i)
	}
	return &m.e[i]
}

func (m *childTable) resize(n int) {
	old := m.e
	m.e = make([]childEntry, n)
	for _, e := range old {
		if e.child == 0 {
			continue
		}
		j := home(childKey(e.parent, e.head), n)
		for m.e[j].child != 0 {
			if j++; j == n {
				j = 0
			}
		}
		m.e[j] = e
	}
}

func (m *childTable) bytes() int64 { return int64(cap(m.e)) * 16 }
