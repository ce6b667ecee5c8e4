// Package router provides kvroute's router service: the batcher that owns
// the scheduler and decides requests in batches against the sharded index,
// the worker table fed by static configuration and NATS registrations, the
// HTTP API (an OpenAI-compatible proxy and a decision API) over fasthttp,
// the metrics, and Service, which assembles a whole router process (NATS,
// index, ingest, router, listeners) for `kvroute serve`.
//
// # Data flow (DESIGN.md §3)
//
// An HTTP handler parses the request, tokenizes a text prompt (with
// Config.Tokenizer, or the model's from Config.ModelTokenizers; with
// Config.ForwardTokenIDs a completion's text prompt is then forwarded as
// those ids, openai.ReplacePrompt), hashes the prompt's full blocks (local and sequence hashes) on its own goroutine and
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
// # Served and remote index
//
// ServiceConfig.ServeIndexer (--serve-indexer) also answers other routers'
// index queries from this process's index (node.IndexServer, the protocol
// of wire/plane/query.go). ServiceConfig.UseRemoteIndexer
// (--use-remote-indexer) keeps no index: the node ingests nothing, and
// Hooks.Lookup (a node.RemoteIndex) replaces the batcher's
// shard.Index.MatchBatch with one NATS request per batch, answered by one of
// the serving instances (`serve --serve-indexer` or `kvroute indexer`); in
// approximate mode it also receives the decisions. A failed or late query
// (--remote-indexer-timeout) routes the batch with zero overlap, counted in
// kvroute_remote_index_failures_total{reason}; the client never sees it.
//
// # Endpoints
//
//	POST /v1/completions, /v1/chat/completions  route and proxy (SSE streamed chunk by chunk)
//	GET  /v1/models                             the union of the workers' models (OpenAI list shape)
//	POST /route                                 decision only: {"token_ids"|"prompt", "model", "request_id",
//	                                            "lora_name", "cache_salt", "mm_hashes", "explain", "overrides"}
//	POST /route/{id}/prefill_done, /route/{id}/free
//	GET  /workers, /health, /ready, /metrics
//
// The prompt's blocks are hashed as the engines' KV events are:
// lora_name and vLLM's cache_salt seed the hash (wire.SaltSeed: a salted
// request matches only its tenant's blocks), and the router extension
// mm_hashes, [{identifier, offset, length}] per multimodal object, folds
// each object's hash into the blocks its placeholder tokens overlap
// (wire.LocalHashesMM). Without mm_hashes, a chat request's media parts are
// rendered as a placeholder identified by the part's uuid, else its URL
// (openai.Parse). The router cannot compute a real engine's content hash of
// an image, so such blocks never match an engine's multimodal blocks: the
// request can match only the text before its first image, never a false
// prefix. With Config.EagleWindows (--eagle-windows, for SGLang EAGLE
// fleets) a request without mm_hashes is hashed as Dynamo hashes EAGLE
// requests, block i the window of B+1 tokens from i × B
// (wire.LocalHashesEagle), and node's ZMQ decoders hash the bigram pages
// the same way: a page matches only when the token after it does too
// (TestEagleWindowsThroughServe).
//
// Another method gets 405 with Allow. A proxied response carries
// X-Kvroute-Worker, X-Kvroute-Dp-Rank and X-Kvroute-Cached-Blocks. Its load
// is booked at the decision, its prefill marked done at the first streamed
// event (or the whole answer), and freed when the stream ends, fails, or the
// client disconnects. A /route decision books load the same way until /free
// or expiry (--request-expiry).
//
// GET /ready answers 503 with the reason while the router shuts down (the
// first ServiceConfig.ShutdownReadyDelay of Service.Drain, while requests are
// still served), while the event plane (NATS) is down (Hooks.EventPlane),
// while no worker is routable (none known, or all down), or while KV-event
// ingest is not running.
//
// # Worker health and retries
//
// The proxy sends a request (proxy.Proxy.SendRank) and gets the worker's
// answer before anything is written to the client. A worker registered with
// more than one dp rank behind its URL gets the decision's rank in the
// X-Data-Parallel-Rank header, which vLLM and SGLang obey (their own
// balancer would otherwise pick a rank, blind to the cached prefix). A transport failure (dial
// refused or timed out, the connection dropped before the answer, or, for a
// streamed request, no first byte within proxy.Config.FirstByteTimeout)
// counts against the worker and the request is decided again once, with the
// failed worker excluded (the Allowed override of the other workers' ranks),
// and sent there; kvroute_proxy_retries_total counts these. An HTTP error
// status from a worker is its answer and is relayed.
//
// Health is passive, like Envoy's outlier detection: handlers count a
// worker's consecutive transport failures (atomics in workerHealth, reset by
// any success) and the one reaching Config.EjectAfter marks it down; the
// batcher removes its ranks from the scheduler (its booked requests are
// dropped) but keeps its index entries and its table entry, publishes the
// table (/workers shows "down", kvroute_worker_up 0) and starts a prober that
// asks GET /health after Config.ProbeInterval, doubling up to
// ProbeMaxInterval. A 2xx puts the ranks back. Each transition is logged
// once (Warn down, Info up). A worker down for Config.ForgetAfter loses its
// index entries. A registered worker's heartbeats keep it registered while
// down but do not make it routable.
//
// # Models
//
// A worker's models come from its registration, from --worker ...,model=NAME,
// or, for a static worker without one, from asking it (GET URL/v1/models,
// retried until it answers once; until then it declares none). The worker
// table keeps, per model, the dp ranks that may serve it: its workers' and
// those of workers declaring no model. A request naming a model is
// restricted to those ranks through the scheduler's allowed-workers override
// (the one /route's allowed_workers uses; /route intersects the two); a model
// no worker serves gets 404 model_not_found. Without a model, or when no
// worker declares one, any rank may serve.
//
// # Errors
//
// Errors are OpenAI-style JSON, {"error": {"message", "type", "param",
// "code"}} with code a string and param the field at fault (null when none),
// written by proxy.WriteAPIError: 400 invalid_request_error for a bad body or
// a /route override naming an unknown worker or rank; 404 not_found for a
// wrong path, model_not_found for a model no worker serves; 405
// method_not_allowed; 409 conflict for a request_id already active; 429
// rate_limit_exceeded with Retry-After while the all-workers-busy window is
// open (opened by this router's scheduler, which also publishes the event on
// NATS, or by another replica's message), and when the scheduler sheds a
// request whose predicted queue wait nears Config.Sched.MaxQueueWait
// (--max-queue-wait; ErrQueueWait, Retry-After the bound rounded up to
// seconds, counted in kvroute_refused_total{reason="queue_wait"}; see
// sched's "Early shedding"); 503 service_unavailable with no
// workers (or all down), a full decision queue, or a queue timeout; 502
// bad_gateway when the worker cannot be reached (or its non-streamed answer
// breaks off) and neither can the one the request was retried on.
//
// Requests fasthttp cannot read are answered by connError: 413 for a body
// over --max-body-bytes, 431 for a request line and headers over
// --max-header-bytes (fasthttp's ReadBufferSize), 408 for a read timeout,
// 400 for malformed HTTP; the messages never quote the request (fasthttp's
// errors embed its head, Authorization included), the answers are counted
// under the path's endpoint or "connection", and the connection is closed
// lingeringly (internal/linger, on the listener Service wraps) so that a
// client still uploading reads the answer instead of a reset.
//
// A stream whose worker breaks off (read error, or end before data: [DONE])
// ends with an SSE error event (code worker_stream_interrupted) unless the
// worker sent one; it is counted (kvroute_proxy_worker_gone_total) and
// logged once. At shutdown, Service.Drain waits --shutdown-grace, then cuts
// the streams from the worker side (Router.CutStreams) so each client gets an
// error event (code shutting_down), waits up to a second for them, and closes
// the client connections still open: a request still waiting for a worker's
// whole answer sees its connection close without an answer.
//
// # Workers
//
// Static workers (--worker) are configured and never expire. Registered
// workers come from heartbeats on the control plane (plane.Registry): each
// registration is validated (plane.Registration.ValidateRanks with
// --max-dp-ranks), a live worker id belongs to its URL (another URL is a
// conflict, never a takeover; a new instance_id at the same URL a restart),
// a withdrawal must name the live URL and instance id, and at most
// --max-workers register; each refusal is counted in
// kvroute_refused_total{reason} and logged at most every 10 s per reason
// (rateLog). A registration whose block size differs from --block-size is
// rejected and
// counted (kvroute_registration_block_size_mismatch_total) with an error log
// naming both sizes; a worker that withdraws, or misses plane.ExpiryFactor
// heartbeats, leaves the scheduler (its active requests dropped) and the
// index at once. A worker registering a ZMQ endpoint gets its events
// subscribed (Hooks.WorkerJoined).
//
// Replica sync (sync.go, Config.Sync, --router-replica-sync): routed
// requests, prefill completions and frees are appended by the batcher to a
// plane.SyncWriter and published by a flusher goroutine (at once when idle,
// then at most once per Config.SyncInterval, a heartbeat every
// SyncExpiry/4); the other replicas' are posted to the batcher and booked
// with sched.Scheduler.AddRequest under ids with the top bit set (remoteBit).
// A replica silent for Config.SyncExpiry, leaving, or restarted (new
// instance) has all its bookings freed; a gap in a replica's message numbers
// (a message lost, e.g. with a NATS node) frees the bookings it made before
// the gap, since the lost message may have freed them (kept, they were
// phantom load until Config.Sched's request expiry; found by
// cluster.TestClusterKills). With Config.Peers set only the listed
// replicas are applied. A new replica converges as the older requests end.
// TestReplicaSyncSharesLoad, TestReplicaSyncExpiresDeadReplica,
// TestReplicaWithoutSyncSeesNoRemoteLoad, TestReplicaSyncRestartAndForgedMessages
// and TestReplicaSyncRoutingQuality
// (the measure of README "Replicas sharing load") run real replicas on one
// NATS in front of the simulated fleet.
//
// Another replica's AllWorkersBusy opens the rejection window only when its
// router id is in Config.Peers (--router-peers), for at most this router's
// window counted from the message's time. Bounds of the HTTP side: prompts
// over every worker's limit (Config.MaxPromptTokens or
// DefaultMaxPromptTokens, lowered or, without the flag, replaced by the
// worker's max_model_len; and the largest rank's KV capacity) get 400
// before they are booked, found so before they are tokenized whole
// (openai.Request.TokenLimit), and a prompt over some workers' limits goes
// only to the others (workerTable.fitPrompt); the server
// takes at most Config.MaxConns connections, and bodies are accounted by
// declared length against Config.MaxInflightBodyBytes before fasthttp
// allocates them (bodyBudget, via fasthttp's HeaderReceived): one that does
// not fit gets 503 unread. /route ids are "kvr-" and 128 random bits.
// FuzzRouteBody fuzzes /route's body and the /route/{id}/{action} paths.
//
// Overload (issue 15 §3): TestMaxQueueWaitSheds checks --max-queue-wait's
// 429 against a live router (in make test); TestChaosOverload (build tag
// chaos, make chaos) offers 3× a real-time fleet's capacity with and
// without it, prints the 1-second timelines and fails when its targets do
// not hold (README "Overload").
//
// # Metrics
//
// Router.WritePrometheus (GET /metrics, and the admin listener's) writes
// Prometheus text through one promtext.Registry (routerFamilies in
// metrics.go, shard.MetricFamilies, ingest.MetricFamilies,
// node.MetricFamilies, node.SnapshotFamilies, recovery.MetricFamilies (the KV event recovery
// requester's kvroute_recovery_*, written when the node has one),
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
// kvroute_proxy_{ttft,duration}_seconds (histograms), kvroute_proxy_{errors,client_gone,worker_gone,worker_left}_total,
// kvroute_proxy_retries_total, kvroute_proxy_first_byte_timeouts_total,
// kvroute_proxy_{response_timeouts,abandoned,client_deadline}_total,
// kvroute_worker_{ejections,recoveries}_total,
// kvroute_sync_{messages_sent,messages_received,items_applied,items_ignored,
// messages_missed,bookings_dropped_on_gap,replicas_expired,messages_refused,publish_errors}_total,
// and at scrape time kvroute_sync_{replicas,remote_requests}, kvroute_queue_depth,
// kvroute_queue_drain_rate, kvroute_queue_wait_predicted_seconds (sched.Scheduler.QueueWait), kvroute_active_requests,
// kvroute_sched_{decisions,rejections,expirations,dropped}_total,
// kvroute_batcher_queue_depth, kvroute_throttled, kvroute_workers,
// kvroute_worker_up{worker},
// kvroute_worker_{decisions_total,active_blocks,prefill_tokens,requests,
// reported_used_blocks,tree_blocks,busy}{worker,dp_rank}, the index's
// kvroute_shard_*, the ingest's kvroute_ingest_*, the NATS connection's
// kvroute_nats_{connected,disconnects_total,reconnects_total} (node.Node),
// and the Go runtime and
// process metrics (go_*, process_*). docs/grafana-kvroute.json is a Grafana
// dashboard over them; TestMetricsExposition checks that every metric name it
// uses is exposed and that its queries parse.
package router
