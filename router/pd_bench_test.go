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
// frees) in a fleet of 16 workers: aggregated (16 both) against P/D (4
// prefill, 12 decode, every request a pair with two bookings). The ratio
// of the two is what disaggregation costs the router per decision.
func BenchmarkPDDecision(b *testing.B) {
	for _, mode := range []struct {
		name    string
		prefill int
	}{{"aggregated", 0}, {"pd", 4}} {
		for _, size := range []int{1, 32} {
			b.Run(fmt.Sprintf("fleet=%s/batch=%d", mode.name, size), func(b *testing.B) {
				r, ix := pdBenchRouter(b, 2048, mode.prefill)
				defer ix.Close()
				batch := benchBatch(b, r, 2048, size)
				decideRound(r, batch)
				if mode.prefill > 0 && !batch[0].remote() {
					b.Fatalf("not a pair: rule %v", batch[0].pd.rule)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					decideRound(r, batch)
				}
				b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "req/s")
			})
		}
	}
}
