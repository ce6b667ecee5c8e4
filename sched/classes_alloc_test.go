//go:build !race && !invariants

package sched

import "testing"

// With tenants, classes and sessions on, deciding, booking and freeing
// allocate nothing once the tables have grown, and neither does a drain of
// the queue through the fair path.
func TestDecideTenantsAllocs(t *testing.T) {
	for _, n := range []int{8, 256} {
		f := newFleet(t, tenantOpts(n))
		withTenants(t, f)
		if a := testing.AllocsPerRun(50, f.step); a != 0 {
			t.Errorf("workers=%d: %v allocs per batch of %d", n, a, len(f.batch))
		}
	}
	// A fleet that is always busy: every decision queues, and every free
	// admits through nextFair.
	o := tenantOpts(4)
	o.inFlight = 64
	f := newFleet(t, o)
	withTenants(t, f)
	for i := range f.s.hot {
		f.s.slots[i].capacity.TotalBlocks = 200
		f.s.setLimits(uint32(i))
	}
	for i := 0; i < 200; i++ {
		f.step()
	}
	if a := testing.AllocsPerRun(50, f.step); a != 0 {
		t.Errorf("busy fleet: %v allocs per batch", a)
	}
	if f.s.Stats().Admitted == 0 || f.s.Stats().Queued == 0 {
		t.Fatalf("the busy fleet never queued: %+v", f.s.Stats())
	}
}
