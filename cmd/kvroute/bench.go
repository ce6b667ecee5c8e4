package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/kvroute/kvroute/bench/indexbench"
	"github.com/kvroute/kvroute/bench/synth"
	"github.com/kvroute/kvroute/bench/trace"
	"github.com/kvroute/kvroute/bench/tracestream"
	"github.com/kvroute/kvroute/internal/cpuset"
)

func runBench(args []string) error {
	if len(args) == 0 || args[0] != "index" {
		return errors.New("usage: kvroute bench index [flags] (run `kvroute bench index -h` for the flags)")
	}
	return runBenchIndex(args[1:])
}

func runBenchIndex(args []string) error {
	fs := newFlagSet("kvroute bench index")
	var (
		tracePath = fs.String("trace", defaultTrace, "Mooncake JSONL trace to replay (default: the Mooncake trace shipped in the repository, for a run from its root)")
		shared    = fs.Bool("shared-prefix", false, "replay the shared-prefix workload (bench/synth.SharedPrefix: 12,000 conversation turns under one system prompt, ~1,800 requests sharing each touched block) instead of --trace")
		synthSeed = fs.Uint64("synth-seed", 1, "with --shared-prefix: the generator's seed")
		workers   = fs.Int("workers", 256, "simulated workers W the trace is partitioned over")
		kvBlocks  = fs.Int("kv-blocks", 16384, "KV cache blocks C per worker")
		blockSize = fs.Int("block-size", 512, "engine block size B in tokens")
		shards    = fs.Int("shards", 1, "index shards")
		cpus      = fs.String("cpus", "", "pin shards to these CPUs, e.g. 0-3,8 (empty: no pinning)")
		dup       = fs.Int("duplicate", 1, "disjoint copies of the trace and its workers (workers × duplicate in all)")
		limit     = fs.Int("requests", 0, "use only the first N requests of the trace (0: all)")
		holdTok   = fs.Duration("hold-per-output-token", 0, "a request keeps its blocks active for output_length × this (0: freed at once)")
		batch     = fs.Int("event-batch", 256, "max consecutive events per Apply call")
		repeat    = fs.Int("repeat", 3, "replays (fresh index each); the fastest is reported")
		cpuProf   = fs.String("cpuprofile", "", "write a CPU profile of the replays to this file (go tool pprof)")
		asJSON    = fs.Bool("json", false, "print one JSON object on one line instead of a table and benchmark line")
		minSecs   = fs.Float64("seconds", 0, "replay the trace again (into an emptied index, not timed) until a run lasts at least this many seconds, for stable p99s on short traces (0: one pass)")
		lockOS    = fs.Bool("lock-os-thread", false, "lock unpinned shard goroutines to OS threads (slower hand-offs; pinned shards are always locked)")
		direct    = fs.Bool("direct", false, "replay into one shard core on the replaying goroutine (no runner, queue or hand-off): the index's own cost per op")
		churn     = fs.Int("churn", 0, "with --seconds: each pass after the first removes the workers of one of N groups (not timed) and replays only their part of the trace, into an index that keeps the rest (workers leaving and rejoining); 0: every pass into an emptied index")
		replayers = fs.Int("replayers", 1, "replaying goroutines, each the requests and events of its group of workers (worker mod N), into the one index: as a router's several ingest receivers and request handlers (not with --direct or --churn)")
		settle    = fs.Bool("settle", true, "collect the heap and return its free pages to the OS before each run (not timed); false: the stream build's garbage stays in the heap")
	)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	for name, v := range map[string]int{"workers": *workers, "kv-blocks": *kvBlocks, "block-size": *blockSize, "shards": *shards, "duplicate": *dup, "event-batch": *batch, "repeat": *repeat, "replayers": *replayers} {
		if v <= 0 {
			return fmt.Errorf("--%s must be > 0 (got %d)", name, v)
		}
	}
	if *replayers > 1 && (*direct || *churn > 0) {
		return errors.New("--replayers > 1 cannot be combined with --direct or --churn")
	}
	if *churn < 0 {
		return fmt.Errorf("--churn must be >= 0 (got %d)", *churn)
	}
	if *minSecs < 0 {
		return fmt.Errorf("--seconds must be >= 0 (got %g)", *minSecs)
	}
	var cpuList []int
	if *cpus != "" {
		var err error
		if cpuList, err = cpuset.Parse(*cpus); err != nil {
			return fmt.Errorf("--cpus: %w", err)
		}
	}
	var tr *trace.Trace
	var err error
	name := *tracePath
	if *shared {
		c := synth.SharedPrefix()
		c.Seed = *synthSeed
		if tr, err = synth.Generate(c); err != nil {
			return fmt.Errorf("--shared-prefix: %w", err)
		}
		name = fmt.Sprintf("shared-prefix(seed=%d)", c.Seed)
	} else if tr, err = readTrace(*tracePath); err != nil {
		return err
	}
	if *limit > 0 && *limit < len(tr.Requests) {
		tr.Requests = tr.Requests[:*limit]
	}
	if *dup > 1 {
		if tr, err = tr.Duplicate(*dup); err != nil {
			return fmt.Errorf("--duplicate: %w", err)
		}
	}
	t0 := time.Now()
	s, err := tracestream.Build(tr, tracestream.Config{
		Workers: *workers * *dup, Capacity: *kvBlocks, BlockSize: *blockSize,
		HoldPerOutputToken: *holdTok, WorkerBase: 1,
	})
	if err != nil {
		return err
	}
	prep := time.Since(t0)
	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	res, err := indexbench.Run(s, indexbench.Config{Shards: *shards, CPUs: cpuList, MaxEventBatch: *batch, Repeat: *repeat, LockOSThread: *lockOS, MinSeconds: *minSecs, Direct: *direct, NoSettle: !*settle, Churn: *churn, Replayers: *replayers})
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(res) // one line: scripts read the last line
	}
	fmt.Printf("trace %s: %d requests, %d events (%s), stream built in %s\n", name, s.Counts.Requests, s.Counts.Events, s.Counts, prep.Round(time.Millisecond))
	fmt.Printf("%-22s %s\n", "workers × shards", fmt.Sprintf("%d × %d (block size %d, %d blocks each)", res.Workers, res.Shards, res.BlockSize, *kvBlocks))
	fmt.Printf("%-22s %.0f ops/s, %.2fM block ops/s (%.3fs for %d ops, %d block ops, %d passes)\n", "throughput", res.OpsPerSec, res.BlockOpsPerSec/1e6, res.Seconds, res.Ops, res.BlockOps, res.Passes)
	fmt.Printf("%-22s p50 %s, p99 %s, max %s\n", "Match latency", time.Duration(res.MatchP50ns), time.Duration(res.MatchP99ns), time.Duration(res.MatchMaxns))
	fmt.Printf("%-22s %d entries, %d nodes, %.1f MiB, %.1f bytes/entry\n", "index at end", res.Entries, res.Nodes, float64(res.IndexBytes)/(1<<20), res.BytesPerEntry)
	line := fmt.Sprintf("W=%d/B=%d/S=%d", res.Workers, res.BlockSize, res.Shards)
	if *shared {
		line = "shared-prefix/" + line
	}
	indexbench.WriteBenchmarkLine(os.Stdout, strings.NewReplacer(" ", "").Replace(line), res)
	return nil
}
