package radix

import (
	"fmt"
	"maps"
	"slices"

	"github.com/kvroute/kvroute/internal/cow"
	"github.com/kvroute/kvroute/wire"
)

// Capture is a copy-on-write image of a Tree being taken on the tree's own
// goroutine (BeginCapture). The tree goes on being mutated; before any
// mutation writes a page (a fixed-size chunk, PageBytes) of an arena that the
// capture has not copied yet, the write barrier copies that page as it still
// is, and Step copies the pending pages in bounded steps between mutations.
// Tree, on another goroutine, may take the pages meanwhile, reading them
// from the tree's arenas (cow's per-page handshake: the tree then copies
// only the pages it writes before Tree has read them). Once no page is
// pending (Step or Complete returned true, or Tree returned) the capture is
// over, and Tree's image is exactly the tree as it was at BeginCapture: an
// independent Tree.
//
// Arenas replaced rather than written (growth beyond capacity, table
// rehashes, worker sets widened, an emptied tree reset) need no copy at
// Begin or at the replacement: the capture keeps the old arrays, which the
// tree no longer writes (a replaced engine-table array goes to the tree's
// pool for reuse only if no capture covers its table: table.go, engPool). A Capture holds no locks and starts no goroutines;
// all its methods but Tree must be called on the tree's goroutine.
type Capture struct {
	t   *Tree // the tree captured; its cw points here until done
	img *Tree // the scalar state at Begin; arenas filled in when done

	nodes    cow.Slice[node]
	sets     cow.Slice[uint64]
	tiers    cow.Slice[uint64]
	sp       cow.Slice[uint64]
	blocks   []cow.Slice[block] // one per chunk at Begin
	children cow.Slice[childEntry]
	loc      []cow.Slice[wire.BlockHash] // one per runs page at Begin
	ids      []cow.Slice[uint32]
	eng      []engCow // per slot at Begin

	seg         int // Step's cursor over the arenas (see arena)
	pages       int // pages at Begin
	steppedB    int // bytes copied by Step
	copied      int // bytes copied by Step and the write barrier
	barrier     int // pages copied by the write barrier (set when done)
	waits       int // barrier calls that waited for Tree's read (set when done)
	done        bool
	image       *Tree // Tree's result (Tree's goroutine)
	check       *Tree // -tags invariants: a Clone taken at Begin
	checkFailed error
}

// engCow captures one worker's engine table.
type engCow struct {
	ctrl cow.Slice[uint8]
	e    cow.Slice[engEntry]
}

// PageBytes is the copy-on-write page size: a write to a page not yet
// copied first copies that page, so a mutation waits at most for one page
// copy per page it writes. Smaller pages make the first writes after
// BeginCapture cheaper and cost more page-table entries (24 bytes each;
// 5,732 pages for the 1.3M-entry fleet). 8 KiB measured best of 2, 8 and
// 32 KiB (docs/decisions/0012-copy-on-write-captures.md).
const PageBytes = 8 << 10

// pageBytes is PageBytes; tests shrink it to one element per page.
var pageBytes = PageBytes

// BeginCapture starts a copy-on-write capture of t as it is now; the
// scalar state and the worker table are copied at once (O(workers)), the
// arenas page by page later. A tree holds at most one capture at a time:
// BeginCapture panics if one is in progress (Capturing).
func (t *Tree) BeginCapture() *Capture {
	if t.nodes == nil {
		t.init()
	}
	if t.cw != nil {
		panic("radix: BeginCapture while a capture is in progress")
	}
	c := &Capture{t: t}
	img := &Tree{
		w: t.w, freeNode: t.freeNode, liveNodes: t.liveNodes,
		freeBlock: t.freeBlock, liveBlocks: t.liveBlocks, maxRun: t.maxRun,
		sparse: t.sparse, spFree: t.spFree,
		children:  childTable{count: t.children.count},
		slotOf:    maps.Clone(t.slotOf),
		freeSlots: slices.Clone(t.freeSlots),
		slots:     make([]slotRec, len(t.slots)),
	}
	img.runs.runMeta = t.runs.runMeta
	if t.tiers != nil {
		img.act = make([]uint64, len(t.act))
	}
	c.img = img
	c.nodes.Begin(t.nodes, pageBytes)
	c.sets.Begin(t.sets, pageBytes)
	c.tiers.Begin(t.tiers, pageBytes)
	c.sp.Begin(t.sp, pageBytes)
	c.blocks = make([]cow.Slice[block], len(t.blocks.c))
	for i, ch := range t.blocks.c {
		c.blocks[i].Begin(ch, pageBytes)
	}
	c.children.Begin(t.children.e, pageBytes)
	c.loc = make([]cow.Slice[wire.BlockHash], len(t.runs.loc))
	c.ids = make([]cow.Slice[uint32], len(t.runs.ids))
	for p := range t.runs.loc {
		c.loc[p].Begin(t.runs.loc[p], pageBytes)
		c.ids[p].Begin(t.runs.ids[p], pageBytes)
	}
	c.eng = make([]engCow, len(t.slots))
	for s := range t.slots {
		src := &t.slots[s]
		img.slots[s] = slotRec{key: src.key, live: src.live, size: src.size, eng: engineTable{count: src.eng.count}}
		if src.eng.e != nil {
			img.pool.live += src.eng.bytes()
			c.eng[s].ctrl.Begin(src.eng.ctrl, pageBytes)
			c.eng[s].e.Begin(src.eng.e, pageBytes)
			src.eng.cw = &c.eng[s]
		}
	}
	t.children.cw = &c.children
	t.cw = c
	for i := range c.arenas() {
		a := c.arena(i)
		c.pages += a.Pending()
		a.CountInto(&c.copied)
	}
	if invariants {
		c.check = t.Clone()
	}
	return c
}

// Capturing reports whether a capture of t is in progress.
func (t *Tree) Capturing() bool { return t.cw != nil }

// arenas returns the number of arenas Step walks.
func (c *Capture) arenas() int { return 5 + 2*len(c.loc) + 2*len(c.eng) + len(c.blocks) }

// pager is what Step and Stats need of a cow.Slice.
type pager interface {
	Pending() int
	Touched() int
	ReadWaits() int
	Step(budget int) int
	Stepped() bool
	Done() bool
	CountInto(*int)
}

// arena returns arena i: the node, set, tier, child and sparse-set arenas,
// each runs page's local hashes and block ids, each slot's engine table,
// then each chunk of block records.
func (c *Capture) arena(i int) pager {
	switch {
	case i == 0:
		return &c.nodes
	case i == 1:
		return &c.sets
	case i == 2:
		return &c.tiers
	case i == 3:
		return &c.children
	case i == 4:
		return &c.sp
	case i < 5+2*len(c.loc):
		if k := (i - 5) / 2; (i-5)%2 == 0 {
			return &c.loc[k]
		} else {
			return &c.ids[k]
		}
	}
	j := i - 5 - 2*len(c.loc)
	if j >= 2*len(c.eng) {
		return &c.blocks[j-2*len(c.eng)]
	}
	if j%2 == 0 {
		return &c.eng[j/2].ctrl
	}
	return &c.eng[j/2].e
}

// Step copies pending pages until about budget bytes are copied (at least
// one page if any is pending) and reports whether the capture is complete
// (as Complete). Pages Tree is reading are left to it. Call it on the
// tree's goroutine, between mutations.
func (c *Capture) Step(budget int) bool {
	if c.done {
		return true
	}
	for c.seg < c.arenas() {
		a := c.arena(c.seg)
		n := a.Step(budget)
		c.steppedB += n
		budget -= n
		if a.Stepped() {
			c.seg++
		}
		if budget <= 0 {
			break
		}
	}
	if c.seg < c.arenas() {
		return false
	}
	return c.Complete()
}

// Complete reports whether every page is copied or read by Tree, and then
// detaches the write barrier: the tree's writes cost nothing more. Call it
// on the tree's goroutine, between mutations; a capture whose pages Tree
// takes is over once Complete returns true.
func (c *Capture) Complete() bool {
	if c.done {
		return true
	}
	for i := range c.arenas() {
		if !c.arena(i).Done() {
			return false
		}
	}
	c.finish()
	return true
}

// finish detaches the barrier (on the tree's goroutine).
func (c *Capture) finish() {
	c.done = true
	for i := range c.arenas() {
		c.barrier += c.arena(i).Touched()
		c.waits += c.arena(i).ReadWaits()
	}
	t := c.t
	if t.cw == c {
		t.cw = nil
	}
	if t.children.cw == &c.children {
		t.children.cw = nil
	}
	for s := range t.slots {
		if cw := t.slots[s].eng.cw; cw != nil && s < len(c.eng) && cw == &c.eng[s] {
			t.slots[s].eng.cw = nil
		}
	}
	c.t = nil
}

// Tree returns the image, the tree as it was at BeginCapture. The first
// call assembles the image's arenas (O(tree), allocating them) from the
// pages the tree's goroutine copied and, for the pages it has not, straight
// from the tree's arenas, which that goroutine meanwhile does not write
// (cow's handshake): so it may run on one goroutine other than the tree's
// while the tree is being mutated (after a happens-before edge from
// BeginCapture of the caller's making), or on any goroutine once Step or
// Complete reported completion. Later calls return the same image, on the
// same goroutine or after a happens-before edge. The image is the caller's:
// no longer tied to the captured tree.
func (c *Capture) Tree() *Tree {
	if c.image != nil {
		return c.image
	}
	img := c.img
	img.nodes, img.sets, img.tiers, img.sp = c.nodes.Result(), c.sets.Result(), c.tiers.Result(), c.sp.Result()
	img.children.e = c.children.Result()
	img.blocks.c = make([][]block, len(c.blocks))
	for i := range c.blocks {
		img.blocks.c[i] = c.blocks[i].Result()
	}
	img.runs.loc = make([][]wire.BlockHash, len(c.loc))
	img.runs.ids = make([][]uint32, len(c.ids))
	for p := range c.loc {
		img.runs.loc[p], img.runs.ids[p] = c.loc[p].Result(), c.ids[p].Result()
	}
	for s := range c.eng {
		img.slots[s].eng.ctrl, img.slots[s].eng.e = c.eng[s].ctrl.Result(), c.eng[s].e.Result()
	}
	c.image = img
	if invariants {
		if err := sameArenas(img, c.check); err != nil {
			panic(fmt.Sprintf("radix: capture differs from the tree at BeginCapture: %v", err))
		}
		c.check = nil
	}
	return img
}

// CopiedBytes returns the bytes copied so far, by Step and by the write
// barrier: the owner paces Step against it (shard's Runner gives a
// capture a copy budget per block of events applied, which the barrier's
// copies use up first).
func (c *Capture) CopiedBytes() int { return c.copied }

// CaptureStats counts a capture's pages (a plain value).
type CaptureStats struct {
	Pages        int   // arena pages at BeginCapture
	BarrierPages int   // pages copied by the write barrier (known once done)
	ReadWaits    int   // barrier calls that waited for Tree's read of their page
	SteppedBytes int64 // bytes copied by Step
}

// Stats returns what the capture has copied so far (on the tree's
// goroutine).
func (c *Capture) Stats() CaptureStats {
	waits := c.waits
	if !c.done {
		for i := range c.arenas() {
			waits += c.arena(i).ReadWaits()
		}
	}
	return CaptureStats{Pages: c.pages, BarrierPages: c.barrier, ReadWaits: waits, SteppedBytes: int64(c.steppedB)}
}

// sameArenas reports the first difference between two trees' arenas and
// scalar state (used to check a capture against a Clone).
func sameArenas(a, b *Tree) error {
	switch {
	case a.w != b.w || a.sparse != b.sparse || a.spFree != b.spFree || a.freeNode != b.freeNode || a.liveNodes != b.liveNodes || a.freeBlock != b.freeBlock || a.liveBlocks != b.liveBlocks:
		return fmt.Errorf("scalars differ")
	case !slices.Equal(a.nodes, b.nodes):
		return fmt.Errorf("nodes differ")
	case !slices.Equal(a.sets, b.sets):
		return fmt.Errorf("sets differ")
	case !slices.Equal(a.tiers, b.tiers):
		return fmt.Errorf("tiers differ")
	case !slices.Equal(a.sp, b.sp):
		return fmt.Errorf("sparse sets differ")
	case !slices.Equal(a.blocks.flat(), b.blocks.flat()):
		return fmt.Errorf("blocks differ")
	case !slices.Equal(a.children.e, b.children.e) || a.children.count != b.children.count:
		return fmt.Errorf("children differ")
	case a.runs.runMeta != b.runs.runMeta || len(a.runs.loc) != len(b.runs.loc):
		return fmt.Errorf("run free lists or pages differ")
	case len(a.slots) != len(b.slots):
		return fmt.Errorf("slots differ")
	}
	for p := range a.runs.loc {
		if !slices.Equal(a.runs.loc[p], b.runs.loc[p]) || !slices.Equal(a.runs.ids[p], b.runs.ids[p]) {
			return fmt.Errorf("runs page %d differs", p)
		}
	}
	for s := range a.slots {
		x, y := &a.slots[s], &b.slots[s]
		if x.key != y.key || x.live != y.live || x.size != y.size || x.eng.count != y.eng.count {
			return fmt.Errorf("slot %d differs", s)
		}
		if x.live && (!slices.Equal(x.eng.ctrl, y.eng.ctrl) || !slices.Equal(x.eng.e, y.eng.e)) {
			return fmt.Errorf("slot %d's engine table differs", s)
		}
	}
	return nil
}
