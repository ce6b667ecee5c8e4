package radix

import (
	"slices"
	"testing"

	"github.com/kvroute/kvroute/wire"
)

// TestReclaimAll: once every worker is gone, by every removal path, the
// tree holds nothing and its memory is back to an empty tree's; it is then
// reused as new.
func TestReclaimAll(t *testing.T) {
	baseline := New().Stats().Bytes
	wl := newWorkload(smallParams, 11)
	for _, how := range []string{"remove-worker", "cleared", "remove-dp", "removed-roots"} {
		tr := wl.tree(t, 0)
		if st := tr.Stats(); st.Entries != wl.blocks || st.Bytes <= baseline {
			t.Fatalf("built %+v, want %d entries", st, wl.blocks)
		}
		removed := 0
		for _, k := range wl.keys {
			switch how {
			case "remove-worker":
				removed += tr.RemoveWorker(k.Worker)
			case "cleared":
				removed += mustApply(t, tr, &wire.Event{Worker: k, Kind: wire.KindCleared}).Removed
			case "remove-dp":
				removed += tr.RemoveDpRank(k)
			}
		}
		if how == "removed-roots" { // name each worker's first block of every family
			for i := range wl.build {
				if ev := &wl.build[i]; !ev.HasParent {
					rm := wire.Event{Worker: ev.Worker, Kind: wire.KindRemoved, Blocks: ev.Blocks[:1]}
					removed += mustApply(t, tr, &rm).Removed
				}
			}
		}
		if removed != wl.blocks {
			t.Errorf("%s: removed %d entries, built %d", how, removed, wl.blocks)
		}
		st := tr.Stats()
		if st.Nodes != 0 || st.Entries != 0 || st.Workers != 0 || st.Blocks != 0 {
			t.Errorf("%s: %+v after removing everything", how, st)
		}
		if st.Bytes != baseline {
			t.Errorf("%s: %d bytes after removing everything, empty tree %d", how, st.Bytes, baseline)
		}
		if len(tr.nodes) != int(rootID)+1 || tr.blocks.len() != 1 || tr.liveNodes != 1 {
			t.Errorf("%s: arenas not back to empty: %d nodes, %d blocks", how, len(tr.nodes), tr.blocks.len())
		}
		if err := tr.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
		// Reused: rebuilding gives the same tree as building fresh.
		for i := range wl.build {
			mustApply(t, tr, &wl.build[i])
		}
		if a, b := treeString(tr), treeString(wl.tree(t, 0)); a != b {
			t.Errorf("%s: rebuilt tree differs from a fresh build", how)
		}
	}
}

// TestChurnBounded: a periodic store/remove schedule returns the tree to the
// same state every period, and no arena or table grows after the first one:
// freed nodes, blocks and chunks are reused.
func TestChurnBounded(t *testing.T) {
	wl := newWorkload(smallParams, 12)
	sc := wl.schedule()
	tr := wl.tree(t, 0)
	for i := range sc.warm {
		mustApply(t, tr, &sc.warm[i])
	}
	period := func() {
		for i := range sc.events {
			mustApply(t, tr, &sc.events[i])
		}
	}
	period()
	st0, shape0, lens0 := tr.Stats(), treeString(tr), arenaLens(tr)
	for range 5 {
		period()
	}
	if st := tr.Stats(); st != st0 {
		t.Errorf("stats drifted over 5 periods: %+v → %+v", st0, st)
	}
	if treeString(tr) != shape0 {
		t.Error("tree shape drifted over 5 periods")
	}
	if lens := arenaLens(tr); lens != lens0 {
		t.Errorf("arenas grew under churn: %+v → %+v", lens0, lens)
	}
	if err := tr.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

type arenaSizes struct {
	nodes, blocks, chunks, children, engine int
}

func arenaLens(tr *Tree) arenaSizes {
	a := arenaSizes{nodes: len(tr.nodes), blocks: tr.blocks.len(), children: len(tr.children.e)}
	a.chunks = tr.runs.blocks()
	for i := range tr.slots {
		a.engine += len(tr.slots[i].eng.e)
	}
	return a
}

func mustApply(t testing.TB, tr *Tree, ev *wire.Event) Result {
	t.Helper()
	res, err := tr.Apply(ev)
	if err != nil {
		t.Fatalf("%s: %v", fmtEvent(*ev), err)
	}
	return res
}

// TestZeroValue: a zero Tree works without New.
func TestZeroValue(t *testing.T) {
	var tr Tree
	if got := tr.Match(nil, []wire.BlockHash{1}); len(got) != 0 || tr.Stats().Entries != 0 || tr.RemoveWorker(1) != 0 ||
		tr.RemoveDpRank(wire.WorkerKey{}) != 0 || len(tr.Dump(nil)) != 0 || len(tr.Workers(nil)) != 0 || tr.CheckInvariants() != nil {
		t.Fatal("zero tree is not empty")
	}
	k := wire.WorkerKey{Worker: 1}
	mustApply(t, &tr, &wire.Event{Worker: k, Kind: wire.KindStored, Blocks: []wire.Block{{Engine: 1, Local: 10}, {Engine: 2, Local: 20}}})
	if got := tr.Match(nil, []wire.BlockHash{10, 20, 30}); len(got) != 1 || got[0] != (Overlap{Worker: k, Blocks: 2, TreeSize: 2}) {
		t.Fatalf("Match = %v", got)
	}
	if err := tr.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestRemovedOrder removes the same named blocks head first, tail first and
// shuffled (sortByPosition's three paths, over two runs and a branch): the
// trees and Results must be the same.
func TestRemovedOrder(t *testing.T) {
	a, b := wire.WorkerKey{Worker: 1}, wire.WorkerKey{Worker: 2}
	chain := func(k wire.WorkerKey, n int) []wire.Block {
		bl := make([]wire.Block, n)
		for i := range bl {
			bl[i] = wire.Block{Engine: wire.EngineHash(k.Worker<<32 | uint64(i+1)), Local: wire.BlockHash(i + 1)}
		}
		return bl
	}
	named := chain(a, 12)[3:]
	orders := map[string][]wire.Block{"asc": named, "desc": slices.Clone(named), "shuffled": slices.Clone(named)}
	slices.Reverse(orders["desc"])
	sh := orders["shuffled"]
	sh[0], sh[4], sh[2], sh[7] = sh[4], sh[0], sh[7], sh[2]
	var want string
	var wantRes Result
	for _, name := range []string{"asc", "desc", "shuffled"} {
		tr := New()
		mustApply(t, tr, &wire.Event{Worker: a, Kind: wire.KindStored, Blocks: chain(a, 12)})
		mustApply(t, tr, &wire.Event{Worker: b, Kind: wire.KindStored, Blocks: chain(b, 6)})
		rm := make([]wire.Block, len(orders[name]))
		for i, bl := range orders[name] {
			rm[i].Engine = bl.Engine
		}
		res := mustApply(t, tr, &wire.Event{Worker: a, Kind: wire.KindRemoved, Blocks: rm})
		if err := tr.CheckInvariants(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := treeString(tr)
		if res.Removed != 9 || res.Unknown != 0 || tr.TreeSize(a) != 3 {
			t.Errorf("%s: %+v, tree size %d; want 9 removed and 3 left", name, res, tr.TreeSize(a))
		}
		if name == "asc" {
			want, wantRes = got, res
		} else if got != want || res != wantRes {
			t.Errorf("%s: %+v\n%s\nasc: %+v\n%s", name, res, got, wantRes, want)
		}
	}
}

// TestEngineTableRandom runs inserts and deletes against a map, checking the
// control bytes after every operation, with keys drawn from a small pool so
// that tables fill to their 7/8 load, wrap around and hold entries displaced
// far from their home slots (long backward shifts).
func TestEngineTableRandom(t *testing.T) {
	for seed := range uint64(20) {
		var m engineTable
		var pool engPool
		ref := map[wire.EngineHash]uint32{}
		r := splitmix(seed + 1)
		maxDisp := 0
		for op := range 4000 {
			r = splitmix(r)
			k := wire.EngineHash(splitmix(r%300 + seed<<32))
			if r>>40%3 == 0 {
				got, want := m.del(&pool, k), ref[k]
				if got != want {
					t.Fatalf("seed %d op %d: del %x = %d, want %d", seed, op, k, got, want)
				}
				delete(ref, k)
			} else {
				_, had := ref[k]
				if ok := m.insertNew(&pool, k, uint32(op+1)); ok == had {
					t.Fatalf("seed %d op %d: insertNew %x = %v, held %v", seed, op, k, ok, had)
				}
				if !had {
					ref[k] = uint32(op + 1)
				}
			}
			if err := m.check(); err != nil && len(m.e) > 0 {
				t.Fatalf("seed %d op %d: %v", seed, op, err)
			}
			if int(m.count) != len(ref) {
				t.Fatalf("seed %d op %d: count %d, want %d", seed, op, m.count, len(ref))
			}
			if pool.live != m.bytes() && len(m.e) > 0 {
				t.Fatalf("seed %d op %d: pool counts %d live bytes, table holds %d", seed, op, pool.live, m.bytes())
			}
			for i, c := range m.ctrl[:len(m.e)] {
				if c != 0 {
					h, _ := probe(m.e[i].key(), len(m.e))
					maxDisp = max(maxDisp, (i-h+len(m.e))%len(m.e))
				}
			}
		}
		for k, v := range ref {
			if got := m.get(k); got != v {
				t.Fatalf("seed %d: get %x = %d, want %d", seed, k, got, v)
			}
		}
		if seed == 0 && maxDisp < 14 {
			t.Errorf("largest displacement %d: no long clusters were exercised", maxDisp)
		}
	}
}

// An engine table shrinks to its floor class and stays there: deleting
// from a table at the floor, however empty, does not resize it again (a
// floor below the class made every deletion re-create the same arrays).
func TestEngineTableShrinkFloor(t *testing.T) {
	var m engineTable
	var pool engPool
	const n = 1000
	for i := range n {
		m.insertNew(&pool, wire.EngineHash(splitmix(uint64(i)+1)), uint32(i+1))
	}
	grown := len(m.e)
	for i := range n - 8 {
		m.del(&pool, wire.EngineHash(splitmix(uint64(i)+1)))
	}
	if len(m.e) >= grown || len(m.e) != engShrinkFloor {
		t.Fatalf("after deleting to 8 of %d entries the table has %d slots (grown %d), want the floor class %d", n, len(m.e), grown, engShrinkFloor)
	}
	first := &m.e[0]
	for i := n - 8; i < n; i++ {
		m.del(&pool, wire.EngineHash(splitmix(uint64(i)+1)))
		if &m.e[0] != first || len(m.e) != engShrinkFloor {
			t.Fatalf("deleting entry %d of a floor-sized table resized it (%d slots)", i, len(m.e))
		}
	}
	if m.count != 0 {
		t.Fatalf("count %d after deleting every entry", m.count)
	}
}

// An engine table that reserves room for k inserts resizes once at most and
// ends in the class that inserting the k keys one at a time reaches, with
// the same contents: reserve changes how often a table is rehashed, never
// its memory.
func TestEngineTableReserve(t *testing.T) {
	key := func(i int) wire.EngineHash { return wire.EngineHash(splitmix(uint64(i) + 1)) }
	for _, start := range []int{0, 1, 7, 8, 19, 47, 100, 265, 1000} {
		for _, k := range []int{0, 1, 2, 6, 13, 41, 42, 200, 1500} {
			var step, res engineTable
			var pool engPool
			for i := range start {
				step.insertNew(&pool, key(i), uint32(i+1))
				res.insertNew(&pool, key(i), uint32(i+1))
			}
			res.reserve(&pool, k)
			var first *engEntry
			if len(res.e) > 0 {
				first = &res.e[0]
			}
			for i := start; i < start+k; i++ {
				step.insertNew(&pool, key(i), uint32(i+1))
				if !res.insertNew(&pool, key(i), uint32(i+1)) {
					t.Fatalf("start %d, k %d: insert %d refused", start, k, i)
				}
				if &res.e[0] != first {
					t.Fatalf("start %d, k %d: the table resized at insert %d after reserving", start, k, i-start)
				}
			}
			if len(res.e) != len(step.e) || res.count != step.count {
				t.Fatalf("start %d, k %d: reserved table has %d slots and %d entries, stepped %d and %d", start, k, len(res.e), res.count, len(step.e), step.count)
			}
			for i := range start + k {
				if got := res.get(key(i)); got != uint32(i+1) {
					t.Fatalf("start %d, k %d: key %d maps to %d", start, k, i, got)
				}
			}
			if err := res.check(); len(res.e) > 0 && err != nil {
				t.Fatalf("start %d, k %d: %v", start, k, err)
			}
		}
	}
}
