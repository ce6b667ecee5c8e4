package replay

import (
	"reflect"
	"testing"

	"github.com/kvroute/kvroute/bench/synth"
)

func pdWorkload(t *testing.T, n int) *Workload {
	t.Helper()
	c := synth.Default()
	c.Requests, c.Rate = n, 2
	tr, err := synth.Generate(c)
	if err != nil {
		t.Fatal(err)
	}
	w, err := Prepare(tr, 16, "synth")
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestPDCells: every cell serves every request; the aggregated cell moves
// no KV; always-disaggregated cells prefill every request remotely (when
// nothing queues) and pull its KV; the conditional cell serves some locally
// and pulls less; the kv prefill choice finds more of the prompts cached
// than round-robin pairs; and under load the aggregated cell's decodes,
// sharing steps with prefills, see a higher ITL p99 than the disaggregated
// kv cell's. A run is a pure function of its inputs.
func TestPDCells(t *testing.T) {
	w := pdWorkload(t, 160)
	cfg := PDConfig{Prefill: 2, Decode: 4}
	res, err := RunPD(w, cfg, []float64{0.1, 2}, 0)
	if err != nil {
		t.Fatal(err)
	}
	get := func(sp float64, c PDCell) PDResult {
		for _, r := range res {
			if r.Speedup == sp && r.Cell == c.String() {
				return r
			}
		}
		t.Fatalf("no %v at %g", c, sp)
		return PDResult{}
	}
	for _, r := range res {
		t.Logf("%g %-9s ttft %7.1f itl p99 %6.1f hit %.3f remote %3d xfer %6.1f GB util %.2f/%.2f queued %d",
			r.Speedup, r.Cell, r.Result.TTFTMeanMs, r.Result.ITLP99Ms, r.Result.HitRatio, r.Remote, r.TransferGB, r.PrefillUtil, r.DecodeUtil, r.Result.Queued)
		if r.Result.Completed != w.Len() {
			t.Errorf("%g %s: %d of %d completed", r.Speedup, r.Cell, r.Result.Completed, w.Len())
		}
		if r.PrefillUtil <= 0 || r.PrefillUtil > 1 || r.DecodeUtil <= 0 || r.DecodeUtil > 1 {
			t.Errorf("%g %s: utilisation %.3f/%.3f", r.Speedup, r.Cell, r.PrefillUtil, r.DecodeUtil)
		}
	}
	agg, rr, kv, cond := get(0.1, CellAggKV), get(0.1, CellDisaggRR), get(0.1, CellDisaggKV), get(0.1, CellCondKV)
	if agg.Remote != 0 || agg.TransferGB != 0 {
		t.Errorf("agg-kv: %d remote, %.1f GB pulled", agg.Remote, agg.TransferGB)
	}
	for _, r := range []PDResult{rr, kv} {
		if r.Remote != w.Len() || r.TransferGB <= 0 {
			t.Errorf("%s: %d of %d remote, %.1f GB", r.Cell, r.Remote, w.Len(), r.TransferGB)
		}
	}
	if cond.Remote == 0 || cond.Remote >= kv.Remote || cond.TransferGB >= kv.TransferGB {
		t.Errorf("cond-kv: %d remote, %.1f GB; disagg-kv %d, %.1f GB", cond.Remote, cond.TransferGB, kv.Remote, kv.TransferGB)
	}
	if kv.Result.HitRatio <= rr.Result.HitRatio || kv.Result.TTFTMeanMs >= rr.Result.TTFTMeanMs {
		t.Errorf("disagg-kv hit %.3f, TTFT %.1f ms; round-robin pairs %.3f, %.1f ms", kv.Result.HitRatio, kv.Result.TTFTMeanMs, rr.Result.HitRatio, rr.Result.TTFTMeanMs)
	}
	if a, k := get(2, CellAggKV).Result.ITLP99Ms, get(2, CellDisaggKV).Result.ITLP99Ms; a <= k {
		t.Errorf("at speedup 2: agg-kv ITL p99 %.1f ms, not above disagg-kv's %.1f", a, k)
	}
	again, err := SimulatePD(w, PDConfig{Prefill: 2, Decode: 4, Speedup: 2}, CellCondKV)
	if err != nil {
		t.Fatal(err)
	}
	if c := get(2, CellCondKV); !reflect.DeepEqual(again, c) {
		t.Errorf("rerun differs:\n%+v\n%+v", again, c)
	}
}

func TestPDConfigErrors(t *testing.T) {
	w := pdWorkload(t, 4)
	for _, c := range []PDConfig{{Prefill: 0, Decode: 2}, {Prefill: 1, Decode: 0}, {Prefill: 1, Decode: 1, TransferGBps: -1}} {
		if _, err := SimulatePD(w, c, CellDisaggKV); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	if _, err := SimulatePD(w, PDConfig{Prefill: 1, Decode: 1}, PDCell(9)); err == nil {
		t.Error("unknown cell: no error")
	}
}
