//go:build !race

package trace

import (
	"testing"

	"github.com/kvroute/kvroute/wire"
)

func TestHasherAppendAllocs(t *testing.T) {
	tr := loadSmall(t)
	for _, bs := range []int{16, 100} { // cached and fallback paths
		h := NewHasher(bs, wire.Seed)
		dst := make([]wire.BlockHash, 0, 1<<14)
		for i := range tr.Requests {
			dst = h.Append(dst[:0], &tr.Requests[i])
		}
		allocs := testing.AllocsPerRun(5, func() {
			for i := range tr.Requests {
				dst = h.Append(dst[:0], &tr.Requests[i])
			}
		})
		if allocs != 0 {
			t.Fatalf("B=%d: %v allocations per replay of a warm hasher", bs, allocs)
		}
	}
	toks := make([]uint32, 0, 1<<18)
	if a := testing.AllocsPerRun(5, func() { toks = AppendTokens(toks[:0], &tr.Requests[0]) }); a != 0 {
		t.Fatalf("AppendTokens: %v allocations", a)
	}
}
