// Package router provides kvroute's router service: the batcher that owns
// the scheduler and decides requests in batches against the sharded index,
// the worker table fed by static configuration and NATS registrations, the
// HTTP API (an OpenAI-compatible proxy and a decision API) over fasthttp,
// the metrics, and Service, which assembles a whole router process (NATS,
// index, ingest, router, listeners) for `kvroute serve`.
//
//	svc, err := router.StartService(cfg) // listeners, then NATS, index, ingest; an error undoes all
//	...
//	err = svc.Drain() // /ready 503, --shutdown-grace, then streams cut and connections closed
//	err = svc.Close()
//
// # Data flow and threading
//
// An HTTP handler parses the request, tokenizes a text prompt
// (Config.Tokenizer, or the model's from Config.ModelTokenizers; with
// Config.ForwardTokenIDs a completion's text prompt is forwarded as those
// ids, openai.ReplacePrompt), hashes the prompt's full blocks (local and
// sequence hashes) on its own goroutine and queues a pending request to the
// batcher, or, finding the batcher idle, decides it itself under the
// batcher's mutex (no hand-off to another goroutine and back; decision
// record 0044). The batcher goroutine drains what is queued (up to
// Config.BatchMax), looks the whole batch up in every shard at once
// (shard.Index.MatchBatch, or Hooks.Lookup), then decides the requests one by
// one with sched.Scheduler.Decide, each seeing the previous one's booking. A
// routed request is answered at once; a queued one (every worker busy) waits
// for an admission from the scheduler's outbox, at most Config.QueueTimeout.
// Prefill-done and free notifications come back on a separate queue applied
// before the next batch (applied by the notifying goroutine itself when the
// batcher is idle). Control-plane work (registrations, load reports,
// /workers, scrapes) runs as closures on the batcher: the scheduler has one
// owner at a time, whoever holds the batcher's mutex (Router.owner), and
// the batcher holds it whenever it works. Worker health counters are atomics the
// handlers update; everything else the batcher owns.
//
// # Endpoints
//
//	POST /v1/completions, /v1/chat/completions  route and proxy (SSE streamed chunk by chunk)
//	GET  /v1/models                             the union of the workers' models (OpenAI list shape)
//	POST /route                                 decision only: {"token_ids"|"prompt"|"messages", "model",
//	                                            "request_id", "lora_name", "cache_salt", "mm_hashes",
//	                                            "explain", "overrides"}
//	POST /route/{id}/prefill_done, /route/{id}/free
//	GET  /workers, /health, /ready, /metrics
//
// Another method gets 405 with Allow. docs/reference/http-api.md has the
// request and error shapes (make docs). A proxied response carries
// X-Kvroute-Worker, X-Kvroute-Dp-Rank and X-Kvroute-Cached-Blocks. Its load
// is booked at the decision, its prefill marked done at the first streamed
// event (or the whole answer), and freed when the stream ends, fails or the
// client disconnects; a /route decision is booked until /free or
// --request-expiry. /route ids are "kvr-" and 128 random bits.
//
// Hashing follows the engines' KV events: lora_name and cache_salt seed the
// hash (wire.SaltSeed), mm_hashes folds each multimodal object's hash into
// the blocks its placeholder overlaps (wire.LocalHashesMM); without them a
// chat's media part is a placeholder that never matches an engine's blocks,
// so a request matches only the text before its first image, never a false
// prefix. Config.EagleWindows (--eagle-windows) hashes B+1-token windows as
// Dynamo does for SGLang EAGLE fleets (wire.LocalHashesEagle), as node's ZMQ
// decoders then do (TestEagleWindowsThroughServe).
//
// GET /ready answers 503 with the reason while the router drains (the first
// ServiceConfig.ShutdownReadyDelay of Service.Drain), while the event plane
// is down (Hooks.EventPlane), while no worker is routable, or while KV-event
// ingest is not running.
//
// # Workers, models and health
//
// Static workers (--worker) never expire. Registered workers come from
// heartbeats on the control plane (plane.Registry): a registration is
// validated (plane.Registration.ValidateRanks, --max-dp-ranks); a live
// worker id belongs to its URL (another URL is a conflict, never a takeover;
// a new instance_id at the same URL is a restart); a withdrawal must name the
// live URL and instance id; at most --max-workers register; a block size
// other than --block-size is refused and logged with both sizes. Refusals
// are counted in kvroute_refused_total{reason} and logged at most every 10 s
// per reason (rateLog). A worker that withdraws or misses plane.ExpiryFactor
// heartbeats leaves the scheduler (its requests dropped) and the index. A
// registered ZMQ endpoint is subscribed (Hooks.WorkerJoined).
//
// A worker's models come from its registration, --worker ...,model=NAME, or
// GET URL/v1/models (static workers, retried until answered). A request
// naming a model is restricted, through the scheduler's allowed-workers
// override, to the ranks of its workers and of those declaring none; a model
// no worker serves gets 404 model_not_found.
//
// The proxy (proxy.Proxy.SendRank) gets the worker's answer before writing
// to the client. A worker registered with several dp ranks behind one URL
// gets the decision's rank in X-Data-Parallel-Rank, which vLLM and SGLang
// obey. A transport failure (dial refused or timed out, connection dropped
// before the answer, for a stream no first byte within
// proxy.Config.FirstByteTimeout, for a whole answer none within
// proxy.Config.ResponseTimeout, capped by the client's own deadline from
// X-Stainless-Timeout, which answers 504 without blaming the worker) counts
// against the worker, and the request is decided again once without it and
// sent there (kvroute_proxy_retries_total); a worker's HTTP error status is
// relayed. Health is passive, like Envoy's outlier detection:
// Config.EjectAfter consecutive transport failures mark a worker down;
// ejecting it closes the connections of its requests that have had no byte
// of their answer yet, and those are decided again elsewhere
// (kvroute_proxy_abandoned_total); the batcher removes its
// ranks from the scheduler but keeps its index and table entries and starts
// a prober (GET /health after Config.ProbeInterval, doubling up to
// ProbeMaxInterval); a 2xx puts the ranks back. A worker down for
// Config.ForgetAfter loses its index entries; heartbeats keep a down worker
// registered but not routable.
//
// # Disaggregated prefill/decode
//
// A worker's role (prefill, decode or both: its registration, or
// StaticWorker.Capacity.Role) is its rank's sched.Capacity.Role. With no
// prefill rank in the scheduler nothing below runs and every path is the
// aggregated one (TestPDWithoutPrefillWorkersUnchanged). Otherwise the
// batcher makes one pair decision per request (sched.DecidePDBatch) and the
// handler runs the legs in pd.go: vLLM NIXL (the one-token prefill leg within
// Config.PrefillTimeout, then the decode leg with its kv_transfer_params) or
// SGLang (both legs at once, bootstrap_host, bootstrap_port and a random
// bootstrap_room), one X-Request-Id on both; the client gets the decode
// worker's answer, X-Kvroute-Prefill-Worker naming the prefill worker. A
// failed prefill leg serves the request aggregated on its decode worker; a
// decode leg failing before its first byte goes once to another decode
// worker with the same leg; a prefill answer without kv_transfer_params is
// a 502 and its worker is routed as aggregated from then on
// (docs/decisions/0040-pd-serving.md). /route answers the pair beside its
// usual fields; /route/{id}/prefill_done ends the prefill booking.
// # Checking predictions against the engines
//
// Every proxied request that gets a 200 answer is checked (verify.go):
// the blocks its decision credited to the chosen rank against the
// engine's usage.prompt_tokens_details.cached_tokens (openai.CachedTokens).
// A stream whose client set no stream_options is sent with
// stream_options.include_usage (openai.AppendIncludeUsage) and relayed
// without the usage chunk (proxy.Hooks.StripUsage), byte for byte
// otherwise. The pair goes to a verify.Tracker behind a lock; a cause it
// names is logged once; a stale index or missing events asks the rank for
// a dump through recovery (Hooks.Repair, rate-limited by
// Config.VerifyRepairInterval). kvroute_verify_* are the metrics, /workers
// and /route's explain carry each rank's agreement, last report and
// diagnosis. The batcher records every decision in a ring
// (decisions.go, Config.DecisionRing) that the admin listener serves as
// /debug/decisions?n=N; one in Config.DecisionSample is decided with the
// scheduler's explanation and logged at debug level.
//
// # Errors and bounds
//
// Errors are OpenAI-style JSON (proxy.WriteAPIError) whose param names the
// field at fault; docs/reference/http-api.md has the table. Each worker's
// prompt limit is Config.MaxPromptTokens (or DefaultMaxPromptTokens),
// lowered by its max_model_len, or replaced by it when the flag is unset; a
// prompt goes only to workers it fits (workerTable.fitPrompt), and one over
// every worker's limit (or the largest rank's KV capacity) gets 400 before
// it is booked, found so before it is tokenized whole
// (openai.Request.TokenLimit: the byte length decides for the bytes
// tokenizer, a real one stops at the first 64 KiB piece past the limit), so
// a huge prompt costs its body and little more; 429 with Retry-After
// comes from the all-workers-busy window or from sched's early shedding
// (Config.Sched.MaxQueueWait, ErrQueueWait). Requests fasthttp cannot read
// are answered by connError (413, 431, 408, 400), never quoting the
// request, and the connection is closed lingeringly (internal/linger) so an
// uploading client reads the answer. At most Config.MaxConns connections;
// bodies are accounted by declared length against
// Config.MaxInflightBodyBytes before fasthttp allocates them (bodyBudget):
// one that does not fit gets 503 unread. A stream whose worker breaks off
// ends with an SSE error event (worker_stream_interrupted) unless the worker
// sent one. Service.Drain waits --shutdown-grace, cuts the streams from the
// worker side (Router.CutStreams: error event shutting_down), waits up to a
// second, and closes the connections still open.
//
// # Replicas and the remote index
//
// Replica sync (sync.go, Config.Sync, --router-replica-sync): the batcher
// appends routed requests, prefill completions and frees to a
// plane.SyncWriter, and a flusher goroutine publishes them (at once when
// idle, then at most once per Config.SyncInterval; a heartbeat every
// SyncExpiry/4). Other replicas' bookings are posted to the batcher and
// booked with sched.Scheduler.AddRequest under ids with the top bit set
// (remoteBit). A replica silent for Config.SyncExpiry, leaving or restarted
// has its bookings freed; a gap in its message numbers frees the bookings it
// made before the gap (the lost message may have freed them). With
// Config.Peers only the listed replicas count, and another replica's
// all-workers-busy opens the window only when it is listed (--router-peers),
// for at most this router's window. A new replica converges as older
// requests end.
//
// ServiceConfig.ServeIndexer (--serve-indexer) also answers other routers'
// index queries (node.IndexServer, wire/plane's query protocol).
// ServiceConfig.UseRemoteIndexer (--use-remote-indexer) keeps no index:
// Hooks.Lookup (a node.RemoteIndex) replaces MatchBatch with one NATS
// request per batch (in approximate mode it also sends the decisions); a
// failed or late query (--remote-indexer-timeout) routes the batch with
// zero overlap, counted, never seen by the client.
//
// # Metrics and tests
//
// Router.WritePrometheus (GET /metrics and the admin listener) writes one
// promtext.Registry: routerFamilies (metrics.go) and the shard, ingest,
// node, recovery and process families, each once. A metric added to
// metricSet needs a Family in routerFamilies, or TestMetricsExposition fails
// naming it (it also runs promtool and checks docs/grafana-kvroute.json's
// queries). docs/reference/metrics.md lists every family. The e2e and sync
// tests run real routers on an in-process NATS in front of bench/mock;
// under the chaos build tag (make chaos) hostile_chaos_test.go and
// overload_chaos_test.go add forged registrations, floods, slow bodies and
// 3× overload. Decision records (control-plane bounds, shedding, replica
// sync, the served index, the dp-rank header) are in docs/decisions/.
package router
