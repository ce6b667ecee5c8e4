package sched

import (
	"fmt"
	"testing"
	"time"
)

// tenantOpts is benchOpts with tenants, classes and sessions on: four
// tenants (weights 1 to 4), 20% critical, 50% standard and 30% sheddable
// requests, every request in one of 256 sessions, SessionTTL one minute.
func tenantOpts(workers int) fleetOpts {
	o := benchOpts(workers)
	o.cfg.SessionTTL = time.Minute
	return o
}

func withTenants(tb testing.TB, f *fleet) {
	for id := uint32(1); id <= 4; id++ {
		if err := f.s.SetTenant(id, float64(id)); err != nil {
			tb.Fatal(err)
		}
	}
	for i := range f.reqs {
		r := &f.reqs[i]
		r.Tenant = uint32(i % 4)
		switch i % 10 {
		case 0, 5:
			r.Class = ClassCritical
		case 2, 6, 9:
			r.Class = ClassSheddable
		}
		r.Session = uint64(i%256) + 1
	}
	for i := 0; i < 64; i++ {
		f.step()
	}
}

// BenchmarkDecideTenants compares Decide with tenants, classes and
// sessions on against the plain fleet (BenchmarkDecide's): one op steps
// both by a batch of 64 decisions, alternating; tenants/plain is the ratio
// of their CPU time per decision, the figure the target bounds (≤ 1.2).
func BenchmarkDecideTenants(b *testing.B) {
	for _, n := range []int{8, 256} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			plain := newFleet(b, benchOpts(n))
			ten := newFleet(b, tenantOpts(n))
			withTenants(b, ten)
			b.ReportAllocs()
			var tp, tt int64
			for b.Loop() {
				c0 := cpuNanos()
				plain.step()
				c1 := cpuNanos()
				ten.step()
				c2 := cpuNanos()
				tp += c1 - c0
				tt += c2 - c1
			}
			d := float64(b.N * 64)
			b.ReportMetric(float64(tp)/d, "plain-ns/decision")
			b.ReportMetric(float64(tt)/d, "tenants-ns/decision")
			if tp > 0 {
				b.ReportMetric(float64(tt)/float64(tp), "tenants/plain")
			}
		})
	}
}
