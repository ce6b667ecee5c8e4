//go:build !race

package router

import "testing"

// A request decided on its handler's goroutine (the batcher idle) and its
// free applied by the notifying goroutine allocate nothing once warmed up,
// and both really ran inline: the request is routed and its load freed
// with no batcher goroutine running.
func TestInlineDecisionAllocs(t *testing.T) {
	r, ix := benchRouter(t, 2048)
	defer ix.Close()
	defer r.closed.Store(true) // never started: nothing to stop
	p := benchBatch(t, r, 2048, 1)[0]
	round := func() {
		p.err = nil
		r.submit(p)
		if p.err != nil {
			t.Fatalf("inline decision: %v", p.err)
		}
		if st := r.s.Stats(); st.Active != 1 {
			t.Fatalf("after the decision %d requests booked, want 1", st.Active)
		}
		r.notify(opFree, p.id)
		if st := r.s.Stats(); st.Active != 0 {
			t.Fatalf("after the free %d requests booked, want 0", st.Active)
		}
	}
	round()
	if a := testing.AllocsPerRun(50, round); a != 0 {
		t.Errorf("inline decision and free: %v allocs, want 0", a)
	}
}
