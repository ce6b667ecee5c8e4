package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
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
	Targets  *Targets  `json:"targets,omitempty"`
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

// Targets evaluates the routing-quality targets (README "Replay") on a
// report that has kv and other policies. A plain value.
type Targets struct {
	// SaturationSpeedup is the highest speedup of the sweep at which kv
	// still keeps up (Result.Saturated false); the targets hold at every
	// speedup up to it. 0 when kv saturates at every speedup run.
	SaturationSpeedup float64 `json:"kv_saturation_speedup"`
	// SaturatedAt is the lowest speedup at which kv saturates (0: none in
	// the sweep, so SaturationSpeedup is only a lower bound).
	SaturatedAt float64 `json:"kv_saturated_at"`
	Checks      []Check `json:"checks"`
}

// Check is one target: its name, the measured value, the goal and whether
// it is met (plain data).
type Check struct {
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Goal   string  `json:"goal"`
	Met    bool    `json:"met"`
	Detail string  `json:"detail,omitempty"`
}

// Met reports whether every check is met.
func (t *Targets) Met() bool {
	for _, c := range t.Checks {
		if !c.Met {
			return false
		}
	}
	return len(t.Checks) > 0
}

// evaluate fills Targets when the report has kv and another policy.
func (r *Report) evaluate() {
	var others []string
	hasKV := false
	for _, p := range r.Policies {
		if p.Policy == "kv" {
			hasKV = true
		} else if !contains(others, p.Policy) {
			others = append(others, p.Policy)
		}
	}
	if !hasKV || len(others) == 0 {
		return
	}
	t := &Targets{}
	for _, s := range r.Speedups {
		kv := r.Result("kv", s)
		if kv == nil {
			continue
		}
		if kv.Saturated {
			t.SaturatedAt = s
			break
		}
		t.SaturationSpeedup = s
	}
	r.Targets = t
	if t.SaturationSpeedup == 0 {
		t.Checks = append(t.Checks, Check{Name: "kv keeps up at 1x", Goal: "not saturated", Detail: "kv saturates at every speedup run"})
		return
	}
	low := r.Result("kv", r.Speedups[0])
	share, shareAt := 0.0, 0.0
	meanOK, p99OK := true, true
	var meanFail, p99Fail []string
	for _, s := range r.Speedups {
		if s > t.SaturationSpeedup {
			break
		}
		kv := r.Result("kv", s)
		if kv == nil {
			continue
		}
		if kv.MaxWorkerShare > share {
			share, shareAt = kv.MaxWorkerShare, s
		}
		for _, o := range others {
			or := r.Result(o, s)
			if or == nil {
				continue
			}
			if kv.TTFTMeanMs >= or.TTFTMeanMs {
				meanOK = false
				meanFail = append(meanFail, fmt.Sprintf("%gx %s %.0f ≤ kv %.0f ms", s, o, or.TTFTMeanMs, kv.TTFTMeanMs))
			}
			if kv.TTFTP99Ms >= or.TTFTP99Ms {
				p99OK = false
				p99Fail = append(p99Fail, fmt.Sprintf("%gx %s %.0f ≤ kv %.0f ms", s, o, or.TTFTP99Ms, kv.TTFTP99Ms))
			}
		}
	}
	hitDetail := fmt.Sprintf("at %gx: %.3f of %.3f", r.Speedups[0], low.HitRatio, r.AchievableHitRatio)
	if r.FleetCacheHitRatio > 0 {
		hitDetail += fmt.Sprintf("; one LRU cache of the fleet's size gets %.3f", r.FleetCacheHitRatio)
	}
	t.Checks = append(t.Checks,
		Check{Name: "kv hit ratio / achievable", Value: low.HitOfAchievable, Goal: "≥ 0.90", Met: low.HitOfAchievable >= 0.9, Detail: hitDetail},
		Check{Name: "kv max worker share (worst speedup)", Value: share, Goal: "≤ 1.30", Met: share <= 1.3, Detail: fmt.Sprintf("at %gx", shareAt)},
		Check{Name: "kv mean TTFT lowest at every speedup", Value: b2f(meanOK), Goal: "1", Met: meanOK, Detail: strings.Join(meanFail, "; ")},
		Check{Name: "kv p99 TTFT lowest at every speedup", Value: b2f(p99OK), Goal: "1", Met: p99OK, Detail: strings.Join(p99Fail, "; ")},
	)
	// With a fleet-cache reference: kv's hit ratio against one LRU cache of
	// the fleet's whole size (device + host), at every speedup below
	// saturation; and at round-robin's saturation speedup, kv keeps up with
	// a mean TTFT ≥ 3× lower.
	if r.FleetCacheHitRatio > 0 {
		worst, worstAt := math.Inf(1), 0.0
		for _, s := range r.Speedups {
			if s > t.SaturationSpeedup {
				break
			}
			if kv := r.Result("kv", s); kv != nil && kv.HitOfFleetCache < worst {
				worst, worstAt = kv.HitOfFleetCache, s
			}
		}
		if worstAt > 0 {
			t.Checks = append(t.Checks, Check{Name: "kv hit ratio / fleet-size LRU (worst below saturation)", Value: worst, Goal: "≥ 0.90", Met: worst >= 0.9,
				Detail: fmt.Sprintf("at %gx; the LRU holds %d blocks per rank", worstAt, r.KVBlocks+r.HostKVBlocks)})
		}
	}
	for _, s := range r.Speedups {
		rr := r.Result("round-robin", s)
		if rr == nil || !rr.Saturated {
			continue
		}
		if kv := r.Result("kv", s); kv != nil && kv.TTFTMeanMs > 0 {
			ratio := rr.TTFTMeanMs / kv.TTFTMeanMs
			t.Checks = append(t.Checks, Check{
				Name: "at round-robin's saturation speedup: kv not saturated, rr / kv mean TTFT", Value: ratio, Goal: "≥ 3, kv not saturated",
				Met: ratio >= 3 && !kv.Saturated, Detail: fmt.Sprintf("at %gx: %.0f / %.0f ms, kv saturated %v", s, rr.TTFTMeanMs, kv.TTFTMeanMs, kv.Saturated),
			})
		}
		break
	}
	kv, rr := r.Result("kv", t.SaturationSpeedup), r.Result("round-robin", t.SaturationSpeedup)
	if rr != nil && kv.TTFTMeanMs > 0 {
		ratio := rr.TTFTMeanMs / kv.TTFTMeanMs
		t.Checks = append(t.Checks, Check{
			Name: "round-robin / kv mean TTFT at kv's saturation speedup", Value: ratio, Goal: "≥ 5", Met: ratio >= 5,
			Detail: fmt.Sprintf("at %gx: %.0f / %.0f ms", t.SaturationSpeedup, rr.TTFTMeanMs, kv.TTFTMeanMs),
		})
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

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// WriteJSON writes r as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the human-readable report: a header, one row per
// (speedup, policy), the worker shares, and the targets.
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
	if t := r.Targets; t != nil {
		b.WriteString("\ntargets (issue 7 §3):")
		if t.SaturationSpeedup > 0 {
			fmt.Fprintf(&b, " kv keeps up to %gx", t.SaturationSpeedup)
			if t.SaturatedAt > 0 {
				fmt.Fprintf(&b, " and saturates at %gx", t.SaturatedAt)
			} else {
				b.WriteString(" (no saturation in the sweep)")
			}
		}
		b.WriteString("\n")
		for _, c := range t.Checks {
			met := "MISSED"
			if c.Met {
				met = "met"
			}
			fmt.Fprintf(&b, "  %-6s %-55s %8.3f (goal %s)", met, c.Name, c.Value, c.Goal)
			if c.Detail != "" {
				fmt.Fprintf(&b, "  %s", c.Detail)
			}
			b.WriteString("\n")
		}
	}
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
