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
//	 kv_cache_spec_sliding_window]
//	["BlockRemoved", block_hashes, medium, group_idx]
//	["AllBlocksCleared"]
//
// whose trailing fields may be omitted, or a map keyed by the same names with
// the tag under "type", in any key order (plus "cache_salt"). Unknown keys
// and trailing fields are skipped. Hashes may be int64 (taken as their bits),
// uint64 or bytes (the last 8 bytes big-endian; shorter strings are
// zero-extended on the left); parent_block_hash may be nil. medium maps
// GPU→device; CPU, CPU_PINNED (SGLang's HiCache) and CPU_TIER1→host; DISK,
// CPU_TIER2 and NVME→disk; nil→device; anything else→external (ignoring
// case).
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
//   - SGLang's EAGLE pages ("EAGLE pages"): token_ids as bigrams [t, t+1].
//     By default a page's block is its first tokens, hashed as the plain
//     page, so that it matches the router's plain request hashes. Dynamo
//     (zmq_wire.rs, protocols.rs compute_block_hash_for_seq with is_eagle)
//     hashes each page with the token after it, a window of B+1 tokens, on
//     both sides, for workers whose runtime config enables EAGLE: exact,
//     since SGLang's bigram keys make a page reusable only when that next
//     token matches too. The plain hash can credit one page too many per
//     request (when the request's token after a cached page differs, or the
//     prompt ends with the page). VLLMConfig.EagleWindows and
//     LocalHashesEagle implement Dynamo's form; they must be switched on
//     together (events and requests): serve's --eagle-windows does both.
//   - vLLM's offloading connector ("Offloaded blocks"): a BlockStored with
//     empty token_ids on a tier other than the device (medium CPU),
//     block_size the offloaded block size (the GPU's by default, a multiple
//     of it) or 0 (main's placeholder payload), names GPU blocks by hash:
//     the event is a Stored event with ByEngine set, which adds the tier to
//     the blocks the worker holds under those hashes (radix). A chunk of k >
//     1 GPU blocks is named by its last block, which alone gets the tier (a
//     host extension stops before it: fewer host hits, never false ones).
//     The same with medium GPU, or a block_size that is not a multiple of
//     B, is rejected.
//   - Cache salts: cache_salt (map form), a map {lora_name, cache_salt} in
//     lora_name's place (SGLang), a string in extra_keys' place, or the
//     first string of the first block's extra_keys that is neither a
//     multimodal identifier nor the LoRA name (vLLM). A Stored event without
//     one inherits its parent block's salt (vLLM stamps a request's first
//     block only); the decoder remembers the salted blocks (a map that is
//     only touched while salts are in use) until they are removed.
//
// Event ids: the decoder keeps a counter per data-parallel rank. The events
// of a batch take consecutive ids in order (the first event ever gets 1),
// rejected events included; events of unknown kinds and of a hybrid model's
// other KV cache groups take none. When a
// batch's seq is not the successor of the rank's previous seq (a batch was
// lost or malformed, or the engine restarted), one id is skipped first. Ids
// are therefore contiguous per WorkerKey exactly while nothing is lost, and
// a consumer checking ID == last+1 sees every loss as a gap, as it does with
// Dynamo's publisher-assigned ids. The alternatives were worse: ID = seq for
// every event of a batch is not contiguous per event, and a plain counter
// hides lost batches.
//
// AppendVLLMBatch writes a VLLMBatch in either form, with hashes as uint64,
// int64 or 32-byte strings, optionally compact (trailing nils omitted, as
// msgspec's omit_defaults does) and with the newer fields the decoder skips.
// Its input carries token ids rather than local hashes, which cannot be
// inverted.
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
// simulated fleet (AppendNative, DecodeNative): an 8-byte header ("kv",
// version 1, flags 0, event count u32), then per event a 40-byte header
// (kind, tier, flags, reserved, dp u32, worker u64, event id u64, parent u64,
// LoRA length u32, block count u32), the LoRA name padded to 8 bytes, and
// 16 bytes (engine u64, local u64) per block. Every field sits at an offset
// aligned to its size, so on little-endian hosts an 8-byte aligned message's
// block arrays are used in place (BenchmarkDecodeNative measures the view
// against memmove and field-by-field decoding); otherwise they are copied
// into the batch.
//
// # Errors
//
// Malformed input returns an error wrapping ErrMalformed and never panics;
// list lengths are checked against the bytes left before anything is
// reserved, so a lying header cannot cause a large allocation. Errors come at
// two levels:
//
//   - Message level: the framing is broken (truncated, wrong types in the
//     envelope, trailing bytes, an undecodable dp rank). The decoder returns
//     the error and leaves the batch exactly as it was: a message is
//     appended whole or not at all. For the Dynamo and native formats every
//     error is of this kind.
//   - Event level (vLLM): one event of a well-framed batch is invalid (a
//     block size mismatch, a hash of the wrong type, a missing field). It is
//     dropped, counted in Batch.Rejected (and SizeMismatches), the first
//     such error is kept in Batch.Err, and the other events of the batch are
//     decoded as usual. Only the first error is formatted, so a stream of
//     bad events costs no allocation.
//
// Every decoder is fuzzed (FuzzDecodeVLLM, FuzzDecodeDynamo,
// FuzzDecodeDynamoJSON, FuzzDecodeNative) on its input and every prefix of it.
//
// # Fast paths
//
// The shapes publishers actually send are read byte by byte before the
// general msgpack readers: a Dynamo block map written as {"block_hash",
// "tokens_hash"} in that order with fixint or 64-bit values
// (readBlockMapFast; any other shape, e.g. keys reversed, an extra key or a
// uint32 value, goes to the general path, TestDecodeBlockFastPath), integer
// hashes (readIntFast), and vLLM token ids in one loop (readTokens) rather
// than one call per token. Six to fourteen interleaved runs of the old and
// new code on the loaded 2-vCPU machine: BenchmarkDecodeDynamo/msgpack
// -58% time per op (p = 0.002), BenchmarkDecodeVLLM array -51% and map -47%
// (p < 0.01); still 0 allocations. End to end (BenchmarkNATSIngest, Dynamo
// messages of ~39 blocks) the process's CPU per event moved 11.5 -> 11.1 µs,
// within the noise (p = 0.70): the decode is ~11% of it.
//
// # Hashing
//
// LocalHashes and SequenceHashes are Dynamo's block and sequence hashes.
// SaltSeed is Dynamo's compute_salt_hash (the LoRA name and the cache salt
// folded into the seed); MMHashOf, BlockHashMM and LocalHashesMM fold
// multimodal objects into the blocks they overlap, as Dynamo's
// compute_block_hash_for_seq does with block_mm_infos.
package wire
