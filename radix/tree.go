package radix

import (
	"cmp"
	"errors"
	"fmt"
	"math/bits"
	"slices"

	"github.com/kvroute/kvroute/wire"
)

var (
	// ErrParentMissing: a Stored event names a parent engine hash its worker
	// does not hold. Nothing of the event is applied; the caller should treat
	// it as a gap in the worker's event stream.
	ErrParentMissing = errors.New("radix: stored event's parent block is not held by the worker")
	// ErrBadEvent: a malformed event (unknown kind). Nothing is applied.
	ErrBadEvent = errors.New("radix: malformed event")
	// ErrConflict: a Stored block contradicts what the worker already holds:
	// its engine hash is held at another position, or the worker holds that
	// position under another engine hash. The blocks before it are applied,
	// it and the rest are not (Result.Conflicts counts them). It wraps
	// ErrBadEvent.
	ErrConflict = fmt.Errorf("%w: engine hash conflicts with a block the worker holds", ErrBadEvent)
)

// Overlap is one worker key's match against a request; it is wire.Overlap,
// the type the query plane carries, so a lookup's answer needs no copy.
type Overlap = wire.Overlap

// Result counts what Apply did (a plain value).
//
// Stored and Removed count blocks of the event's tier: a Stored block the
// worker already held in that tier counts 0 (one it held in another tier
// only counts 1), and a Removed block loses the worker's copy in that tier.
// A block left in no tier leaves the tree with every block the worker holds
// below it; those are counted in Removed whatever tier held them.
type Result struct {
	Stored    int // (block, worker) entries newly stored in the event's tier
	Removed   int // (block, worker) entries removed from the event's tier, including descendants
	Unknown   int // removals of engine hashes the worker did not hold in the event's tier, or ByEngine stores of hashes it does not hold (the rest is applied)
	Conflicts int // Stored blocks dropped by ErrConflict
}

// Stats describes a tree's size (a plain value, a snapshot).
type Stats struct {
	Nodes   int   // live nodes (runs), not counting the root
	Entries int   // (block, worker) pairs
	Workers int   // worker keys holding at least one block
	Blocks  int   // distinct blocks
	Bytes   int64 // memory held by the arenas, tables and scratch (capacity, not length)
}

// Tree mirrors the KV caches of a set of workers: a radix tree over local
// block hashes whose nodes are runs of blocks held by the same worker set
// (see doc.go for the layout).
//
// A Tree is not safe for concurrent use: one goroutine owns it (the one
// exception, read-only calls during Apply's quiet stretches, is SetQuiet's,
// and the owner's to arrange). The zero
// value is an empty tree ready to use; New is equivalent. Slices returned by
// Match, Workers and Dump are the caller's dst, appended to; Tree keeps no
// reference to them, and Dump's event Blocks are freshly allocated.
type Tree struct {
	nodes []node
	sets  []uint64 // worker set of node x (held in any tier): sets[x*w : (x+1)*w]
	w     int      // words per worker set
	// tiers is nil until the first event of a tier other than the device;
	// then numTiers sets per node (see tierSet).
	tiers []uint64
	act   []uint64 // Match's per-level active sets when tiered (3 × w; sparse: then 4 × w dense scratch)
	// sparse: sets (and tier sets) are in the sparse form (sparse.go), a
	// 2-word header per set in sets/tiers and the words in sp.
	sparse    bool
	sp        []uint64
	spFree    [numSetClasses]uint32
	freeNode  uint32
	liveNodes int // including the root

	blocks     blockArena
	freeBlock  uint32
	liveBlocks int

	runs     runStore
	children childTable

	slots     []slotRec
	slotOf    map[wire.WorkerKey]uint32
	freeSlots []uint32

	// maxRun > 0 caps run length. Only maxRun 1, the one-block-per-node layout
	// that docs/decisions/0001-arena-tree-of-runs.md measures against, is tested; with other caps the tree stays
	// correct but not canonical (a shrinking run does not re-merge).
	maxRun int

	sink uint32 // keeps engineTable.touch's loads alive

	// pool recycles the engine tables' arrays (table.go); counted in Bytes.
	pool engPool

	// quiet, when set (SetQuiet), is told as Apply enters and leaves the
	// stretches in which it writes nothing Match reads (see SetQuiet).
	quiet func(bool)

	// cw is the capture in progress (BeginCapture), nil otherwise: every
	// write to an arena calls its barrier first (the w* helpers in arena.go).
	cw *Capture

	// scratch, reused so steady-state mutations do not allocate
	ids       []uint32
	stack     []uint32
	doomed    []uint32
	survivors []uint32
	rmKeys    []rmKey // applyRemovedTiered's
}

// slotRec is one worker key's dense slot: its engine-hash table, whose count
// is the number of blocks it holds.
type slotRec struct {
	key  wire.WorkerKey
	live bool
	// size is eng.count as last published (at the end of an event and as
	// a quiet stretch begins), what Match, Workers and TreeSize report:
	// Apply's quiet stretches change eng while a Match may read the slot
	// (SetQuiet).
	size uint32
	eng  engineTable
}

// New returns an empty tree.
func New() *Tree {
	t := &Tree{}
	t.init()
	return t
}

func (t *Tree) init() {
	*t = Tree{
		maxRun: t.maxRun,
		quiet:  t.quiet,
		nodes:  make([]node, rootID+1),
		w:      1,
		blocks: newBlockArena(),
		slotOf: make(map[wire.WorkerKey]uint32),
	}
	t.sets = make([]uint64, len(t.nodes)*t.w)
	if denseMax == 0 {
		t.sparse = true
		t.sets = make([]uint64, len(t.nodes)*spStride)
	}
	t.nodes[rootID].live = true
	t.liveNodes = 1
}

// Apply applies one KV event. See ErrParentMissing, ErrBadEvent and
// ErrConflict for what an error means; Result is valid with or without one.
// Apply does not allocate in steady state (when tables need not grow).
func (t *Tree) Apply(ev *wire.Event) (Result, error) {
	if t.nodes == nil {
		t.init()
	}
	var res Result
	var err error
	switch ev.Kind {
	case wire.KindStored:
		if ev.ByEngine {
			res = t.applyTierByEngine(ev)
			break
		}
		res, err = t.applyStored(ev)
	case wire.KindRemoved:
		res = t.applyRemoved(ev)
	case wire.KindCleared:
		res.Removed = t.removeWorker(ev.Worker.Worker)
	default:
		return res, ErrBadEvent
	}
	t.afterMutation()
	return res, err
}

func (t *Tree) afterMutation() {
	if t.liveNodes == 1 && (len(t.nodes) > int(rootID)+1 || cap(t.slots) > 0) {
		t.init() // empty: return every arena to the baseline
	}
	if invariants {
		if err := t.CheckInvariants(); err != nil {
			panic(err)
		}
	}
}

func (t *Tree) addSlot(k wire.WorkerKey) uint32 {
	var s uint32
	if n := len(t.freeSlots); n > 0 {
		s = t.freeSlots[n-1]
		t.freeSlots = t.freeSlots[:n-1]
	} else {
		s = uint32(len(t.slots))
		t.slots = append(t.slots, slotRec{})
	}
	if int(s) >= 64*t.w {
		t.growWords(s)
	}
	t.slots[s] = slotRec{key: k, live: true}
	t.slotOf[k] = s
	return s
}

// releaseSlot frees a slot that holds no block.
func (t *Tree) releaseSlot(s uint32) {
	delete(t.slotOf, t.slots[s].key)
	eng := &t.slots[s].eng
	eng.release(&t.pool, eng.e, eng.ctrl)
	t.slots[s] = slotRec{}
	t.freeSlots = append(t.freeSlots, s)
}

// beQuiet tells the quiet hook (SetQuiet), if any, that a quiet stretch
// of work on slot s's blocks begins, first publishing s's size: the
// blocks a Match can see s hold are in its table already (a block enters
// the table before the tree, and leaves it before the tree, in a quiet
// stretch whose Matches see the size from before), so the size a Match
// reports is at least the blocks it finds.
func (t *Tree) beQuiet(s uint32) {
	if t.quiet != nil {
		t.slots[s].size = t.slots[s].eng.count
		t.quiet(true)
	}
}

// quietMinCheck is the held blocks a check must span to be a quiet
// stretch: a stretch costs the shard an unlock and a lock of its core
// (≈20–40 ns), a check ≈40 ns a block.
const quietMinCheck = 16

// beQuietAsIs is beQuiet without publishing a size, for a removal's
// stretches after its table deletes: the size published before them still
// covers the blocks Match can see the worker hold (they only shrink), where
// the table's count, already lower, would not.
func (t *Tree) beQuietAsIs() {
	if t.quiet != nil {
		t.quiet(true)
	}
}

// beBusy tells the quiet hook, if any, that a quiet stretch ends.
func (t *Tree) beBusy() {
	if t.quiet != nil {
		t.quiet(false)
	}
}

// publishSize makes slot s's block count the size Match reports, or frees
// the slot when it holds nothing, at the end of an event.
func (t *Tree) publishSize(s uint32) {
	if t.slots[s].eng.count == 0 {
		t.releaseSlot(s)
		return
	}
	t.slots[s].size = t.slots[s].eng.count
}

// applyStored walks the event's blocks from the parent position, block by
// block: inside a run the worker already holds it checks them; at the end of
// a run it steps into the matching child (joining it if the worker is not in
// its set) or creates a new leaf for all remaining blocks.
func (t *Tree) applyStored(ev *wire.Event) (Result, error) {
	var res Result
	tb := tierBit(ev.Tier)
	if tb != devBit && t.tiers == nil && len(ev.Blocks) > 0 {
		t.enableTiers()
	}
	s, known := t.slotOf[ev.Worker]
	// Position: the worker holds block j of node x (x = root, j = -1: nothing).
	x, j := rootID, -1
	if ev.HasParent {
		if !known {
			return res, ErrParentMissing
		}
		id := t.slots[s].eng.get(ev.Parent)
		if id == 0 {
			return res, ErrParentMissing
		}
		b := t.blocks.at(id)
		x, j = b.node, int(b.off)
	}
	if len(ev.Blocks) == 0 {
		return res, nil
	}
	if !known {
		s = t.addSlot(ev.Worker)
	}
	blks := ev.Blocks
	conflict := false
	for len(blks) > 0 && !conflict {
		if n := int(t.nodes[x].n); j+1 < n {
			// Inside x's run: the worker holds the rest of it already.
			loc, ids := t.runOf(x)
			eng := &t.slots[s].eng
			a := j + 1
			k := a
			// Checking a long stretch of held blocks (an event that
			// announces blocks again) only reads: a quiet stretch.
			long := n-a >= quietMinCheck && len(blks) >= quietMinCheck
			if long {
				t.beQuiet(s)
			}
			for k < n && len(blks) > 0 && loc[k] == blks[0].Local {
				if eng.get(blks[0].Engine) != ids[k] {
					conflict = true
					break
				}
				k++
				blks = blks[1:]
			}
			if long {
				t.beBusy()
			}
			if k > a && t.tiers != nil && t.maskOf(x, s)&tb == 0 {
				// Held in another tier: add this one to blocks a..k-1.
				res.Stored += k - a
				last := ids[k-1]
				t.addTier(x, s, a, k, tb)
				// The run may have merged with its neighbours: go on from
				// the last block, wherever it is now.
				b := t.blocks.at(last)
				x, j = b.node, int(b.off)
				continue
			}
			j = k - 1
			if conflict || len(blks) == 0 {
				break
			}
			if k < n {
				// Diverges inside the run: split there (x then ends at j) unless
				// the new leaf's first block is a conflict, so that nothing is
				// left split without a new branch.
				if eng.get(blks[0].Engine) != 0 {
					conflict = true
					break
				}
				t.split(x, uint32(k))
			}
		}
		c := t.child(x, blks[0].Local)
		switch {
		case c == 0:
			stored := t.storeNew(x, s, blks, tb)
			res.Stored += stored
			blks = blks[stored:]
			conflict = len(blks) > 0
		case t.has(c, s):
			x, j = c, -1 // the run loop above checks it (and adds the tier)
		default:
			k, last := t.join(x, c, s, blks, tb)
			if k == 0 {
				conflict = true
				break
			}
			res.Stored += k
			blks = blks[k:]
			b := t.blocks.at(last)
			x, j = b.node, int(b.off)
		}
	}
	t.publishSize(s)
	if conflict {
		res.Conflicts = len(blks)
		return res, ErrConflict
	}
	return res, nil
}

// addTier adds tier tb to slot s's blocks a..k-1 of x, which s holds in
// other tiers only: it splits them off, marks them and restores canonical
// form (the blocks may end up in another node; their ids stay).
func (t *Tree) addTier(x, s uint32, a, k int, tb uint8) {
	if a > 0 {
		x = t.split(x, uint32(a))
	}
	if k-a < int(t.nodes[x].n) {
		t.split(x, uint32(k-a))
	}
	t.setTiers(x, s, t.maskOf(x, s)|tb)
	t.tryMerge(x)
	t.tryMerge(t.nodes[x].parent)
}

// storeNew stores blks in tier tb as a new leaf under x for slot s, or
// appends them to x when x is a leaf held by s alone in tier tb alone. It
// stops at the first engine hash s already holds and returns how many blocks
// it stored.
func (t *Tree) storeNew(x, s uint32, blks []wire.Block, tb uint8) int {
	eng := &t.slots[s].eng
	t.beQuiet(s)
	eng.reserve(&t.pool, len(blks))
	t.sink += eng.touch(blks)
	t.beBusy()
	stored := 0
	for stored < len(blks) { // once, unless maxRun caps the run length
		rest := blks[stored:]
		if eng.get(rest[0].Engine) != 0 {
			break
		}
		y, room, fresh := x, len(rest), false
		if n := int(t.nodes[x].n); x != rootID && t.nodes[x].nchild == 0 && t.onlyMember(x, s) && (t.maxRun == 0 || n < t.maxRun) && (t.tiers == nil || t.maskOf(x, s) == tb) {
			if t.maxRun > 0 {
				room = min(room, t.maxRun-n)
			}
			t.ensureCap(x, n+room)
		} else {
			if t.maxRun > 0 {
				room = min(room, t.maxRun)
			}
			// The new leaf is filled before it is linked: a Match in
			// the quiet stretch below cannot reach it.
			y, fresh = t.allocNode(), true
			c := classFor(room)
			k := t.allocRun(c)
			nd := t.wNode(y)
			nd.class, nd.run, nd.head = c, k, rest[0].Local
		}
		base := int(t.nodes[y].n)
		loc, ids := t.chunkOf(y)
		if t.cw != nil {
			t.wRun(t.nodes[y].run, base, base+room)
		}
		// Quiet: the blocks go past the end of y's run (or into a leaf no
		// Match can reach), into the block arena and the engine table.
		t.beQuiet(s)
		i := 0
		for ; i < room; i++ {
			id := t.allocBlock(y, uint32(base+i))
			if !eng.insertNew(&t.pool, rest[i].Engine, id) {
				t.releaseBlock(id)
				break
			}
			loc[base+i], ids[base+i] = rest[i].Local, id
		}
		t.beBusy()
		if fresh {
			// i >= 1: rest[0]'s engine hash is new (checked above) and
			// the table has room for it (reserve).
			t.setBit(y, s, tb)
			t.link(x, y)
		}
		t.wNode(y).n = uint32(base + i)
		stored += i
		if i < room {
			break
		}
		x = y
	}
	return stored
}

// join adds slot s to the leading blocks of child c of x that match blks,
// splitting c where they stop matching. It returns how many blocks it joined
// and the id of the last one (0, 0 if the first engine hash is already held).
func (t *Tree) join(x, c, s uint32, blks []wire.Block, tb uint8) (int, uint32) {
	eng := &t.slots[s].eng
	loc, ids := t.runOf(c)
	m := 0 // the blocks that match c's run: at most these join
	for m < len(loc) && m < len(blks) && loc[m] == blks[m].Local {
		m++
	}
	t.beQuiet(s) // the engine table only, until the split
	eng.reserve(&t.pool, m)
	t.sink += eng.touch(blks[:m])
	k := 0
	for k < m {
		if !eng.insertNew(&t.pool, blks[k].Engine, ids[k]) {
			break
		}
		k++
	}
	t.beBusy()
	if k == 0 {
		return 0, 0
	}
	last := ids[k-1]
	if k < len(loc) {
		t.split(c, uint32(k))
	}
	t.setBit(c, s, tb)
	t.tryMerge(x)
	return k, last
}

// split cuts x after its first j blocks (0 < j < n): a new node y takes the
// rest of the run, x's children and a copy of x's set, and becomes x's only
// child. It returns y.
func (t *Tree) split(x, j uint32) uint32 {
	y := t.allocNode()
	tail := int(t.nodes[x].n - j)
	c := classFor(tail)
	k := t.allocRun(c)
	yn := t.wNode(y)
	yn.class, yn.run, yn.n = c, k, uint32(tail)
	xl, xi := t.runOf(x)
	yl, yi := t.runOf(y)
	t.wRun(k, 0, tail)
	copy(yl, xl[j:])
	copy(yi, xi[j:])
	for i, id := range yi {
		t.setBlock(id, block{node: y, off: uint32(i)})
	}
	yn.head = yl[0]
	t.adoptChildren(x, y)
	t.wNode(x).n = j
	t.copySet(y, x)
	t.link(x, y)
	t.shrinkRun(x)
	return y
}

// tryMerge folds x's only child into x while that child has x's worker set,
// keeping the tree canonical (a run ends only where the tree branches or the
// worker set changes).
func (t *Tree) tryMerge(x uint32) {
	for x != rootID && t.nodes[x].nchild == 1 {
		c := t.nodes[x].first
		if !t.sameSet(x, c) {
			return
		}
		xn, cn := int(t.nodes[x].n), int(t.nodes[c].n)
		if t.maxRun > 0 && xn+cn > t.maxRun {
			return
		}
		t.ensureCap(x, xn+cn)
		xl, xi := t.chunkOf(x)
		cl, ci := t.runOf(c)
		if t.cw != nil {
			t.wRun(t.nodes[x].run, xn, xn+cn)
		}
		copy(xl[xn:], cl)
		copy(xi[xn:], ci)
		for i, id := range ci {
			t.setBlock(id, block{node: x, off: uint32(xn + i)})
		}
		t.wNode(x).n = uint32(xn + cn)
		t.unlink(c)
		t.adoptChildren(c, x)
		t.releaseRun(t.nodes[c].class, t.nodes[c].run)
		t.clearSet(c)
		t.releaseNode(c)
	}
}

// freeDetached releases x's blocks, run and node; x is unlinked, has no
// children and an empty set, so no Match can reach it.
func (t *Tree) freeDetached(x uint32) {
	_, ids := t.runOf(x)
	for _, id := range ids {
		t.releaseBlock(id)
	}
	t.releaseRun(t.nodes[x].class, t.nodes[x].run)
	t.releaseNode(x)
}

// applyRemoved deletes every named engine hash first, then removes the
// worker from each named block and everything it holds below it. Blocks
// removed as descendants without being named leave stale table entries,
// swept at the end.
func (t *Tree) applyRemoved(ev *wire.Event) Result {
	var res Result
	s, ok := t.slotOf[ev.Worker]
	if !ok {
		res.Unknown = len(ev.Blocks)
		return res
	}
	tb := tierBit(ev.Tier)
	if t.tiers != nil {
		return t.applyRemovedTiered(ev, s, tb)
	}
	if tb != devBit {
		res.Unknown = len(ev.Blocks) // the tree holds nothing outside the device
		return res
	}
	eng := &t.slots[s].eng
	t.beQuiet(s) // the engine table only, until the blocks leave the tree
	t.sink += eng.touch(ev.Blocks)
	ids := t.ids[:0]
	for _, b := range ev.Blocks {
		if id := eng.del(&t.pool, b.Engine); id != 0 {
			ids = append(ids, id)
		} else {
			res.Unknown++
		}
	}
	t.ids = ids
	t.beBusy()
	// Shallowest offset first within a run: removing it takes the rest of the
	// run with it, where the reverse order (engines evict tails first) would
	// split the run once per block.
	t.sortByPosition(ids)
	for _, id := range ids {
		b := t.blocks.at(id)
		if b.off == freeOff || !t.has(b.node, s) {
			continue // removed already, under an ancestor named earlier
		}
		res.Removed += t.removeFrom(s, b.node, b.off)
	}
	if res.Removed > len(ids) {
		t.sweep(s)
	}
	t.publishSize(s)
	return res
}

// sortByPosition orders block ids by (node, offset). Engines name a run's
// blocks in order, head first or tail first, so the ids usually come sorted
// or reversed: one pass finds that without the sort's comparator calls.
func (t *Tree) sortByPosition(ids []uint32) {
	if len(ids) < 2 {
		return
	}
	pos := func(id uint32) uint64 { b := t.blocks.at(id); return uint64(b.node)<<32 | uint64(b.off) }
	asc, desc := true, true
	prev := pos(ids[0])
	for _, id := range ids[1:] {
		cur := pos(id) // distinct: two live blocks never share a position
		if cur > prev {
			desc = false
		} else {
			asc = false
		}
		if !asc && !desc {
			break
		}
		prev = cur
	}
	switch {
	case asc:
	case desc:
		slices.Reverse(ids)
	default:
		slices.SortFunc(ids, func(a, b uint32) int {
			ba, bb := t.blocks.at(a), t.blocks.at(b)
			return cmp.Or(cmp.Compare(ba.node, bb.node), cmp.Compare(ba.off, bb.off))
		})
	}
}

// applyRemovedTiered is applyRemoved in a tree with tier sets: each named
// block that slot s holds in tier tb loses that tier (its other tiers and
// the blocks below it keep theirs: a host may hold a block without its
// parent); a block left in no tier leaves the tree with everything s holds
// below it. Named hashes not held in tb are Unknown (a host copy removed
// while the device copy stays is a no-op for the device).
func (t *Tree) applyRemovedTiered(ev *wire.Event, s uint32, tb uint8) Result {
	var res Result
	eng := &t.slots[s].eng
	t.sink += eng.touch(ev.Blocks)
	keys := t.rmKeys[:0]
	for _, b := range ev.Blocks {
		id := eng.get(b.Engine)
		if id == 0 || t.maskOf(t.blocks.at(id).node, s)&tb == 0 {
			res.Unknown++
			continue
		}
		x := t.blocks.at(id).node
		depth := uint32(0)
		for y := x; y != rootID; y = t.nodes[y].parent {
			depth++
		}
		keys = append(keys, rmKey{depth: depth, node: x, off: t.blocks.at(id).off, id: id})
	}
	// Ancestors first (a subtree that leaves takes the named blocks below
	// it), in run order, so consecutive named blocks of a run go together.
	slices.SortFunc(keys, func(a, b rmKey) int {
		return cmp.Or(cmp.Compare(a.depth, b.depth), cmp.Compare(a.node, b.node), cmp.Compare(a.off, b.off))
	})
	n := len(keys)
	keys = slices.CompactFunc(keys, func(a, b rmKey) bool { return a.id == b.id }) // a hash named twice is unknown the second time
	res.Unknown += n - len(keys)
	t.rmKeys = keys
	left := 0
	for i := 0; i < len(keys); {
		b := t.blocks.at(keys[i].id)
		if b.off == freeOff || t.maskOf(b.node, s)&tb == 0 {
			i++ // gone already, under an ancestor that left
			continue
		}
		x, a := b.node, b.off
		if t.maskOf(x, s) == tb {
			// In no other tier: the block leaves, with the rest of the run
			// and everything below.
			r := t.removeFrom(s, x, a)
			res.Removed += r
			left += r
			i++
			continue
		}
		// The named blocks that follow it in the run lose the tier with it.
		e := a + 1
		for i++; i < len(keys); i++ {
			nb := t.blocks.at(keys[i].id)
			if nb.off != e || nb.node != x {
				break
			}
			e++
		}
		t.clearTier(s, x, a, e, tb)
		res.Removed += int(e - a)
	}
	if left > 0 {
		gone := 0
		for _, b := range ev.Blocks {
			if id := eng.get(b.Engine); id != 0 && (t.blocks.at(id).off == freeOff || !t.has(t.blocks.at(id).node, s)) {
				eng.del(&t.pool, b.Engine)
				gone++
			}
		}
		if left > gone {
			t.sweep(s)
		}
	}
	t.publishSize(s)
	return res
}

// rmKey orders a tiered removal's named blocks.
type rmKey struct{ depth, node, off, id uint32 }

// clearTier takes tier tb from slot s's blocks a..e-1 of x, which s also
// holds in another tier, and restores canonical form.
func (t *Tree) clearTier(s, x, a, e uint32, tb uint8) {
	if a > 0 {
		x = t.split(x, a)
	}
	if e-a < t.nodes[x].n {
		t.split(x, e-a)
	}
	t.setTiers(x, s, t.maskOf(x, s)&^tb)
	t.tryMerge(x)
	t.tryMerge(t.nodes[x].parent)
}

// sweep deletes slot s's table entries for blocks it no longer holds: a
// quiet stretch (it reads the tree and writes only the table), after a
// removal's deletes.
func (t *Tree) sweep(s uint32) {
	t.beQuietAsIs()
	t.slots[s].eng.filter(&t.pool, func(_ wire.EngineHash, id uint32) bool {
		b := t.blocks.at(id)
		return b.off != freeOff && t.has(b.node, s)
	})
	t.beBusy()
}

// removeFrom removes slot s from block off of x and from everything s holds
// below it, and returns the number of (block, worker) entries removed.
func (t *Tree) removeFrom(s, x, off uint32) int {
	if off > 0 {
		x = t.split(x, off)
	}
	return t.removeSubtree(s, x)
}

// removeSubtree removes slot s from y and every descendant s holds, frees
// nodes left without workers and restores canonical form.
func (t *Tree) removeSubtree(s, y uint32) int {
	p := t.nodes[y].parent
	stack := append(t.stack[:0], y)
	doomed, surv := t.doomed[:0], t.survivors[:0]
	removed := 0
	for len(stack) > 0 {
		z := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		t.clearBit(z, s)
		removed += int(t.nodes[z].n)
		if t.emptySet(z) {
			doomed = append(doomed, z)
		} else {
			surv = append(surv, z)
		}
		for c := t.nodes[z].first; c != 0; c = t.nodes[c].next {
			if t.has(c, s) {
				stack = append(stack, c)
			}
		}
	}
	// Popped in preorder, so reversed the descendants come first: each is
	// childless when it is unlinked. Once all are, no Match can reach them,
	// and freeing their blocks, runs and nodes is a quiet stretch.
	for i := len(doomed) - 1; i >= 0; i-- {
		t.unlink(doomed[i])
	}
	if len(doomed) > 0 {
		t.beQuietAsIs()
		for i := len(doomed) - 1; i >= 0; i-- {
			t.freeDetached(doomed[i])
		}
		t.beBusy()
	}
	for _, z := range surv {
		if t.nodes[z].live {
			t.tryMerge(z)
		}
	}
	t.tryMerge(p)
	t.stack, t.doomed, t.survivors = stack, doomed, surv
	return removed
}

// removeSlot removes every block of slot s and frees the slot.
func (t *Tree) removeSlot(s uint32) int {
	roots := t.ids[:0]
	eng := &t.slots[s].eng
	for i := range eng.e {
		id := eng.e[i].val
		if id == 0 {
			continue
		}
		if b := t.blocks.at(id); b.off == 0 && t.nodes[b.node].parent == rootID {
			roots = append(roots, b.node)
		}
	}
	t.ids = roots
	removed := 0
	for _, r := range roots {
		removed += t.removeSubtree(s, r)
	}
	t.releaseSlot(s)
	return removed
}

func (t *Tree) removeWorker(worker uint64) int {
	removed := 0
	for s := range t.slots {
		if t.slots[s].live && t.slots[s].key.Worker == worker {
			removed += t.removeSlot(uint32(s))
		}
	}
	return removed
}

// RemoveWorker removes every dp rank of a worker and returns the number of
// (block, worker) entries removed.
func (t *Tree) RemoveWorker(worker uint64) int {
	if t.nodes == nil {
		return 0
	}
	n := t.removeWorker(worker)
	t.afterMutation()
	return n
}

// RemoveDpRank removes one worker key and returns the number of (block,
// worker) entries removed.
func (t *Tree) RemoveDpRank(k wire.WorkerKey) int {
	s, ok := t.slotOf[k]
	if !ok {
		return 0
	}
	n := t.removeSlot(s)
	t.afterMutation()
	return n
}

// SetQuiet sets fn (nil: none) to be called by Apply around the stretches
// of its work that write nothing Match, Workers or TreeSize read (the engine
// tables, the block arena, a new leaf before it is linked, the runs' unused
// tails, the nodes a removal has unlinked, checks of blocks already held):
// fn(true) as one begins, fn(false) as it ends. Between the two, the
// goroutine that owns the tree may let another run those read-only calls
// concurrently (shard.Runner releases its core lock): they see the tree as
// it was when the stretch began. fn must not call into the tree itself.
// Those stretches are most of a Stored event's time (the engine-table
// inserts and their growth).
func (t *Tree) SetQuiet(fn func(quiet bool)) { t.quiet = fn }

// Match appends to dst one Overlap per worker key that holds at least the
// first block of hashes, with the number of leading blocks it holds, and
// returns dst. Overlaps come in no particular order (deterministic for a
// given tree). It does not allocate when dst has room for every worker.
func (t *Tree) Match(dst []Overlap, hashes []wire.BlockHash) []Overlap {
	if len(hashes) == 0 || t.nodes == nil {
		return dst
	}
	if t.tiers != nil {
		return t.matchTiered(dst, hashes)
	}
	if t.sparse {
		return t.matchSparse(dst, hashes)
	}
	c := t.child(rootID, hashes[0])
	depth := 0
	for c != 0 {
		loc := t.locOf(c)
		rest := hashes[depth:]
		m := matchLen(loc, rest)
		depth += m
		if m < len(loc) || depth == len(hashes) {
			break
		}
		next := t.child(c, hashes[depth])
		if next == 0 {
			break
		}
		// Workers of c that do not hold next stop here.
		cs, ns := t.setOf(c), t.setOf(next)
		for i := range cs {
			dst = t.emit(dst, i, cs[i]&^ns[i], depth)
		}
		c = next
	}
	if c != 0 {
		for i, w := range t.setOf(c) {
			dst = t.emit(dst, i, w, depth)
		}
	}
	return dst
}

// matchSparse is Match (device-only) with sparse sets: the same walk, the
// words of a node's set minus its next node's merged by word index.
func (t *Tree) matchSparse(dst []Overlap, hashes []wire.BlockHash) []Overlap {
	c := t.child(rootID, hashes[0])
	depth := 0
	for c != 0 {
		loc := t.locOf(c)
		m := matchLen(loc, hashes[depth:])
		depth += m
		if m < len(loc) || depth == len(hashes) {
			break
		}
		next := t.child(c, hashes[depth])
		if next == 0 {
			break
		}
		dst = t.spEmitLeaving(dst, c, next, depth)
		c = next
	}
	if c != 0 {
		dst = t.spEmitAll(dst, c, depth)
	}
	return dst
}

// matchTiered is Match in a tree with tier sets. It appends one Overlap per
// worker key holding the first block (in slot order) and follows three
// levels down the path, each a set of still-matching slots: on the device,
// on the device or host, in any tier. A slot leaving a level at a node
// records the depth before it in its Overlap (found by its rank in the
// first node's set); the fields hold absolute depths until the end.
func (t *Tree) matchTiered(dst []Overlap, hashes []wire.BlockHash) []Overlap {
	c := t.child(rootID, hashes[0])
	if c == 0 {
		return dst
	}
	w := t.w
	var first []uint64
	if t.sparse {
		first = t.spDense(t.sets, int(c), t.act[3*w:4*w:4*w])
	} else {
		first = t.setOf(c)
	}
	act := t.act[: 3*w : 3*w]
	base := len(dst)
	for i, word := range first {
		act[i], act[w+i], act[2*w+i] = word, word, word
		dst = t.emit(dst, i, word, 0) // depths set below
	}
	out := dst[base:]
	depth := 0
	for {
		loc := t.locOf(c)
		before := depth
		m := matchLen(loc, hashes[depth:])
		depth += m
		t.leaveLevels(out, first, act, c, before)
		if m < len(loc) || depth == len(hashes) {
			break
		}
		if c = t.child(c, hashes[depth]); c == 0 {
			break
		}
	}
	pre := 0
	for i, word := range first {
		for l := range 3 {
			for a := act[l*w+i]; a != 0; a &= a - 1 {
				b := uint64(1) << bits.TrailingZeros64(a)
				setLevel(&out[pre+bits.OnesCount64(word&(b-1))], l, depth)
			}
		}
		pre += bits.OnesCount64(word)
	}
	for i := range out {
		o := &out[i]
		o.Disk -= o.Host
		o.Host -= o.Blocks
	}
	return dst
}

// leaveLevels drops from each level the slots that do not hold node x in
// that level's tiers, recording depth for them.
func (t *Tree) leaveLevels(out []Overlap, first, act []uint64, x uint32, depth int) {
	w := t.w
	var dev, host, all []uint64
	if t.sparse {
		dev = t.spDense(t.tiers, int(x)*numTiers+int(wire.TierDevice), t.act[4*w:5*w:5*w])
		host = t.spDense(t.tiers, int(x)*numTiers+int(wire.TierHost), t.act[5*w:6*w:6*w])
		all = t.spDense(t.sets, int(x), t.act[6*w:7*w:7*w])
	} else {
		dev, host, all = t.tierSet(x, int(wire.TierDevice)), t.tierSet(x, int(wire.TierHost)), t.setOf(x)
	}
	pre := 0
	for i, word := range first {
		held := [3]uint64{dev[i], dev[i] | host[i], all[i]}
		for l := range 3 {
			gone := act[l*w+i] &^ held[l]
			act[l*w+i] &^= gone
			for ; gone != 0; gone &= gone - 1 {
				b := uint64(1) << bits.TrailingZeros64(gone)
				setLevel(&out[pre+bits.OnesCount64(word&(b-1))], l, depth)
			}
		}
		pre += bits.OnesCount64(word)
	}
}

func setLevel(o *Overlap, level, depth int) {
	switch level {
	case 0:
		o.Blocks = uint32(depth)
	case 1:
		o.Host = uint32(depth)
	default:
		o.Disk = uint32(depth)
	}
}

// matchLen returns the length of the common prefix of a and b.
func matchLen(a, b []wire.BlockHash) int {
	n := min(len(a), len(b))
	a, b = a[:n], b[:n]
	i := 0
	for ; i+4 <= n; i += 4 {
		if a[i] != b[i] || a[i+1] != b[i+1] || a[i+2] != b[i+2] || a[i+3] != b[i+3] {
			break
		}
	}
	for ; i < n && a[i] == b[i]; i++ {
	}
	return i
}

// emit appends an Overlap of depth blocks for each slot of bitsSet (word
// word of a set). It grows dst once and writes each Overlap's fields in
// place: Overlap (32 bytes, 5 fields) is too big for the compiler to keep in
// registers, so append(dst, Overlap{...}) built it in a stack temporary with
// narrow stores and copied it with 16-byte loads, which the store buffer
// cannot forward (a stall per load); that was the +30–49% of device-only
// Match after the tier fields were added (docs/decisions/0003-storage-tiers.md).
func (t *Tree) emit(dst []Overlap, word int, bitsSet uint64, depth int) []Overlap {
	if bitsSet == 0 {
		return dst
	}
	n := len(dst)
	dst = slices.Grow(dst, bits.OnesCount64(bitsSet))
	dst = dst[:n+bits.OnesCount64(bitsSet)]
	for ; bitsSet != 0; n++ {
		sl := &t.slots[word*64+bits.TrailingZeros64(bitsSet)]
		bitsSet &= bitsSet - 1
		o := &dst[n]
		o.Worker = sl.key
		o.Blocks, o.Host, o.Disk = uint32(depth), 0, 0
		o.TreeSize = sl.size
	}
	return dst
}

// Workers appends every worker key present in the tree, with Blocks 0 and
// its TreeSize, in slot order, and returns dst.
func (t *Tree) Workers(dst []Overlap) []Overlap {
	for i := range t.slots {
		if sl := &t.slots[i]; sl.live {
			dst = append(dst, Overlap{Worker: sl.key, TreeSize: sl.size})
		}
	}
	return dst
}

// TreeSize returns the number of blocks k holds.
func (t *Tree) TreeSize(k wire.WorkerKey) uint32 {
	if s, ok := t.slotOf[k]; ok {
		return t.slots[s].size
	}
	return 0
}

// Stats returns the tree's size and memory.
func (t *Tree) Stats() Stats {
	st := Stats{Blocks: t.liveBlocks, Bytes: int64(t.bytes())}
	if t.nodes != nil {
		st.Nodes = t.liveNodes - 1
	}
	for i := range t.slots {
		if sl := &t.slots[i]; sl.live {
			st.Workers++
			st.Entries += int(sl.eng.count)
		}
	}
	return st
}

// slotMapEntryBytes approximates one entry of the worker-key map (a Swiss
// table slot of a 16-byte key and a 4-byte value plus control bytes and
// load-factor slack); it is a small control-plane map.
const slotMapEntryBytes = 40

func (t *Tree) bytes() int64 {
	b := int64(cap(t.nodes))*nodeBytes + int64(cap(t.sets))*8 + t.blocks.capBytes()
	b += t.runs.bytes() + t.children.bytes()
	b += int64(cap(t.slots))*slotRecBytes + int64(cap(t.freeSlots))*4
	for i := range t.slots {
		b += t.slots[i].eng.bytes()
	}
	b += int64(len(t.slotOf)) * slotMapEntryBytes
	b += int64(cap(t.ids)+cap(t.stack)+cap(t.doomed)+cap(t.survivors)+4*cap(t.rmKeys)) * 4
	b += int64(cap(t.tiers)+cap(t.act)) * 8
	b += t.spBytes()
	b += t.pool.bytes()
	return b
}
