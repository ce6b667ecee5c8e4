//go:build !race

package epp_test

import (
	"testing"

	"github.com/kvroute/kvroute/router"
)

// TestPickAllocs: the EPP's decision (Router.Pick with fallbacks, then
// PickDone) allocates nothing once warm, as /route's does not.
func TestPickAllocs(t *testing.T) {
	r := benchRouter(t, 2048)
	_, bodies := bodies(2048, 64)
	var pk router.Pick
	in := router.PickRequest{Fallbacks: 2}
	i := 0
	step := func() {
		in.Body = bodies[i%len(bodies)]
		i++
		if err := r.Pick(&pk, &in); err != nil {
			t.Fatal(err)
		}
		if len(pk.Endpoints) != 3 {
			t.Fatalf("endpoints %v", pk.Endpoints)
		}
		r.PickDone(&pk)
	}
	for range 200 {
		step()
	}
	if a := testing.AllocsPerRun(200, step); a > 0.05 {
		t.Fatalf("%.2f allocations per decision", a)
	}
}
