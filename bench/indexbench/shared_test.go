package indexbench

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kvroute/kvroute/bench/synth"
	"github.com/kvroute/kvroute/bench/tracestream"
	"github.com/kvroute/kvroute/radix"
	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire"
)

// sharedRequests is the shared-prefix workload's length in the benchmarks:
// a sixth of synth.SharedPrefix's 12,000 requests per copy, so a stream of
// 7 copies builds in seconds; with 1,000 workers a copy, each worker still
// serves about two requests, so the first block has about 850 holders.
const sharedRequests = 2000

var sharedStreams sync.Map // "workers/dup/requests" → *tracestream.Stream

// buildShared returns the shared-prefix workload's stream (synth.SharedPrefix,
// sharedRequests requests, dup disjoint copies) on workers workers, built
// once per configuration.
func buildShared(tb testing.TB, workers, dup int) *tracestream.Stream {
	return buildSharedN(tb, workers, dup, sharedRequests)
}

// buildSharedN is buildShared with requests requests a copy.
func buildSharedN(tb testing.TB, workers, dup, requests int) *tracestream.Stream {
	tb.Helper()
	key := fmt.Sprintf("%d/%d/%d", workers, dup, requests)
	if s, ok := sharedStreams.Load(key); ok {
		return s.(*tracestream.Stream)
	}
	c := synth.SharedPrefix()
	c.Requests = requests
	tr, err := synth.Generate(c)
	if err != nil {
		tb.Fatal(err)
	}
	if dup > 1 {
		if tr, err = tr.Duplicate(dup); err != nil {
			tb.Fatal(err)
		}
	}
	s, err := tracestream.Build(tr, tracestream.Config{Workers: workers, Capacity: 4096, BlockSize: 512, WorkerBase: 1})
	if err != nil {
		tb.Fatal(err)
	}
	sharedStreams.Store(key, s)
	return s
}

// The shared-prefix replay is exact like the trace's, and its lookups name
// most of a copy's workers. 300 requests a copy: -tags invariants checks
// the whole tree after every event.
func TestSharedPrefixReplay(t *testing.T) {
	s := buildSharedN(t, 70, 7, 300)
	res, err := Run(s, Config{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	held := s.Counts.StoredBlocks - s.Counts.RemovedBlocks
	if res.Entries != held || res.ParentMissing != 0 {
		t.Fatalf("entries %d (managers %d), parent missing %d", res.Entries, held, res.ParentMissing)
	}
	c := shard.NewCore(shard.CoreConfig{})
	replayAll(c, s)
	last := s.Ops[len(s.Ops)-1]
	for i := len(s.Ops) - 1; s.Ops[i].Kind != tracestream.OpRequest; i-- {
		last = s.Ops[i-1]
	}
	if n := len(c.Match(nil, s.Hashes(&last))); n < 9 {
		t.Fatalf("the last request's answer names %d workers, want most of its copy's 10", n)
	}
}

// replayAll applies every event of s to c (no lookups).
func replayAll(c *shard.Core, s *tracestream.Stream) {
	for i := range s.Ops {
		if op := &s.Ops[i]; op.Kind == tracestream.OpEvent {
			c.Apply([]wire.Event{s.Event(op)})
		}
	}
}

// BenchmarkSharedPrefixReplay is `kvroute bench index --shared-prefix` in
// benchmark form (sharedRequests requests a copy): one shard, and the
// --direct replay of the same stream in the same op, so p99-ratio (the
// shard's Match p99 over the direct one's) comes from one run. At 7,000
// workers (7 copies on 1,000 workers each) a lookup's answer names about
// 850 workers.
func BenchmarkSharedPrefixReplay(b *testing.B) {
	for _, c := range []struct {
		name         string
		workers, dup int
	}{
		{"W=256/B=512/S=1", 256, 1},
		{"W=7000/B=512/S=1", 7000, 7},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := buildShared(b, c.workers, c.dup)
			b.ReportAllocs()
			var sh, dir Result
			for b.Loop() {
				var err error
				if sh, err = Run(s, Config{Shards: 1}); err != nil {
					b.Fatal(err)
				}
				if dir, err = Run(s, Config{Direct: true}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(sh.OpsPerSec, "ops/s")
			b.ReportMetric(sh.BlockOpsPerSec, "blockops/s")
			b.ReportMetric(float64(sh.MatchP50ns), "match-p50-ns")
			b.ReportMetric(float64(sh.MatchP99ns), "match-p99-ns")
			b.ReportMetric(float64(dir.MatchP99ns), "direct-p99-ns")
			b.ReportMetric(float64(sh.MatchP99ns)/float64(max(dir.MatchP99ns, 1)), "p99-ratio")
			b.ReportMetric(sh.BytesPerEntry, "B/entry")
		})
	}
}

// BenchmarkSharedDecision is the whole decision on the shared-prefix
// workload: Match in a core holding 1,000 workers' caches (the index after
// sharedRequests requests of the workload), then
// sched.Decide over 7,000 ranks (the other 6,000 hold nothing of this
// prefix), one request at a time, with its booking; each decision frees
// the one 4,096 decisions before it, so bookings stay in flight. One op is
// one decision; cpu-ns/decision and cpu-decisions/s are the process's CPU
// time (a core's throughput), match-overlaps the answer's mean size.
func BenchmarkSharedDecision(b *testing.B) {
	const ranks, workers, inFlight = 7000, 1000, 4096
	s := buildShared(b, workers, 1)
	c := shard.NewCore(shard.CoreConfig{})
	replayAll(c, s)
	var reqs [][]wire.BlockHash
	for i := range s.Ops {
		if op := &s.Ops[i]; op.Kind == tracestream.OpRequest {
			reqs = append(reqs, s.Hashes(op))
		}
	}
	cfg := sched.DefaultConfig()
	cfg.BlockSize = 512
	cfg.ChainedHashes = true
	sc, err := sched.New(cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	for w := range ranks {
		sc.AddWorker(wire.WorkerKey{Worker: uint64(w + 1)}, sched.Capacity{TotalBlocks: 16384})
	}
	var (
		ovs     []radix.Overlap
		sovs    = [][]sched.Overlap{nil}
		batch   = []sched.Request{{}}
		dec     []sched.Decision
		seqs    []wire.SeqHash
		ring    = make([]uint64, inFlight)
		id      uint64
		now     int64
		matched int
	)
	decide := func(i int) {
		hs := reqs[i%len(reqs)]
		ovs = c.Match(ovs[:0], hs)
		matched += len(ovs)
		so := sovs[0][:0]
		for _, o := range ovs {
			so = append(so, sched.Overlap{Worker: o.Worker, Device: o.Blocks, Host: o.Host, Disk: o.Disk, TreeSize: o.TreeSize})
		}
		sovs[0] = so
		seqs = wire.SequenceHashes(seqs[:0], hs)
		id++
		now += int64(10 * time.Microsecond)
		batch[0] = sched.Request{ID: id, ISL: uint32(len(hs) * 512), Blocks: seqs}
		dec = sc.Decide(dec[:0], batch, sovs, now)
		slot := &ring[id%inFlight]
		if *slot != 0 {
			sc.MarkPrefillCompleted(*slot, now)
			sc.Free(*slot, now)
		}
		*slot = dec[0].ID
	}
	for i := range 2 * inFlight {
		decide(i)
	}
	b.ReportAllocs()
	matched = 0
	i, cpu := 0, cpuNs()
	for b.Loop() {
		decide(i)
		i++
	}
	if c := cpuNs() - cpu; c > 0 {
		b.ReportMetric(float64(c)/float64(b.N), "cpu-ns/decision")
		b.ReportMetric(float64(b.N)/(float64(c)/1e9), "cpu-decisions/s")
	}
	b.ReportMetric(float64(matched)/float64(b.N), "match-overlaps")
}

// cpuNs is the process's CPU time so far (user and system).
func cpuNs() int64 {
	u := readUsage()
	return u.userNs + u.sysNs
}
