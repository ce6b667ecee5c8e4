package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Report is the outcome of a replay: the workload, the fleet and one Result
// per (speedup, policy). JSON field names are part of `kvroute replay
// --json`. A plain value.
type Report struct {
	Trace    string  `json:"trace"`
	Mode     string  `json:"mode"` // "offline" or "online"
	URL      string  `json:"url,omitempty"`
	Requests int     `json:"requests"`
	SpanS    float64 `json:"trace_span_s"` // arrival span at speedup 1
	Workers  int     `json:"workers"`
	DPRanks  int     `json:"dp_ranks,omitempty"`
	KVBlocks int     `json:"kv_blocks,omitempty"`
	// HostKVBlocks is each rank's host tier (offline; 0: none).
	HostKVBlocks int `json:"host_kv_blocks,omitempty"`
	BlockSize    int `json:"block_size"`
	// EngineSpeedup divides the simulated engines' step times (offline).
	EngineSpeedup float64 `json:"engine_speedup,omitempty"`
	// Timing is the engines' step timing model (offline).
	Timing string `json:"timing,omitempty"`
	// Concurrency is the online mode's fixed concurrency (0: trace timing).
	Concurrency int `json:"concurrency,omitempty"`

	// AchievableHitRatio: an infinite prefix cache shared by all workers
	// (Workload.Achievable).
	AchievableHitRatio float64 `json:"achievable_hit_ratio"`
	// FleetCacheHitRatio: one LRU cache as large as the whole fleet's,
	// device plus host blocks (Workload.PooledLRU), offline only.
	FleetCacheHitRatio float64   `json:"fleet_cache_hit_ratio,omitempty"`
	FleetCacheOverTime []float64 `json:"fleet_cache_over_time,omitempty"`
	// AchievableOverTime is AchievableHitRatio per time slot.
	AchievableOverTime []float64 `json:"achievable_over_time"`

	Speedups []float64 `json:"speedups"`
	Policies []Result  `json:"policies"`
	// Saturation is where kv saturates in the sweep (nil without kv).
	Saturation *Saturation `json:"saturation,omitempty"`
}

func newReport(w *Workload, cfg Config, mode string) *Report {
	return &Report{
		Trace: w.Name, Mode: mode, Requests: w.Len(), SpanS: w.span.Seconds(),
		Workers: cfg.Fleet.Workers, DPRanks: cfg.Fleet.DPRanks, KVBlocks: cfg.Fleet.KVBlocks,
		BlockSize: w.BlockSize, EngineSpeedup: cfg.Fleet.EngineSpeedup,
		Timing: fmt.Sprintf("prefill_ms = poly(%s) of uncached batch tokens, decode_ms = poly(%s) of KV usage (a·x² + b·x + c)",
			cfg.Fleet.PrefillPoly, cfg.Fleet.DecodePoly),
		AchievableHitRatio: w.achievable, AchievableOverTime: w.achievableOver,
	}
}

// Result returns the result of policy at speedup, or nil.
func (r *Report) Result(policy string, speedup float64) *Result {
	for i := range r.Policies {
		if p := &r.Policies[i]; p.Policy == policy && p.Speedup == speedup {
			return p
		}
	}
	return nil
}

// Saturation is where kv stops keeping up in a speedup sweep (a result,
// not a judgement). A plain value.
type Saturation struct {
	// KeepsUpTo is the highest speedup of the sweep, below the first one
	// at which kv saturates, at which kv keeps up (Result.Saturated
	// false). 0 when kv saturates at every speedup run.
	KeepsUpTo float64 `json:"kv_keeps_up_to"`
	// SaturatedAt is the lowest speedup at which kv saturates (0: none in
	// the sweep, so KeepsUpTo is only a lower bound).
	SaturatedAt float64 `json:"kv_saturated_at"`
}

// saturation fills Saturation when the report has kv.
func (r *Report) saturation() {
	st := &Saturation{}
	found := false
	for _, s := range r.Speedups {
		kv := r.Result("kv", s)
		if kv == nil {
			continue
		}
		found = true
		if kv.Saturated {
			st.SaturatedAt = s
			break
		}
		st.KeepsUpTo = s
	}
	if found {
		r.Saturation = st
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// WriteJSON writes r as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the human-readable report: a header, one row per
// (speedup, policy), the worker shares, and where kv saturates. It reports
// results only; judging them is for tests and benchmarks.
func (r *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "trace %s: %d requests over %.0f s (%s mode)\n", r.Trace, r.Requests, r.SpanS, r.Mode)
	if r.Mode == "offline" {
		fmt.Fprintf(&b, "fleet: %d workers × %d dp, %d KV blocks of %d tokens each, engine speedup %g\n",
			r.Workers, r.DPRanks, r.KVBlocks, r.BlockSize, r.EngineSpeedup)
		if r.HostKVBlocks > 0 {
			fmt.Fprintf(&b, "host tier: %d KV blocks per rank behind the GPU's (offload on eviction, onload instead of recompute)\n", r.HostKVBlocks)
		}
		fmt.Fprintf(&b, "timing: %s\n", r.Timing)
	} else {
		fmt.Fprintf(&b, "endpoint %s: %d workers seen, block size %d (for the achievable ratio)", r.URL, r.Workers, r.BlockSize)
		if r.Concurrency > 0 {
			fmt.Fprintf(&b, ", concurrency %d", r.Concurrency)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "achievable hit ratio %.3f (infinite shared cache)", r.AchievableHitRatio)
	if r.FleetCacheHitRatio > 0 {
		fmt.Fprintf(&b, "; %.3f with one LRU cache the size of the fleet's", r.FleetCacheHitRatio)
	}
	b.WriteString("\n\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "speedup\tpolicy\treqs\tdone\trej\treq/s\ttok/s\tTTFT mean\tp50\tp90\tp99\tITL mean\tp50\tp90\tp99\tE2E mean\tp50\tp90\tp99\thit\thost\t/achv\t/lru\tmax share\tqueued\tsat\t")
	for _, p := range r.Policies {
		sat := ""
		if p.Saturated {
			sat = "yes"
		}
		fmt.Fprintf(tw, "%gx\t%s\t%d\t%d\t%d\t%.2f\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.3f\t%.3f\t%.2f\t%.2f\t%.2f\t%d\t%s\t\n",
			p.Speedup, p.Policy, p.Requests, p.Completed, p.Rejected, p.ReqPerS, p.TokensPerS,
			fms(p.TTFTMeanMs), fms(p.TTFTP50Ms), fms(p.TTFTP90Ms), fms(p.TTFTP99Ms),
			fms(p.ITLMeanMs), fms(p.ITLP50Ms), fms(p.ITLP90Ms), fms(p.ITLP99Ms),
			fms(p.E2EMeanMs), fms(p.E2EP50Ms), fms(p.E2EP90Ms), fms(p.E2EP99Ms),
			p.HitRatio, p.HostHitRatio, p.HitOfAchievable, p.HitOfFleetCache, p.MaxWorkerShare, p.Queued, sat)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	b.WriteString("(latencies in ms; hit = cached prompt tokens / prompt tokens, device and host; host = of it, onloaded from host tiers; /achv = hit / achievable; /lru = hit / one LRU of the fleet's size; max share = max over workers of requests / mean)\n")
	b.WriteString("\nworker shares of requests (of prompt tokens):\n")
	for _, p := range r.Policies {
		fmt.Fprintf(&b, "  %-6s %-13s", strconv.FormatFloat(p.Speedup, 'g', -1, 64)+"x", p.Policy)
		for _, ws := range p.Workers {
			fmt.Fprintf(&b, " %s:%.2f(%.2f)", ws.Worker, ws.RequestShare, ws.TokenShare)
		}
		b.WriteString("\n")
	}
	if st := r.Saturation; st != nil && len(r.Speedups) > 1 {
		switch {
		case st.KeepsUpTo == 0:
			fmt.Fprintf(&b, "\nkv saturates at every speedup run (from %gx)\n", st.SaturatedAt)
		case st.SaturatedAt == 0:
			fmt.Fprintf(&b, "\nkv keeps up at every speedup run (to %gx)\n", st.KeepsUpTo)
		default:
			fmt.Fprintf(&b, "\nkv keeps up to %gx and saturates at %gx\n", st.KeepsUpTo, st.SaturatedAt)
		}
	}
	writeGroups(&b, r.Policies)
	_, err := io.WriteString(w, b.String())
	return err
}

// fms formats milliseconds compactly.
func fms(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// WriteBenchmarkLines writes one Go benchmark-format line per Result,
// BenchmarkReplay/policy=<p>/speedup=<s>, with the run's wall time as ns/op
// and its figures as extra metrics, so benchstat can compare replays.
func (r *Report) WriteBenchmarkLines(w io.Writer) error {
	var b strings.Builder
	for _, p := range r.Policies {
		b.WriteString(BenchmarkLine(&p))
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// BenchmarkLine formats one Result as a Go benchmark line (no newline).
func BenchmarkLine(p *Result) string {
	return fmt.Sprintf("BenchmarkReplay/policy=%s/speedup=%g \t1\t%d ns/op\t%.2f ttft_mean_ms\t%.2f ttft_p50_ms\t%.2f ttft_p99_ms\t%.3f itl_mean_ms\t%.2f e2e_mean_ms\t%.4f hit_ratio\t%.4f hit_of_achievable\t%.3f max_worker_share\t%.3f req/s\t%d rejected",
		p.Policy, p.Speedup, int64(p.WallS*1e9), p.TTFTMeanMs, p.TTFTP50Ms, p.TTFTP99Ms, p.ITLMeanMs, p.E2EMeanMs,
		p.HitRatio, p.HitOfAchievable, p.MaxWorkerShare, p.ReqPerS, p.Rejected)
}
