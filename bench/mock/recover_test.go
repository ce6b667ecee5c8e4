package mock

import (
	"testing"

	"github.com/kvroute/kvroute/bench/kvcache"
	"github.com/kvroute/kvroute/radix"
	"github.com/kvroute/kvroute/wire"
)

// A dump holds both tiers: applied in order to an empty index, it rebuilds
// every device block and every host copy whose parent is placed (on the
// host or the device), parents first, and leaves out the blocks whose
// parent is in neither tier. Without the host tier, a dump would replace
// the worker's host copies in an index by nothing while its id said the
// index was up to date.
func TestDumpEventsBothTiers(t *testing.T) {
	k := wire.WorkerKey{Worker: 7}
	blk := func(e, parent wire.EngineHash) kvcache.HeldBlock {
		return kvcache.HeldBlock{Engine: e, Local: wire.BlockHash(e) * 10, Parent: parent, HasParent: parent != 0}
	}
	// Device: 1 <- 2 <- 3, 1 <- 4. Host: copies of 1 and 2 (inclusive),
	// 5 below device 3, 6 below host 5, a host-only chain 8 <- 9, and 11
	// below 10, which no tier holds.
	device := []kvcache.HeldBlock{blk(3, 2), blk(1, 0), blk(4, 1), blk(2, 1)}
	host := []kvcache.HeldBlock{blk(6, 5), blk(2, 1), blk(5, 3), blk(9, 8), blk(1, 0), blk(11, 10), blk(8, 0)}
	evs := dumpEvents(device, host, k, 42)

	var tree radix.Tree
	got := map[wire.Tier]map[wire.EngineHash]bool{wire.TierDevice: {}, wire.TierHost: {}}
	for i := range evs {
		ev := &evs[i]
		if ev.ID != 42 || ev.Worker != k || ev.Kind != wire.KindStored {
			t.Fatalf("event %d: %+v, want Stored of %v at id 42", i, ev, k)
		}
		if _, err := tree.Apply(ev); err != nil {
			t.Fatalf("event %d (%+v) does not apply in order: %v", i, ev, err)
		}
		for _, b := range ev.Blocks {
			if got[ev.Tier][b.Engine] {
				t.Fatalf("block %d twice in tier %d", b.Engine, ev.Tier)
			}
			got[ev.Tier][b.Engine] = true
		}
	}
	want := map[wire.Tier][]wire.EngineHash{wire.TierDevice: {1, 2, 3, 4}, wire.TierHost: {1, 2, 5, 6, 8, 9}}
	for tier, es := range want {
		if len(got[tier]) != len(es) {
			t.Errorf("tier %d holds %v, want %v", tier, got[tier], es)
		}
		for _, e := range es {
			if !got[tier][e] {
				t.Errorf("tier %d lacks block %d (holds %v)", tier, e, got[tier])
			}
		}
	}
}
