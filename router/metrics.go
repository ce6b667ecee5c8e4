package router

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/puzpuzpuz/xsync/v4"

	"github.com/kvroute/kvroute/ingest"
	"github.com/kvroute/kvroute/ingest/recovery"
	"github.com/kvroute/kvroute/internal/promhist"
	"github.com/kvroute/kvroute/internal/promtext"
	"github.com/kvroute/kvroute/node"
	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/shard"
)

// endpoint indexes the HTTP endpoints in metrics.
type endpoint uint8

const (
	epCompletions endpoint = iota
	epChat
	epRoute
	epRouteOp
	epWorkers
	epHealth
	epReady
	epMetrics
	epOther
	epModels
	epConnection // a request fasthttp could not read (connError)
	numEndpoints
)

var endpointNames = [numEndpoints]string{"completions", "chat_completions", "route", "route_op", "workers", "health", "ready", "metrics", "other",
	"models", "connection"}

// routerFamilies declares every family the router writes itself: its
// metricSet and the scrape-time writers of WritePrometheus. A metric added
// without an entry here is still exposed, but the router's exposition test
// (TestMetricsExposition) fails naming it: add {Name, Type, Help} here.
var routerFamilies = []promtext.Family{
	{Name: "kvroute_http_requests_total", Type: promtext.Counter, Help: "HTTP requests answered, by endpoint and status code"},
	{Name: "kvroute_http_request_duration_seconds", Type: promtext.Histogram, Help: "Time in the HTTP handler, by endpoint (a streamed response continues after it)"},
	{Name: "kvroute_decision_duration_seconds", Type: promtext.Histogram, Help: "Time from a request entering the decision queue to its routing decision"},
	{Name: "kvroute_decision_batch_size", Type: promtext.Histogram, Help: "Requests decided together in one batcher batch"},
	{Name: "kvroute_decision_overlap_blocks", Type: promtext.Histogram, Help: "Prompt blocks cached on the chosen worker, per decision"},
	{Name: "kvroute_decisions_total", Type: promtext.Counter, Help: "Routing decisions made"},
	{Name: "kvroute_decision_prompt_blocks_total", Type: promtext.Counter, Help: "Prompt blocks of routed requests (the denominator of the hit rate)"},
	{Name: "kvroute_decision_overlap_blocks_total", Type: promtext.Counter, Help: "Prompt blocks cached on the chosen worker (achieved hit rate = this / prompt blocks)"},
	{Name: "kvroute_decision_best_overlap_blocks_total", Type: promtext.Counter, Help: "Prompt blocks cached on the best-matching worker (available hit rate = this / prompt blocks)"},
	{Name: "kvroute_requests_queued_total", Type: promtext.Counter, Help: "Requests that waited in the scheduler queue because every worker was over its limits"},
	{Name: "kvroute_requests_admitted_total", Type: promtext.Counter, Help: "Queued requests admitted to a worker later"},
	{Name: "kvroute_requests_throttled_total", Type: promtext.Counter, Help: "Requests answered 429 while the all-workers-busy window was open"},
	{Name: "kvroute_requests_queue_timeout_total", Type: promtext.Counter, Help: "Requests answered 503 after waiting --queue-timeout for a decision"},
	{Name: "kvroute_requests_batcher_full_total", Type: promtext.Counter, Help: "Requests answered 503 because the batcher queue was full"},
	{Name: "kvroute_requests_expired_total", Type: promtext.Counter, Help: "Booked requests freed by --request-expiry because nothing freed them"},
	{Name: "kvroute_requests_rejected_total", Type: promtext.Counter, Help: "Requests the scheduler rejected, by reason (no_workers, queue_full, duplicate, queue_wait)"},
	{Name: "kvroute_all_workers_busy_total", Type: promtext.Counter, Help: "All-workers-busy windows opened by this router (its queue overflowed)"},
	{Name: "kvroute_all_workers_busy_remote_total", Type: promtext.Counter, Help: "All-workers-busy messages received from other router replicas"},
	{Name: "kvroute_publish_errors_total", Type: promtext.Counter, Help: "Failed publishes on the NATS control plane"},
	{Name: "kvroute_workers_joined_total", Type: promtext.Counter, Help: "Workers that registered"},
	{Name: "kvroute_workers_left_total", Type: promtext.Counter, Help: "Workers that withdrew"},
	{Name: "kvroute_workers_expired_total", Type: promtext.Counter, Help: "Workers removed after missing their heartbeats"},
	{Name: "kvroute_registration_block_size_mismatch_total", Type: promtext.Counter, Help: "Worker registrations rejected because their block size differs from --block-size (also in kvroute_refused_total)"},
	{Name: "kvroute_control_messages_invalid_total", Type: promtext.Counter, Help: "Control-plane messages that could not be decoded"},
	{Name: "kvroute_proxy_ttft_seconds", Type: promtext.Histogram, Help: "Time from forwarding a request to its worker to the first token (after the routing decision)"},
	{Name: "kvroute_proxy_duration_seconds", Type: promtext.Histogram, Help: "Time from forwarding a request to its worker to the end of the response"},
	{Name: "kvroute_proxy_errors_total", Type: promtext.Counter, Help: "Proxied requests that failed because the worker could not be reached or broke off"},
	{Name: "kvroute_proxy_client_gone_total", Type: promtext.Counter, Help: "Proxied requests whose client disconnected before the end"},
	{Name: "kvroute_proxy_worker_gone_total", Type: promtext.Counter, Help: "Proxied answers a worker broke off (the client got an SSE error event or a 502)"},
	{Name: "kvroute_proxy_worker_left_total", Type: promtext.Counter, Help: "Routed requests answered 503 because their worker left before they were forwarded"},
	{Name: "kvroute_proxy_retries_total", Type: promtext.Counter, Help: "Requests decided again and sent to another worker after a connection failure"},
	{Name: "kvroute_proxy_first_byte_timeouts_total", Type: promtext.Counter, Help: "Streamed requests whose worker sent no byte within --worker-first-byte-timeout"},
	{Name: "kvroute_proxy_response_timeouts_total", Type: promtext.Counter, Help: "Non-streamed requests whose worker sent no byte within --worker-response-timeout"},
	{Name: "kvroute_proxy_abandoned_total", Type: promtext.Counter, Help: "Requests given up on, and decided again, because their worker was ejected before it answered"},
	{Name: "kvroute_proxy_client_deadline_total", Type: promtext.Counter, Help: "Non-streamed requests answered 504 because their worker did not answer within the client's X-Stainless-Timeout"},
	{Name: "kvroute_worker_ejections_total", Type: promtext.Counter, Help: "Workers taken out of routing after consecutive connection failures"},
	{Name: "kvroute_worker_recoveries_total", Type: promtext.Counter, Help: "Ejected workers put back after answering a health probe"},
	{Name: "kvroute_worker_up", Type: promtext.Gauge, Help: "1 while the worker is routable, 0 while it is down (ejected and probed)"},
	// Read from the batcher at scrape time.
	{Name: "kvroute_queue_depth", Type: promtext.Gauge, Help: "Requests waiting in the scheduler queue"},
	{Name: "kvroute_active_requests", Type: promtext.Gauge, Help: "Requests booked on workers (routed and not yet freed)"},
	{Name: "kvroute_sched_decisions_total", Type: promtext.Counter, Help: "Decisions made by the scheduler"},
	{Name: "kvroute_sched_rejections_total", Type: promtext.Counter, Help: "Requests rejected by the scheduler"},
	{Name: "kvroute_sched_expirations_total", Type: promtext.Counter, Help: "Booked requests the scheduler expired"},
	{Name: "kvroute_sched_dropped_total", Type: promtext.Counter, Help: "Booked requests dropped because their worker left"},
	{Name: "kvroute_queue_admitted_ahead_total", Type: promtext.Counter, Help: "Requests admitted from the queue before an earlier waiting one, by cache-aware dispatch (--queue-affinity)"},
	{Name: "kvroute_workers", Type: promtext.Gauge, Help: "Worker dp ranks known to the scheduler"},
	{Name: "kvroute_worker_decisions_total", Type: promtext.Counter, Help: "Decisions that chose the worker's dp rank"},
	{Name: "kvroute_worker_active_blocks", Type: promtext.Gauge, Help: "KV blocks booked on the worker's dp rank by routed requests"},
	{Name: "kvroute_worker_prefill_tokens", Type: promtext.Gauge, Help: "Uncached prompt tokens booked on the worker's dp rank and not yet prefilled"},
	{Name: "kvroute_worker_requests", Type: promtext.Gauge, Help: "Requests booked on the worker's dp rank"},
	{Name: "kvroute_worker_reported_used_blocks", Type: promtext.Gauge, Help: "KV blocks in use as last reported by the worker"},
	{Name: "kvroute_worker_tree_blocks", Type: promtext.Gauge, Help: "Blocks the index holds for the worker's dp rank"},
	{Name: "kvroute_worker_busy", Type: promtext.Gauge, Help: "1 while the worker's dp rank is over its load limits"},
	{Name: "kvroute_http_open_connections", Type: promtext.Gauge, Help: "Open API connections (at most --max-conns)"},
	{Name: "kvroute_http_inflight_body_bytes", Type: promtext.Gauge, Help: "Declared bytes of the request bodies being read or handled (at most --max-inflight-body-bytes)"},
	{Name: "kvroute_batcher_queue_depth", Type: promtext.Gauge, Help: "Requests waiting for the batcher"},
	{Name: "kvroute_throttled", Type: promtext.Gauge, Help: "1 while the all-workers-busy window is open (requests get 429)"},
	{Name: "kvroute_queue_wait_predicted_seconds", Type: promtext.Gauge, Help: "Time the requests waiting in the scheduler queue take to drain at its measured drain rate (--max-queue-wait sheds new requests as it nears the bound)"},
	{Name: "kvroute_queue_drain_rate", Type: promtext.Gauge, Help: "Requests leaving the scheduler queue for a worker per second while it is not empty (smoothed; 0 before the first measurement)"},
	// Replica sync (--router-replica-sync).
	{Name: "kvroute_sync_messages_sent_total", Type: promtext.Counter, Help: "Replica-sync messages published (batches of bookings, and heartbeats)"},
	{Name: "kvroute_sync_messages_received_total", Type: promtext.Counter, Help: "Replica-sync messages received from other router replicas"},
	{Name: "kvroute_sync_items_applied_total", Type: promtext.Counter, Help: "Other replicas' bookings, prefill completions and frees applied to this scheduler"},
	{Name: "kvroute_sync_items_ignored_total", Type: promtext.Counter, Help: "Other replicas' items not applied (a worker this router does not know, an unknown or duplicate request id)"},
	{Name: "kvroute_sync_messages_missed_total", Type: promtext.Counter, Help: "Replica-sync messages lost in transit (gaps in a replica's message numbers)"},
	{Name: "kvroute_sync_bookings_dropped_on_gap_total", Type: promtext.Counter, Help: "Other replicas' bookings dropped because a message of theirs was lost (it may have freed them)"},
	{Name: "kvroute_sync_replicas_expired_total", Type: promtext.Counter, Help: "Replicas silent for --router-sync-expiry whose bookings were dropped"},
	{Name: "kvroute_sync_messages_refused_total", Type: promtext.Counter, Help: "Replica-sync messages ignored: sender not in --router-peers, another process using this --router-id, or too many replicas"},
	{Name: "kvroute_sync_publish_errors_total", Type: promtext.Counter, Help: "Replica-sync messages that could not be published"},
	{Name: "kvroute_sync_replicas", Type: promtext.Gauge, Help: "Other router replicas whose bookings this router holds"},
	{Name: "kvroute_sync_remote_requests", Type: promtext.Gauge, Help: "Requests booked by other router replicas, held in this router's scheduler"},
}

// registry is everything Router.WritePrometheus exposes: the router's
// families, the index's, ingest's (Hooks.Metrics in a Service) and the Go
// runtime and process metrics.
var registry = promtext.NewRegistry(routerFamilies, pdFamilies, shard.MetricFamilies, ingest.MetricFamilies, node.MetricFamilies, node.SnapshotFamilies, node.QueryFamilies, recovery.MetricFamilies, verifyFamilies, tenantFamilies, promtext.ProcessFamilies)

// Histogram buckets. Latencies span 100 µs (a /route answer on loopback is
// ~240 µs, README) to 60 s (a long generation); decisions start at 10 µs
// (one batcher decision is ~4 µs at 2,048 tokens, BenchmarkBatcher).
var (
	latencyBuckets  = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	decisionBuckets = append([]float64{0.00001, 0.000025, 0.00005}, latencyBuckets...)
	// Requests per batch, up to Config.BatchMax's default of 256 and beyond.
	batchBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}
	// Blocks: 0 (a miss) and powers of 2 up to 16,384 blocks (256k tokens
	// of 16).
	blockBuckets = []float64{0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}
)

// metricSet holds the router's metrics. Counters are VictoriaMetrics
// counters (one atomic each, bumped once per request, not per block);
// histograms are Prometheus (le) histograms (promhist, registered on set);
// scheduler and worker gauges are read from the batcher at scrape time.
// Every name needs an entry in routerFamilies.
type metricSet struct {
	r   *Router
	set *metrics.Set

	requests *xsync.Map[uint32, *metrics.Counter] // endpoint<<16 | code
	latency  [numEndpoints]*promhist.Histogram

	decisionLatency, batchSize, overlap                *promhist.Histogram
	decisions, promptBlocks, overlapBlocks, bestBlocks *metrics.Counter

	queued, admitted, throttled, queueTimeouts, queueFull, expired *metrics.Counter
	allBusy, remoteBusy, publishErrors                             *metrics.Counter
	rejectNoWorkers, rejectQueueFull, rejectDuplicate, rejectWait  *metrics.Counter
	joined, left, expiredWorkers, sizeMismatch, controlErrors      *metrics.Counter

	ttft, e2e                                  *promhist.Histogram
	proxyErrors, clientGone, workerGoneRequest *metrics.Counter
	workerGone                                 *metrics.Counter

	retries, firstByteTimeouts, ejections, recoveries *metrics.Counter
	responseTimeouts, abandoned, clientDeadline       *metrics.Counter

	refused [numRefusals]*metrics.Counter
	logs    rateLog

	sync *syncMetrics
	pd   *pdMetrics
}

// refusal is a reason in kvroute_refused_total (declared with node's
// families: ingest and the index write their reasons into it too).
type refusal uint8

const (
	refRegInvalid     refusal = iota // registration failed plane.Registration.Validate
	refRegConflict                   // worker id held by a live registration from another URL (or static)
	refRegBlockSize                  // registration with another block size
	refTooManyWorkers                // --max-workers reached
	refLeaveMismatch                 // withdrawal naming another URL or instance id
	refBusyUnknown                   // all-workers-busy from a router not in --router-peers
	refBusyStale                     // all-workers-busy whose window already ended
	refPromptTooLong                 // prompt over --max-prompt-tokens
	refBodyBudget                    // body over the --max-inflight-body-bytes budget
	refQueueWait                     // shed: predicted queue wait over --max-queue-wait
	refConnLimit                     // connection over --max-conns (read from fasthttp at scrape time; no counter)
	numRefusals
)

var refusalNames = [numRefusals]string{"registration_invalid", "registration_conflict", "registration_block_size",
	"too_many_workers", "leave_mismatch", "busy_unknown_router", "busy_stale", "prompt_too_long", "body_budget",
	"queue_wait"}

// rateLog lets one log line per reason through per interval and counts
// the ones it holds back (reported with the next line).
type rateLog struct {
	mu         sync.Mutex
	last       [numRefusals]time.Time
	suppressed [numRefusals]int
}

// rateLogInterval is how often one refusal reason is logged.
const rateLogInterval = 10 * time.Second

func (l *rateLog) allow(r refusal, now time.Time) (suppressed int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last[r].IsZero() && now.Sub(l.last[r]) < rateLogInterval {
		l.suppressed[r]++
		return 0, false
	}
	l.last[r] = now
	suppressed, l.suppressed[r] = l.suppressed[r], 0
	return suppressed, true
}

// refuse counts a refusal and logs it at Warn, at most once per
// rateLogInterval per reason.
func (r *Router) refuse(why refusal, msg string, args ...any) {
	r.m.refused[why].Inc()
	if sup, ok := r.m.logs.allow(why, time.Now()); ok {
		r.cfg.Logger.Warn(msg, append(args, "reason", refusalNames[why], "suppressed_since_last_log", sup)...)
	}
}

func newMetricSet(r *Router) *metricSet {
	s := metrics.NewSet()
	m := &metricSet{r: r, set: s, requests: xsync.NewMap[uint32, *metrics.Counter]()}
	for i := range m.latency {
		m.latency[i] = promhist.New(s, fmt.Sprintf(`kvroute_http_request_duration_seconds{endpoint=%q}`, endpointNames[i]), latencyBuckets)
	}
	m.decisionLatency = promhist.New(s, "kvroute_decision_duration_seconds", decisionBuckets)
	m.batchSize = promhist.New(s, "kvroute_decision_batch_size", batchBuckets)
	m.overlap = promhist.New(s, "kvroute_decision_overlap_blocks", blockBuckets)
	m.decisions = s.NewCounter("kvroute_decisions_total")
	m.promptBlocks = s.NewCounter("kvroute_decision_prompt_blocks_total")
	m.overlapBlocks = s.NewCounter("kvroute_decision_overlap_blocks_total")
	m.bestBlocks = s.NewCounter("kvroute_decision_best_overlap_blocks_total")
	m.queued = s.NewCounter("kvroute_requests_queued_total")
	m.admitted = s.NewCounter("kvroute_requests_admitted_total")
	m.throttled = s.NewCounter("kvroute_requests_throttled_total")
	m.queueTimeouts = s.NewCounter("kvroute_requests_queue_timeout_total")
	m.queueFull = s.NewCounter("kvroute_requests_batcher_full_total")
	m.expired = s.NewCounter("kvroute_requests_expired_total")
	m.rejectNoWorkers = s.NewCounter(`kvroute_requests_rejected_total{reason="no_workers"}`)
	m.rejectQueueFull = s.NewCounter(`kvroute_requests_rejected_total{reason="queue_full"}`)
	m.rejectDuplicate = s.NewCounter(`kvroute_requests_rejected_total{reason="duplicate"}`)
	m.rejectWait = s.NewCounter(`kvroute_requests_rejected_total{reason="queue_wait"}`)
	m.allBusy = s.NewCounter("kvroute_all_workers_busy_total")
	m.remoteBusy = s.NewCounter("kvroute_all_workers_busy_remote_total")
	m.publishErrors = s.NewCounter("kvroute_publish_errors_total")
	m.joined = s.NewCounter("kvroute_workers_joined_total")
	m.left = s.NewCounter("kvroute_workers_left_total")
	m.expiredWorkers = s.NewCounter("kvroute_workers_expired_total")
	m.sizeMismatch = s.NewCounter("kvroute_registration_block_size_mismatch_total")
	m.controlErrors = s.NewCounter("kvroute_control_messages_invalid_total")
	m.ttft = promhist.New(s, "kvroute_proxy_ttft_seconds", latencyBuckets)
	m.e2e = promhist.New(s, "kvroute_proxy_duration_seconds", latencyBuckets)
	m.proxyErrors = s.NewCounter("kvroute_proxy_errors_total")
	m.clientGone = s.NewCounter("kvroute_proxy_client_gone_total")
	m.workerGoneRequest = s.NewCounter("kvroute_proxy_worker_left_total")
	m.workerGone = s.NewCounter("kvroute_proxy_worker_gone_total")
	m.retries = s.NewCounter("kvroute_proxy_retries_total")
	m.firstByteTimeouts = s.NewCounter("kvroute_proxy_first_byte_timeouts_total")
	m.responseTimeouts = s.NewCounter("kvroute_proxy_response_timeouts_total")
	m.abandoned = s.NewCounter("kvroute_proxy_abandoned_total")
	m.clientDeadline = s.NewCounter("kvroute_proxy_client_deadline_total")
	m.ejections = s.NewCounter("kvroute_worker_ejections_total")
	m.recoveries = s.NewCounter("kvroute_worker_recoveries_total")
	m.sync = newSyncMetrics(s)
	m.pd = newPDMetrics(s)
	for i := range refConnLimit { // conn_limit is read from the server at scrape time
		m.refused[i] = s.NewCounter(fmt.Sprintf(`kvroute_refused_total{reason=%q}`, refusalNames[i]))
	}
	return m
}

// request counts one answered HTTP request.
func (m *metricSet) request(ep endpoint, code int, d time.Duration) {
	key := uint32(ep)<<16 | uint32(code&0xffff)
	c, ok := m.requests.Load(key)
	if !ok {
		c = m.set.GetOrCreateCounter(fmt.Sprintf(`kvroute_http_requests_total{endpoint=%q,code="%d"}`, endpointNames[ep], code))
		m.requests.Store(key, c)
	}
	c.Inc()
	m.latency[ep].Update(d.Seconds())
}

func (m *metricSet) rejected(reason sched.Reason) *metrics.Counter {
	switch reason {
	case sched.ReasonQueueFull:
		return m.rejectQueueFull
	case sched.ReasonDuplicate:
		return m.rejectDuplicate
	case sched.ReasonQueueWait:
		return m.rejectWait
	}
	return m.rejectNoWorkers
}

// decided records a routed decision (batcher goroutine).
func (m *metricSet) decided(p *pending, d sched.Decision, now int64) {
	m.decisions.Inc()
	m.promptBlocks.Add(len(p.local))
	m.overlapBlocks.Add(int(d.Overlap))
	m.bestBlocks.Add(int(p.best))
	m.overlap.Update(float64(d.Overlap))
	m.decisionLatency.Update(time.Duration(now - p.enq).Seconds())
}

// WritePrometheus writes every router metric in Prometheus text format:
// HTTP, decisions, queueing and overload, workers (read from the batcher at
// scrape time), the index's shards, the Hooks' extra writers, and the Go
// runtime and process metrics; each family once, with its # HELP and # TYPE
// lines (see registry).
func (r *Router) WritePrometheus(w io.Writer) {
	registry.Write(w, r.writeSamples, promtext.WriteProcess)
}

// writeSamples writes the router's samples in any order; registry.Write
// groups them by family.
func (r *Router) writeSamples(w io.Writer) {
	r.m.set.WritePrometheus(w)
	r.tm.set.WritePrometheus(w)
	var (
		st                 sched.Stats
		qw                 sched.QueueWait
		loads              []sched.WorkerLoad
		replicas, bookings int
	)
	if err := r.call(func() {
		st = r.s.Stats()
		qw = r.s.QueueWait(r.now())
		loads = r.s.AppendLoads(nil, nil, r.now())
		replicas, bookings = r.syncState()
	}, 2*time.Second); err == nil {
		metrics.WriteGaugeUint64(w, "kvroute_sync_replicas", uint64(replicas))
		metrics.WriteGaugeUint64(w, "kvroute_sync_remote_requests", uint64(bookings))
		metrics.WriteGaugeUint64(w, "kvroute_queue_depth", uint64(st.QueueDepth))
		metrics.WriteGaugeFloat64(w, "kvroute_queue_wait_predicted_seconds", qw.Predicted.Seconds())
		metrics.WriteGaugeFloat64(w, "kvroute_queue_drain_rate", qw.Rate)
		metrics.WriteGaugeUint64(w, "kvroute_active_requests", uint64(st.Active))
		metrics.WriteCounterUint64(w, "kvroute_sched_decisions_total", st.Decisions)
		metrics.WriteCounterUint64(w, "kvroute_sched_rejections_total", st.Rejections)
		metrics.WriteCounterUint64(w, "kvroute_sched_expirations_total", st.Expirations)
		metrics.WriteCounterUint64(w, "kvroute_sched_dropped_total", st.Dropped)
		metrics.WriteCounterUint64(w, "kvroute_queue_admitted_ahead_total", st.AdmittedAhead)
		metrics.WriteGaugeUint64(w, "kvroute_workers", uint64(len(loads)))
		for _, l := range loads {
			lbl := fmt.Sprintf(`{worker="%d",dp_rank="%d",role="%s"}`, l.Worker.Worker, l.Worker.Dp, l.Capacity.Role)
			metrics.WriteCounterUint64(w, "kvroute_worker_decisions_total"+lbl, l.Decisions)
			metrics.WriteGaugeUint64(w, "kvroute_worker_active_blocks"+lbl, uint64(max(l.ActiveBlocks, 0)))
			metrics.WriteGaugeUint64(w, "kvroute_worker_prefill_tokens"+lbl, uint64(max(l.PrefillTokens, 0)))
			metrics.WriteGaugeUint64(w, "kvroute_worker_requests"+lbl, uint64(max(l.Requests, 0)))
			metrics.WriteGaugeUint64(w, "kvroute_worker_reported_used_blocks"+lbl, l.Reported.UsedBlocks)
			metrics.WriteGaugeUint64(w, "kvroute_worker_tree_blocks"+lbl, uint64(l.TreeSize))
			busy := uint64(0)
			if l.Busy {
				busy = 1
			}
			metrics.WriteGaugeUint64(w, "kvroute_worker_busy"+lbl, busy)
		}
	}
	t := r.table.Load()
	for _, id := range t.ids {
		up := uint64(1)
		if t.byID[id].health.down.Load() {
			up = 0
		}
		metrics.WriteGaugeUint64(w, fmt.Sprintf(`kvroute_worker_up{worker="%d",role="%s"}`, id, t.byID[id].Capacity.Role), up)
	}
	metrics.WriteGaugeUint64(w, "kvroute_batcher_queue_depth", uint64(len(r.in)))
	if srv := r.srv.Load(); srv != nil {
		metrics.WriteCounterUint64(w, `kvroute_refused_total{reason="conn_limit"}`, uint64(srv.GetRejectedConnectionsCount()))
		metrics.WriteGaugeUint64(w, "kvroute_http_open_connections", uint64(max(srv.GetOpenConnectionsCount(), 0)))
	}
	metrics.WriteGaugeUint64(w, "kvroute_http_inflight_body_bytes", uint64(max(r.budget.inUse(), 0)))
	throttled := uint64(0)
	if t, _ := r.Throttled(); t {
		throttled = 1
	}
	metrics.WriteGaugeUint64(w, "kvroute_throttled", throttled)
	r.writeVerify(w)
	r.ix.WriteMetrics(w)
	for _, f := range r.hooks.Metrics {
		f(w)
	}
}
