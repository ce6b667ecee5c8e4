package router

import (
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/kvroute/kvroute/internal/promtext"
	"github.com/kvroute/kvroute/verify"
	"github.com/kvroute/kvroute/wire"
)

// Checking predictions against the engines (package verify): every proxied
// request's decision credited blocks to the chosen rank; the engine's
// answer says how many prompt tokens it served from its cache
// (usage.prompt_tokens_details.cached_tokens, asked for on streams with
// stream_options.include_usage and stripped again when the client did not
// ask). The verifier feeds the pair to a verify.Tracker, logs a named
// cause once, and asks recovery for a dump (Hooks.Repair) when the index
// is stale or misses events.

// verifyFamilies are the verifier's metric families (in routerFamilies'
// registry).
var verifyFamilies = []promtext.Family{
	{Name: "kvroute_verify_predicted_cached_tokens_total", Type: promtext.Counter, Help: "Prompt tokens the routing decisions credited to the worker's dp rank as cached on its device (blocks × --block-size), for proxied requests"},
	{Name: "kvroute_verify_predicted_host_tokens_total", Type: promtext.Counter, Help: "Prompt tokens the routing decisions credited to the worker's dp rank in its host tier, beyond the device's (blocks × --block-size), for proxied requests; an engine counts what it loads back as cached"},
	{Name: "kvroute_verify_reported_cached_tokens_total", Type: promtext.Counter, Help: "Prompt tokens the worker reported served from its prefix cache (usage.prompt_tokens_details.cached_tokens)"},
	{Name: "kvroute_verify_requests_total", Type: promtext.Counter, Help: "Proxied requests by result: agree (report within one block of the prediction), disagree, unverified (the engine reported no cached tokens)"},
	{Name: "kvroute_verify_error_blocks", Type: promtext.Histogram, Help: "Reported minus predicted cached blocks per proxied request (negative: the index believed more than the engine had)"},
	{Name: "kvroute_verify_agreement", Type: promtext.Gauge, Help: "Share of the dp rank's recent proxied requests (a window of 32) whose report agreed with the prediction within one block"},
	{Name: "kvroute_verify_cause", Type: promtext.Gauge, Help: "1 for the cause the dp rank's disagreement is diagnosed as: block_size_mismatch, hash_mismatch, stale_index, missing_events (none: no persistent disagreement)"},
	{Name: "kvroute_verify_engine_block_size", Type: promtext.Gauge, Help: "The engine block size a block_size_mismatch infers from the reports (0 without one)"},
	{Name: "kvroute_verify_repairs_total", Type: promtext.Counter, Help: "Dumps asked of the worker's dp rank through recovery because its reports showed a stale index or missing events"},
}

// verifier is the Router's verify.Tracker behind a lock: handlers and
// stream goroutines report at the end of each proxied request.
type verifier struct {
	mu struct {
		sync.Mutex
		t *verify.Tracker
	}
	bs int
}

func newVerifier(bs int, repairInterval time.Duration) *verifier {
	v := &verifier{bs: bs}
	v.mu.t = verify.New(verify.Config{BlockSize: bs, RepairInterval: repairInterval})
	return v
}

// check is what a proxied request's end needs of its decision; it
// outlives the pending.
type check struct {
	key       wire.WorkerKey
	pred      uint32
	host      uint32
	id        uint64
	seq       uint64 // the decision ring's slot (0: none)
	reported  int
	hasReport bool
}

var checkPool = sync.Pool{New: func() any { return new(check) }}

// newCheck captures p's decision for verifyEnd.
func (r *Router) newCheck(p *pending) *check {
	c := checkPool.Get().(*check)
	*c = check{key: p.dec.Worker, pred: p.dec.Overlap, host: p.host, id: p.id, seq: p.seq0}
	return c
}

// usage records the engine's report (proxy.Hooks.Usage).
func (c *check) usage(n int) { c.reported, c.hasReport = n, true }

// verifyEnd compares c's prediction with the engine's report, acts on the
// verdict and releases c. It is called once per proxied request that got
// a 200 answer.
func (r *Router) verifyEnd(c *check) {
	defer checkPool.Put(c)
	v := r.verify
	if !c.hasReport {
		v.mu.Lock()
		v.mu.t.Unverified(c.key, c.pred)
		v.mu.Unlock()
		r.decisions.report(c.seq, c.id, -1)
		return
	}
	publishes := false
	if c.pred == 0 && c.reported > 0 && r.ix != nil && r.hooks.Lookup == nil {
		// Only while nothing matched: does the rank's index hold blocks?
		n, err := r.ix.TreeSize(c.key)
		publishes = err == nil && n > 0
	}
	v.mu.Lock()
	vd := v.mu.t.Observe(c.key, verify.Sample{Predicted: c.pred, Host: c.host, Reported: c.reported, Publishes: publishes}, time.Now().UnixNano())
	v.mu.Unlock()
	r.decisions.report(c.seq, c.id, c.reported)
	if vd.Named {
		r.logCause(c.key, vd)
	}
	if vd.Repair {
		r.cfg.Logger.Warn("the worker's cached-token reports disagree with the index; asking it for a dump through recovery",
			"worker", c.key.Worker, "dp_rank", c.key.Dp, "cause", vd.Cause.String(), "error_blocks", vd.ErrBlocks)
		if r.hooks.Repair != nil {
			r.hooks.Repair(c.key)
		}
	}
}

// logCause logs a newly named cause once, with what to check.
func (r *Router) logCause(k wire.WorkerKey, vd verify.Verdict) {
	bs := r.verify.bs
	switch vd.Cause {
	case verify.CauseBlockSize:
		r.cfg.Logger.Error(fmt.Sprintf("KV block size mismatch: the worker's cached tokens are multiples of %d tokens, the router hashes blocks of %d; set --block-size to the engines' block size", vd.EngineBlock, bs),
			"worker", k.Worker, "dp_rank", k.Dp, "engine_block_size", vd.EngineBlock, "router_block_size", bs, "flag", "--block-size")
	case verify.CauseHash:
		r.cfg.Logger.Error("the worker reports cached prompt tokens but no block of the index ever matches its prompts: an input to hashing differs; check the block size (--block-size), the engine's hash seed and algorithm (vLLM: PYTHONHASHSEED, --prefix-caching-hash-algo), the LoRA name (lora_name), the cache salt (cache_salt) and the multimodal keys (mm_hashes)",
			"worker", k.Worker, "dp_rank", k.Dp, "router_block_size", bs)
	default:
		r.cfg.Logger.Warn("the worker's cached-token reports disagree with the index persistently",
			"worker", k.Worker, "dp_rank", k.Dp, "cause", vd.Cause.String())
	}
}

// verifyStats returns rank k's verification state (false: never reported).
func (r *Router) verifyStats(k wire.WorkerKey) (verify.Stats, bool) {
	r.verify.mu.Lock()
	defer r.verify.mu.Unlock()
	return r.verify.mu.t.Stats(k)
}

// forgetVerify drops a worker that left.
func (r *Router) forgetVerify(worker uint64) {
	r.verify.mu.Lock()
	r.verify.mu.t.Forget(worker)
	r.verify.mu.Unlock()
}

// writeVerify writes the verifier's samples (scrape time).
func (r *Router) writeVerify(w io.Writer) {
	v := r.verify
	v.mu.Lock()
	keys := v.mu.t.Keys(nil)
	stats := make([]verify.Stats, len(keys))
	for i, k := range keys {
		stats[i], _ = v.mu.t.Stats(k)
	}
	v.mu.Unlock()
	for i, k := range keys {
		st := &stats[i]
		lbl := fmt.Sprintf(`worker="%d",dp_rank="%d"`, k.Worker, k.Dp)
		metrics.WriteCounterUint64(w, "kvroute_verify_predicted_cached_tokens_total{"+lbl+"}", st.PredictedTokens)
		metrics.WriteCounterUint64(w, "kvroute_verify_predicted_host_tokens_total{"+lbl+"}", st.PredictedHostTokens)
		metrics.WriteCounterUint64(w, "kvroute_verify_reported_cached_tokens_total{"+lbl+"}", st.ReportedTokens)
		verified := st.Requests - st.Unverified
		metrics.WriteCounterUint64(w, "kvroute_verify_requests_total{"+lbl+`,result="agree"}`, st.Agreed)
		metrics.WriteCounterUint64(w, "kvroute_verify_requests_total{"+lbl+`,result="disagree"}`, verified-st.Agreed)
		metrics.WriteCounterUint64(w, "kvroute_verify_requests_total{"+lbl+`,result="unverified"}`, st.Unverified)
		var cum uint64
		for b, n := range st.Errors {
			cum += n
			le := "+Inf"
			if b < len(verify.ErrorBuckets) {
				le = strconv.FormatFloat(verify.ErrorBuckets[b], 'g', -1, 64)
			}
			metrics.WriteCounterUint64(w, "kvroute_verify_error_blocks_bucket{"+lbl+`,le="`+le+`"}`, cum)
		}
		fmt.Fprintf(w, "kvroute_verify_error_blocks_sum{%s} %d\n", lbl, st.ErrorSum)
		metrics.WriteCounterUint64(w, "kvroute_verify_error_blocks_count{"+lbl+"}", verified)
		if st.WindowSize > 0 {
			metrics.WriteGaugeFloat64(w, "kvroute_verify_agreement{"+lbl+"}", float64(st.WindowAgreed)/float64(st.WindowSize))
		}
		for c := verify.CauseNone; c < verify.NumCauses; c++ {
			on := uint64(0)
			if c == st.Cause {
				on = 1
			}
			metrics.WriteGaugeUint64(w, "kvroute_verify_cause{"+lbl+`,cause="`+c.String()+`"}`, on)
		}
		metrics.WriteGaugeUint64(w, "kvroute_verify_engine_block_size{"+lbl+"}", uint64(st.EngineBlock))
		metrics.WriteCounterUint64(w, "kvroute_verify_repairs_total{"+lbl+"}", st.Repairs)
	}
}

// appendAgreement appends rank k's verification fields to a /workers or
// explain object: "agreement" (the window's share, null before any
// report), "verified_requests", "unverified_requests",
// "last_reported_cached_tokens" (null: none yet) and "diagnosis".
func (r *Router) appendAgreement(b []byte, k wire.WorkerKey) []byte {
	st, ok := r.verifyStats(k)
	b = append(b, `,"agreement":`...)
	if ok && st.WindowSize > 0 {
		b = strconv.AppendFloat(b, float64(st.WindowAgreed)/float64(st.WindowSize), 'f', 3, 64)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"verified_requests":`...)
	b = strconv.AppendUint(b, st.Requests-st.Unverified, 10)
	b = append(b, `,"unverified_requests":`...)
	b = strconv.AppendUint(b, st.Unverified, 10)
	b = append(b, `,"last_reported_cached_tokens":`...)
	if ok && st.LastReported >= 0 {
		b = strconv.AppendInt(b, int64(st.LastReported), 10)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"diagnosis":"`...)
	b = append(b, st.Cause.String()...)
	return append(b, '"')
}
