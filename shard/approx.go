package shard

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kvroute/kvroute/internal/cow"
	"github.com/kvroute/kvroute/radix"
	"github.com/kvroute/kvroute/wire"
)

// Approximate mode bookkeeping.
//
// A recorded block is a (worker, sequence hash) entry stored in the tree with
// engine hash = its sequence hash (Dynamo's convention), so expiry can remove
// it with an ordinary Removed event. Entries live in one pointer-free arena
// and are threaded on a single doubly linked list ordered by expiry. Because
// the core's clock never goes backwards (now is clamped to the latest time
// seen) and every decision gives all its blocks the same expiry now+TTL, a
// new or refreshed entry always belongs at the tail: refresh is an O(1)
// unlink and append plus one map lookup, and the earliest expiries are
// always at the head.
//
// A decision that routes block i also routes its whole prefix, so a block's
// expiry is never later than its parent's; entries with equal expiry are
// removed deepest first. Hence removal always takes leaves before their
// prefixes, as the size cap requires, and the tree never drops a subtree the
// bookkeeping still tracks.
type approx struct {
	ttl         time.Duration
	max, target int

	now     time.Duration // latest time seen
	entries []aEntry      // entries[0] is the list sentinel
	free    uint32        // free list of entries, linked by next
	n       int           // live entries

	workers []aWorker
	byKey   map[wire.WorkerKey]uint32
	freeW   []uint32

	group  []gEnt       // scratch: one expiry group
	blocks []wire.Block // scratch: blocks of one tree event

	// cw is the snapshot capture of entries in progress, if any: every
	// write to an entry calls wEntry first (see capture in snapshot.go).
	cw *cow.Slice[aEntry]
}

type aEntry struct {
	seq        wire.SeqHash
	expiry     time.Duration
	worker     uint32 // index into workers; freeWorker when on the free list
	depth      uint32 // 1-based position of the block in its sequence
	prev, next uint32
}

const freeWorker = ^uint32(0)

type aWorker struct {
	key wire.WorkerKey
	m   map[wire.SeqHash]uint32 // sequence hash → entry
}

type gEnt struct {
	worker, depth, idx uint32
}

func (a *approx) init(cfg ApproxConfig) {
	a.ttl = cfg.TTL
	a.setMax(cfg.MaxBlocks, cfg.PruneTarget)
	a.entries = make([]aEntry, 1, 64)
	a.byKey = make(map[wire.WorkerKey]uint32)
}

func (a *approx) setMax(maxBlocks int, ratio float64) {
	a.max = maxBlocks
	a.target = int(float64(maxBlocks) * ratio)
}

func (a *approx) worker(k wire.WorkerKey) uint32 {
	if wi, ok := a.byKey[k]; ok {
		return wi
	}
	var wi uint32
	if n := len(a.freeW); n > 0 {
		wi = a.freeW[n-1]
		a.freeW = a.freeW[:n-1]
		a.workers[wi].key = k
	} else {
		wi = uint32(len(a.workers))
		a.workers = append(a.workers, aWorker{key: k, m: make(map[wire.SeqHash]uint32)})
	}
	a.byKey[k] = wi
	return wi
}

func (a *approx) releaseWorker(wi uint32) {
	delete(a.byKey, a.workers[wi].key)
	a.freeW = append(a.freeW, wi)
}

func (a *approx) alloc() uint32 {
	if e := a.free; e != 0 {
		a.free = a.entries[e].next
		return e
	}
	a.entries = append(a.entries, aEntry{})
	return uint32(len(a.entries) - 1)
}

// wEntry returns &a.entries[e] for writing, after the capture's write
// barrier.
func (a *approx) wEntry(e uint32) *aEntry {
	if a.cw != nil {
		a.cw.Touch(a.entries, int(e))
	}
	return &a.entries[e]
}

func (a *approx) pushBack(e uint32) {
	last := a.entries[0].prev
	en := a.wEntry(e)
	en.prev, en.next = last, 0
	a.wEntry(last).next = e
	a.wEntry(0).prev = e
}

func (a *approx) unlink(e uint32) {
	p, n := a.entries[e].prev, a.entries[e].next
	a.wEntry(p).next = n
	a.wEntry(n).prev = p
}

// release unlinks entry e, forgets it in its worker's index and frees it.
func (a *approx) release(e uint32) {
	wi := a.entries[e].worker
	delete(a.workers[wi].m, a.entries[e].seq)
	a.unlink(e)
	*a.wEntry(e) = aEntry{worker: freeWorker, next: a.free}
	a.free = e
	a.n--
	if len(a.workers[wi].m) == 0 {
		a.releaseWorker(wi)
	}
}

// dropWorker forgets every entry of worker (only dp rank *dp if dp != nil)
// without touching the tree (the caller removes the worker there).
func (a *approx) dropWorker(worker uint64, dp *uint32) {
	for k, wi := range a.byKey {
		if k.Worker != worker || (dp != nil && k.Dp != *dp) {
			continue
		}
		for _, e := range a.workers[wi].m {
			a.release(e)
		}
	}
}

// advance clamps now so the core's clock never goes backwards.
func (a *approx) advance(now time.Duration) time.Duration {
	if now > a.now {
		a.now = now
	}
	return a.now
}

// RecordDecision records, in approximate mode, that a request whose blocks
// have the given local and sequence hashes was routed to worker k at time
// now: blocks new to k are stored in the tree (engine hash = sequence hash,
// parent = the previous block's sequence hash) and every block's expiry is
// set to now+TTL. If the recorded blocks exceed the size cap, the oldest are
// pruned. local and seq must have equal lengths (ErrLengthMismatch
// otherwise); both are read, not retained. now earlier than a time the Core
// has already seen is treated as that time.
func (c *Core) RecordDecision(k wire.WorkerKey, local []wire.BlockHash, seq []wire.SeqHash, now time.Duration) error {
	if len(local) != len(seq) {
		return fmt.Errorf("%w: %d local, %d sequence", ErrLengthMismatch, len(local), len(seq))
	}
	c.cnt.Decisions++
	if len(seq) == 0 {
		return nil
	}
	a := &c.ax
	exp := a.advance(now) + a.ttl
	wi := a.worker(k)
	first := -1
	for i, s := range seq {
		m := a.workers[wi].m
		if e, ok := m[s]; ok {
			a.wEntry(e).expiry = exp
			a.unlink(e)
			a.pushBack(e)
			c.cnt.BlocksRefreshed++
			continue
		}
		if first < 0 {
			first = i
		}
		e := a.alloc()
		*a.wEntry(e) = aEntry{seq: s, expiry: exp, worker: wi, depth: uint32(i + 1)}
		a.pushBack(e)
		m[s] = e
		a.n++
		c.cnt.BlocksRecorded++
	}
	var err error
	if first >= 0 {
		err = c.storeRecorded(k, local, seq, first)
	}
	if a.n > a.max {
		c.prune()
	}
	c.assertApprox()
	return err
}

// assertApprox panics on broken bookkeeping when built with -tags invariants.
func (c *Core) assertApprox() {
	if invariantsEnabled {
		if err := c.ax.check(); err != nil {
			panic("shard: approx invariant: " + err.Error())
		}
	}
}

// storeRecorded stores blocks first.. of a decision for k, linked to the
// previous block; if the tree lost that parent it stores the whole path.
func (c *Core) storeRecorded(k wire.WorkerKey, local []wire.BlockHash, seq []wire.SeqHash, first int) error {
	a := &c.ax
	a.blocks = a.blocks[:0]
	for i := first; i < len(seq); i++ {
		a.blocks = append(a.blocks, wire.Block{Engine: wire.EngineHash(seq[i]), Local: local[i]})
	}
	ev := wire.Event{Worker: k, Kind: wire.KindStored, Blocks: a.blocks}
	if first > 0 {
		ev.HasParent, ev.Parent = true, wire.EngineHash(seq[first-1])
	}
	res, err := c.tree.Apply(&ev)
	if errors.Is(err, radix.ErrParentMissing) {
		a.blocks = a.blocks[:0]
		for i := range seq {
			a.blocks = append(a.blocks, wire.Block{Engine: wire.EngineHash(seq[i]), Local: local[i]})
		}
		ev.HasParent, ev.Parent, ev.Blocks = false, 0, a.blocks
		res, err = c.tree.Apply(&ev)
	}
	c.cnt.BlocksStored += uint64(res.Stored)
	if err != nil {
		c.cnt.Events[wire.KindStored][OutcomeBad]++
		return fmt.Errorf("shard: recording decision for worker %d/%d: %w", k.Worker, k.Dp, err)
	}
	return nil
}

// Tick expires, at time now, every recorded block whose expiry is not after
// now (deepest first among equal expiries) and returns how many it removed.
// now earlier than a time the Core has already seen is treated as that time.
func (c *Core) Tick(now time.Duration) int {
	a := &c.ax
	now = a.advance(now)
	removed := 0
	for h := a.entries[0].next; h != 0 && a.entries[h].expiry <= now; h = a.entries[0].next {
		g := a.headGroup()
		slices.SortFunc(g, byWorkerDeepest)
		c.removeRecorded(g)
		removed += len(g)
	}
	c.cnt.BlocksExpired += uint64(removed)
	c.assertApprox()
	return removed
}

// prune removes recorded blocks, earliest expiry first and deepest first
// among equal expiries, until at most target remain.
func (c *Core) prune() {
	a := &c.ax
	need := a.n - a.target
	for need > 0 && a.entries[0].next != 0 {
		g := a.headGroup()
		if len(g) > need {
			slices.SortStableFunc(g, deepest)
			g = g[:need]
		}
		slices.SortFunc(g, byWorkerDeepest)
		c.removeRecorded(g)
		need -= len(g)
		c.cnt.BlocksPruned += uint64(len(g))
	}
}

func deepest(x, y gEnt) int { return cmp.Compare(y.depth, x.depth) }

func byWorkerDeepest(x, y gEnt) int {
	if c := cmp.Compare(x.worker, y.worker); c != 0 {
		return c
	}
	if c := cmp.Compare(y.depth, x.depth); c != 0 {
		return c
	}
	return cmp.Compare(x.idx, y.idx)
}

// headGroup collects, in list order, the entries sharing the head's expiry.
func (a *approx) headGroup() []gEnt {
	a.group = a.group[:0]
	h := a.entries[0].next
	exp := a.entries[h].expiry
	for e := h; e != 0 && a.entries[e].expiry == exp; e = a.entries[e].next {
		en := &a.entries[e]
		a.group = append(a.group, gEnt{worker: en.worker, depth: en.depth, idx: e})
	}
	return a.group
}

// removeRecorded removes entries g (sorted by worker, deepest first) from the
// tree, one Removed event per worker, and from the bookkeeping.
func (c *Core) removeRecorded(g []gEnt) {
	a := &c.ax
	for len(g) > 0 {
		wi := g[0].worker
		n := 1
		for n < len(g) && g[n].worker == wi {
			n++
		}
		a.blocks = a.blocks[:0]
		for _, x := range g[:n] {
			a.blocks = append(a.blocks, wire.Block{Engine: wire.EngineHash(a.entries[x.idx].seq)})
		}
		ev := wire.Event{Worker: a.workers[wi].key, Kind: wire.KindRemoved, Blocks: a.blocks}
		res, _ := c.tree.Apply(&ev) // a Removed event of known shape cannot be bad; unknown blocks are counted
		c.cnt.BlocksRemoved += uint64(res.Removed)
		c.cnt.BlocksUnknown += uint64(res.Unknown)
		for _, x := range g[:n] {
			a.release(x.idx)
		}
		g = g[n:]
	}
}

func (a *approx) check() error {
	seen := 0
	var prevExp time.Duration
	for e, p := a.entries[0].next, uint32(0); e != 0; p, e = e, a.entries[e].next {
		en := &a.entries[e]
		if en.prev != p {
			return fmt.Errorf("entry %d: prev %d, want %d", e, en.prev, p)
		}
		if seen > 0 && en.expiry < prevExp {
			return fmt.Errorf("entry %d: expiry %v before its predecessor's %v", e, en.expiry, prevExp)
		}
		prevExp = en.expiry
		if en.worker == freeWorker || int(en.worker) >= len(a.workers) {
			return fmt.Errorf("entry %d: bad worker slot %d", e, en.worker)
		}
		if got := a.workers[en.worker].m[en.seq]; got != e {
			return fmt.Errorf("entry %d: worker index maps its hash to %d", e, got)
		}
		if seen++; seen > len(a.entries) {
			return errors.New("list cycle")
		}
	}
	if seen != a.n {
		return fmt.Errorf("list holds %d entries, count says %d", seen, a.n)
	}
	total := 0
	for k, wi := range a.byKey {
		w := &a.workers[wi]
		if w.key != k {
			return fmt.Errorf("worker slot %d holds key %v, indexed as %v", wi, w.key, k)
		}
		if len(w.m) == 0 {
			return fmt.Errorf("worker %v has no entries but keeps its slot", k)
		}
		total += len(w.m)
	}
	if total != a.n {
		return fmt.Errorf("worker indexes hold %d entries, count says %d", total, a.n)
	}
	free := 0
	for e := a.free; e != 0; e = a.entries[e].next {
		if a.entries[e].worker != freeWorker {
			return fmt.Errorf("free entry %d is live", e)
		}
		if free++; free > len(a.entries) {
			return errors.New("free list cycle")
		}
	}
	if free+a.n+1 != len(a.entries) {
		return fmt.Errorf("%d free + %d live + sentinel != %d entries", free, a.n, len(a.entries))
	}
	return nil
}
