package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kvroute/kvroute/bench/replay"
	"github.com/kvroute/kvroute/bench/synth"
	"github.com/kvroute/kvroute/bench/trace"
	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/shard"
)

// defaultTrace is --trace's default: the Mooncake trace shipped in the
// repository (bench/traces/README.md), relative to the repository's root.
const defaultTrace = "bench/traces/mooncake_synthetic_trace.jsonl"

// readTrace reads --trace; a missing default says where it is looked for.
func readTrace(path string) (*trace.Trace, error) {
	tr, err := trace.ReadFile(path)
	if err != nil && path == defaultTrace && errors.Is(err, iofs.ErrNotExist) {
		return nil, fmt.Errorf("--trace: %w (the default is relative to the repository's root: run there, or give --trace PATH)", err)
	}
	if err != nil {
		return nil, fmt.Errorf("--trace: %w", err)
	}
	return tr, nil
}

// replayOptions is everything `kvroute replay` takes, after flag parsing.
type replayOptions struct {
	tracePath    string
	synth        *synth.Config // nil: read tracePath
	synthOut     string
	limit        int
	policies     []replay.Policy
	auto         bool
	speedups     []float64
	offline      replay.Config
	online       replay.OnlineConfig // online mode when URLs are set
	parallel     int
	jsonPath     string
	plotPath     string
	plotSpeedups []float64
	benchLines   bool
	progress     string
	cpuProfile   string
	// syncDelays, when set, runs a sync-delay sweep (--sync-delays)
	// instead of the policy comparison.
	syncDelays []time.Duration
	// pd, when set, runs the P/D comparison (--pd) instead.
	pd *replay.PDConfig
}

// parseReplayFlags parses args into options; errors name the flag.
func parseReplayFlags(args []string, stderr io.Writer) (*replayOptions, error) {
	fs := newFlagSet("kvroute replay")
	fs.SetOutput(stderr)
	def := sched.DefaultConfig()
	syn := synth.Default()
	var (
		tracePath  = fs.String("trace", defaultTrace, "Mooncake JSONL trace to replay (default: the Mooncake trace shipped in the repository, for a run from its root)")
		traceBS    = fs.Int("trace-block-size", trace.IDBlockSize, "tokens per trace hash id (Mooncake: 512, the only size supported)")
		limit      = fs.Int("requests", 0, "replay only the first N requests of the trace (0: all)")
		useSynth   = fs.Bool("synth", false, "replay a synthetic workload (the --synth-* flags) instead of --trace")
		synthOut   = fs.String("synth-out", "", "also write the synthetic workload to this JSONL trace file")
		sReqs      = fs.Int("synth-requests", syn.Requests, "synthetic: requests (turns)")
		sRate      = fs.Float64("synth-rate", syn.Rate, "synthetic: new sessions per second (Poisson)")
		sGroups    = fs.Int("synth-groups", syn.Groups, "synthetic: shared-prefix groups (system prompts)")
		sSkew      = fs.Float64("synth-group-skew", syn.GroupSkew, "synthetic: Zipf exponent of group popularity (0: uniform)")
		sPrefix    = fs.String("synth-prefix", syn.PrefixTokens.String(), "synthetic: shared prefix tokens per group (fixed:N, uniform:A,B, exp:MEAN, lognormal:MEDIAN,SIGMA)")
		sPrompt    = fs.String("synth-prompt", syn.PromptTokens.String(), "synthetic: a first turn's tokens after the prefix")
		sOutput    = fs.String("synth-output", syn.OutputTokens.String(), "synthetic: output tokens per turn")
		sTurns     = fs.String("synth-turns", syn.Turns.String(), "synthetic: turns per session")
		sTurnTok   = fs.String("synth-turn-tokens", syn.TurnTokens.String(), "synthetic: new user tokens per follow-up turn")
		sThink     = fs.String("synth-think-ms", syn.ThinkTime.String(), "synthetic: milliseconds between a turn's end and the next")
		sSeed      = fs.Uint64("synth-seed", syn.Seed, "synthetic: generator seed")
		compare    = fs.String("compare", "kv,round-robin,random,least-loaded", "policies to compare: "+strings.Join(replay.PolicyNames, ", ")+" (kv-approx: kv without KV events)")
		speedup    = fs.String("speedup", "", "arrival-time compression: a list (1,2,4,8) or auto (offline: double until kv saturates, then bisect); default auto offline, 1 online")
		workers    = fs.Int("workers", 8, "offline: simulated workers")
		dpRanks    = fs.Int("dp-ranks", 1, "offline: dp ranks per worker (each an engine with its own cache)")
		kvBlocks   = fs.Int("kv-blocks", 16384, "offline: KV cache blocks per rank (kvroute mock's --kv-blocks)")
		hostKV     = fs.Int("host-kv-blocks", 0, "offline: host-memory KV blocks per rank behind the GPU's (kvroute mock's --host-kv-blocks; 0: none)")
		hostGBps   = fs.Float64("host-gbps", 32, "offline: host tier onload bandwidth in GB/s (kvroute mock's --host-gbps)")
		blockSize  = fs.Int("block-size", 16, "engine KV block size in tokens (online: for the achievable hit ratio)")
		maxSeqs    = fs.Int("max-num-seqs", 256, "offline: running requests per rank at most (vLLM max_num_seqs)")
		maxBatch   = fs.Int("max-batched-tokens", 8192, "offline: tokens per engine step at most (vLLM max_num_batched_tokens)")
		engSpeed   = fs.Float64("engine-speedup", 1, "offline: divide every engine step time by this (kvroute mock's --speedup)")
		prefPoly   = fs.String("prefill-poly", replay.DefaultPrefillPoly.String(), "offline timing model: prefill_ms = a·t² + b·t + c of a step's uncached tokens t, as a,b,c")
		decPoly    = fs.String("decode-poly", replay.DefaultDecodePoly.String(), "offline timing model: decode_ms = a·u² + b·u + c of the KV usage u in [0,1], as a,b,c")
		evDelay    = fs.Duration("event-delay", time.Millisecond, "offline: KV events reach the index this long after the step that produced them")
		loadIvl    = fs.Duration("load-interval", 50*time.Millisecond, "offline: minimum gap between an engine's load reports")
		tenantsF   = fs.String("tenants", "", "offline: YAML file assigning priority classes (classes: {critical, standard, sheddable} fractions), tenants (tenants: [{name, share, weight}]) and sessions (sessions: true, from the trace's session_id) to the requests, or with from_trace: true takes them from the trace's tenant and priority fields; the report adds each class's and tenant's TTFT and share, and Jain's index over 10 s windows")
		routers    = fs.Int("routers", 1, "offline: router replicas, each with its own scheduler; request i arrives at replica i mod N")
		syncDelays = fs.String("sync-delays", "", "offline, with --routers > 1: sweep the sync delay over this list (e.g. 0,100us,1ms,10ms) with the first --compare policy at one --speedup, against one router and the replicas without sync; prints a table, --plot draws it, --json writes it")
		syncDelay  = fs.Duration("sync-delay", -1, "offline, with --routers > 1: a replica's bookings reach the others this long after it made them (serve --router-replica-sync); negative: never (replicas without sync)")
		approxTTL  = fs.Duration("approx-ttl", shard.DefaultTTL, "kv-approx: how long a routed prefix is assumed cached (refreshed on reuse)")
		approxMax  = fs.Int("approx-max-blocks", shard.DefaultMaxBlocks, "kv-approx: blocks recorded before the oldest are pruned")
		parallel   = fs.Int("parallel", 0, "offline: simulations run at once (0: GOMAXPROCS); results do not depend on it")
		model      = fs.String("model", "mock", "online: the requests' model field")
		conc       = fs.Int("concurrency", 0, "online: fixed number of concurrent clients instead of the trace's timing (0: trace timing)")
		timeout    = fs.Duration("timeout", 10*time.Minute, "online: limit per request")
		wHeader    = fs.String("worker-header", replay.DefaultWorkerHeader, "online: response header naming the worker that served")
		label      = fs.String("label", "online", "online: the policy column's name in the report")
		jsonPath   = fs.String("json", "", "also write the report as JSON to this file (- for stdout instead of the table)")
		plotPath   = fs.String("plot", "", "also draw the report to this .svg or .png file")
		plotSpeeds = fs.String("plot-speedups", "", "speedups to plot, one row each (default: the lowest and kv's saturation speedup)")
		bench      = fs.Bool("bench-lines", true, "print Go benchmark-format lines (BenchmarkReplay/...) after the table, for benchstat")
		progress   = fs.String("progress", "auto", "progress bar on stderr: auto (when stderr is a terminal), on or off")
		cpuProf    = fs.String("cpuprofile", "", "write a CPU profile of the replay to this file")
		pdGPUs     = fs.String("pd", "", "offline: compare aggregated kv, disaggregated round-robin pairs, disaggregated kv and conditional kv (isl-or-load) on P prefill + D decode GPUs (P + D aggregated ones), with DistServe's OPT-13B/A100 step model (KV per GPU: --kv-blocks when given, else the profiled GPU's 57,344 tokens), at each --speedup: P,D")
		pdGBps     = fs.Float64("pd-transfer-gbps", 25, "with --pd: prefill-to-decode KV bandwidth in GB/s")
	)
	var urls stringList
	fs.Var(&urls, "url", "online mode: base URL of an OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000 (repeatable: requests spread in turn)")
	sf := addSchedFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o := &replayOptions{
		tracePath: *tracePath, synthOut: *synthOut, limit: *limit, parallel: *parallel,
		jsonPath: *jsonPath, plotPath: *plotPath, benchLines: *bench, progress: *progress, cpuProfile: *cpuProf,
	}
	if *traceBS != trace.IDBlockSize {
		return nil, fmt.Errorf("--trace-block-size %d: only %d-token hash ids are supported", *traceBS, trace.IDBlockSize)
	}
	if *limit < 0 {
		return nil, fmt.Errorf("--requests must be ≥ 0 (got %d)", *limit)
	}
	if *parallel < 0 {
		return nil, fmt.Errorf("--parallel must be ≥ 0 (got %d)", *parallel)
	}
	switch *progress {
	case "auto", "on", "off":
	default:
		return nil, fmt.Errorf("--progress must be auto, on or off (got %q)", *progress)
	}
	if *plotPath != "" {
		if _, err := replayPlotFormat(*plotPath); err != nil {
			return nil, err
		}
	}
	if *useSynth {
		c := syn
		c.Requests, c.Rate, c.Groups, c.GroupSkew, c.Seed = *sReqs, *sRate, *sGroups, *sSkew, *sSeed
		for _, d := range []struct {
			flag string
			v    string
			dst  *synth.Dist
		}{{"synth-prefix", *sPrefix, &c.PrefixTokens}, {"synth-prompt", *sPrompt, &c.PromptTokens}, {"synth-output", *sOutput, &c.OutputTokens},
			{"synth-turns", *sTurns, &c.Turns}, {"synth-turn-tokens", *sTurnTok, &c.TurnTokens}, {"synth-think-ms", *sThink, &c.ThinkTime}} {
			dist, err := synth.ParseDist(d.v)
			if err != nil {
				return nil, fmt.Errorf("--%s: %w", d.flag, err)
			}
			*d.dst = dist
		}
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("--synth-*: %w", err)
		}
		o.synth = &c
	} else if *synthOut != "" {
		return nil, errors.New("--synth-out needs --synth")
	}
	var err error
	if o.policies, err = replay.ParsePolicies(*compare); err != nil {
		return nil, fmt.Errorf("--compare: %w", err)
	}
	online := len(urls) > 0
	switch {
	case *speedup == "auto" && online:
		return nil, errors.New("--speedup auto is offline only; give one speedup with --url")
	case *speedup == "auto" || (*speedup == "" && !online):
		o.auto = true
		if !replayHasPolicy(o.policies, "kv") {
			return nil, errors.New("--speedup auto needs kv in --compare (give explicit --speedup values otherwise)")
		}
	case *speedup == "":
		o.speedups = []float64{1}
	default:
		if o.speedups, err = replayFloats(*speedup); err != nil {
			return nil, fmt.Errorf("--speedup: %w", err)
		}
	}
	if *plotSpeeds != "" {
		if o.plotSpeedups, err = replayFloats(*plotSpeeds); err != nil {
			return nil, fmt.Errorf("--plot-speedups: %w", err)
		}
	}
	if *blockSize <= 0 {
		return nil, fmt.Errorf("--block-size must be > 0 (got %d)", *blockSize)
	}
	if online {
		if *routers != 1 {
			return nil, errors.New("--routers simulates router replicas offline; online, run the replicas and give each one's --url")
		}
		if len(o.speedups) != 1 {
			return nil, fmt.Errorf("--speedup: online mode takes one speedup (got %d)", len(o.speedups))
		}
		if *conc < 0 {
			return nil, fmt.Errorf("--concurrency must be ≥ 0 (got %d)", *conc)
		}
		if *timeout <= 0 {
			return nil, fmt.Errorf("--timeout must be > 0 (got %v)", *timeout)
		}
		for _, u := range urls {
			if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
				return nil, fmt.Errorf("--url %q must start with http:// or https://", u)
			}
		}
		o.online = replay.OnlineConfig{
			URLs: urls, Model: *model, Label: *label, Speedup: o.speedups[0], Concurrency: *conc,
			Timeout: *timeout, WorkerHeader: *wHeader,
		}
	}
	sc := def
	sc.BlockSize = *blockSize
	if err := sf.apply(&sc); err != nil {
		return nil, fmt.Errorf("scheduler flags: %w", err)
	}
	for name, v := range map[string]int{"workers": *workers, "dp-ranks": *dpRanks, "kv-blocks": *kvBlocks, "max-num-seqs": *maxSeqs, "max-batched-tokens": *maxBatch} {
		if v <= 0 {
			return nil, fmt.Errorf("--%s must be > 0 (got %d)", name, v)
		}
	}
	if !(*engSpeed > 0) {
		return nil, fmt.Errorf("--engine-speedup must be > 0 (got %g)", *engSpeed)
	}
	pp, err := replay.ParsePoly(*prefPoly)
	if err != nil {
		return nil, fmt.Errorf("--prefill-poly: %w", err)
	}
	dp, err := replay.ParsePoly(*decPoly)
	if err != nil {
		return nil, fmt.Errorf("--decode-poly: %w", err)
	}
	if *evDelay < 0 || *loadIvl < 0 {
		return nil, fmt.Errorf("--event-delay and --load-interval must be ≥ 0 (got %v, %v)", *evDelay, *loadIvl)
	}
	if *routers < 1 || *routers > 64 {
		return nil, fmt.Errorf("--routers must be in [1, 64] (got %d)", *routers)
	}
	var syncErr error
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "sync-delay" && *routers < 2 {
			syncErr = errors.New("--sync-delay needs --routers > 1")
		}
	})
	if syncErr != nil {
		return nil, syncErr
	}
	if *syncDelays != "" {
		if online || *routers < 2 {
			return nil, errors.New("--sync-delays sweeps the offline replicas' sync delay: it needs --routers > 1 and no --url")
		}
		if len(o.speedups) != 1 || o.auto {
			return nil, errors.New("--sync-delays: give one --speedup")
		}
		for _, f := range strings.Split(*syncDelays, ",") {
			d, err := time.ParseDuration(strings.TrimSpace(f))
			if f = strings.TrimSpace(f); f == "0" {
				d, err = 0, nil
			}
			if err != nil || d < 0 {
				return nil, fmt.Errorf("--sync-delays: %q is not a duration ≥ 0", f)
			}
			o.syncDelays = append(o.syncDelays, d)
		}
	}
	if *hostKV < 0 || *hostGBps <= 0 {
		return nil, fmt.Errorf("--host-kv-blocks must be >= 0 and --host-gbps > 0 (got %d, %g)", *hostKV, *hostGBps)
	}
	if *approxTTL <= 0 || *approxMax <= 0 {
		return nil, fmt.Errorf("--approx-ttl and --approx-max-blocks must be > 0 (got %v, %d)", *approxTTL, *approxMax)
	}
	o.offline = replay.Config{
		Fleet: replay.Fleet{
			Workers: *workers, DPRanks: *dpRanks, KVBlocks: *kvBlocks, HostKVBlocks: *hostKV, HostGBps: *hostGBps, BlockSize: *blockSize,
			MaxNumSeqs: *maxSeqs, MaxBatchedTokens: *maxBatch, EngineSpeedup: *engSpeed,
			PrefillPoly: pp, DecodePoly: dp,
		},
		Sched:        sc,
		Approx:       shard.ApproxConfig{TTL: *approxTTL, MaxBlocks: *approxMax},
		Speedup:      1,
		EventDelay:   *evDelay,
		LoadInterval: *loadIvl,
		TickInterval: time.Second,
		Routers:      *routers,
		SyncDelay:    *syncDelay,
		Seed:         *sf.seed,
	}
	if *tenantsF != "" {
		data, err := os.ReadFile(*tenantsF)
		if err != nil {
			return nil, fmt.Errorf("--tenants: %w", err)
		}
		if o.offline.Tenants, err = replay.ParseTenantMix(data); err != nil {
			return nil, fmt.Errorf("--tenants %s: %w", *tenantsF, err)
		}
	}
	if err := o.offline.Validate(); err != nil {
		return nil, err
	}
	if *pdGPUs != "" {
		kvSet := false
		fs.Visit(func(f *flag.Flag) { kvSet = kvSet || f.Name == "kv-blocks" })
		if o.pd, err = parseReplayPD(o, *pdGPUs, *pdGBps, online, kvSet); err != nil {
			return nil, err
		}
	}
	return o, nil
}

func replayHasPolicy(ps []replay.Policy, name string) bool {
	for _, p := range ps {
		if p.Name == name {
			return true
		}
	}
	return false
}

func replayFloats(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(v > 0) || v > 1e6 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, v)
	}
	return out, nil
}

func replayPlotFormat(path string) (string, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".svg":
		return replay.PlotSVG, nil
	case ".png":
		return replay.PlotPNG, nil
	}
	return "", fmt.Errorf("--plot %q: the file name must end in .svg or .png", path)
}

func runReplay(args []string) error {
	o, err := parseReplayFlags(args, os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return replayMain(ctx, o, os.Stdout, os.Stderr)
}

// replayMain runs a parsed replay and writes its outputs.
func replayMain(ctx context.Context, o *replayOptions, stdout, stderr io.Writer) error {
	tr, name, err := o.load()
	if err != nil {
		return err
	}
	w, err := replay.Prepare(tr, o.offline.Fleet.BlockSize, name)
	if err != nil {
		return err
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	if len(o.syncDelays) > 0 {
		return replaySyncSweep(w, o, stdout)
	}
	if o.pd != nil {
		return replayPD(w, o, stdout)
	}
	bar := newReplayProgress(stderr, o.progress, w.Len())
	var rep *replay.Report
	if len(o.online.URLs) > 0 {
		bar.total(w.Len())
		c := o.online
		c.Progress = bar.add
		rep, err = replay.RunOnline(ctx, w, c)
	} else {
		if !o.auto {
			bar.total(w.Len() * len(o.policies) * len(o.speedups))
		}
		c := o.offline
		c.Progress = bar.add
		rep, err = replay.Run(w, c, replay.Sweep{Policies: o.policies, Speedups: o.speedups, Auto: o.auto, Parallel: o.parallel})
	}
	bar.finish()
	if err != nil {
		if rep == nil {
			return err
		}
		fmt.Fprintf(stderr, "kvroute replay: %v\n", err)
	}
	if o.jsonPath == "-" {
		if err := rep.WriteJSON(stdout); err != nil {
			return err
		}
	} else {
		if err := rep.WriteTable(stdout); err != nil {
			return err
		}
		if o.benchLines {
			fmt.Fprintln(stdout)
			if err := rep.WriteBenchmarkLines(stdout); err != nil {
				return err
			}
		}
	}
	if o.jsonPath != "" && o.jsonPath != "-" {
		if err := replayWriteFile(o.jsonPath, rep.WriteJSON); err != nil {
			return fmt.Errorf("--json: %w", err)
		}
	}
	if o.plotPath != "" {
		format, _ := replayPlotFormat(o.plotPath)
		if err := replayWriteFile(o.plotPath, func(f io.Writer) error { return replay.Plot(f, rep, format, o.plotSpeedups) }); err != nil {
			return fmt.Errorf("--plot: %w", err)
		}
	}
	return err
}

// load reads the trace or generates the synthetic workload.
func (o *replayOptions) load() (*trace.Trace, string, error) {
	var (
		tr   *trace.Trace
		name string
		err  error
	)
	if o.synth != nil {
		if tr, err = synth.Generate(*o.synth); err != nil {
			return nil, "", err
		}
		name = fmt.Sprintf("synthetic(requests=%d,rate=%g,groups=%d,seed=%d)", o.synth.Requests, o.synth.Rate, o.synth.Groups, o.synth.Seed)
		if o.synthOut != "" {
			err := replayWriteFile(o.synthOut, func(w io.Writer) error {
				bw := bufio.NewWriter(w)
				var line []byte
				for i := range tr.Requests {
					line = append(tr.Requests[i].AppendJSON(line[:0]), '\n')
					if _, err := bw.Write(line); err != nil {
						return err
					}
				}
				return bw.Flush()
			})
			if err != nil {
				return nil, "", fmt.Errorf("--synth-out: %w", err)
			}
		}
	} else {
		if tr, err = readTrace(o.tracePath); err != nil {
			return nil, "", err
		}
		name = o.tracePath
	}
	if o.limit > 0 && o.limit < len(tr.Requests) {
		tr.Requests = tr.Requests[:o.limit]
	}
	return tr, name, nil
}

func replayWriteFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// replayProgress draws "[=====>    ] 45% 1800/3993 requests" on stderr, at
// most every 200 ms. It is goroutine-safe; a disabled bar does nothing.
type replayProgress struct {
	w       io.Writer
	on      bool
	n, max  atomic.Int64
	mu      sync.Mutex
	last    time.Time
	started time.Time
}

func newReplayProgress(w io.Writer, mode string, _ int) *replayProgress {
	on := mode == "on"
	if mode == "auto" {
		if f, ok := w.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				on = true
			}
		}
	}
	return &replayProgress{w: w, on: on, started: time.Now()}
}

func (p *replayProgress) total(n int) { p.max.Store(int64(n)) }

func (p *replayProgress) add(k int) {
	if !p.on {
		return
	}
	n := p.n.Add(int64(k))
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.last) < 200*time.Millisecond {
		return
	}
	p.last = time.Now()
	p.draw(n)
}

func (p *replayProgress) draw(n int64) {
	el := time.Since(p.started).Round(time.Second)
	if m := p.max.Load(); m > 0 {
		const width = 30
		f := min(1, float64(n)/float64(m))
		fill := int(f * width)
		bar := strings.Repeat("=", fill) + strings.Repeat(" ", width-fill)
		if fill < width {
			bar = bar[:fill] + ">" + bar[fill+1:]
		}
		fmt.Fprintf(p.w, "\r[%s] %3.0f%% %d/%d requests %v ", bar, 100*f, n, m, el)
		return
	}
	fmt.Fprintf(p.w, "\rreplay: %d requests simulated %v ", n, el)
}

func (p *replayProgress) finish() {
	if !p.on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.draw(p.n.Load())
	fmt.Fprintln(p.w)
}

// replaySyncSweep runs --sync-delays: a table on stdout, and the JSON and
// plot files when asked.
func replaySyncSweep(w *replay.Workload, o *replayOptions, stdout io.Writer) error {
	c := o.offline
	c.Speedup = o.speedups[0]
	rep, err := replay.SyncSweep(w, c, o.policies[0], o.syncDelays)
	if err != nil {
		return err
	}
	if o.jsonPath == "-" {
		return json.NewEncoder(stdout).Encode(rep)
	}
	fmt.Fprintf(stdout, "%s: %d requests, %d workers, policy %s, speedup %g\n", rep.Trace, rep.Requests, rep.Workers, rep.Policy, rep.Speedup)
	fmt.Fprintf(stdout, "%-28s %16s %16s %10s\n", "setup", "window max/mean", "max worker share", "hit ratio")
	line := func(name string, p replay.SyncPoint) {
		fmt.Fprintf(stdout, "%-28s %16.3f %16.3f %10.4f\n", name, p.WindowMaxMean, p.MaxWorkerShare, p.HitRatio)
	}
	line("1 router", rep.One)
	line(fmt.Sprintf("%d replicas, no sync", rep.NoSync.Routers), rep.NoSync)
	for _, p := range rep.Points {
		line(fmt.Sprintf("%d replicas, sync delay %v", p.Routers, p.Delay), p)
	}
	if o.jsonPath != "" {
		if err := replayWriteFile(o.jsonPath, func(f io.Writer) error { return json.NewEncoder(f).Encode(rep) }); err != nil {
			return fmt.Errorf("--json: %w", err)
		}
	}
	if o.plotPath != "" {
		format, _ := replayPlotFormat(o.plotPath)
		if err := replayWriteFile(o.plotPath, func(f io.Writer) error { return replay.PlotSyncSweep(f, rep, format) }); err != nil {
			return fmt.Errorf("--plot: %w", err)
		}
	}
	return nil
}
