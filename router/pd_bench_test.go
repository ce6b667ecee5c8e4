package router

import (
	"fmt"
	"testing"

	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/plane"
)

// pdBenchRouter is benchRouter's fleet (16 workers, 48 families of n
// tokens indexed) with the first prefill workers in the prefill role and
// the always policy: every decision is a pair. It is not started: the
// caller owns the batcher.
func pdBenchRouter(b testing.TB, n, prefill int) (*Router, *shard.Index) {
	ix, err := shard.NewIndex(shard.Config{Shards: 1})
	if err != nil {
		b.Fatal(err)
	}
	subj, _ := plane.SubjectsFor("bench", "backend")
	sc := sched.DefaultConfig()
	sc.BlockSize = testBlockSize
	sc.Expiry = 0
	sc.DisaggPolicy = sched.DisaggAlways
	cfg := Config{Sched: sc, Subjects: subj, Logger: quietLogger()}
	for w := range 16 {
		role := sched.RoleBoth
		if w < prefill {
			role = sched.RolePrefill
		} else if prefill > 0 {
			role = sched.RoleDecode
		}
		cfg.Workers = append(cfg.Workers, StaticWorker{ID: uint64(w + 1), URL: fmt.Sprintf("http://127.0.0.1:%d", 9000+w), Model: "bench",
			Capacity: sched.Capacity{Role: role}})
	}
	for f := range 48 {
		local := wire.LocalHashes(nil, benchTokens(f, n), testBlockSize, wire.Seed)
		blocks := make([]wire.Block, len(local))
		for i, h := range local {
			blocks[i] = wire.Block{Engine: wire.EngineHash(uint64(f)<<32 | uint64(i) + 1), Local: h}
		}
		if err := ix.Apply([]wire.Event{{Worker: wire.WorkerKey{Worker: uint64(f%16 + 1)}, Kind: wire.KindStored, Blocks: blocks}}); err != nil {
			b.Fatal(err)
		}
	}
	if err := ix.Flush(); err != nil {
		b.Fatal(err)
	}
	r, err := New(cfg, ix, Hooks{})
	if err != nil {
		b.Fatal(err)
	}
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
