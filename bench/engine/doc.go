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
package engine
