package sched

import (
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestDecidePDBatchIsDecidePD decides random batches with DecidePDBatch and
// the same requests one by one with DecidePD on a twin scheduler: every
// pair decision, and the loads after, are the same.
func TestDecidePDBatchIsDecidePD(t *testing.T) {
	for _, pol := range []DisaggPolicy{DisaggAlways, DisaggISL, DisaggLoad, DisaggISLOrLoad} {
		cfg := pdConfig(pol)
		cfg.QueueDepth = 0 // nothing waits: a batch admits once, DecidePD before each request
		a, b := pdFleet(t, cfg), pdFleet(t, cfg)
		rng := rand.New(rand.NewPCG(3, uint64(pol)))
		id := uint64(0)
		now := int64(0)
		var active []uint64
		for round := range 40 {
			now += int64(rng.IntN(5_000_000))
			n := 1 + rng.IntN(8)
			batch := make([]Request, n)
			ovs := make([][]Overlap, n)
			for i := range batch {
				id++
				blocks := 1 + rng.IntN(12)
				batch[i] = Request{ID: id, ISL: uint32(blocks * cfg.BlockSize), Blocks: pdHashes(uint64(rng.IntN(4)), blocks)}
				if rng.IntN(2) == 0 {
					ovs[i] = []Overlap{{Worker: key(uint64([]int{1, 2, 11, 12}[rng.IntN(4)])), Device: uint32(rng.IntN(blocks + 1))}}
				}
			}
			got := a.DecidePDBatch(nil, batch, ovs, now)
			for i := range batch {
				want := b.DecidePD(&batch[i], ovs[i], now)
				if !reflect.DeepEqual(got[i], want) {
					t.Fatalf("policy %v round %d request %d: batch %+v, one by one %+v", pol, round, i, got[i], want)
				}
				if want.Decode.Outcome == Routed {
					active = append(active, batch[i].ID)
				}
			}
			// Free some, end some prefills, in both.
			for len(active) > 0 && rng.IntN(3) > 0 {
				k := rng.IntN(len(active))
				if rng.IntN(2) == 0 {
					a.PrefillDone(active[k], now)
					b.PrefillDone(active[k], now)
					continue
				}
				a.Free(active[k], now)
				b.Free(active[k], now)
				active = append(active[:k], active[k+1:]...)
			}
			if la, lb := a.AppendLoads(nil, nil, now), b.AppendLoads(nil, nil, now); !reflect.DeepEqual(la, lb) {
				t.Fatalf("policy %v round %d: loads differ:\n%+v\n%+v", pol, round, la, lb)
			}
			checkInv(t, a)
		}
		if a.Stats() != b.Stats() {
			t.Errorf("policy %v: stats %+v and %+v", pol, a.Stats(), b.Stats())
		}
	}
}
