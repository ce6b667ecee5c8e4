//go:build !race && !invariants

package engine

import (
	"testing"
	"time"
)

// TestStepAllocs: a steady decode step allocates nothing.
func TestStepAllocs(t *testing.T) {
	e := loaded(t, 64, 1000)
	now := time.Duration(0)
	if a := testing.AllocsPerRun(200, func() {
		now += e.Step(now)
		e.Reset()
	}); a != 0 {
		t.Fatalf("%v allocations per step", a)
	}
	if st := e.Stats(); st.DecodeTokens < 200*64 {
		t.Fatalf("decoded %d tokens", st.DecodeTokens)
	}
}
