// Package wire provides everything that crosses the wire at kvroute's core:
// the normalized KV event type, block and sequence hashing bit-compatible with
// Dynamo's router, and the decoders and encoders for the KV-event formats that
// engines publish (vLLM/SGLang ZMQ msgpack, Dynamo's NATS event plane, and
// kvroute's native binary batch).
//
// # Decoding into a Batch
//
// Every decoder appends normalized Events to a caller-owned Batch. Blocks
// point into the batch's reusable block storage (or, for the native format,
// into the message), LoRA names point into the message bytes, and Reset keeps
// the storage: decoding into a warmed-up Batch allocates nothing (the
// allocation tests gate this for every format). An event's views are valid
// until the batch is Reset and while the message buffer is unchanged; copy
// what must outlive them. A Batch and a VLLMDecoder are not goroutine-safe:
// use one per receiving goroutine.
//
// # vLLM and SGLang over ZMQ
//
// A message has three frames, [topic, seq, payload] (ParseVLLMFrames,
// VLLMFrames), seq being 8 bytes big-endian. The payload is msgpack
// [ts, events, data_parallel_rank] (the rank may be nil or missing: rank 0),
// or the map {"ts", "events", "data_parallel_rank"}. An event is a tagged
// array,
//
//	["BlockStored", block_hashes, parent_block_hash, token_ids, block_size,
//	 lora_id, medium, lora_name, extra_keys, group_idx, kv_cache_spec_kind,
//	 kv_cache_spec_sliding_window, locality]
//	["BlockRemoved", block_hashes, medium, group_idx, locality]
//	["AllBlocksCleared"]
//
// whose trailing fields may be omitted, or a map keyed by the same names with
// the tag under "type", in any key order (plus "cache_salt"). Unknown keys
// and trailing fields are skipped. Hashes may be int64 (taken as their bits),
// uint64 or bytes (the last 8 bytes big-endian; shorter strings are
// zero-extended on the left); parent_block_hash may be nil. medium maps
// GPU→device; CPU, CPU_PINNED (SGLang's HiCache) and CPU_TIER1→host; DISK,
// CPU_TIER2, NVME and STORAGE (vLLM's native offload to a file system or
// object store; FS before 0.27)→disk; nil→device; anything else→external
// (ignoring case).
//
// Locality (vLLM 0.26: LOCAL or REMOTE, where the copy lives relative to the
// publishing engine; absent: unspecified) qualifies the medium: a host or
// disk copy that is not LOCAL (a shared CPU pool, remote storage; any value
// but LOCAL counts) is priced as external, the slowest tier the worker can
// still load from. A device copy is the worker's own however it got there:
// in disaggregated serving a decode worker publishes the blocks it pulled
// from a prefill worker as GPU blocks, and they are indexed like any other.
// Without locality every event decodes as before; the field costs one
// zero-copy string read per event: BenchmarkDecodeVLLM's map-locality
// (locality on every event of the realistic batch) and map were alike
// within the noise of a shared 2-core machine (21–131 µs per 1024-block
// batch for both, 2026-11-28), and the allocation gates cover it (0
// allocations).
//
// The VLLMDecoder is configured with the worker id and the engine's block
// size B. It computes each block's local hash from token_ids: block i is
// tokens[i*B:(i+1)*B], hashed with BlockHashOf and the seed
// SaltSeed(lora_name, cache salt). A Stored event whose block_size field is
// not B, or whose token_ids are not len(block_hashes)*B long, is rejected
// with an error wrapping ErrBlockSizeMismatch that names both sizes, and
// counted in Batch.SizeMismatches. Events with a lora_id but no lora_name are
// hashed with the base seed (the name is what the seed is made of).
//
// Engine variants the decoder folds into the hashes, as Dynamo does:
//
//   - Hybrid models (group_idx, kv_cache_spec_kind): vLLM publishes every
//     KV cache group's blocks under the same block hashes. Only the main
//     group is indexed: the first group a Stored event declares full
//     attention (group 0 until one does); events without group_idx belong to
//     it. The other groups' events are counted in Batch.OtherGroups and take
//     no event id.
//   - Multimodal blocks (extra_keys, one entry per block): the 64-hex-digit
//     identifiers among a block's keys (also as [identifier, offset]) are its
//     multimodal objects; their MMHashOf values are folded into its hash
//     (BlockHashMM), so two images over the same placeholder tokens differ.
//   - SGLang's EAGLE pages: token_ids as bigrams [t, t+1]. By default a
//     page's block is its first tokens, hashed as the plain page, so it
//     matches the router's plain request hashes (and can credit one page
//     too many per request). VLLMConfig.EagleWindows and LocalHashesEagle
//     are Dynamo's exact form (each page with the token after it, a window
//     of B+1 tokens; zmq_wire.rs, compute_block_hash_for_seq with
//     is_eagle); events and requests must switch together, as serve's
//     --eagle-windows does.
//   - vLLM's offloading connector ("Offloaded blocks"): a BlockStored with
//     empty token_ids on a non-device medium, block_size a multiple of B or
//     0, names GPU blocks by hash: a Stored event with ByEngine set, which
//     adds the tier to the blocks the worker holds under those hashes. A
//     chunk of k > 1 GPU blocks is named by its last block, which alone gets
//     the tier (fewer host hits, never false ones). Medium GPU, or another
//     block_size, is rejected.
//   - Cache salts: cache_salt (map form), a map {lora_name, cache_salt} in
//     lora_name's place (SGLang), a string in extra_keys' place, or the
//     first string of the first block's extra_keys that is neither a
//     multimodal identifier nor the LoRA name (vLLM). A Stored event without
//     one inherits its parent block's salt (vLLM stamps a request's first
//     block only); the decoder remembers the salted blocks (a map that is
//     only touched while salts are in use) until they are removed.
//
// Event ids: the decoder numbers each data-parallel rank's events 1, 2, 3,
// ..., rejected events included, and skips one id when a batch's seq is not
// the successor of the rank's previous one, so a consumer checking ID ==
// last+1 sees every lost batch as a gap (VLLMDecoder has the rules).
//
// AppendVLLMBatch writes a VLLMBatch in either form (hashes as uint64,
// int64 or 32-byte strings, optionally compact as msgspec's omit_defaults)
// from token ids, since local hashes cannot be inverted.
//
// # Dynamo's event plane over NATS
//
// A message is the msgpack map {publisher_id, sequence, published_at, topic,
// payload} (DecodeDynamo, AppendDynamo) whose payload (bin) is a msgpack
// RouterEvent (DecodeDynamoEvent, AppendDynamoEvent):
//
//	{worker_id, storage_tier, event: {event_id, dp_rank, data}}
//	data: {"stored": {parent_hash, start_position, blocks: [{block_hash, tokens_hash, mm_extra_info}]}}
//	    | {"removed": {block_hashes}}
//	    | "cleared" (or {"cleared": nil})
//
// tokens_hash is the local hash, already computed by the publisher (with its
// LoRA seed), and block_hash the engine hash; parent_hash may be nil.
// storage_tier is device, host (or host_pinned), disk, any other name
// (external), or nil/absent (device), ignoring case. Worker ids and hashes
// may be signed or unsigned integers; a block may also be an array
// [block_hash, tokens_hash, ...]. The event id is the publisher's event_id.
// DecodeDynamoJSON and AppendDynamoJSON handle the same RouterEvent as JSON,
// with a small in-place scanner (no encoding/json, no allocation): the form
// older Dynamo published (on ...kv_events, then on ...kv-events);
// DecodeDynamoAny takes either form. A data variant kvroute does not know is
// counted in Batch.Ignored. Dynamo's publisher computes tokens_hash itself,
// with the LoRA name, cache namespace and multimodal hashes folded in.
//
// # kvroute native
//
// A compact little-endian batch for kvroute's own publishers and the
// simulated fleet (AppendNative, DecodeNative; the layout is in native.go).
// Every field sits at an offset aligned to its size, so on little-endian
// hosts an 8-byte aligned message's block arrays are used in place
// (BenchmarkDecodeNative compares the view with a copy and field-by-field
// decoding); otherwise they are copied into the batch.
//
// # Errors
//
// Malformed input returns an error wrapping ErrMalformed and never panics;
// list lengths are checked against the bytes left before anything is
// reserved, so a lying header cannot cause a large allocation. A broken
// message (truncated, wrong envelope types, trailing bytes, an undecodable
// dp rank; every error of the Dynamo and native formats) leaves the batch
// exactly as it was: a message is appended whole or not at all. An invalid
// event in a well-framed vLLM batch (a block size mismatch, a hash of the
// wrong type, a missing field) is dropped and counted in Batch.Rejected
// (and SizeMismatches); the first such error is kept in Batch.Err, the only
// one formatted, so a stream of bad events allocates nothing; the batch's
// other events are decoded. Every decoder is fuzzed on its input and every
// prefix of it (FuzzDecodeVLLM, FuzzDecodeDynamo, FuzzDecodeDynamoJSON,
// FuzzDecodeNative).
//
// # Fast paths
//
// The shapes publishers actually send are read byte by byte before the
// general msgpack readers: a Dynamo block map {"block_hash", "tokens_hash"}
// in that order with fixint or 64-bit values (readBlockMapFast; any other
// shape, e.g. keys reversed, an extra key or a uint32 value, takes the
// general path, TestDecodeBlockFastPath), integer hashes (readIntFast), and
// vLLM token ids in one loop (readTokens). The measurement is in the
// decoder fast-path record under docs/decisions/.
//
// # Hashing
//
// LocalHashes and SequenceHashes are Dynamo's block and sequence hashes.
// SaltSeed is Dynamo's compute_salt_hash (the LoRA name and the cache salt
// folded into the seed); MMHashOf, BlockHashMM and LocalHashesMM fold
// multimodal objects into the blocks they overlap, as Dynamo's
// compute_block_hash_for_seq does with block_mm_infos.
package wire
