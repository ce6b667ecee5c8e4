package router

import (
	"fmt"
	"testing"

	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/shard"
)

// pdBenchRouter is benchRouter's fleet (16 workers, 48 families of n
// tokens indexed) with the first prefill workers in the prefill role and
// the always policy: every decision is a pair. It is not started: the
// caller owns the batcher.
func pdBenchRouter(b testing.TB, n, prefill int) (*Router, *shard.Index) {
	sc := sched.DefaultConfig()
	sc.Expiry = 0
	sc.DisaggPolicy = sched.DisaggAlways
	r, ix := benchFleet(b, n, sc, func(w int) sched.Role {
		switch {
		case w < prefill:
			return sched.RolePrefill
		case prefill > 0:
			return sched.RoleDecode
		}
		return sched.RoleBoth
	})
	r.closed.Store(true)
	return r, ix
}

// BenchmarkPDDecision is the batcher's work per batch (lookup, decisions,
// frees) in a fleet of 16 workers, aggregated (16 both) against P/D (4
// prefill, 12 decode, every request a pair with two bookings), the two
// interleaved in each iteration. Besides the wall time of both it reports
// each one's CPU time per decision and their ratio, pd/aggregated: what
// disaggregation costs the router per decision, robust to a shared
// machine's noise.
func BenchmarkPDDecision(b *testing.B) {
	for _, size := range []int{1, 32} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			ra, ixa := pdBenchRouter(b, 2048, 0)
			defer ixa.Close()
			rp, ixp := pdBenchRouter(b, 2048, 4)
			defer ixp.Close()
			ba, bp := benchBatch(b, ra, 2048, size), benchBatch(b, rp, 2048, size)
			decideRound(ra, ba)
			decideRound(rp, bp)
			if !bp[0].remote() || ba[0].pd.paired {
				b.Fatalf("pd rule %v, aggregated paired %v", bp[0].pd.rule, ba[0].pd.paired)
			}
			var aggNs, pdNs int64
			b.ReportAllocs()
			for b.Loop() {
				c0 := cpuNanos()
				decideRound(ra, ba)
				c1 := cpuNanos()
				decideRound(rp, bp)
				c2 := cpuNanos()
				aggNs += c1 - c0
				pdNs += c2 - c1
			}
			d := float64(b.N * size)
			b.ReportMetric(float64(aggNs)/d, "aggregated-cpu-ns/decision")
			b.ReportMetric(float64(pdNs)/d, "pd-cpu-ns/decision")
			if aggNs > 0 {
				b.ReportMetric(float64(pdNs)/float64(aggNs), "pd/aggregated")
			}
		})
	}
}
