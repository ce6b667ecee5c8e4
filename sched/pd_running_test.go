package sched

import (
	"testing"
)

// With Config.RunningWeight the decode leg counts the requests booked on a
// decode rank beside its active blocks: two small requests outweigh one
// larger one. Without it (the default) blocks alone decide. The prefill leg
// and aggregated decisions never count requests; the explained costs carry
// the term, and the chosen rank's is the lowest.
func TestDecodeCountsRunningRequests(t *testing.T) {
	for _, c := range []struct {
		rw   float64
		want uint64
	}{{0, 11}, {2, 12}} {
		cfg := pdConfig(DisaggAlways)
		cfg.RunningWeight = c.rw
		s := pdFleet(t, cfg)
		// Rank 11: two requests, 4 active blocks; rank 12: one, 5 blocks.
		for id, b := range map[uint64]struct {
			k    uint64
			base uint64
			n    int
		}{91: {11, 91, 2}, 92: {11, 92, 2}, 93: {12, 93, 5}} {
			if err := s.AddRequest(id, key(b.k), pdHashes(b.base, b.n), uint32(4*b.n), 0, PrefillLoadHint{}, 0); err != nil {
				t.Fatal(err)
			}
			s.MarkPrefillCompleted(id, 0)
		}
		r := Request{ID: 1, ISL: 64, Blocks: pdHashes(1, 16)}
		d, dec, pre := s.DecidePDExplained(nil, nil, &r, nil, 1)
		if !d.Remote() || d.Decode.Worker != key(c.want) {
			t.Fatalf("running weight %g: decode leg %+v (remote %v), want rank %d", c.rw, d.Decode, d.Remote(), c.want)
		}
		costs := map[uint64]float64{}
		for _, cd := range dec {
			costs[cd.Worker.Worker] = cd.Cost
			if cd.Chosen != (cd.Worker == key(c.want)) {
				t.Errorf("running weight %g: candidate %+v", c.rw, cd)
			}
		}
		// 64 tokens to pull at weight 1 over blocks of 4, plus 16 new
		// blocks: 32 on either rank, then active blocks and requests.
		if want := 32 + 4 + 2*c.rw; costs[11] != want {
			t.Errorf("running weight %g: rank 11 cost %g, want %g", c.rw, costs[11], want)
		}
		if want := 32 + 5 + 1*c.rw; costs[12] != want {
			t.Errorf("running weight %g: rank 12 cost %g, want %g", c.rw, costs[12], want)
		}
		for _, cd := range pre {
			if cd.Cost != pre[0].Cost {
				t.Errorf("running weight %g: prefill ranks' costs differ (%+v): requests counted there", c.rw, pre)
			}
		}
		checkInv(t, s)
	}
	cfg := pdConfig(DisaggAlways)
	cfg.RunningWeight = -1
	if _, err := New(cfg, 1); err == nil {
		t.Error("negative running weight: no error")
	}
}
