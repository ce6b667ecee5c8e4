package indexbench

import (
	"fmt"
	"io"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"sync"
	"time"

	"github.com/kvroute/kvroute/bench/tracestream"
	"github.com/kvroute/kvroute/radix"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire"
)

// Config configures a replay.
type Config struct {
	Shards int
	CPUs   []int // optional pinning, as shard.Config.CPUs
	// MaxEventBatch caps how many consecutive events go into one Apply call
	// (default 256): the batching a NATS or ZMQ receiver would do.
	MaxEventBatch int
	// LockOSThread locks unpinned shard goroutines to their OS threads
	// (see shard.RunnerConfig).
	LockOSThread bool
	// Repeat replays the stream this many times into fresh indexes and keeps
	// the fastest run (default 1).
	Repeat int
	// MinSeconds is a floor on a run's timed duration: the stream is
	// replayed again (each pass into an emptied index, the emptying not
	// timed) until the passes together last at least this long, so a short
	// trace still gives enough lookups for a stable p99. Zero: one pass.
	MinSeconds float64
	// Direct replays into one shard.Core on the replaying goroutine: no
	// Runner, queue, lock or hand-off, so a run measures the index's own
	// work per op, the floor under the sharded replay (Shards, CPUs and
	// LockOSThread are ignored).
	Direct bool
	// NoSettle skips collecting and returning the heap to the OS before
	// each run (runtime/debug.FreeOSMemory, not timed). Without the
	// settling a run starts with whatever the caller left behind: after
	// `kvroute bench index` builds a 7,000-worker stream, ≈7 GB of block
	// managers' garbage that either holds the collector off for the whole
	// run (every pass then faults fresh pages) or is scavenged during the
	// timed passes. It is for comparing with figures taken without the
	// settling; see doc.go.
	NoSettle bool
	// Churn > 0 changes what a pass after the first replays (with
	// MinSeconds): instead of the whole stream into an emptied index, the
	// workers of one of Churn groups (worker mod Churn, in turn) are
	// removed (not timed) and their part of the stream replayed alone,
	// into an index that keeps every other worker: a router's workers
	// leaving and rejoining, where the emptied index swings the whole heap
	// every pass. Ops, BlockOps and the latencies count what was replayed.
	Churn int
	// Replayers > 1 replays with that many goroutines, each the ops
	// (requests and events) of the workers w with w mod Replayers equal to
	// its number, in stream order, into the one shard.Index: what several
	// ingest receivers and request handlers do in a router. Not with
	// Direct or Churn. The latencies are all replayers' lookups.
	Replayers int
}

// Result is one replay's outcome. JSON field names are part of the
// `kvroute bench index --json` output.
type Result struct {
	Workers        int     `json:"workers"`
	Shards         int     `json:"shards"`
	BlockSize      int     `json:"block_size"`
	Requests       int     `json:"requests"`
	Events         int     `json:"events"`
	Ops            int     `json:"ops"`
	BlockOps       int     `json:"block_ops"`
	Seconds        float64 `json:"seconds"`
	OpsPerSec      float64 `json:"ops_per_sec"`
	BlockOpsPerSec float64 `json:"block_ops_per_sec"`
	MatchP50ns     int64   `json:"match_p50_ns"`
	MatchP99ns     int64   `json:"match_p99_ns"`
	MatchMaxns     int64   `json:"match_max_ns"`
	IndexBytes     int64   `json:"index_bytes"`
	Entries        int     `json:"entries"`
	Nodes          int     `json:"nodes"`
	BytesPerEntry  float64 `json:"bytes_per_entry"`
	// OverlapErrors counts requests whose own worker's overlap, as the index
	// reported it, differed from the block manager's truth. Lookups overtake
	// queued writes, so a few are expected with more than one shard queue in
	// flight; with the final Flush the index is exact.
	OverlapErrors int    `json:"overlap_errors"`
	ParentMissing uint64 `json:"parent_missing"`
	// Passes is how many times the stream was replayed in this run
	// (Config.MinSeconds); Ops, BlockOps, Seconds and the latencies cover
	// all of them, the index figures the last.
	Passes int `json:"passes"`
	// The process's resources over the timed passes (getrusage; zero where
	// unsupported): CPU seconds of every thread (the shards', the
	// replaying goroutine's, the runtime's), minor page faults (fresh
	// pages the index or the runtime touched first), and context
	// switches (voluntary: a thread parked or woke another; involuntary:
	// the OS preempted it).
	CPUUserSeconds float64 `json:"cpu_user_seconds"`
	CPUSysSeconds  float64 `json:"cpu_sys_seconds"`
	PageFaults     int64   `json:"page_faults"`
	VolSwitches    int64   `json:"vol_ctx_switches"`
	InvolSwitches  int64   `json:"invol_ctx_switches"`
	// BlockOpsPerCPUSec is BlockOps over the process's CPU seconds: block
	// ops per core, whatever number of threads ran them.
	BlockOpsPerCPUSec float64 `json:"block_ops_per_cpu_sec"`
	// How the lookups met the shard's runner, over the whole run (the
	// untimed emptying between passes included; shard.ShardStats):
	// lookups that found the core taken and waited, those that parked,
	// and the runner's steps that parked waiting for lookups. Zero with
	// Direct.
	LookupWaits uint64 `json:"lookup_waits"`
	LookupParks uint64 `json:"lookup_parks"`
	RunnerParks uint64 `json:"runner_parks"`
	// GCCycles counts the garbage collections that completed during the
	// timed passes (runtime/metrics /gc/cycles/total:gc-cycles).
	GCCycles int64 `json:"gc_cycles"`
	// FirstPass is the first pass alone (a cold start: the index and the
	// heap's pages fresh), so a multi-pass run shows what its later
	// passes, each into an emptied index, pay that the first does not.
	FirstPass Pass `json:"first_pass"`
}

// Pass is one pass's duration and the process's resources over it, as in
// Result.
type Pass struct {
	Seconds        float64 `json:"seconds"`
	OpsPerSec      float64 `json:"ops_per_sec"`
	CPUUserSeconds float64 `json:"cpu_user_seconds"`
	CPUSysSeconds  float64 `json:"cpu_sys_seconds"`
	PageFaults     int64   `json:"page_faults"`
	GCCycles       int64   `json:"gc_cycles"`
}

// Run replays s into a new shard.Index per repeat and returns the best run.
func Run(s *tracestream.Stream, cfg Config) (Result, error) {
	if cfg.Shards <= 0 {
		cfg.Shards = 1
	}
	if cfg.MaxEventBatch <= 0 {
		cfg.MaxEventBatch = 256
	}
	if cfg.Repeat <= 0 {
		cfg.Repeat = 1
	}
	if cfg.Replayers > 1 && (cfg.Direct || cfg.Churn > 0) {
		return Result{}, fmt.Errorf("indexbench: %d replayers with Direct or Churn", cfg.Replayers)
	}
	var best Result
	for r := 0; r < cfg.Repeat; r++ {
		res, err := runOnce(s, cfg)
		if err != nil {
			return res, err
		}
		if r == 0 || res.Seconds < best.Seconds {
			best = res
		}
	}
	return best, nil
}

// target is what a replay drives: a shard.Index, or one shard.Core on the
// replaying goroutine (Config.Direct).
type target interface {
	apply(events []wire.Event) error
	match(dst []radix.Overlap, hashes []wire.BlockHash) ([]radix.Overlap, error)
	flush() error
	removeWorker(worker uint64) error
	stats() (shard.ShardStats, error)
	close()
}

type indexTarget struct{ ix *shard.Index }

func (t indexTarget) apply(events []wire.Event) error { return t.ix.Apply(events) }
func (t indexTarget) match(dst []radix.Overlap, hashes []wire.BlockHash) ([]radix.Overlap, error) {
	return t.ix.Match(dst, hashes)
}
func (t indexTarget) flush() error { return t.ix.Flush() }
func (t indexTarget) removeWorker(w uint64) error {
	_, err := t.ix.RemoveWorker(w)
	return err
}
func (t indexTarget) stats() (shard.ShardStats, error) {
	st, err := t.ix.Stats(nil)
	return shard.Sum(st), err
}
func (t indexTarget) close() { t.ix.Close() }

type coreTarget struct{ c *shard.Core }

func (t coreTarget) apply(events []wire.Event) error { t.c.Apply(events); return nil }
func (t coreTarget) match(dst []radix.Overlap, hashes []wire.BlockHash) ([]radix.Overlap, error) {
	return t.c.Match(dst, hashes), nil
}
func (t coreTarget) flush() error                { return nil }
func (t coreTarget) removeWorker(w uint64) error { t.c.RemoveWorker(w); return nil }
func (t coreTarget) stats() (shard.ShardStats, error) {
	return shard.ShardStats{Tree: t.c.TreeStats(), Counters: t.c.Counters()}, nil
}
func (t coreTarget) close() {}

func newTarget(cfg Config) (target, error) {
	if cfg.Direct {
		return coreTarget{shard.NewCore(shard.CoreConfig{})}, nil
	}
	ix, err := shard.NewIndex(shard.Config{Shards: cfg.Shards, CPUs: cfg.CPUs, TickInterval: -1, LockOSThread: cfg.LockOSThread})
	if err != nil {
		return nil, err
	}
	return indexTarget{ix}, nil
}

// gcCycles reads the number of completed GC cycles without stopping the
// world (runtime.ReadMemStats would).
func gcCycles() int64 {
	sample := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(sample[0].Value.Uint64())
}

func runOnce(s *tracestream.Stream, cfg Config) (Result, error) {
	if !cfg.NoSettle {
		// Start from a collected heap whose free pages are back with the
		// OS, as a process that never held the stream's build garbage
		// (doc.go: what a run measures).
		debug.FreeOSMemory()
	}
	ix, err := newTarget(cfg)
	if err != nil {
		return Result{}, err
	}
	defer ix.close()
	sc := s.Config()
	res := Result{
		Workers: sc.Workers, Shards: cfg.Shards, BlockSize: sc.BlockSize,
		Requests: s.Counts.Requests, Events: s.Counts.Events,
	}
	if cfg.Direct {
		res.Shards = 0
	}
	lat := make([]int64, 0, s.Counts.Requests)
	events := make([]wire.Event, 0, cfg.MaxEventBatch)
	overlaps := make([]radix.Overlap, 0, 1024)
	var groups [][]int32 // Churn: each group's ops, in stream order
	var groupBlockOps []int
	if cfg.Churn > 0 {
		groups, groupBlockOps = make([][]int32, cfg.Churn), make([]int, cfg.Churn)
		for i := range s.Ops {
			op := &s.Ops[i]
			g := int(op.Worker) % cfg.Churn
			groups[g] = append(groups[g], int32(i))
			ev := s.Event(op)
			groupBlockOps[g] += len(s.Hashes(op)) + len(ev.Blocks)
		}
	}
	var parts [][]int32 // Replayers: each replayer's ops, in stream order
	if cfg.Replayers > 1 {
		parts = make([][]int32, cfg.Replayers)
		for i := range s.Ops {
			r := int(s.Ops[i].Worker) % cfg.Replayers
			parts[r] = append(parts[r], int32(i))
		}
	}
	var sel []int32 // the ops of this pass; nil: all of them
	var elapsed time.Duration
	var used usage
	for {
		n := len(s.Ops)
		if sel != nil {
			n = len(sel)
		}
		u0, gc0 := readUsage(), gcCycles()
		start := time.Now()
		if len(parts) > 0 {
			if err := replayParallel(ix, s, parts, cfg.MaxEventBatch, &lat, &res.OverlapErrors); err != nil {
				return res, err
			}
		} else if err := replay(ix, s, sel, n, events, &overlaps, &lat, &res.OverlapErrors); err != nil {
			return res, err
		}
		if err := ix.flush(); err != nil {
			return res, err
		}
		passTime := time.Since(start)
		elapsed += passTime
		u1, gc1 := readUsage(), gcCycles()
		res.GCCycles += gc1 - gc0
		if res.Passes == 0 {
			res.FirstPass = Pass{
				Seconds: passTime.Seconds(), OpsPerSec: float64(len(s.Ops)) / passTime.Seconds(),
				CPUUserSeconds: float64(u1.userNs-u0.userNs) / 1e9, CPUSysSeconds: float64(u1.sysNs-u0.sysNs) / 1e9,
				PageFaults: u1.minFlt - u0.minFlt, GCCycles: gc1 - gc0,
			}
		}
		used.userNs += u1.userNs - u0.userNs
		used.sysNs += u1.sysNs - u0.sysNs
		used.minFlt += u1.minFlt - u0.minFlt
		used.nvcsw += u1.nvcsw - u0.nvcsw
		used.nivcsw += u1.nivcsw - u0.nivcsw
		res.Ops += n
		if sel == nil {
			res.BlockOps += s.Counts.BlockOps()
		} else {
			res.BlockOps += groupBlockOps[(res.Passes-1)%cfg.Churn]
		}
		res.Passes++
		if elapsed.Seconds() >= cfg.MinSeconds {
			break
		}
		// Empty the index for the next pass (not timed): the stream
		// assumes it starts from nothing. With Churn, only the next
		// group's workers, whose part of the stream starts from nothing.
		step, first := 1, 0
		if cfg.Churn > 0 {
			step, first = cfg.Churn, (res.Passes-1)%cfg.Churn
			sel = groups[first]
		}
		for w := first; w < sc.Workers; w += step {
			if err := ix.removeWorker(s.WorkerKey(uint32(w)).Worker); err != nil {
				return res, err
			}
		}
		if err := ix.flush(); err != nil {
			return res, err
		}
	}
	res.Seconds = elapsed.Seconds()
	res.OpsPerSec = float64(res.Ops) / res.Seconds
	res.BlockOpsPerSec = float64(res.BlockOps) / res.Seconds
	res.CPUUserSeconds, res.CPUSysSeconds = float64(used.userNs)/1e9, float64(used.sysNs)/1e9
	res.PageFaults, res.VolSwitches, res.InvolSwitches = used.minFlt, used.nvcsw, used.nivcsw
	if cpu := res.CPUUserSeconds + res.CPUSysSeconds; cpu > 0 {
		res.BlockOpsPerCPUSec = float64(res.BlockOps) / cpu
	}
	slices.Sort(lat)
	res.MatchP50ns, res.MatchP99ns = percentile(lat, 0.50), percentile(lat, 0.99)
	if len(lat) > 0 {
		res.MatchMaxns = lat[len(lat)-1]
	}
	total, err := ix.stats()
	if err != nil {
		return res, err
	}
	res.IndexBytes, res.Entries, res.Nodes = total.Tree.Bytes, total.Tree.Entries, total.Tree.Nodes
	if res.Entries > 0 {
		res.BytesPerEntry = float64(res.IndexBytes) / float64(res.Entries)
	}
	res.LookupWaits, res.LookupParks, res.RunnerParks = total.LookupWaits, total.LookupParks, total.RunnerParks
	res.ParentMissing = total.Counters.Events[wire.KindStored][shard.OutcomeParentMissing]
	return res, nil
}

// replay replays n ops of s (sel's, or all when sel is nil) into ix on
// this goroutine, appending each lookup's latency to lat and counting
// overlaps that differ from the stream's in errs.
func replay(ix target, s *tracestream.Stream, sel []int32, n int, events []wire.Event, overlaps *[]radix.Overlap, lat *[]int64, errs *int) error {
	events = events[:0]
	flush := func() error {
		if len(events) == 0 {
			return nil
		}
		err := ix.apply(events)
		events = events[:0]
		return err
	}
	for k := range n {
		i := k
		if sel != nil {
			i = int(sel[k])
		}
		op := &s.Ops[i]
		if op.Kind == tracestream.OpEvent {
			events = append(events, s.Event(op))
			if len(events) == cap(events) {
				if err := flush(); err != nil {
					return err
				}
			}
			continue
		}
		if err := flush(); err != nil {
			return err
		}
		t0 := time.Now()
		var err error
		*overlaps, err = ix.match((*overlaps)[:0], s.Hashes(op))
		*lat = append(*lat, int64(time.Since(t0)))
		if err != nil {
			return err
		}
		if got := overlapOf(*overlaps, s.WorkerKey(op.Worker)); got != op.Overlap {
			*errs++
		}
	}
	return flush()
}

// replayParallel replays each of parts on its own goroutine (Replayers).
func replayParallel(ix target, s *tracestream.Stream, parts [][]int32, batch int, lat *[]int64, errs *int) error {
	type out struct {
		lat  []int64
		errs int
		err  error
	}
	outs := make([]out, len(parts))
	var wg sync.WaitGroup
	for r := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := &outs[r]
			o.lat = make([]int64, 0, len(parts[r]))
			ovs := make([]radix.Overlap, 0, 1024)
			o.err = replay(ix, s, parts[r], len(parts[r]), make([]wire.Event, 0, batch), &ovs, &o.lat, &o.errs)
		}()
	}
	wg.Wait()
	for r := range outs {
		if outs[r].err != nil {
			return outs[r].err
		}
		*lat = append(*lat, outs[r].lat...)
		*errs += outs[r].errs
	}
	return nil
}

func overlapOf(ov []radix.Overlap, k wire.WorkerKey) uint32 {
	for i := range ov {
		if ov[i].Worker == k {
			return ov[i].Blocks
		}
	}
	return 0
}

func percentile(sorted []int64, q float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return sorted[i]
}

// WriteBenchmarkLine writes r as one Go benchmark-format line named
// BenchmarkIndexReplay/<name>, so benchstat can compare runs.
func WriteBenchmarkLine(w io.Writer, name string, r Result) {
	nsPerOp := 0.0
	if r.Ops > 0 {
		nsPerOp = r.Seconds * 1e9 / float64(r.Ops)
	}
	fmt.Fprintf(w, "BenchmarkIndexReplay/%s \t%d\t%.2f ns/op\t%.0f ops/s\t%.0f blockops/s\t%d match-p50-ns\t%d match-p99-ns\t%.1f B/entry\n",
		name, r.Ops, nsPerOp, r.OpsPerSec, r.BlockOpsPerSec, r.MatchP50ns, r.MatchP99ns, r.BytesPerEntry)
}
