// Package pd provides the request bodies of disaggregated prefill/decode
// serving: what a router sends to the prefill and the decode worker of a
// pair, made from the client's OpenAI (or SGLang native) JSON body, for the
// two engine protocols, and the reading of a vLLM prefill answer. It holds
// formats only: no I/O, no state; every function is safe for concurrent use.
//
// # vLLM, NIXL connector ("vllm-nixl")
//
// As vLLM's reference proxy does it
// (vllm-project/vllm tests/v1/kv_connector/nixl_integration/toy_proxy_server.py):
//
//   - prefill leg, AppendVLLMPrefill: the client's body with
//     kv_transfer_params = {"do_remote_decode":true,"do_remote_prefill":false,
//     "remote_engine_id":null,"remote_block_ids":null,"remote_host":null,
//     "remote_port":null} (PrefillTransferParams), "stream":false,
//     "max_tokens":1, "max_completion_tokens":1 when the client sent it, and
//     stream_options, min_tokens and min_completion_tokens removed;
//   - the prefill answer (a completion or chat completion body) carries a
//     kv_transfer_params object naming the blocks the prefill worker holds;
//     TransferParams returns it as it came, or an error wrapping
//     ErrNoTransferParams when it is absent, null or empty (a worker
//     without the connector);
//   - decode leg, AppendVLLMDecode: the client's body unchanged, plus that
//     object copied as is, whatever fields it has.
//
// The same X-Request-Id header goes on both legs; headers are the caller's.
//
// # SGLang PD ("sglang")
//
// As SGLang's mini_lb (sgl-project/sglang
// python/sglang/srt/disaggregation/mini_lb.py, and the router's PD mode) does
// it: one body, AppendSGLang, goes to both workers at once: the client's body
// plus bootstrap_host, bootstrap_port and bootstrap_room (Bootstrap). The
// caller draws the room (this package holds no randomness). A batch, "text"
// as a list or "input_ids" as a list of lists (BatchSize), gets a list of
// each of the three, one per element, rooms counting up from the one drawn
// as SGLang's router numbers them.
//
// # Design
//
// Every function edits the body at its top level only: it validates the
// JSON once (fastjson's validator, as the request parser), walks the
// top-level members with a small scanner, copies each member it keeps byte
// for byte (key, value and the spacing between them; values are never
// decoded and re-encoded, so numbers such as 12345678901234567890 or
// -1.0E+2 reach the engine as the client wrote them), drops the members it
// rewrites wherever they appear (repeated, or with a key spelled with
// escapes such as "str\u0065am"), and appends its own members last. The
// functions are append-style (dst in, dst out) and allocate nothing beyond
// growing dst (TestAllocs). A client body that is not a JSON object, or an
// SGLang batch that is neither a request nor a non-empty list, is an error
// wrapping openai.ErrBadRequest (a 400; openai.ParamOf names the field); a
// malformed prefill answer is not, since the worker is at fault.
//
// # Measurement
//
// BenchmarkVLLMPrefill compares the scanner with the reference proxies' way
// (decode the body into a map, set the members, encode it again, here with
// encoding/json). On a shared 2-core machine, for chat bodies of 256 B,
// 8 KiB and 64 KiB the scanner took 0.8, 14 and 218 µs with no allocation,
// the map round trip 82, 194 and 1840 µs with 87 allocations (about 8 to 100
// times slower); the decode leg (TransferParams plus AppendVLLMDecode) and
// the SGLang body cost the same order as the prefill leg.
package pd
