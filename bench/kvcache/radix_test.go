package kvcache

import (
	"math/rand/v2"
	"testing"

	"github.com/kvroute/kvroute/bench/kvcache/kvmodel"
	"github.com/kvroute/kvroute/radix"
	"github.com/kvroute/kvroute/wire"
)

// checkTree checks that tree holds, for m's worker, exactly m's cached
// blocks: the worker's tree size is the number of held blocks; every held
// block's full prefix path matches to its end for that worker; and the
// tree's Dump, replayed into a strict model, gives back exactly the held
// (engine hash, local hash, parent) triples.
func checkTree(t *testing.T, tree *radix.Tree, m *Manager, ctx string) {
	t.Helper()
	k := m.Config().Worker
	held := m.Held(nil)
	if got := tree.TreeSize(k); int(got) != len(held) {
		t.Fatalf("%s: tree size %d for %v, manager holds %d", ctx, got, k, len(held))
	}
	var model kvmodel.Model
	for _, ev := range tree.Dump(nil) {
		if ev.Worker != k {
			continue
		}
		ev.ID = 0 // dump events carry no publisher ids
		if err := model.Apply(&ev); err != nil {
			t.Fatalf("%s: dump: %v", ctx, err)
		}
	}
	if err := model.Check(k, toModel(held)); err != nil {
		t.Fatalf("%s: dump differs from the manager: %v", ctx, err)
	}
	var ov []radix.Overlap
	for _, b := range held {
		path := model.Path(k, b.Engine)
		ov = tree.Match(ov[:0], path)
		if n := overlapOf(ov, k); n != len(path) {
			t.Fatalf("%s: held block at depth %d matches %d blocks", ctx, len(path), n)
		}
	}
}

func overlapOf(ov []radix.Overlap, k wire.WorkerKey) int {
	for _, o := range ov {
		if o.Worker == k {
			return int(o.Blocks)
		}
	}
	return 0
}

// TestRandomEventsRebuildRadix is the key property against the real index:
// several managers publish into one radix.Tree; after every step each
// manager's events, applied in order, have left the tree holding exactly the
// blocks the manager holds, with no error, unknown removal or conflict, and
// the tree's overlap for random prompts equals the manager's own Match.
func TestRandomEventsRebuildRadix(t *testing.T) {
	seed := testSeed(t)
	tree := radix.New()
	mgrs := []*Manager{
		New(Config{Capacity: 12, BlockSize: 1, Worker: wire.WorkerKey{Worker: 1}}),
		New(Config{Capacity: 40, BlockSize: 4, Worker: wire.WorkerKey{Worker: 2, Dp: 1}}),
		New(Config{Capacity: 100, BlockSize: 2, Worker: wire.WorkerKey{Worker: 3}}),
	}
	rngs := make([]*rand.Rand, len(mgrs))
	for i := range mgrs {
		rngs[i] = rand.New(rand.NewPCG(seed, uint64(i)))
	}
	probeRng := rand.New(rand.NewPCG(seed, 99))
	probe := make([]wire.BlockHash, 6)
	var ov []radix.Overlap
	// Distinct worker ids: a Cleared clears every dp rank of its worker id
	// in the index, so two managers sharing an id would clear each other.
	// The managers run one after the other into the same tree.
	const steps = 1500
	for i, m := range mgrs {
		done := 0
		randomOps(t, rngs[i], m, steps, func(step int) {
			for _, ev := range m.Events() {
				res, err := tree.Apply(&ev)
				if err != nil || res.Unknown != 0 || res.Conflicts != 0 {
					t.Fatalf("manager %d step %d: apply %v event %d: %+v, %v", i, step, ev.Kind, ev.ID, res, err)
				}
			}
			m.Reset()
			if err := tree.CheckInvariants(); err != nil {
				t.Fatalf("manager %d step %d: tree: %v", i, step, err)
			}
			if step%7 == 0 || step == steps-1 {
				checkTree(t, tree, m, "after its own step")
			}
			for j := range probe {
				probe[j] = wire.BlockHash(probeRng.IntN(3)*7919 + 1)
			}
			ov = tree.Match(ov[:0], probe)
			for _, o := range mgrs[:i+1] {
				if got, want := overlapOf(ov, o.Config().Worker), o.Match(probe); got != want {
					t.Fatalf("manager %d step %d: tree overlap of %v is %d, its manager's %d",
						i, step, o.Config().Worker, got, want)
				}
			}
			done++
		})
		if done != steps {
			t.Fatalf("manager %d ran %d steps", i, done)
		}
	}
	// Every manager's blocks are still exactly in the tree after the others
	// ran.
	for _, m := range mgrs {
		checkTree(t, tree, m, "at the end")
	}
}

// TestHostTierRebuildsRadix: managers with a host tier (offload on eviction)
// publish into one radix.Tree. After every step the tree holds, per worker,
// the union of the device and host copies; no event fails, names an unknown
// block or conflicts; and for random prompts the tree's device overlap and
// host extension equal the manager's MatchTiers.
func TestHostTierRebuildsRadix(t *testing.T) {
	seed := testSeed(t)
	tree := radix.New()
	mgrs := []*Manager{
		New(Config{Capacity: 12, BlockSize: 1, Worker: wire.WorkerKey{Worker: 1}, HostCapacity: 30}),
		New(Config{Capacity: 40, BlockSize: 4, Worker: wire.WorkerKey{Worker: 2, Dp: 1}, HostCapacity: 7}),
		New(Config{Capacity: 100, BlockSize: 2, Worker: wire.WorkerKey{Worker: 3}, HostCapacity: 60}),
	}
	probeRng := rand.New(rand.NewPCG(seed, 99))
	probe := make([]wire.BlockHash, 6)
	var ov []radix.Overlap
	hostHits := 0
	const steps = 1500
	for i, m := range mgrs {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		randomOps(t, rng, m, steps, func(step int) {
			for _, ev := range m.Events() {
				res, err := tree.Apply(&ev)
				if err != nil || res.Unknown != 0 || res.Conflicts != 0 {
					t.Fatalf("manager %d step %d: apply %v %v event %d: %+v, %v", i, step, ev.Tier, ev.Kind, ev.ID, res, err)
				}
			}
			m.Reset()
			if err := tree.CheckInvariants(); err != nil {
				t.Fatalf("manager %d step %d: tree: %v", i, step, err)
			}
			union := map[wire.EngineHash]bool{}
			for _, b := range m.Held(nil) {
				union[b.Engine] = true
			}
			for _, b := range m.HostHeld(nil) {
				union[b.Engine] = true
			}
			if got := tree.TreeSize(m.Config().Worker); int(got) != len(union) {
				t.Fatalf("manager %d step %d: tree size %d, device ∪ host %d", i, step, got, len(union))
			}
			for j := range probe {
				probe[j] = wire.BlockHash(probeRng.IntN(3)*7919 + 1)
			}
			ov = tree.Match(ov[:0], probe)
			for _, o := range mgrs[:i+1] {
				dev, host := o.MatchTiers(probe)
				var got radix.Overlap
				for _, x := range ov {
					if x.Worker == o.Config().Worker {
						got = x
					}
				}
				if int(got.Blocks) != dev || int(got.Host) != host || got.Disk != 0 {
					t.Fatalf("manager %d step %d: tree overlap of %v is %+v, its manager's device %d host %d",
						i, step, o.Config().Worker, got, dev, host)
				}
				hostHits += host
			}
		})
	}
	evicted := uint64(0)
	for _, m := range mgrs {
		st := m.HostStats()
		if st.Offloaded == 0 {
			t.Errorf("%v: nothing offloaded: %+v", m.Config().Worker, st)
		}
		evicted += st.Evicted // Clear empties the host, so a big one may never fill
	}
	if evicted == 0 {
		t.Error("no host copy was ever evicted")
	}
	if hostHits == 0 {
		t.Error("no probe matched a host block")
	}
}
