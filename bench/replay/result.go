package replay

import (
	"math"
	"slices"
	"time"
)

// Result is the outcome of replaying a workload with one policy at one
// speedup: a plain value (JSON field names are part of `kvroute replay
// --json`). Latencies are in milliseconds, measured from a request's arrival
// (offline: its arrival in the simulation; online: when the client sent it).
type Result struct {
	Policy  string  `json:"policy"`
	Speedup float64 `json:"speedup"`

	Requests  int `json:"requests"`  // requests of the workload
	Completed int `json:"completed"` // finished
	Rejected  int `json:"rejected"`  // refused: router queue full, no worker, or (offline) longer than a worker's cache; online: HTTP 429/503
	TooLong   int `json:"too_long"`  // of Rejected: prompt + output larger than a worker's KV cache (offline)
	Failed    int `json:"failed"`    // online only: transport errors and other HTTP errors

	DurationS        float64 `json:"duration_s"`  // first arrival to last completion
	OfferedRPS       float64 `json:"offered_rps"` // requests over the arrival span
	ReqPerS          float64 `json:"req_per_s"`   // completed over DurationS
	TokensPerS       float64 `json:"tokens_per_s"`
	OutputTokensPerS float64 `json:"output_tokens_per_s"`

	TTFTMeanMs float64 `json:"ttft_mean_ms"`
	TTFTP50Ms  float64 `json:"ttft_p50_ms"`
	TTFTP90Ms  float64 `json:"ttft_p90_ms"`
	TTFTP99Ms  float64 `json:"ttft_p99_ms"`
	// Inter-token latency: per request, (last token − first token) /
	// (output tokens − 1), for requests with at least 2 output tokens.
	ITLMeanMs float64 `json:"itl_mean_ms"`
	ITLP50Ms  float64 `json:"itl_p50_ms"`
	ITLP90Ms  float64 `json:"itl_p90_ms"`
	ITLP99Ms  float64 `json:"itl_p99_ms"`
	E2EMeanMs float64 `json:"e2e_mean_ms"`
	E2EP50Ms  float64 `json:"e2e_p50_ms"`
	E2EP90Ms  float64 `json:"e2e_p90_ms"`
	E2EP99Ms  float64 `json:"e2e_p99_ms"`

	PromptTokens int64   `json:"prompt_tokens"` // of the requests that got a first token
	CachedTokens int64   `json:"cached_tokens"`
	HitRatio     float64 `json:"hit_ratio"` // CachedTokens / PromptTokens
	// HostCachedTokens are the CachedTokens onloaded from host tiers
	// (Fleet.HostKVBlocks); HostHitRatio is their share of PromptTokens
	// (so the device's is HitRatio − HostHitRatio).
	HostCachedTokens int64   `json:"host_cached_tokens,omitempty"`
	HostHitRatio     float64 `json:"host_hit_ratio,omitempty"`
	// HitOfFleetCache is HitRatio / Report.FleetCacheHitRatio (offline).
	HitOfFleetCache float64 `json:"hit_of_fleet_cache,omitempty"`
	// HitOfAchievable is HitRatio / Report.AchievableHitRatio.
	HitOfAchievable float64 `json:"hit_of_achievable"`
	// BestHitRatio and RoutedHitRatio (offline, policies with an exact
	// index) split the hit ratio's losses: at each request's dispatch (its
	// routing, or its admission from the router queue) the index's longest
	// cached prefix (device + host, capped as the engine caps a hit) on any
	// rank, and on the rank chosen, over the prompt tokens. Best − routed is
	// lost to placement (the request went elsewhere); routed − hit to what
	// happened between dispatch and the engine's scheduling (evictions while
	// it waited, or gains from requests computing the same blocks).
	BestHitRatio   float64 `json:"best_hit_ratio,omitempty"`
	RoutedHitRatio float64 `json:"routed_hit_ratio,omitempty"`

	// MaxWorkerShare is the max over workers of (requests routed there /
	// mean requests per worker); 1 is perfect balance. MaxWorkerTokenShare
	// is the same over prompt tokens.
	MaxWorkerShare      float64       `json:"max_worker_share"`
	MaxWorkerTokenShare float64       `json:"max_worker_token_share"`
	Workers             []WorkerShare `json:"worker_shares"`

	// Queueing: requests that waited in the router's queue (every worker
	// busy) and their mean wait; offline also the peak of requests waiting
	// inside the engines, the engines' preemptions and the router's
	// expiries (requests force-freed after sched.Config.Expiry).
	Queued          int     `json:"queued"`
	QueueWaitMeanMs float64 `json:"queue_wait_mean_ms"`
	PeakWaiting     int     `json:"peak_engine_waiting"`
	Preemptions     int     `json:"preemptions"`
	Expired         int     `json:"expired"`

	// Saturated: the fleet did not keep up with the offered load at this
	// speedup: the router rejected requests because every worker was busy
	// and its queue was full, or Tracking fell below SaturationTracking
	// (requests piled up faster than they drained).
	Saturated bool `json:"saturated"`
	// Backlog is how much longer than the arrival span the run took:
	// (DurationS − arrival span) / arrival span.
	Backlog float64 `json:"backlog"`
	// Tracking is the completions within the middle 80% of the arrivals'
	// time (from the 10th to the 90th percentile arrival) over the arrivals
	// in that window (too-long requests aside): ≈ 1 while the fleet keeps
	// up, the service rate over the arrival rate once it does not.
	Tracking float64 `json:"tracking"`

	// HitOverTime is the hit ratio of the requests arriving in each of the
	// Buckets slots of the trace's time (-1: no request).
	HitOverTime []float64 `json:"hit_ratio_over_time"`

	WallS float64 `json:"wall_s"` // wall time the run took (simulation cost offline)

	// Groups are the per-class and per-tenant results (Config.Tenants).
	Groups *Groups `json:"groups,omitempty"`

	ttft []float64 // sorted, ms; for plots
}

// TTFTs returns the sorted TTFTs (ms) of the completed requests: a view
// valid as long as r.
func (r *Result) TTFTs() []float64 { return r.ttft }

// WorkerShare is one worker's part of a run (plain data).
type WorkerShare struct {
	Worker       string  `json:"worker"`
	Requests     int     `json:"requests"`
	PromptTokens int64   `json:"prompt_tokens"`
	RequestShare float64 `json:"request_share"` // requests / mean requests per worker
	TokenShare   float64 `json:"token_share"`
}

// record is one request's fate, the input of summarize.
type record struct {
	arrive, first, finish time.Duration
	hasFirst, done        bool
	rejected, failed      bool
	tooLong               bool
	queued                bool
	queueWait             time.Duration
	prompt, cached, host  int
	best, routed          int // tokens: longest cached prefix on any rank, and on the chosen one, at dispatch (-1: unknown)
	output                int
	worker                int // index into the worker labels, -1 if none
	bucket                int
}

// SaturationTracking is the Tracking below which a run counts as saturated:
// fewer than 95% as many requests completed as arrived over the middle 80%
// of the arrival window. In a fleet that keeps up the two counts differ
// only by the change in requests in flight between the window's edges
// (a few percent on the shared trace); past saturation the ratio drops to
// the service rate over the arrival rate.
const SaturationTracking = 0.95

// summarize computes a Result from per-request records. span is the arrival
// span at this speedup; workers labels the worker indexes of the records.
func summarize(recs []record, workers []string, span time.Duration, achievable float64) Result {
	r := Result{Requests: len(recs)}
	var ttft, itl, e2e []float64
	var first, last time.Duration
	firstSet := false
	var tokens, outTokens int64
	var qwait time.Duration
	var best, routed, diagPrompt int64
	buckets := make([]bucket, Buckets)
	wreq := make([]int, len(workers))
	wtok := make([]int64, len(workers))
	for i := range recs {
		c := &recs[i]
		if !firstSet || c.arrive < first {
			first, firstSet = c.arrive, true
		}
		if c.worker >= 0 && c.worker < len(workers) {
			wreq[c.worker]++
			wtok[c.worker] += int64(c.prompt)
		}
		if c.queued {
			r.Queued++
			qwait += c.queueWait
		}
		switch {
		case c.rejected:
			r.Rejected++
			if c.tooLong {
				r.TooLong++
			}
		case c.failed:
			r.Failed++
		}
		if c.hasFirst {
			r.PromptTokens += int64(c.prompt)
			r.CachedTokens += int64(c.cached)
			r.HostCachedTokens += int64(c.host)
			if c.best >= 0 {
				best += int64(c.best)
				routed += int64(c.routed)
				diagPrompt += int64(c.prompt)
			}
			b := &buckets[c.bucket]
			b.prompt += int64(c.prompt)
			b.cached += int64(c.cached)
		}
		if !c.done {
			continue
		}
		r.Completed++
		last = max(last, c.finish)
		tokens += int64(c.prompt + c.output)
		outTokens += int64(c.output)
		ttft = append(ttft, ms(c.first-c.arrive))
		e2e = append(e2e, ms(c.finish-c.arrive))
		if c.output >= 2 {
			itl = append(itl, ms(c.finish-c.first)/float64(c.output-1))
		}
	}
	if r.PromptTokens > 0 {
		r.HitRatio = float64(r.CachedTokens) / float64(r.PromptTokens)
		r.HostHitRatio = float64(r.HostCachedTokens) / float64(r.PromptTokens)
	}
	if diagPrompt > 0 {
		r.BestHitRatio = float64(best) / float64(diagPrompt)
		r.RoutedHitRatio = float64(routed) / float64(diagPrompt)
	}
	if achievable > 0 {
		r.HitOfAchievable = r.HitRatio / achievable
	}
	if r.Queued > 0 {
		r.QueueWaitMeanMs = ms(qwait) / float64(r.Queued)
	}
	if r.Completed > 0 {
		d := last - first
		r.DurationS = d.Seconds()
		if d > 0 {
			r.ReqPerS = float64(r.Completed) / d.Seconds()
			r.TokensPerS = float64(tokens) / d.Seconds()
			r.OutputTokensPerS = float64(outTokens) / d.Seconds()
		}
		if span > 0 {
			r.OfferedRPS = float64(len(recs)) / span.Seconds()
			r.Backlog = float64(d-span) / float64(span)
		}
	}
	r.Tracking = tracking(recs)
	r.Saturated = r.Rejected > r.TooLong || r.Tracking < SaturationTracking
	r.TTFTMeanMs, r.TTFTP50Ms, r.TTFTP90Ms, r.TTFTP99Ms = dist(ttft)
	r.ITLMeanMs, r.ITLP50Ms, r.ITLP90Ms, r.ITLP99Ms = dist(itl)
	r.E2EMeanMs, r.E2EP50Ms, r.E2EP90Ms, r.E2EP99Ms = dist(e2e)
	r.ttft = ttft
	r.HitOverTime = ratios(buckets)
	var sumReq, sumTok float64
	for i := range workers {
		sumReq += float64(wreq[i])
		sumTok += float64(wtok[i])
	}
	for i, name := range workers {
		ws := WorkerShare{Worker: name, Requests: wreq[i], PromptTokens: wtok[i]}
		if sumReq > 0 {
			ws.RequestShare = float64(wreq[i]) * float64(len(workers)) / sumReq
		}
		if sumTok > 0 {
			ws.TokenShare = float64(wtok[i]) * float64(len(workers)) / sumTok
		}
		r.MaxWorkerShare = max(r.MaxWorkerShare, ws.RequestShare)
		r.MaxWorkerTokenShare = max(r.MaxWorkerTokenShare, ws.TokenShare)
		r.Workers = append(r.Workers, ws)
	}
	return r
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// dist sorts v and returns its mean, p50, p90 and p99 (nearest rank).
func dist(v []float64) (mean, p50, p90, p99 float64) {
	if len(v) == 0 {
		return 0, 0, 0, 0
	}
	slices.Sort(v)
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v)), quantile(v, 0.5), quantile(v, 0.9), quantile(v, 0.99)
}

// quantile returns the nearest-rank q-quantile of sorted v.
func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	k := int(math.Ceil(q*float64(len(v)))) - 1
	return v[min(len(v)-1, max(0, k))]
}

// tracking computes Result.Tracking.
func tracking(recs []record) float64 {
	if len(recs) < 10 {
		return 1
	}
	at := make([]time.Duration, len(recs))
	for i := range recs {
		at[i] = recs[i].arrive
	}
	slices.Sort(at)
	lo, hi := at[len(at)/10], at[len(at)*9/10]
	if hi <= lo {
		return 1
	}
	arrived, completed := 0, 0
	for i := range recs {
		c := &recs[i]
		if c.arrive >= lo && c.arrive < hi && !c.tooLong {
			arrived++
		}
		if c.done && c.finish >= lo && c.finish < hi {
			completed++
		}
	}
	if arrived == 0 {
		return 1
	}
	return float64(completed) / float64(arrived)
}
