package replay

import (
	"math"
	"testing"
)

// One partition with any slack is the pooled LRU; four partitions of a
// quarter each, with load ignored, keep most of its hits and a balanced
// share of the work.
func TestPartitionedLRU(t *testing.T) {
	w := head(t, 200)
	for _, c := range []int{16384, 65536} {
		pooled, _ := w.PooledLRU(c)
		if h, share := w.PartitionedLRU(1, c, math.Inf(1), 64); h != pooled || share != 1 {
			t.Errorf("capacity %d: one partition %v (share %v), pooled %v", c, h, share, pooled)
		}
		loose, share := w.PartitionedLRU(4, c/4, math.Inf(1), 64)
		t.Logf("capacity %d: pooled %.3f, 4 partitions %.3f (max share %.2f)", c, pooled, loose, share)
		if pooled <= 0 || loose < 0.8*pooled || share > 1.5 {
			t.Errorf("capacity %d: 4 partitions %v (share %v), pooled %v", c, loose, share, pooled)
		}
	}
}

// The placement diagnostics: for kv the best cached prefix at dispatch is
// at least the chosen rank's and both are reported; kv-sticky routes every
// request to its best rank (nothing waits at this load), and the policies
// without an index report neither.
func TestDispatchDiagnostics(t *testing.T) {
	w := head(t, sized(200, 60))
	rep, err := Run(w, DefaultConfig(), Sweep{Policies: []Policy{mustPolicy(t, "kv"), mustPolicy(t, "kv-sticky"), mustPolicy(t, "round-robin")}, Speedups: []float64{1}})
	if err != nil {
		t.Fatal(err)
	}
	kv, st, rr := rep.Result("kv", 1), rep.Result("kv-sticky", 1), rep.Result("round-robin", 1)
	if kv.RoutedHitRatio <= 0 || kv.BestHitRatio < kv.RoutedHitRatio {
		t.Errorf("kv: best %v, routed %v", kv.BestHitRatio, kv.RoutedHitRatio)
	}
	if st.RoutedHitRatio <= 0 || st.RoutedHitRatio != st.BestHitRatio {
		t.Errorf("kv-sticky: best %v, routed %v", st.BestHitRatio, st.RoutedHitRatio)
	}
	if rr.BestHitRatio != 0 || rr.RoutedHitRatio != 0 {
		t.Errorf("round-robin: best %v, routed %v, want none", rr.BestHitRatio, rr.RoutedHitRatio)
	}
}
