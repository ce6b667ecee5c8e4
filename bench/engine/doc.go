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
// Decode(KV usage) when the batch decodes: every decode request batched
// with a prefill waits for the whole step, so its inter-token latency rises
// with the prefill tokens it shares the step with. That is the generation
// stall Sarathi-Serve (Agrawal et al., OSDI'24, "Taming Throughput-Latency
// Tradeoff in LLM Inference with Sarathi-Serve", arXiv:2403.02310)
// measures and bounds with chunked prefill, and the prefill-decoding
// interference DistServe (Zhong et al., OSDI'24, arXiv:2401.09670)
// removes by disaggregation. With DefaultPerf a small batch's decode step
// takes about 6 ms alone and about 55 ms beside a 2048-token prefill (9×).
// TestDecodeSlowedByCoBatchedPrefill checks that the step grows with the
// co-batched prefill tokens and keeps that ratio between 3× and 15×, a band
// around the model's own value, so a change that removes the stall fails.
// This is not yet a calibration against the papers' figures: they
// establish the effect (decodes stall for the whole of a co-scheduled
// prefill); the constants are the Dynamo mocker's fit, and fitting them to
// a published figure of decode latency against co-batched prefill tokens
// is still to do. The model is the step model aggregated replays already
// used, so no aggregated result changes. A worker that only decodes (a P/D
// decode worker) pays the prefill term only for its transferred prompts'
// partial tails.
package engine
