package radix

import (
	"testing"

	"github.com/kvroute/kvroute/wire"
)

// A ByEngine Stored event (vLLM's offloading connector: the CPU copies of
// GPU blocks, by hash, without tokens) adds the host tier to the blocks the
// worker holds, so that they survive the GPU's eviction as host blocks.
func TestApplyTierByEngine(t *testing.T) {
	w := wire.WorkerKey{Worker: 7}
	hs := []wire.BlockHash{101, 102, 103}
	blocks := []wire.Block{{Engine: 1, Local: 101}, {Engine: 2, Local: 102}, {Engine: 3, Local: 103}}
	tr := New()
	mustApply := func(ev wire.Event) Result {
		t.Helper()
		ev.Worker = w
		res, err := tr.Apply(&ev)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	mustApply(wire.Event{Kind: wire.KindStored, Blocks: blocks})
	byEngine := []wire.Block{{Engine: 1}, {Engine: 2}, {Engine: 3}, {Engine: 99}}
	if res := mustApply(wire.Event{Kind: wire.KindStored, Tier: wire.TierHost, ByEngine: true, Blocks: byEngine}); res.Stored != 3 || res.Unknown != 1 {
		t.Fatalf("by engine: %+v, want 3 stored, 1 unknown", res)
	}
	if res := mustApply(wire.Event{Kind: wire.KindStored, Tier: wire.TierHost, ByEngine: true, Blocks: byEngine[:1]}); res.Stored != 0 {
		t.Fatalf("again: %+v", res)
	}
	mustApply(wire.Event{Kind: wire.KindRemoved, Blocks: []wire.Block{{Engine: 2}, {Engine: 3}}})
	ov := tr.Match(nil, hs)
	if len(ov) != 1 || ov[0].Blocks != 1 || ov[0].Host != 2 {
		t.Fatalf("after the GPU evicted 2 blocks: %+v, want 1 device + 2 host", ov)
	}
	mustApply(wire.Event{Kind: wire.KindRemoved, Tier: wire.TierHost, Blocks: []wire.Block{{Engine: 3}}})
	if ov = tr.Match(nil, hs); len(ov) != 1 || ov[0].Blocks != 1 || ov[0].Host != 1 {
		t.Fatalf("after the CPU evicted 1: %+v", ov)
	}
	// A device tier by hash, and an unknown worker, are refused.
	if res := mustApply(wire.Event{Kind: wire.KindStored, ByEngine: true, Blocks: byEngine[:1]}); res.Stored != 0 || res.Unknown != 1 {
		t.Fatalf("device by engine: %+v", res)
	}
	ev := wire.Event{Worker: wire.WorkerKey{Worker: 8}, Kind: wire.KindStored, Tier: wire.TierHost, ByEngine: true, Blocks: byEngine[:2]}
	if res, err := tr.Apply(&ev); err != nil || res.Unknown != 2 {
		t.Fatalf("unknown worker: %+v %v", res, err)
	}
}
