package node

import (
	"log/slog"
	"testing"
	"time"

	"github.com/kvroute/kvroute/bench/kvcache"
	"github.com/kvroute/kvroute/bench/mock"
	"github.com/kvroute/kvroute/ingest/recovery"
	"github.com/kvroute/kvroute/internal/natstest"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/plane"
)

// tierEntry is one (block, worker, tier) entry.
type tierEntry struct {
	entry
	tier wire.Tier
}

// fleetTierEntries returns every block the fleet's engines hold in each
// tier that an index can place: a device block whose device ancestors are
// all cached, a host copy whose parent is placeable in some tier.
func fleetTierEntries(f *mock.Fleet) map[tierEntry]bool {
	out := map[tierEntry]bool{}
	for _, fw := range f.Workers() {
		for r := range fw.DPSize() {
			k := wire.WorkerKey{Worker: fw.ID(), Dp: uint32(r)}
			dev := map[entry]bool{}
			fleetRankEntries(dev, fw.Rank(r), k)
			placed := map[wire.EngineHash]bool{}
			for e := range dev {
				out[tierEntry{e, wire.TierDevice}] = true
				placed[e.engine] = true
			}
			host := fw.Rank(r).HostHeld(nil)
			byEngine := map[wire.EngineHash]kvcache.HeldBlock{}
			for _, b := range host {
				byEngine[b.Engine] = b
			}
			var ok func(b kvcache.HeldBlock, depth int) bool
			ok = func(b kvcache.HeldBlock, depth int) bool {
				if !b.HasParent || placed[b.Parent] {
					return true
				}
				p, found := byEngine[b.Parent]
				return found && depth < len(host) && ok(p, depth+1)
			}
			for _, b := range host {
				if ok(b, 0) {
					out[tierEntry{entry{k, b.Engine, b.Local}, wire.TierHost}] = true
				}
			}
		}
	}
	return out
}

// indexTierEntries returns the index's (block, worker, tier) entries.
func indexTierEntries(t *testing.T, ix *shard.Index) map[tierEntry]bool {
	t.Helper()
	evs, err := ix.Dump(nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[tierEntry]bool{}
	for _, ev := range evs {
		for _, b := range ev.Blocks {
			out[tierEntry{entry{ev.Worker, b.Engine, b.Local}, ev.Tier}] = true
		}
	}
	return out
}

// tierDiff returns, per worker, how many of the fleet's entries the index
// lacks (below) and how many it has that the fleet does not (above).
func tierDiff(t *testing.T, ix *shard.Index, f *mock.Fleet) (below, above map[uint64]int) {
	a, b := indexTierEntries(t, ix), fleetTierEntries(f)
	below, above = map[uint64]int{}, map[uint64]int{}
	for e := range b {
		if !a[e] {
			below[e.k.Worker]++
		}
	}
	for e := range a {
		if !b[e] {
			above[e.k.Worker]++
		}
	}
	return below, above
}

// A router restarted while the fleet is under load (its caches storing,
// evicting and, with a host tier, offloading all along) asks every worker
// for what it missed and, once the load ends, agrees exactly with every
// worker's cache, tier by tier, within a generous bound.
func TestRestartUnderLoadAgrees(t *testing.T) {
	for _, c := range []struct {
		name      string
		transport string
		hostKV    int
	}{
		{"native", plane.TransportNative, 0},
		{"dynamo", plane.TransportDynamo, 0},
		{"native-host-tier", plane.TransportNative, 64},
		{"dynamo-host-tier", plane.TransportDynamo, 64},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := natstest.Server(t)
			fc := faultyFleet(c.transport)
			fc.DropFraction, fc.DupFraction = 0, 0
			fc.Speedup, fc.HostKVBlocks = 200, c.hostKV
			f, err := mock.Start(fc, natstest.Connect(t, s))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = f.Close() })
			cfg := Config{
				Index: shard.Config{Shards: 2}, BlockSize: fc.BlockSize, Subjects: subjects(t), NATSURL: s.ClientURL(),
				Recovery: recovery.Config{Interval: 250 * time.Millisecond, Timeout: 2 * time.Second, MinBackoff: 20 * time.Millisecond, MaxBackoff: 500 * time.Millisecond},
				Logger:   slog.New(slog.DiscardHandler),
			}
			n1, err := Start(cfg)
			if err != nil {
				t.Fatal(err)
			}
			traffic(t, f, 91, 200)
			load := make(chan error, 1)
			go func() { load <- sendTraffic(f.Workers(), 92, 2000) }()
			time.Sleep(100 * time.Millisecond) // into the load
			n1.NC.Close()                      // killed: no drain, no goodbye
			_ = n1.Close()
			time.Sleep(100 * time.Millisecond) // the load goes on without a router
			n2, err := Start(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = n2.Close() })
			if err := <-load; err != nil {
				t.Fatal(err)
			}
			if err := waitIdle(f.Workers(), 30*time.Second); err != nil {
				t.Fatal(err)
			}
			idle := time.Now()
			deadline := idle.Add(15 * time.Second) // the sweep runs every 250 ms
			for {
				below, above := tierDiff(t, n2.Index, f)
				if len(below) == 0 && len(above) == 0 {
					t.Logf("agreement %s after the load; recovery %+v", time.Since(idle).Round(time.Millisecond), n2.Recovery.Stats())
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("15 s after the load the index lacks %v and has %v extra entries per worker (fleet %d entries); recovery %+v",
						below, above, len(fleetTierEntries(f)), n2.Recovery.Stats())
				}
				time.Sleep(50 * time.Millisecond) // polling: convergence has no single event to await
			}
		})
	}
}
