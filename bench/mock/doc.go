// Package mock provides a simulated, GPU-free fleet of vLLM-like inference
// workers for kvroute: each Worker runs a bench/engine model in real time
// behind an OpenAI-compatible HTTP server (fasthttp) and publishes real KV
// events (Dynamo msgpack or kvroute native over NATS, or vLLM's ZMQ
// multipart with a replay socket), load metrics and registration
// heartbeats, so that routing decisions have the same consequences as on a
// real fleet: cache hits shorten prefill, load lengthens decode, full caches
// evict. A Fleet runs N workers in one process over one NATS connection.
//
// # Live mode
//
// Each worker has one goroutine that steps its engine: Step(now) schedules a
// batch and returns its duration d (the polynomial timing model divided by
// Speedup); the goroutine sleeps d, then delivers the batch's effects (first
// tokens, finishes) to the waiting HTTP handlers and publishes the KV events
// the batch produced, then steps again. An idle engine parks until a request
// is submitted. The engine's clock is the wall time since the worker started.
//
// # Streaming
//
// With "stream": true a response is an SSE stream with one chunk per
// generated token. The engine reports first tokens and finishes; progress in
// between is read after every step from the KV manager's token count of the
// sequence (a decoding sequence of P prompt tokens holding T tokens has
// produced T-P+1 output tokens), so chunks leave as the engine's steps
// produce them, never ahead of the engine (a preempted request's stream
// pauses while it recomputes). Each generated token is the one-byte text
// "a".."z". The last chunk carries finish_reason "length" and usage with
// prompt_tokens_details.cached_tokens, followed by "data: [DONE]".
//
// # Prompts
//
// Prompts are token-id arrays or text tokenized as UTF-8 bytes (one token per
// byte, openai.BytesTokenizer); chat messages are rendered with the ChatML
// template of openai.RenderChat first. max_tokens (default 16) is the exact
// output length. Prompt blocks are hashed with wire.LocalHashes (seed
// wire.Seed, or wire.LoRASeed of lora_name), so a router hashing the same
// tokens finds the worker's blocks.
//
// # KV events
//
// Event ids are contiguous per worker from 1 (dp rank 0). Dynamo: one
// event-plane message per event on Subjects.KVEvents. Native: one batch per
// engine step on Subjects.KVEventsNative. ZMQ: one vLLM batch per step on a
// PUB socket with topic kv@<worker>@<model>, and a replay ROUTER socket. A
// vLLM event carries token ids, not hashes: prompt blocks carry their real
// tokens; blocks holding generated tokens carry synthetic tokens derived
// from the engine's internal hash of the block (the engine model does not
// keep output token ids), so a vLLM consumer sees those blocks under the
// local hash of the synthetic tokens. LoRA names are not carried in vLLM
// events.
//
// # Faults
//
// Drop and duplicate a fraction of event messages (seeded), Pause and Resume
// a worker (its engine and heartbeats stop; requests queue), Restart a
// worker (in-flight requests fail with 503, the engine starts over with an
// empty cache and announces Cleared as its event 1).
//
// # Metrics
//
// GET /metrics serves mock_*{worker} counters (requests, streams, failed and
// bad requests, prompt, completion and cached tokens, preemptions, engine
// steps) and gauges (KV used, total and usage, waiting and running requests)
// in Prometheus text with HELP and TYPE lines (a promtext.Registry;
// TestHealthAndMetrics checks it with promtext.Check and promtool).
package mock
