package synth

import (
	"testing"

	"github.com/kvroute/kvroute/bench/trace"
)

// TestSharedPrefixStats pins the shared-prefix workload's statistics to the
// shape it stands for: the first block in every request, about 1,700–1,900
// requests sharing a touched block, about 24 blocks per request, up to about
// 250.
func TestSharedPrefixStats(t *testing.T) {
	tr := generate(t, SharedPrefix())
	st := Stats(tr)
	t.Logf("%+v", st)
	if st.Requests != 12000 || st.FirstShared != 1 {
		t.Fatalf("requests %d, first block shared by %.3f of them; want 12000 and 1", st.Requests, st.FirstShared)
	}
	if st.MeanSharers < 1500 || st.MeanSharers > 2000 {
		t.Errorf("mean sharers %.0f, want 1500–2000", st.MeanSharers)
	}
	if st.MeanBlocks < 20 || st.MeanBlocks > 28 {
		t.Errorf("mean blocks %.1f, want 20–28", st.MeanBlocks)
	}
	if st.MaxBlocks < 180 || st.MaxBlocks > 320 {
		t.Errorf("max blocks %d, want 180–320", st.MaxBlocks)
	}
	last := tr.Requests[0].Time
	for i := range tr.Requests {
		r := &tr.Requests[i]
		if !r.HasTime || r.Time < last {
			t.Fatalf("request %d: time %v (has %v) after %v: every turn is timestamped, in order", i, r.Time, r.HasTime, last)
		}
		last = r.Time
	}
}

func TestSystemTokens(t *testing.T) {
	c := Default()
	c.Requests, c.SystemTokens = 500, Dist{Kind: Fixed, A: 3 * trace.IDBlockSize}
	tr := generate(t, c)
	sys := tr.Requests[0].HashIDs[:3]
	for i := range tr.Requests {
		ids := tr.Requests[i].HashIDs
		if len(ids) < 3 || ids[0] != sys[0] || ids[1] != sys[1] || ids[2] != sys[2] {
			t.Fatalf("request %d starts %v, want the system prompt %v", i, ids[:min(3, len(ids))], sys)
		}
	}
	// Without a system prompt no two groups share a first block.
	st := Stats(generate(t, Default()))
	if st.FirstShared >= 1 {
		t.Fatalf("default workload: first block shared by %.2f of requests, want < 1", st.FirstShared)
	}
}

func TestStats(t *testing.T) {
	tr := &trace.Trace{Requests: []trace.Request{{HashIDs: []uint64{1, 2}}, {HashIDs: []uint64{1, 3, 4}}, {HashIDs: []uint64{5}}}}
	st := Stats(tr)
	// Pairs: 1 (2 holders) twice, 2, 3, 4, 5 (1 each): (2+2+1+1+1+1)/6.
	if st.MeanSharers != 8.0/6 || st.MeanBlocks != 2 || st.MaxBlocks != 3 || st.DistinctBlocks != 5 || st.FirstShared != 2.0/3 {
		t.Fatalf("%+v", st)
	}
}
