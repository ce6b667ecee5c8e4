//go:build !race && !invariants

package kvcache

import (
	"testing"

	"github.com/kvroute/kvroute/wire"
)

// TestSteadyStateAllocs: after warm-up, allocate (with evictions and reuse),
// grow, drain events and free allocate nothing.
func TestSteadyStateAllocs(t *testing.T) {
	const bs, blocks = 4, 16
	pool := workload(64, blocks, 4, 6)
	m := New(Config{Capacity: 128, BlockSize: bs})
	id := uint64(0)
	step := func() {
		for i, p := range pool {
			id++
			if _, err := m.Allocate(id, p, (blocks-2)*bs+1); err != nil {
				t.Fatal(err)
			}
			if _, err := m.Grow(id, p, blocks*bs); err != nil {
				t.Fatal(err)
			}
			if i%3 == 0 {
				m.Preempt(id)
			} else {
				m.Free(id)
			}
		}
		m.Events()
		m.Reset()
	}
	for range 3 {
		step()
	}
	if a := testing.AllocsPerRun(20, step); a != 0 {
		t.Fatalf("%v allocations per round", a)
	}
	if st := m.Stats(); st.RemovedBlocks == 0 || st.ReusedBlocks == 0 {
		t.Fatalf("the round missed eviction or reuse: %+v", st)
	}
	local := []wire.BlockHash{1, 2, 3}
	if a := testing.AllocsPerRun(100, func() { m.Match(local) }); a != 0 {
		t.Fatalf("Match: %v allocations", a)
	}
}
