// Package slowbench is a benchmark whose cost is set by the environment, for
// benchgate's test: GATE_SLOW=k does k times the work and allocates.
package slowbench

import (
	"os"
	"strconv"
	"testing"
)

var (
	sink uint64
	keep []byte
)

func work(k int, alloc bool) {
	x := uint64(1)
	for i := 0; i < 20000*k; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	sink += x
	if alloc {
		keep = make([]byte, 64)
	}
}

func BenchmarkWork(b *testing.B) {
	k, _ := strconv.Atoi(os.Getenv("GATE_SLOW"))
	b.ReportAllocs()
	for b.Loop() {
		work(max(k, 1), k > 1)
	}
}
