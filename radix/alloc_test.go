//go:build !race

package radix

import (
	"testing"

	"github.com/kvroute/kvroute/wire"
)

// TestAllocsApply: in steady state (tables sized) Apply allocates nothing,
// whether it stores new leaves, joins other workers' runs, splits, merges or
// removes tails.
func TestAllocsApply(t *testing.T) {
	skipUnderInvariants(t)
	wl := newWorkload(smallParams, 3)
	sc := wl.schedule()
	tr := wl.tree(t, 0)
	for i := range sc.warm {
		mustApply(t, tr, &sc.warm[i])
	}
	for i := range sc.events { // one period sizes every table
		mustApply(t, tr, &sc.events[i])
	}
	i := 0
	var res Result
	allocs := testing.AllocsPerRun(len(sc.events), func() {
		r, _ := tr.Apply(&sc.events[i%len(sc.events)])
		res.Stored += r.Stored
		res.Removed += r.Removed
		i++
	})
	if allocs != 0 {
		t.Errorf("Apply: %v allocs per event, want 0", allocs)
	}
	if res.Stored == 0 || res.Removed == 0 {
		t.Fatalf("schedule did nothing: %+v", res)
	}
}

// TestAllocsApplyInner: removing an inner block (the subtree goes and the
// worker's table is swept) and storing it again allocates nothing either.
func TestAllocsApplyInner(t *testing.T) {
	skipUnderInvariants(t)
	wl := newWorkload(smallParams, 4)
	tr := wl.tree(t, 0)
	k := wire.WorkerKey{Worker: 77}
	chain := make([]wire.Block, 16)
	for i := range chain {
		chain[i] = wire.Block{Engine: wire.EngineHash(500 + i), Local: wire.BlockHash(9000 + i)}
	}
	// Another worker shares the first half so the run splits and merges.
	share := wire.Event{Worker: wire.WorkerKey{Worker: 78}, Kind: wire.KindStored, Blocks: chain[:8]}
	mustApply(t, tr, &share)
	store := wire.Event{Worker: k, Kind: wire.KindStored, Blocks: chain}
	rmInner := wire.Event{Worker: k, Kind: wire.KindRemoved, Blocks: chain[4:5]}
	rmRoot := wire.Event{Worker: k, Kind: wire.KindRemoved, Blocks: chain[:1]}
	// A worker key that empties is released with its table, and re-adding
	// it allocates a new one: keep the worker alive with another block.
	keep := wire.Event{Worker: k, Kind: wire.KindStored, Blocks: []wire.Block{{Engine: 1, Local: 1}}}
	mustApply(t, tr, &keep)
	mustApply(t, tr, &store)
	mustApply(t, tr, &rmInner)
	if tr.TreeSize(k) != 5 {
		t.Fatalf("TreeSize %d after removing block 4 of 16 (+1 kept), want 5", tr.TreeSize(k))
	}
	mustApply(t, tr, &store)
	mustApply(t, tr, &rmRoot)
	allocs := testing.AllocsPerRun(50, func() {
		mustApply(t, tr, &store)
		mustApply(t, tr, &rmInner)
		mustApply(t, tr, &store)
		mustApply(t, tr, &rmRoot)
	})
	if allocs != 0 {
		t.Errorf("store/remove-inner cycle with a live worker: %v allocs, want 0", allocs)
	}
}

func TestAllocsMatch(t *testing.T) {
	skipUnderInvariants(t)
	wl := newWorkload(smallParams, 5)
	tr := wl.tree(t, 0)
	dst := make([]Overlap, 0, len(wl.keys))
	i, matched := 0, 0
	allocs := testing.AllocsPerRun(len(wl.reqs), func() {
		dst = tr.Match(dst[:0], wl.reqs[i%len(wl.reqs)])
		matched += len(dst)
		i++
	})
	if allocs != 0 {
		t.Errorf("Match: %v allocs, want 0", allocs)
	}
	if matched == 0 {
		t.Fatal("no request matched anything")
	}
}

// TestAllocsMatchTiered: Match in a tree with a host tier (per-tier
// overlaps) allocates nothing either, and does report host overlaps.
func TestAllocsMatchTiered(t *testing.T) {
	skipUnderInvariants(t)
	wl := newWorkload(smallParams, 5)
	tr := wl.tieredTree(t)
	dst := make([]Overlap, 0, len(wl.keys))
	i, host := 0, 0
	allocs := testing.AllocsPerRun(len(wl.reqs), func() {
		dst = tr.Match(dst[:0], wl.reqs[i%len(wl.reqs)])
		for _, o := range dst {
			host += int(o.Host)
		}
		i++
	})
	if allocs != 0 {
		t.Errorf("tiered Match: %v allocs, want 0", allocs)
	}
	if host == 0 {
		t.Fatal("no request matched a host block")
	}
}

// TestHeapMatchesStats: Stats().Bytes accounts for the heap the tree really
// holds (runtime.MemStats growth while building it), and removing every
// worker gives that heap back. Not under -race, whose shadow memory and
// instrumentation skew MemStats.
func TestHeapMatchesStats(t *testing.T) {
	wl := newWorkload(smallParams, 13)
	var tr *Tree
	heap, _ := heapGrowth(func() int { tr = wl.tree(t, 0); return 0 })
	st := tr.Stats()
	ratio := float64(heap) / float64(st.Bytes)
	t.Logf("%d entries: Stats %d B (%.1f B/entry), heap growth %d B (%.1f B/entry)", st.Entries, st.Bytes, float64(st.Bytes)/float64(st.Entries), heap, float64(heap)/float64(st.Entries))
	if ratio < 0.9 || ratio > 1.15 {
		t.Errorf("heap growth %d is %.2f× Stats().Bytes %d", heap, ratio, st.Bytes)
	}
	freed, _ := heapGrowth(func() int {
		for _, k := range wl.keys {
			tr.RemoveDpRank(k)
		}
		return 0
	})
	if left := heap + freed; left > 16<<10 {
		t.Errorf("removing every worker left %d bytes of %d on the heap", left, heap)
	}
}

func skipUnderInvariants(t *testing.T) {
	if invariants {
		t.Skip("-tags invariants: every mutation runs CheckInvariants, which allocates; make test-plain runs this gate")
	}
}
