// Package router provides kvroute's router service: the batcher that owns
// the scheduler and decides requests in batches against the sharded index,
// the worker table fed by static configuration and NATS registrations, the
// HTTP API (an OpenAI-compatible proxy and a decision API) over fasthttp,
// the metrics, and Service, which assembles a whole router process (NATS,
// index, ingest, router, listeners) for `kvroute serve`.
//
// # Data flow (DESIGN.md §3)
//
// An HTTP handler parses the request, tokenizes a text prompt, hashes the
// prompt's full blocks (local and sequence hashes) on its own goroutine and
// queues a pending request to the batcher. The batcher goroutine drains
// whatever is queued (up to Config.BatchMax), looks the whole batch up in
// every shard at once (shard.Index.MatchBatch), then decides the requests one
// by one with sched.Scheduler.Decide, each seeing the previous one's booking.
// A routed request is answered at once; a queued one (every worker busy)
// waits for an admission from the scheduler's outbox, at most
// Config.QueueTimeout. Prefill-done and free notifications come back on a
// separate queue and are applied before the next batch. Control-plane work
// (registrations, load reports, /workers, scrapes) runs as closures on the
// batcher, so the scheduler has exactly one owner and no lock.
//
// # Endpoints
//
//	POST /v1/completions, /v1/chat/completions  route and proxy (SSE streamed chunk by chunk)
//	POST /route                                 decision only: {"token_ids"|"prompt", "request_id",
//	                                            "lora_name", "explain", "overrides"}
//	POST /route/{id}/prefill_done, /route/{id}/free
//	GET  /workers, /health, /ready, /metrics
//
// A proxied response carries X-Kvroute-Worker, X-Kvroute-Dp-Rank and
// X-Kvroute-Cached-Blocks. Its load is booked at the decision, its prefill
// marked done at the first streamed event (or the whole answer), and freed
// when the stream ends, fails, or the client disconnects. A /route decision
// books load the same way until /free or expiry (--request-expiry).
//
// Errors are JSON ({"error": {"message", "type", "code"}}): 400 for a bad
// body, 404/405 for a wrong path or method, 409 for a request_id already
// active, 413 for a body over --max-body-bytes, 429 with Retry-After while the
// all-workers-busy window is open (opened by this router's scheduler, which
// also publishes the event on NATS, or by another replica's message), 503
// with no workers, a full decision queue, or a queue timeout, 502 when the
// worker cannot be reached.
//
// # Workers
//
// Static workers (--worker) are configured and never expire. Registered
// workers come from heartbeats on the control plane (plane.Registry): a
// registration whose block size differs from --block-size is rejected and
// counted (kvroute_registration_block_size_mismatch_total) with an error log
// naming both sizes; a worker that withdraws, or misses plane.ExpiryFactor
// heartbeats, leaves the scheduler (its active requests dropped) and the
// index at once. A worker registering a ZMQ endpoint gets its events
// subscribed (Hooks.WorkerJoined).
//
// # Metrics
//
// Router.WritePrometheus (GET /metrics, and the admin listener's) writes
// Prometheus text through one promtext.Registry (routerFamilies in
// metrics.go, shard.MetricFamilies, ingest.MetricFamilies,
// promtext.ProcessFamilies): every family once, its samples together, after
// one # HELP and one # TYPE line, so promtool check metrics passes
// (TestMetricsExposition runs it and the pure-Go promtext.Check on a real
// router). A metric added to metricSet needs a Family in routerFamilies;
// without one it is exposed under promtext.UnregisteredHelp and the test
// fails naming it. Histograms are Prometheus le histograms (promhist).
//
// kvroute_http_requests_total{endpoint,code}, kvroute_http_request_duration_seconds{endpoint} (histogram),
// kvroute_decision_duration_seconds (queue to decision; histogram), kvroute_decision_batch_size (histogram),
// kvroute_decision_overlap_blocks (per decision; histogram), kvroute_decisions_total,
// kvroute_decision_{prompt,overlap,best_overlap}_blocks_total (achieved hit
// rate = overlap/prompt, best available = best_overlap/prompt),
// kvroute_requests_{queued,admitted,throttled,queue_timeout,batcher_full,expired}_total,
// kvroute_requests_rejected_total{reason}, kvroute_all_workers_busy_total,
// kvroute_all_workers_busy_remote_total, kvroute_publish_errors_total,
// kvroute_workers_{joined,left,expired}_total,
// kvroute_registration_block_size_mismatch_total, kvroute_control_messages_invalid_total,
// kvroute_proxy_{ttft,duration}_seconds (histograms), kvroute_proxy_{errors,client_gone,worker_gone}_total,
// and at scrape time kvroute_queue_depth, kvroute_active_requests,
// kvroute_sched_{decisions,rejections,expirations,dropped}_total,
// kvroute_batcher_queue_depth, kvroute_throttled, kvroute_workers,
// kvroute_worker_{decisions_total,active_blocks,prefill_tokens,requests,
// reported_used_blocks,tree_blocks,busy}{worker,dp_rank}, the index's
// kvroute_shard_*, the ingest's kvroute_ingest_*, and the Go runtime and
// process metrics (go_*, process_*). docs/grafana-kvroute.json is a Grafana
// dashboard over them; TestMetricsExposition checks that every metric name it
// uses is exposed and that its queries parse.
package router
