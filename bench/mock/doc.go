// Package mock provides a simulated, GPU-free fleet of vLLM-like inference
// workers for kvroute: each Worker runs a bench/engine model in real time
// behind an OpenAI-compatible HTTP server (fasthttp) and publishes real KV
// events (Dynamo msgpack or kvroute native over NATS, or vLLM's ZMQ
// multipart with a replay socket), load metrics and registration
// heartbeats, so that routing decisions have the same consequences as on a
// real fleet: cache hits shorten prefill, load lengthens decode, full caches
// evict. A Fleet runs N workers in one process over one NATS connection
// (`kvroute mock`, serve's --demo-fleet, the router and cluster tests):
//
//	fleet, err := mock.Start(mock.Config{Workers: 4, KVBlocks: 4096}, nc)
//	defer fleet.Close()
//	url := fleet.Workers()[0].URL() // an OpenAI-compatible endpoint
//
// With HostKVBlocks a worker has a host tier behind its GPU cache
// (engine.Config.HostCapacity): evictions are offloaded there and announced
// with storage tier host (vLLM medium "CPU", carrying the blocks' tokens,
// which the worker keeps for every cached block while a host tier is on),
// and prompts onload what the host holds at HostGBps.
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
// pauses while it recomputes). The last chunk carries finish_reason "length"
// and usage with prompt_tokens_details.cached_tokens, followed by
// "data: [DONE]"; a request that sets stream_options.include_usage gets
// the usage alone in a chunk without choices after the last token's, as
// vLLM sends it.
//
// # Generated tokens
//
// Output is a pure function of the prompt and the position, as greedy
// sampling is on a real engine: token i is a lowercase ASCII letter derived
// from the xxh3 hash of all the prompt's tokens (under the LoRA seed) and i,
// with no randomness. Its text is that one byte, which the bytes tokenizer
// maps back to the same token id. The worker hashes prompt and output
// together when a request arrives, so the blocks holding the prompt's tail
// and the generated tokens are stored under the local hashes a router
// computes for them: two identical requests store the same blocks, and a
// follow-up prompt that repeats a prompt and its answer (the next turn of a
// chat, whose ChatML template repeats both) finds the answer's blocks cached,
// up to the last token whose KV was computed (the final token's never is).
//
// # Client disconnects
//
// A request whose client goes away is aborted in the engine, as vLLM aborts
// it: it leaves the waiting or running queue and its blocks are freed (full
// ones stay cached until evicted), and no KV event is published for the
// abort (vLLM announces nothing when it frees blocks; later evictions are
// Removed events as usual); the next load message shows it gone. The worker
// notices the client's connection closing (it peeks at the socket while the
// request runs, on Linux and macOS) and, when streaming, a chunk that fails
// to write.
//
// # Validation
//
// Bodies are parsed by openai.Parse, which rejects, with a 400 naming the
// field, wrongly typed or out-of-range fields as vLLM does (max_tokens ≥ 1,
// n ≥ 1, temperature ≥ 0, top_p in (0, 1], stream a boolean, ...). n > 1 is
// answered 400 "n > 1 is not supported": a worker generates one choice per
// request.
//
// # Prompts
//
// Prompts are token-id arrays or text tokenized by Config.Tokenizer: UTF-8
// bytes by default (one token per byte, openai.BytesTokenizer), or a real
// Hugging Face tokenizer (kvroute mock --tokenizer, prompt/tokenizer), so
// usage and cached_tokens count real tokens; chat messages are rendered with
// the ChatML template of openai.RenderChat first, or with Config.ChatTemplate
// (a real model's template, prompt/chattmpl) when one is set, as the router does. max_tokens (default 16) is the exact
// output length. Prompt blocks are hashed with wire.LocalHashes (seed
// wire.SaltSeed of lora_name and cache_salt, multimodal objects folded in
// with wire.LocalHashesMM), so a router hashing the same
// tokens finds the worker's blocks.
//
// # KV events
//
// Event ids are contiguous per worker and dp rank from 1. Dynamo: one
// event-plane message per event on Subjects.KVEvents. Native: one batch per
// engine step on Subjects.KVEventsNative. ZMQ: one vLLM batch per step on a
// PUB socket with topic kv@<worker>@<model>, and a replay ROUTER socket. A
// vLLM event carries token ids, not hashes: every block carries its real
// tokens, prompt and generated alike, so a vLLM consumer computes the same
// local hashes as the worker. LoRA names, cache salts and multimodal objects
// (a request's mm_hashes or chat media parts) are not carried in vLLM events.
//
// # Data-parallel ranks
//
// With WorkerConfig.DPSize (kvroute mock --dp-size) N > 1 a worker is N
// engines behind its one URL, as a vLLM server started with
// --data-parallel-size N: each rank has its own engine loop, KV cache of
// KVBlocks, event ids, recovery ring, load messages and events carrying its
// dp rank (ZMQ: rank r's PUB and replay sockets at the base ports + r, the
// offset vLLM applies). The registration lists dp_ranks 0..N-1. A
// completion goes to the rank its X-Data-Parallel-Rank header names (any
// case; a bad value is a 400 naming the header), as vLLM and SGLang honour
// it, else to the least loaded rank by 4 × waiting + running (vLLM's DP
// balancer's weights), ties rotating. Every rank subscribes to the worker's
// recovery subject and answers for itself; rank 0 answers the error for a
// rank the worker lacks. /metrics carries a dp_rank label. Rank(r) reaches a
// rank's Held and Stats; Pause, Resume, Restart and SetFaults act on every
// rank.
//
// # Faults
//
// Drop and duplicate a fraction of event messages (seeded), Pause and Resume
// a worker (its engine and heartbeats stop; requests queue), Restart a
// worker (in-flight requests fail with 503, the engine starts over with an
// empty cache and announces Cleared as its event 1), CutConnections (every
// open HTTP connection closes mid-answer, as when the engine crashes).
//
// # Recovery
//
// On the NATS transports each worker keeps its last RecoveryRing KV events
// (--recovery-ring, default 4096) and answers recovery requests on
// kv-recover.<id> (wire/plane): the events after the asked id from its ring,
// or, when they are no longer there, a dump of its block manager's cached
// blocks in parent order, the device's and then the host tier's copies
// (blocks whose parent neither tier holds are left out: no index can place
// them). A paused worker does not answer. Restart empties
// the ring and changes the epoch. The drop and duplicate switches
// (--drop-events, --duplicate-events, Config.DropFraction/DupFraction,
// seeded by --seed) exercise it. Three more faults hide from the events
// and show only in the engines' cached-token reports (faults.go):
// CutEvents (POST /mock/fault/events?cut=true|false on the worker's port)
// stops publishing while the engine serves from its cache,
// ClearCacheSilently (POST /mock/fault/clear-cache) empties an idle cache
// without an event or an event id, and WorkerConfig.AnnounceBlockSize
// (--announce-block-size) registers another block size than the engine's.
//
// # Disaggregated serving
//
// WorkerConfig.Role makes a worker a prefill or a decode worker (default
// both: aggregated, and P/D fields in bodies are ignored, as today), and
// PDProtocol picks the protocol it speaks, as the engines speak them:
//
//   - vLLM NIXL (vllm-nixl, the default): a prefill worker answers a body
//     whose kv_transfer_params has do_remote_decode true with an ordinary
//     completion plus kv_transfer_params {do_remote_prefill: true,
//     remote_engine_id, remote_block_ids, remote_host, remote_port,
//     remote_request_id, tp_size}, and keeps the prompt's blocks pinned
//     (engine.Request.Pin) until a decode worker pulls them or
//     TransferTimeout passes. A decode worker given those parameters
//     unchanged pulls the blocks from remote_host:remote_port, waits the
//     modelled transfer time (blocks × BlockSize × engine.KVBytesPerToken
//     at TransferGBps, divided by Speedup), then runs the request with the
//     pulled prompt blocks as computed (engine.Request.Transferred): only
//     the partial tail is prefilled. Parameters naming no pending transfer
//     (never made, already pulled, or timed out) are refused with a 400
//     naming kv_transfer_params, as vLLM refuses them.
//   - SGLang PD (sglang): both legs carry the client's body plus
//     bootstrap_host, bootstrap_port and bootstrap_room and start together.
//     The prefill worker computes the prompt, answers one token and pins
//     the blocks under the room; the decode worker waits for that room's
//     prefill at bootstrap_host:bootstrap_port up to BootstrapTimeout, then
//     pulls and decodes as above, or fails with a 500 naming the room.
//     The mock serves the bootstrap on its HTTP port (BootstrapPort).
//
// The pull is real HTTP between workers (POST /mock/kv_transfer on the
// prefill worker's HTTP port, answered with the blocks' local hashes and
// unpinning them), so a fleet spread over processes works as one in a
// process. A decode worker counts as transferred only the prefix of the
// pulled blocks that matches its own prompt's hashes. Both sides publish
// KV events for what they hold: the prefill worker for the prompt it
// computed, the decode worker for the blocks it received (stored as it
// admits the request). A decode worker given a body without P/D fields
// serves it aggregated (a router's fallback when a prefill leg fails).
//
// A prefill or decode worker's registration carries role and pd_protocol,
// and with SGLang bootstrap_port; an aggregated worker's carries none of
// them, as before.
//
// Not modelled: batched SGLang bodies (lists of rooms) are refused with a
// 400, as is an SGLang decode leg whose bootstrap_port is null (SGLang
// falls back to its own port setting; the mock's is its HTTP port, which
// the decode worker cannot know); and the transfer occupies no engine step
// on either side (NIXL reads asynchronously; the decode worker only
// waits).
//
// Besides the completion endpoints a worker serves GET /v1/models (its
// model, in OpenAI's list shape, as vLLM does), /health and /metrics.
//
// # Metrics
//
// GET /metrics serves mock_*{worker} counters (requests, streams, failed and
// bad requests, prompt, completion and cached tokens, preemptions, engine
// steps) and gauges (KV used, total and usage, waiting and running requests)
// in Prometheus text with HELP and TYPE lines (a promtext.Registry;
// TestHealthAndMetrics checks it with promtext.Check and promtool).
package mock
