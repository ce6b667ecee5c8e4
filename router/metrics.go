package router

import (
	"fmt"
	"io"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/puzpuzpuz/xsync/v4"

	"github.com/kvroute/kvroute/sched"
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

// metricSet holds the router's metrics. Counters are VictoriaMetrics
// counters (one atomic each, bumped once per request, not per block);
// scheduler and worker gauges are read from the batcher at scrape time.
type metricSet struct {
	r   *Router
	set *metrics.Set

	requests *xsync.Map[uint32, *metrics.Counter] // endpoint<<16 | code
	latency  [numEndpoints]*metrics.Histogram

	decisionLatency, batchSize, overlap                *metrics.Histogram
	decisions, promptBlocks, overlapBlocks, bestBlocks *metrics.Counter

	queued, admitted, throttled, queueTimeouts, queueFull, expired *metrics.Counter
	allBusy, remoteBusy, publishErrors                             *metrics.Counter
	rejectNoWorkers, rejectQueueFull, rejectDuplicate              *metrics.Counter
	joined, left, expiredWorkers, sizeMismatch, controlErrors      *metrics.Counter

	ttft, e2e                                  *metrics.Histogram
	proxyErrors, clientGone, workerGoneRequest *metrics.Counter
	workerGone                                 *metrics.Counter

	retries, firstByteTimeouts, ejections, recoveries *metrics.Counter
}

func newMetricSet(r *Router) *metricSet {
	s := metrics.NewSet()
	m := &metricSet{r: r, set: s, requests: xsync.NewMap[uint32, *metrics.Counter]()}
	for i := range m.latency {
		m.latency[i] = s.NewHistogram(fmt.Sprintf(`kvroute_http_request_duration_seconds{endpoint=%q}`, endpointNames[i]))
	}
	m.decisionLatency = s.NewHistogram("kvroute_decision_duration_seconds")
	m.batchSize = s.NewHistogram("kvroute_decision_batch_size")
	m.overlap = s.NewHistogram("kvroute_decision_overlap_blocks")
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
	m.allBusy = s.NewCounter("kvroute_all_workers_busy_total")
	m.remoteBusy = s.NewCounter("kvroute_all_workers_busy_remote_total")
	m.publishErrors = s.NewCounter("kvroute_publish_errors_total")
	m.joined = s.NewCounter("kvroute_workers_joined_total")
	m.left = s.NewCounter("kvroute_workers_left_total")
	m.expiredWorkers = s.NewCounter("kvroute_workers_expired_total")
	m.sizeMismatch = s.NewCounter("kvroute_registration_block_size_mismatch_total")
	m.controlErrors = s.NewCounter("kvroute_control_messages_invalid_total")
	m.ttft = s.NewHistogram("kvroute_proxy_ttft_seconds")
	m.e2e = s.NewHistogram("kvroute_proxy_duration_seconds")
	m.proxyErrors = s.NewCounter("kvroute_proxy_errors_total")
	m.clientGone = s.NewCounter("kvroute_proxy_client_gone_total")
	m.workerGoneRequest = s.NewCounter("kvroute_proxy_worker_left_total")
	m.workerGone = s.NewCounter("kvroute_proxy_worker_gone_total")
	m.retries = s.NewCounter("kvroute_proxy_retries_total")
	m.firstByteTimeouts = s.NewCounter("kvroute_proxy_first_byte_timeouts_total")
	m.ejections = s.NewCounter("kvroute_worker_ejections_total")
	m.recoveries = s.NewCounter("kvroute_worker_recoveries_total")
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
// scrape time), the index's shards, and the Hooks' extra writers.
func (r *Router) WritePrometheus(w io.Writer) {
	r.m.set.WritePrometheus(w)
	var (
		st    sched.Stats
		loads []sched.WorkerLoad
	)
	if err := r.call(func() {
		st = r.s.Stats()
		loads = r.s.AppendLoads(nil, nil, r.now())
	}, 2*time.Second); err == nil {
		metrics.WriteGaugeUint64(w, "kvroute_queue_depth", uint64(st.QueueDepth))
		metrics.WriteGaugeUint64(w, "kvroute_active_requests", uint64(st.Active))
		metrics.WriteCounterUint64(w, "kvroute_sched_decisions_total", st.Decisions)
		metrics.WriteCounterUint64(w, "kvroute_sched_rejections_total", st.Rejections)
		metrics.WriteCounterUint64(w, "kvroute_sched_expirations_total", st.Expirations)
		metrics.WriteCounterUint64(w, "kvroute_sched_dropped_total", st.Dropped)
		metrics.WriteGaugeUint64(w, "kvroute_workers", uint64(len(loads)))
		for _, l := range loads {
			lbl := fmt.Sprintf(`{worker="%d",dp_rank="%d"}`, l.Worker.Worker, l.Worker.Dp)
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
		metrics.WriteGaugeUint64(w, fmt.Sprintf(`kvroute_worker_up{worker="%d"}`, id), up)
	}
	metrics.WriteGaugeUint64(w, "kvroute_batcher_queue_depth", uint64(len(r.in)))
	throttled := uint64(0)
	if t, _ := r.Throttled(); t {
		throttled = 1
	}
	metrics.WriteGaugeUint64(w, "kvroute_throttled", throttled)
	r.ix.WriteMetrics(w)
	for _, f := range r.hooks.Metrics {
		f(w)
	}
}
