//go:build !race && !invariants

package replay

import (
	"math"
	"os"
	"testing"

	"github.com/kvroute/kvroute/bench/trace"
)

// shippedTrace is the Mooncake trace shipped in the repository.
const shippedTrace = "../traces/mooncake_synthetic_trace.jsonl"

// TestPartitionedLRUReport checks the figures docs/decisions/0026 quotes for
// Workload.PartitionedLRU on the shipped Mooncake trace, 8 ranks of GPU +
// host blocks each (16384 + 65536, block size 16): eight partitioned LRUs
// reach 1.00 of the pooled one with load ignored (max share of work 1.05),
// 0.99 at 50% slack over 512 requests, 0.92 at 25% over 128 and 0.71 at 10%
// over 32. The placement is offline and deterministic, so each figure must
// round to the quoted one. With KVROUTE_PARTREF_TRACE set it also logs the
// whole sweep (GPU only and GPU + host, windows 32 to 512, slack 10% to
// none) on that trace. Not built with -race or -tags invariants (minutes
// there): the plain test pass runs it.
func TestPartitionedLRUReport(t *testing.T) {
	if testing.Short() {
		t.Skip("short: 5 passes of LRUs over the 3,993-request trace")
	}
	w := prepareFile(t, shippedTrace)
	const ranks, capacity = 8, 16384 + 65536
	pooled, _ := w.PooledLRU(ranks * capacity)
	if pooled < 0.5 {
		t.Fatalf("pooled LRU hit ratio %.3f: the shipped trace's reference is 0.593", pooled)
	}
	for _, c := range []struct {
		slack    float64
		window   int
		ofPooled float64 // the figure quoted, to two decimals
		maxShare float64 // the largest share of the work quoted, 0: none
	}{
		{math.Inf(1), 128, 1.00, 1.05},
		{0.5, 512, 0.99, 0},
		{0.25, 128, 0.92, 0},
		{0.1, 32, 0.71, 0},
	} {
		h, share := w.PartitionedLRU(ranks, capacity, c.slack, c.window)
		t.Logf("slack %.2f, window %d: hit %.3f, %.3f of pooled %.3f, max share %.3f", c.slack, c.window, h, h/pooled, pooled, share)
		if math.Abs(h/pooled-c.ofPooled) >= 0.005 {
			t.Errorf("slack %.2f, window %d: %.3f of the pooled LRU, quoted %.2f", c.slack, c.window, h/pooled, c.ofPooled)
		}
		if c.maxShare > 0 && math.Abs(share-c.maxShare) >= 0.005 {
			t.Errorf("slack %.2f, window %d: max share of work %.3f, quoted %.2f", c.slack, c.window, share, c.maxShare)
		}
	}
	if path := os.Getenv("KVROUTE_PARTREF_TRACE"); path != "" {
		logPartitionedSweep(t, prepareFile(t, path))
	}
}

func prepareFile(t *testing.T, path string) *Workload {
	t.Helper()
	tr, err := trace.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := Prepare(tr, 16, path)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// logPartitionedSweep logs PartitionedLRU against PooledLRU over 8 ranks of
// GPU only and GPU + host blocks, windows and slacks.
func logPartitionedSweep(t *testing.T, w *Workload) {
	for _, c := range []int{16384, 16384 + 65536} {
		pooled, _ := w.PooledLRU(8 * c)
		t.Logf("capacity %d per rank: pooled %.3f", c, pooled)
		for _, win := range []int{32, 128, 512} {
			for _, sl := range []float64{0.1, 0.25, 0.5, 1, math.Inf(1)} {
				h, share := w.PartitionedLRU(8, c, sl, win)
				t.Logf("  window %d slack %.2f: hit %.3f (%.2f of pooled) max share %.2f", win, sl, h, h/pooled, share)
			}
		}
	}
}
