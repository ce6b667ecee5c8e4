//go:build !race

package promhist_test

import (
	"testing"

	"github.com/kvroute/kvroute/internal/promhist"
)

// Update is on request paths: it must not allocate.
func TestUpdateAllocs(t *testing.T) {
	h := promhist.New(nil, "a_seconds", []float64{0.001, 0.01, 0.1, 1})
	if n := testing.AllocsPerRun(1000, func() { h.Update(0.05) }); n != 0 {
		t.Fatalf("Update allocates %v times", n)
	}
}
