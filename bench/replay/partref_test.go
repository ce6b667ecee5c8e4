package replay

import (
	"math"
	"os"
	"testing"

	"github.com/kvroute/kvroute/bench/trace"
)

func TestPartitionedLRUReport(t *testing.T) {
	path := os.Getenv("KVROUTE_PARTREF_TRACE")
	if path == "" {
		t.Skip("KVROUTE_PARTREF_TRACE not set")
	}
	tr, err := trace.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := Prepare(tr, 16, path)
	if err != nil {
		t.Fatal(err)
	}
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
