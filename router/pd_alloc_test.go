//go:build !race

package router

import "testing"

// TestPDDecisionAllocs: a pair decision through the batcher (lookup, the
// pair's two bookings, the frees) allocates nothing once warmed up.
func TestPDDecisionAllocs(t *testing.T) {
	r, ix := pdBenchRouter(t, 2048, 4)
	defer ix.Close()
	batch := benchBatch(t, r, 2048, 16)
	decideRound(r, batch)
	for _, p := range batch {
		if !p.remote() {
			t.Fatalf("request %d not disaggregated (rule %v)", p.id, p.pd.rule)
		}
	}
	if a := testing.AllocsPerRun(50, func() { decideRound(r, batch) }); a != 0 {
		t.Errorf("P/D decide round: %v allocs, want 0", a)
	}
}
