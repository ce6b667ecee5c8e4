//go:build !race

package replay

import (
	"testing"
	"time"
)

// TestEventHeapAllocs: once grown, the event heap pushes and pops without
// allocating (it carries every arrival and engine step of a replay).
func TestEventHeapAllocs(t *testing.T) {
	var h eventHeap
	for i := range 1024 {
		h.push(event{at: time.Duration(i % 97), seq: uint64(i)})
	}
	for len(h) > 0 {
		h.pop()
	}
	seq := uint64(0)
	allocs := testing.AllocsPerRun(100, func() {
		for i := range 512 {
			seq++
			h.push(event{at: time.Duration((i * 31) % 101), seq: seq, kind: evStepEnd})
		}
		for len(h) > 0 {
			h.pop()
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per 512 pushes and pops, want 0", allocs)
	}
}

// TestStepLoopAllocs: a replay's allocations do not grow with the number of
// engine steps: the per-run tables are allocated up front and the step and
// delivery buffers are reused. The same trace at 1x spreads its requests over
// 8 times the simulated time of 8x, with many more idle-to-busy transitions
// and separate steps; it must not allocate more than 10% beyond the 8x run.
func TestStepLoopAllocs(t *testing.T) {
	skipUnderInvariants(t) // the invariant checks allocate
	w := head(t, 100)
	cfg := DefaultConfig()
	run := func(speedup float64) float64 {
		cfg.Speedup = speedup
		return testing.AllocsPerRun(3, func() {
			if _, err := Simulate(w, cfg, mustPolicy(t, "kv")); err != nil {
				t.Fatal(err)
			}
		})
	}
	fast, slow := run(8), run(1)
	if slow > 1.1*fast+200 {
		t.Fatalf("%v allocations at 1x, %v at 8x: the step loop allocates", slow, fast)
	}
}
