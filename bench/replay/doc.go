// Package replay provides trace replay against routing policies and the
// routing-quality report of `kvroute replay`: an offline, deterministic
// discrete-event simulation of a fleet of simulated engines behind kvroute's
// real scheduler and index, an online driver for any OpenAI-compatible
// endpoint, and the report (table, JSON, Go benchmark lines, SVG/PNG plot)
// that compares policies on hit ratio, latency and balance.
//
// # Workload
//
// Prepare hashes a bench/trace.Trace (Mooncake JSONL or a bench/synth
// workload) once at the engine block size: every request's local and
// sequence block hashes, its session links, and the achievable hit ratio
// (Workload.Achievable: an infinite prefix cache shared by all workers, at
// the engine's block size, capped as the engine caps a hit at prompt − 1
// tokens). A Workload is immutable and shared by concurrent replays.
//
// # Offline mode (Simulate, Run)
//
// A virtual clock and one event heap, no sockets, no sleeping, no wall-clock
// reads in the model. Events are request arrivals (trace timestamp / speedup;
// a session turn without a timestamp arrives its delay / speedup after its
// previous turn ended), engine step ends, and KV-event deliveries:
//
//   - Arrival: the index (shard.Core: exact for kv, approximate for kv-approx,
//     none for the other policies) matches the prompt's local hashes; the
//     scheduler (sched.Scheduler, the policy's sched.Policy) decides with
//     those overlaps and books the load; the request is submitted to the
//     chosen rank's engine (bench/engine, the model `kvroute mock` runs live),
//     which starts a step at once if it was idle. Queued requests enter the
//     engine when the scheduler admits them; rejected ones end there.
//   - Step: Engine.Step(now) runs a batch and returns its duration d; its
//     effects happen at now+d: a first token marks the request's prefill
//     done in the scheduler (and gives its cached tokens), a finish frees
//     it. The engine steps again at now+d while it has work.
//   - Delivery: the step's KV events reach the index Config.EventDelay after
//     the step ended (approximate kv records its own decisions instead).
//     Engines report their load to the scheduler at most every
//     Config.LoadInterval; the scheduler and approximate index tick every
//     Config.TickInterval.
//
// Simultaneous events are processed deliveries first, then step ends, then
// arrivals, each kind in the order it was scheduled, so a run is a pure
// function of the workload, the configuration and the seed. Run executes
// every (speedup, policy) of a Sweep on parallel goroutines; results do not
// depend on the parallelism.
//
// # Online mode (RunOnline)
//
// Sends the trace's requests to <url>/v1/completions at their compressed
// arrival times (or from a fixed number of concurrent clients), streaming,
// prompts as token-id arrays synthesized exactly as the offline hashes are,
// and measures from the client: TTFT at the first streamed chunk, ITL and
// end-to-end at [DONE], cached tokens from the final chunk's
// usage.prompt_tokens_details.cached_tokens, the worker from the
// X-Kvroute-Worker header (or a `kvroute mock` response id). Its Report has
// the offline shape, so the two compare line by line.
//
// # Disaggregated prefill/decode (SimulatePD, RunPD)
//
// `kvroute replay --pd P,D` compares four cells on the same P + D GPUs
// (PDCells): agg-kv (P + D aggregated engines), disagg-rr (round-robin
// pairs), disagg-kv (sched.DecidePD, always remote) and cond-kv
// (isl-or-load), with engine.DistServePerf as the step model. A remote
// request's one-token prefill leg runs on its prefill engine, blocks pinned;
// at its first token the prefill booking ends (PrefillDone) and the pull of
// the prompt's full blocks, less the decode engine's cached prefix, takes
// PDConfig.TransferGBps; then the prefill engine unpins and the decode
// engine admits the prompt as transferred (engine.Request.Transferred).
// TTFT is the decode engine's first token. Deterministic, like Simulate
// (TestPDCells); docs/decisions/0041-pd-replay-and-interference-model.md.
//
// # Metrics
//
// Latencies are from arrival: TTFT to the first token, ITL per request as
// (finish − first token) / (output tokens − 1), E2E to the last token. Hit
// ratio = cached prompt tokens / prompt tokens (the engines' CachedTokens at
// first scheduling). max_worker_share = max over workers of requests routed
// there / mean. Throughput is completions over first arrival to last
// completion.
//
// Saturation: a run is saturated when the router rejected requests because
// every worker was busy and its queue was full, or when, over the middle 80%
// of the arrival window (10th to 90th percentile arrival), fewer than 95% as
// many requests completed as arrived (Result.Tracking < SaturationTracking):
// the fleet no longer completes work as fast as it arrives, so queues grow
// for as long as the load lasts. Measuring inside the arrival window keeps
// the drain after the last arrival from counting. kv's saturation speedup is
// the highest speedup of the sweep at which kv is not saturated; the
// automatic sweep doubles the speedup until kv saturates and bisects to 15%.
//
// Router replicas (Config.Routers, --routers): one scheduler per replica,
// request i decided by replica i mod N; all share the index, the workers'
// load reports and tree sizes. With Config.SyncDelay ≥ 0 (--sync-delay) a
// replica's bookings, prefill completions and frees reach the others'
// schedulers as evSync events that much later (sched.Scheduler.AddRequest,
// MarkPrefillCompleted, Free), as `serve --router-replica-sync` does over
// NATS; negative: never. TestReplicasSyncDelay measures the effect against
// the delay. SyncSweep runs one workload over a list of delays with one
// router and the unsynced replicas as references (window max/mean worker
// share: the busiest rank's requests per window of one arrival per rank;
// hit ratio) and PlotSyncSweep draws it (`kvroute replay --sync-delays`,
// make replica-sync-plot → docs/replica-sync-delay.svg).
//
// # Host tier and references
//
// With --host-kv-blocks the engines offload evicted blocks to a host tier
// and onload them instead of recomputing (bench/engine), and the fleet-cache
// reference (fleet_cache_hit_ratio, /lru) is one LRU of the fleet's GPU +
// host size, processing the trace in order with no concurrency, the
// reference kv's hit ratio is read against. With busy detection off (--busy-decode-frac 0) the
// router never queues or rejects, so saturation shows as Tracking alone.
//
// For kv, Result.BestHitRatio and RoutedHitRatio give, at each dispatch,
// the longest cached prefix on any rank and on the rank chosen: best −
// routed is what placement lost, routed − hit what changed before the
// engine scheduled the request. The policy kv-sticky (a reference, not a
// router) pins each request to the rank with its longest prefix, load
// ignored. Workload.PartitionedLRU splits the fleet-size LRU into one per
// rank under an offline placement with a balance bound
// (TestPartitionedLRUReport checks the figures docs/decisions/0026 quotes
// on the shipped trace; with KVROUTE_PARTREF_TRACE it logs the whole sweep
// on another). These replay
// tables chose sched's cost defaults and cache affinity; the records are in
// docs/decisions/ and the current figures in docs/benchmarks.md
// (BenchmarkReplay times one run of the 200-line testdata trace).
package replay
