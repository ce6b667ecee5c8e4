// Package trace provides Mooncake request traces for replay: a JSONL reader
// with line-numbered errors, deterministic token synthesis from hash ids, the
// router's local block hashes of a request at any engine block size (cached
// per hash id so a replay does not re-hash shared prefixes), trace
// duplication into disjoint copies, and trace statistics (Stats: request
// count, duration, prompt and output lengths, prefix reuse). The Mooncake
// synthetic trace ships with the repository in bench/traces (its source,
// checksum and licence in bench/traces/README.md).
//
// A Mooncake trace line is
//
//	{"timestamp": <ms>, "input_length": <tokens>, "output_length": <tokens>, "hash_ids": [<int>, ...]}
//
// with optional "session_id" and "delay" (ms) for multi-turn traces. Each hash
// id stands for IDBlockSize (512) tokens; the last id of a request may be
// partial. Two requests share a prefix block exactly when they carry the same
// id at the same position, so the tokens of an id are synthesized from the id
// alone (AppendIDTokens) and a request's prompt is the concatenation of its
// ids' tokens truncated to input_length.
package trace
