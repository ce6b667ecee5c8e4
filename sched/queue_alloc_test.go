//go:build !race && !invariants

package sched

import "testing"

// The queue's dispatch path under overload (BenchmarkQueueDispatch's fleet:
// completions draining the queue, holds for busy ranks, aging with the
// per-block extension, arrivals) allocates nothing once the tables and the
// queue have reached their working size.
func TestQueueDispatchAllocs(t *testing.T) {
	for _, n := range []int{8, 256} {
		f := newQueueFleet(t, n, queueDispatchConfig())
		holds, ahead, admits := f.s.q.holds, f.s.stats.AdmittedAhead, f.admits
		if a := testing.AllocsPerRun(200, f.step); a != 0 {
			t.Errorf("%d workers: %v allocs per step", n, a)
		}
		if f.s.q.holds == holds || f.s.stats.AdmittedAhead == ahead || f.admits == admits {
			t.Fatalf("%d workers: the steps do not exercise holds (%d), admissions ahead (%d) and admissions (%d)",
				n, f.s.q.holds-holds, f.s.stats.AdmittedAhead-ahead, f.admits-admits)
		}
	}
}
