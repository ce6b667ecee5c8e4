package wire

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/tinylib/msgp/msgp"
	"github.com/zeebo/xxh3"
)

// Engine-fidelity vectors: each payload is built the way the named upstream
// encoder builds it (msgspec structs with tag=True; array_like where the
// upstream struct is, map otherwise), and each expected local hash is
// computed here from first principles (xxh3 over the bytes the upstream
// hasher feeds), not with the decoder's own helpers.

// The multimodal identifiers vLLM puts in extra_keys are 64-hex digests.
const (
	imageA = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"
	imageB = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"
)

func decodeOne(t *testing.T, d *VLLMDecoder, seq uint64, payload []byte) *Batch {
	t.Helper()
	var b Batch
	if err := d.Decode(&b, seq, payload); err != nil {
		t.Fatal(err)
	}
	if b.Rejected != 0 {
		t.Fatalf("rejected %d: %v", b.Rejected, b.Err)
	}
	return &b
}

// refHash is Dynamo's compute_block_hash_for_seq for one block, spelled out:
// xxh3_64_with_seed(le(tokens) || le(sorted mm hashes), seed).
func refHash(tokens []uint32, mm []uint64, seed uint64) BlockHash {
	buf := leBytes(tokens)
	for _, h := range mm {
		buf = binary.LittleEndian.AppendUint64(buf, h)
	}
	return BlockHash(xxh3.HashSeed(buf, seed))
}

// vLLM's current events (vllm/distributed/kv_events.py, main branch, ≈0.11
// and later: BlockStored's group_idx, kv_cache_spec_kind,
// kv_cache_spec_sliding_window; BlockRemoved's group_idx; KVCacheEvent without array_like, so events are maps). A hybrid
// model (full attention + sliding window) publishes each block once per KV
// cache group under the same block hashes; only the main (full-attention)
// group is indexed, the others are counted and take no event id.
func TestVLLMHybridGroups(t *testing.T) {
	const bs = 4
	toks := tokensFrom(1, 3*bs)
	hashes := []EngineHash{11, 12, 13}
	for _, tc := range []struct {
		name        string
		full, slide int // group indexes
	}{{"full attention is group 0", 0, 1}, {"full attention is group 1", 1, 0}} {
		for _, m := range []bool{true, false} {
			t.Run(tc.name, func(t *testing.T) {
				batch := &VLLMBatch{HasDPRank: true, Events: []VLLMEvent{
					// vLLM publishes the sliding-window group's copy first when
					// it is group 0: the decoder must not take group 0 for the
					// main group once a kind says otherwise.
					{Kind: KindStored, BlockHashes: hashes, Tokens: toks, BlockSize: bs, Medium: "GPU", HasGroup: true, Group: tc.slide, SpecKind: "sliding_window"},
					{Kind: KindStored, BlockHashes: hashes, Tokens: toks, BlockSize: bs, Medium: "GPU", HasGroup: true, Group: tc.full, SpecKind: "full_attention"},
					{Kind: KindRemoved, BlockHashes: hashes, Medium: "GPU", HasGroup: true, Group: tc.slide},
					{Kind: KindRemoved, BlockHashes: hashes[2:], Medium: "GPU", HasGroup: true, Group: tc.full},
				}}
				d := NewVLLMDecoder(VLLMConfig{Worker: 1, BlockSize: bs})
				b := decodeOne(t, d, 0, AppendVLLMBatch(nil, batch, VLLMEncoding{Map: m}))
				if b.OtherGroups != 2 || len(b.Events) != 2 {
					t.Fatalf("other groups %d, events:\n%s", b.OtherGroups, eventsString(b.Events))
				}
				st, rm := b.Events[0], b.Events[1]
				if st.Kind != KindStored || len(st.Blocks) != 3 || st.ID != 1 || rm.Kind != KindRemoved || len(rm.Blocks) != 1 || rm.Blocks[0].Engine != 13 || rm.ID != 2 {
					t.Fatalf("events:\n%s", eventsString(b.Events))
				}
				if st.Blocks[0].Local != refHash(toks[:bs], nil, Seed) {
					t.Fatal("main group's local hash")
				}
			})
		}
	}
	// Older vLLM (no groups) and group-less events stay indexed.
	d := NewVLLMDecoder(VLLMConfig{Worker: 1, BlockSize: bs})
	b := decodeOne(t, d, 0, AppendVLLMBatch(nil, &VLLMBatch{Events: []VLLMEvent{
		{Kind: KindStored, BlockHashes: hashes, Tokens: toks, BlockSize: bs},
		{Kind: KindRemoved, BlockHashes: hashes},
	}}, VLLMEncoding{}))
	if len(b.Events) != 2 || b.OtherGroups != 0 {
		t.Fatalf("group-less events: %d, other groups %d", len(b.Events), b.OtherGroups)
	}
}

// vLLM's extra_keys (vllm/v1/core/kv_cache_utils.py
// _gen_mm_extra_hash_keys: one entry per block, the identifiers of the
// multimodal objects the block overlaps; "vLLM 0.19+" writes
// [identifier, start offset], per Dynamo's comment) as Dynamo turns them into block_mm_infos
// (lib/llm/src/kv_router/publisher zmq_wire.rs extra_keys_to_block_mm_infos,
// parse_mm_hash_from_extra_key: the first 16 hex digits) and folds them into
// the block hash (lib/kv-router/src/protocols.rs compute_block_hash_for_seq:
// the sorted mm hashes appended little-endian after the tokens).
func TestVLLMMultimodalExtraKeys(t *testing.T) {
	const bs = 4
	toks := tokensFrom(7, 3*bs) // the same placeholder tokens for both images
	mmA, mmB := uint64(0xa1b2c3d4e5f60718), uint64(0x0f1e2d3c4b5a6978)
	stored := func(image string) []byte {
		// Array form (vLLM ≤ 0.10 array_like events carried extra_keys at
		// position 8); block 2 uses the [identifier, offset] pair form.
		var p []byte
		p = msgp.AppendArrayHeader(p, 3)
		p = msgp.AppendFloat64(p, 1)
		p = msgp.AppendArrayHeader(p, 1)
		p = msgp.AppendArrayHeader(p, 9)
		p = msgp.AppendString(p, "BlockStored")
		p = appendUintArray(p, []EngineHash{1, 2, 3})
		p = msgp.AppendNil(p)
		p = msgp.AppendArrayHeader(p, uint32(len(toks)))
		for _, tk := range toks {
			p = msgp.AppendUint32(p, tk)
		}
		p = msgp.AppendInt(p, bs)
		p = msgp.AppendNil(p)            // lora_id
		p = msgp.AppendString(p, "GPU")  // medium
		p = msgp.AppendNil(p)            // lora_name
		p = msgp.AppendArrayHeader(p, 3) // extra_keys
		p = msgp.AppendNil(p)            // block 0: text only
		p = msgp.AppendArrayHeader(p, 1)
		p = msgp.AppendString(p, image)
		p = msgp.AppendArrayHeader(p, 2)
		p = msgp.AppendArrayHeader(p, 2)
		p = msgp.AppendString(p, image)
		p = msgp.AppendInt(p, -4) // the object started in the block before
		p = msgp.AppendBytes(p, []byte("prompt-embeds"))
		return msgp.AppendInt(p, 0)
	}
	d := NewVLLMDecoder(VLLMConfig{Worker: 1, BlockSize: bs})
	a := decodeOne(t, d, 0, stored(imageA)).Events[0].Blocks
	b := decodeOne(t, d, 1, stored(imageB)).Events[0].Blocks
	want := []BlockHash{refHash(toks[:bs], nil, Seed), refHash(toks[bs:2*bs], []uint64{mmA}, Seed), refHash(toks[2*bs:], []uint64{mmA}, Seed)}
	for i := range a {
		if a[i].Local != want[i] {
			t.Errorf("image A block %d: %d, want %d", i, a[i].Local, want[i])
		}
	}
	if a[0].Local != b[0].Local {
		t.Error("the text block before the image must match across images")
	}
	if a[1].Local == b[1].Local || a[2].Local == b[2].Local {
		t.Error("two images over the same placeholder tokens share a local hash: a false prefix match")
	}
	if b[1].Local != refHash(toks[bs:2*bs], []uint64{mmB}, Seed) {
		t.Error("image B block 1")
	}
	// Two objects in one block: sorted before hashing.
	if h, _ := BlockHashMM(nil, toks[:bs], []uint64{mmA, mmB}, Seed); h != refHash(toks[:bs], []uint64{mmB, mmA}, Seed) {
		t.Error("mm hashes are not sorted")
	}
	// The request side: LocalHashesMM folds an object into every block its
	// range overlaps (tokens 5..10 overlap blocks 1 and 2).
	got, _, _ := LocalHashesMM(nil, toks, bs, Seed, []MMRange{{Hash: mmA, Offset: 5, Length: 6}}, nil, nil)
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("request block %d: %d, want %d", i, got[i], want[i])
		}
	}
	// MMHashOf: Dynamo's hash_mm_identifier.
	if h, ok := MMHashOf([]byte(imageA)); !ok || h != mmA {
		t.Errorf("MMHashOf(hex digest) = %x", h)
	}
	if h, ok := MMHashOf([]byte("my-uuid")); !ok || h != xxh3.HashString("my-uuid") {
		t.Errorf("MMHashOf(uuid) = %x", h)
	}
	if _, ok := MMHashOf(nil); ok {
		t.Error("MMHashOf(empty)")
	}
}

// SGLang's EAGLE pages: python/sglang/srt/mem_cache/radix_cache.py and
// mem_cache/events.py (_record_store_event, SGLang main; the version is not
// pinned): with a bigram key a page's
// token_ids are the pairs [(raw[j], raw[j+1]) for j in page] and block_size
// is the number of pairs; events are msgspec array_like BlockStored
// [block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium].
// By default the page's block is its first tokens, hashed as the same page
// without EAGLE (so that it matches a plainly hashed request's blocks).
// Dynamo's zmq_wire.rs flattens the pairs the same way (firsts plus the
// last second) and hashes windows of bs+1 tokens (VLLMConfig.EagleWindows).
func TestSGLangEagleBigrams(t *testing.T) {
	const bs = 2
	raw := []uint32{10, 11, 12, 13, 14} // Dynamo's test_deserialize_bigram_block_stored_sequence
	var p []byte
	p = msgp.AppendArrayHeader(p, 3)
	p = msgp.AppendFloat64(p, 1)
	p = msgp.AppendArrayHeader(p, 1)
	p = msgp.AppendArrayHeader(p, 7)
	p = msgp.AppendString(p, "BlockStored")
	p = msgp.AppendArrayHeader(p, 2)
	p = msgp.AppendInt64(p, 11)
	p = msgp.AppendInt64(p, 12)
	p = msgp.AppendNil(p)
	p = msgp.AppendArrayHeader(p, 4)
	for j := range 4 {
		p = msgp.AppendArrayHeader(p, 2)
		p = msgp.AppendUint32(p, raw[j])
		p = msgp.AppendUint32(p, raw[j+1])
	}
	p = msgp.AppendInt(p, bs)
	p = msgp.AppendNil(p)
	p = msgp.AppendString(p, "GPU")
	p = msgp.AppendInt(p, 0) // attn_dp_rank
	d := NewVLLMDecoder(VLLMConfig{Worker: 1, BlockSize: bs})
	b := decodeOne(t, d, 0, p)
	if len(b.Events) != 1 || len(b.Events[0].Blocks) != 2 {
		t.Fatalf("events: %s", eventsString(b.Events))
	}
	for i, bl := range b.Events[0].Blocks {
		if want := refHash(raw[i*bs:(i+1)*bs], nil, Seed); bl.Local != want {
			t.Errorf("page %d: %d, want %d (the plain page's hash)", i, bl.Local, want)
		}
	}
	// With EagleWindows, as Dynamo's zmq_wire.rs (create_stored_blocks with
	// is_eagle: block i over the flattened tokens [i·bs, i·bs+bs+1)) and
	// its test_convert_event_bigram_emits_eagle_windows: hash([10,11,12])
	// and hash([12,13,14]); a request hashed with LocalHashesEagle
	// (Dynamo's test_compute_block_hash_for_seq_eagle_windows: 6 tokens,
	// block size 2, 2 windows) matches them.
	ew := decodeOne(t, NewVLLMDecoder(VLLMConfig{Worker: 1, BlockSize: bs, EagleWindows: true}), 0, p)
	req := LocalHashesEagle(nil, []uint32{10, 11, 12, 13, 14, 15}, bs, Seed)
	if len(req) != 2 || req[0] != refHash(raw[0:3], nil, Seed) || req[1] != refHash(raw[2:5], nil, Seed) {
		t.Fatalf("eagle request windows %v", req)
	}
	if n := len(LocalHashesEagle(nil, raw[:4], bs, Seed)); n != 1 {
		t.Fatalf("4 tokens at block size 2: %d eagle blocks, want (4-1)/2 = 1", n)
	}
	for i, bl := range ew.Events[0].Blocks {
		if bl.Local != req[i] {
			t.Errorf("eagle page %d: %d, want the window's hash %d", i, bl.Local, req[i])
		}
	}
	// The encoder's Bigram form decodes the same.
	enc := AppendVLLMBatch(nil, &VLLMBatch{Events: []VLLMEvent{{Kind: KindStored, BlockHashes: []EngineHash{11, 12}, Tokens: raw, BlockSize: bs, Bigram: true, Medium: "GPU"}}}, VLLMEncoding{Compact: true})
	if got := decodeOne(t, NewVLLMDecoder(VLLMConfig{Worker: 1, BlockSize: bs}), 0, enc); eventsString(got.Events) != eventsString(b.Events) {
		t.Fatalf("encoder's bigrams:\n%s\nwant\n%s", eventsString(got.Events), eventsString(b.Events))
	}
}

// SGLang's StorageMedium (python/sglang/srt/disaggregation/kv_events.py:
// GPU, CPU, CPU_PINNED; HiCache host copies are CPU_PINNED) and the other
// media of Dynamo's StorageTier::from_kv_medium.
func TestMediumTiers(t *testing.T) {
	for medium, want := range map[string]Tier{
		"GPU": TierDevice, "CPU": TierHost, "CPU_PINNED": TierHost, "cpu_pinned": TierHost, "CPU_TIER1": TierHost,
		"CPU_TIER2": TierDisk, "DISK": TierDisk, "NVME": TierDisk, "LMCACHE": TierExternal,
	} {
		d := NewVLLMDecoder(VLLMConfig{Worker: 1, BlockSize: 2})
		b := decodeOne(t, d, 0, AppendVLLMBatch(nil, &VLLMBatch{Events: []VLLMEvent{
			{Kind: KindStored, BlockHashes: []EngineHash{1}, Tokens: []uint32{1, 2}, BlockSize: 2, Medium: medium},
			{Kind: KindRemoved, BlockHashes: []EngineHash{1}, Medium: medium},
		}}, VLLMEncoding{}))
		for _, e := range b.Events {
			if e.Tier != want {
				t.Errorf("medium %s: %s event tier %s, want %s", medium, e.Kind, e.Tier, want)
			}
		}
	}
}

// Cache salts. The seed is Dynamo's compute_salt_hash (lib/kv-hashing:
// seed + xxh3_64(lora, 0) + xxh3_64(salt, 1)).
func TestSaltSeed(t *testing.T) {
	if SaltSeed(nil, nil) != Seed || SaltSeed([]byte("ad"), nil) != LoRASeed("ad") {
		t.Fatal("unsalted seeds must not change")
	}
	if got, want := SaltSeed(nil, []byte("tenant-a")), Seed+xxh3.HashSeed([]byte("tenant-a"), 1); got != want {
		t.Errorf("salt seed %d, want %d", got, want)
	}
	if got, want := SaltSeed([]byte("ad"), []byte("t")), Seed+xxh3.HashString("ad")+xxh3.HashSeed([]byte("t"), 1); got != want {
		t.Errorf("lora+salt seed %d, want %d", got, want)
	}
	if SaltSeed([]byte("x"), nil) == SaltSeed(nil, []byte("x")) {
		t.Error("a salt must not collide with a LoRA name")
	}
}

func TestSaltedEvents(t *testing.T) {
	const bs = 2
	toks := []uint32{5, 6, 7, 8}
	salted := func(salt, lora string) []BlockHash {
		return []BlockHash{refHash(toks[:2], nil, SaltSeed([]byte(lora), []byte(salt))), refHash(toks[2:], nil, SaltSeed([]byte(lora), []byte(salt)))}
	}
	check := func(t *testing.T, b *Batch, want []BlockHash) {
		t.Helper()
		if len(b.Events) != 1 {
			t.Fatalf("events: %s", eventsString(b.Events))
		}
		for i, bl := range b.Events[0].Blocks {
			if bl.Local != want[i] {
				t.Errorf("block %d: %d, want %d", i, bl.Local, want[i])
			}
		}
	}
	// SGLang's salted BlockStored: an 8th element {cache_salt} (a map, with
	// lora_name) where vLLM has the lora_name string. SGLang's own
	// publisher for it was not found in the sources searched, so the shape
	// is as described, not as read; taking the element for vLLM's
	// lora_name string would reject the event.
	t.Run("sglang", func(t *testing.T) {
		for _, lora := range []string{"", "ad"} {
			ev := VLLMEvent{Kind: KindStored, BlockHashes: []EngineHash{1, 2}, Tokens: toks, BlockSize: bs, Medium: "GPU", LoRA: lora, Salt: "tenant-a"}
			p := AppendVLLMBatch(nil, &VLLMBatch{Events: []VLLMEvent{ev}}, VLLMEncoding{Compact: true})
			check(t, decodeOne(t, NewVLLMDecoder(VLLMConfig{Worker: 1, BlockSize: bs}), 0, p), salted("tenant-a", lora))
		}
	})
	// vLLM's map form with a top-level cache_salt (the key Dynamo's
	// zmq_wire.rs reads, TRT-LLM's publisher stamps on every event).
	t.Run("cache_salt key", func(t *testing.T) {
		ev := VLLMEvent{Kind: KindStored, BlockHashes: []EngineHash{1, 2}, Tokens: toks, BlockSize: bs, Salt: "tenant-b"}
		p := AppendVLLMBatch(nil, &VLLMBatch{Events: []VLLMEvent{ev}}, VLLMEncoding{Map: true})
		check(t, decodeOne(t, NewVLLMDecoder(VLLMConfig{Worker: 1, BlockSize: bs}), 0, p), salted("tenant-b", ""))
	})
	// vLLM stamps cache_salt into the first block's extra_keys only
	// (kv_cache_utils.py: lora_name + mm keys + cache_salt); the request's
	// later blocks, in later events, inherit it through their parent
	// (Dynamo's CacheNamespacePropagator), until the parent is removed.
	t.Run("vllm extra_keys and inheritance", func(t *testing.T) {
		d := NewVLLMDecoder(VLLMConfig{Worker: 1, BlockSize: bs})
		first := VLLMEvent{Kind: KindStored, BlockHashes: []EngineHash{1}, Tokens: toks[:2], BlockSize: bs, LoRA: "ad",
			ExtraKeys: [][]string{{"ad", imageA, "tenant-c"}}}
		child := VLLMEvent{Kind: KindStored, BlockHashes: []EngineHash{2}, HasParent: true, Parent: 1, Tokens: toks[2:], BlockSize: bs, LoRA: "ad"}
		p := AppendVLLMBatch(nil, &VLLMBatch{Events: []VLLMEvent{first, child}}, VLLMEncoding{Map: true})
		b := decodeOne(t, d, 0, p)
		seed := SaltSeed([]byte("ad"), []byte("tenant-c"))
		if got, want := b.Events[0].Blocks[0].Local, refHash(toks[:2], []uint64{0xa1b2c3d4e5f60718}, seed); got != want {
			t.Errorf("first block %d, want %d", got, want)
		}
		if got, want := b.Events[1].Blocks[0].Local, refHash(toks[2:], nil, seed); got != want {
			t.Errorf("child block %d, want %d (inherited salt)", got, want)
		}
		// The parent removed, a new child no longer inherits.
		rm := VLLMEvent{Kind: KindRemoved, BlockHashes: []EngineHash{1}}
		b = decodeOne(t, d, 1, AppendVLLMBatch(nil, &VLLMBatch{Events: []VLLMEvent{rm, child}}, VLLMEncoding{}))
		if got, want := b.Events[1].Blocks[0].Local, refHash(toks[2:], nil, LoRASeed("ad")); got != want {
			t.Errorf("orphan child %d, want %d", got, want)
		}
	})
	// A malformed salt map names cache_salt, not lora_name.
	t.Run("error names the field", func(t *testing.T) {
		var p []byte
		p = msgp.AppendArrayHeader(p, 2)
		p = msgp.AppendFloat64(p, 0)
		p = msgp.AppendArrayHeader(p, 1)
		p = msgp.AppendArrayHeader(p, 8)
		p = msgp.AppendString(p, "BlockStored")
		p = appendUintArray(p, []EngineHash{1})
		p = msgp.AppendNil(p)
		p = msgp.AppendArrayHeader(p, 2)
		p = msgp.AppendUint32(p, 1)
		p = msgp.AppendUint32(p, 2)
		p = msgp.AppendInt(p, 2)
		p = msgp.AppendNil(p)
		p = msgp.AppendNil(p)
		p = msgp.AppendMapHeader(p, 1)
		p = msgp.AppendString(p, "cache_salt")
		p = msgp.AppendInt(p, 3)
		var b Batch
		if err := NewVLLMDecoder(VLLMConfig{Worker: 1, BlockSize: 2}).Decode(&b, 0, p); err != nil {
			t.Fatal(err)
		}
		if b.Rejected != 1 || !strings.Contains(b.Err.Error(), "cache_salt") {
			t.Fatalf("rejected %d: %v", b.Rejected, b.Err)
		}
	})
}
