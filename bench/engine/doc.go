// Package engine provides a deterministic vLLM-like inference engine model
// for simulations: waiting and running queues, a per-step token budget with
// chunked prefill, max_num_seqs, recompute preemption when KV blocks run
// out, prefix caching and KV events through a kvcache.Manager, and a step
// time from a prefill/decode performance model.
//
// The engine is a synchronous core with an injected clock: Submit(req, now)
// queues a request and Step(now) schedules and "runs" one batch, returning
// its duration; the first-token, preemption and finish effects of that batch
// are stamped now+duration. The same core drives a discrete-event simulation
// (advance a virtual clock by the returned duration) and a live mode (sleep
// it, scaled by Speedup).
//
// Abort ends a request at once, as vLLM aborts one whose client went away:
// its blocks are freed and nothing is announced. Blocks past the prompt's
// (its partial tail and the generated tokens) are named by the caller
// (Request.Output) when it knows the output, so identical requests store the
// same blocks; otherwise by the request id.
//
// With Config.HostCapacity the engine has a host tier behind the device
// (kvcache's offload on eviction): a prompt's blocks found there after its
// device prefix count as cached (Effect.HostTokens) and cost
// Config.HostBlockTime each in the step that onloads them (HostBlockTime
// gives it from a bandwidth and KVBytesPerToken) instead of their prefill.
//
// # Disaggregated prefill and decode
//
// Two request fields serve a simulated P/D fleet. Request.Transferred names
// prompt tokens whose KV arrived from a prefill worker: at admission their
// full blocks count as computed (stored and announced like computed ones,
// counted in Stats.TransferredTokens, not as cache hits), so a decode
// worker prefills only the partial tail. Request.Pin keeps a finished
// request's blocks allocated, as a prefill worker holds them until the
// decode side has pulled them; Unpin releases them (the caller owns the
// timeout).
//
// # Prefill/decode interference
//
// A step's duration is Prefill(prefill tokens in the batch) plus
// Decode(KV usage) when the batch decodes, less Perf.Shared (the pass's
// fixed cost, paid once) when it does both: every decode request batched
// with a prefill waits for the whole step, so its inter-token latency rises
// with the prefill tokens it shares the step with. That is the generation
// stall Sarathi-Serve (Agrawal et al., OSDI'24, arXiv:2403.02310) bounds
// with chunked prefill, and the prefill-decoding interference DistServe
// (Zhong et al., OSDI'24, arXiv:2401.09670) removes by
// disaggregation.
//
// DistServePerf is the calibrated model: DistServe's own profiled fit of
// OPT-13B on one A100-80GB (TP 1), the one its simulator uses to reproduce
// the paper's figures (LLMServe/DistServe,
// simdistserve/estimators/profile_data/profiler-a100-80g.distserve.json):
// prefill_ms = 16.46 + 0.0926·t + 6.47e-6·t², decode_ms = 19.93 +
// 0.000627·(context tokens) + 0.0385·(requests). A decode step at 1K
// context takes 20.6 ms alone, 69 ms beside a 512-token prefill (3.4×) and
// 237 ms beside a 2048-token one (11.5×): each co-batched prefill token adds
// 0.093 ms (plus the t² term) to every decoding request's inter-token
// latency. TestInterferenceCalibrated checks the engine's steps against
// those coefficients, computed in the test from the published numbers.
// DistServePerf drops the per-request term (at most 3.7 ms; the engine's
// model sees KV usage, not batch size) and squares a batch's total prefill
// tokens where DistServe sums each prompt's square.
//
// DefaultPerf (Dynamo's mocker polynomials, the timing of `kvroute mock` and
// of aggregated replays) has the same shape with a weaker stall: about 6 ms
// alone and 55 ms beside 2048 prefill tokens at low usage, 0.015 ms per
// prefill token, and no shared intercept (TestDecodeSlowedByCoBatchedPrefill
// keeps its ratio between 3× and 15×). Its constants are unchanged, so no
// aggregated result changes; the P/D replay (bench/replay, RunPD) uses
// DistServePerf. A worker that only decodes (a P/D decode worker) pays the
// prefill term only for its transferred prompts' partial tails.
package engine
