package wire

import (
	"fmt"
	"testing"
	"unsafe"
)

// Fuzz targets. Each feeds the input and every prefix of it (the input cut at
// every offset) to a decoder and checks that:
//   - nothing panics;
//   - an error leaves the batch exactly as it was (here: one sentinel event);
//   - decoded events are well-formed (known kind and tier, no blocks on
//     Cleared, Blocks and LoRA inside the batch or the input);
//   - every prefix that decodes without error decodes to the same events
//     (for msgpack and the native format at most one prefix can succeed,
//     since trailing bytes are an error; JSON may add whitespace).
//
// Run one with: go test ./wire -run '^$' -fuzz FuzzDecodeVLLM -fuzztime 60s

var sentinel = Event{Worker: WorkerKey{Worker: 424242}, ID: 1, Kind: KindRemoved, Blocks: []Block{{Engine: 1}}}

func checkPrefixes(t *testing.T, data []byte, fresh func() func(b *Batch, msg []byte) error) {
	if len(data) > 1<<14 {
		data = data[:1<<14] // keep the quadratic prefix walk fast
	}
	var first string
	var firstLen = -1
	for i := 0; i <= len(data); i++ {
		msg := data[:i:i]
		b := Batch{Events: []Event{sentinel}}
		err := fresh()(&b, msg)
		if err != nil {
			if len(b.Events) != 1 || eventString(&b.Events[0]) != eventString(&sentinel) || len(b.blocks) != 0 ||
				b.Rejected != 0 || b.Ignored != 0 || b.Err != nil {
				t.Fatalf("prefix %d: error %v but the batch changed: %s", i, err, eventsString(b.Events))
			}
			continue
		}
		if b.Rejected > 0 && b.Err == nil || b.Rejected == 0 && b.Err != nil || b.SizeMismatches > b.Rejected {
			t.Fatalf("prefix %d: rejected %d, mismatches %d, err %v", i, b.Rejected, b.SizeMismatches, b.Err)
		}
		for j := range b.Events[1:] {
			checkWellFormed(t, &b.Events[1+j], msg, &b)
		}
		got := fmt.Sprintf("%s rejected=%d ignored=%d", eventsString(b.Events[1:]), b.Rejected, b.Ignored)
		if firstLen >= 0 && got != first {
			t.Fatalf("prefixes %d and %d both decode, differently:\n%s\n%s", firstLen, i, first, got)
		}
		first, firstLen = got, i
	}
}

func checkWellFormed(t *testing.T, e *Event, msg []byte, b *Batch) {
	t.Helper()
	if e.Kind < KindStored || e.Kind > KindCleared || e.Tier > TierExternal {
		t.Fatalf("bad kind or tier: %s", eventString(e))
	}
	if e.Kind == KindCleared && len(e.Blocks) != 0 {
		t.Fatalf("cleared with blocks: %s", eventString(e))
	}
	if e.Kind != KindStored && e.HasParent {
		t.Fatalf("parent on a %s event", e.Kind)
	}
	if len(e.LoRA) > 0 && !within(e.LoRA, msg) {
		t.Fatalf("LoRA %q not a view into the message", e.LoRA)
	}
	if len(e.Blocks) > 0 && cap(e.Blocks) != len(e.Blocks) {
		t.Fatalf("Blocks capacity %d > length %d: an append would overwrite the next event", cap(e.Blocks), len(e.Blocks))
	}
}

// within reports whether s lies inside in.
func within(s, in []byte) bool {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	base := uintptr(unsafe.Pointer(unsafe.SliceData(in)))
	return len(in) > 0 && p >= base && p+uintptr(len(s)) <= base+uintptr(len(in))
}

func addSeeds(f *testing.F, seeds ...[]byte) {
	for _, s := range seeds {
		f.Add(s)
	}
}

func FuzzDecodeVLLM(f *testing.F) {
	const bs = 4
	for _, m := range []bool{false, true} {
		for _, h := range []HashEncoding{HashUint, HashInt, HashBytes} {
			batch := sampleVLLM(bs)
			batch.HasDPRank, batch.DPRank = m, 3
			addSeeds(f, AppendVLLMBatch(nil, batch, VLLMEncoding{Map: m, Hashes: h, Compact: h == HashInt, Extras: h == HashBytes}))
		}
	}
	// The fidelity shapes (groups, extra_keys, bigrams, salts), at the
	// fuzz decoder's block size.
	for _, m := range []bool{false, true} {
		fid := fidelityVLLM()
		for i := range fid.Events {
			e := &fid.Events[i]
			if e.Kind == KindStored {
				e.BlockSize, e.Tokens = bs, tokensFrom(3, len(e.BlockHashes)*bs+1)
				if !e.Bigram {
					e.Tokens = e.Tokens[:len(e.BlockHashes)*bs]
				}
			}
		}
		addSeeds(f, AppendVLLMBatch(nil, fid, VLLMEncoding{Map: m}))
	}
	// vLLM 0.26's locality and the STORAGE medium, rich and hash-only.
	for _, m := range []bool{false, true} {
		addSeeds(f, AppendVLLMBatch(nil, &VLLMBatch{Events: []VLLMEvent{
			{Kind: KindStored, BlockHashes: []EngineHash{1, 2}, Tokens: tokensFrom(5, 2*bs), BlockSize: bs, Medium: "GPU", Locality: "REMOTE"},
			{Kind: KindStored, BlockHashes: []EngineHash{1, 2}, Tokens: []uint32{}, BlockSize: bs, Medium: "STORAGE", Locality: "LOCAL"},
			{Kind: KindStored, BlockHashes: []EngineHash{2}, Tokens: tokensFrom(5+bs, bs), BlockSize: bs, Medium: "STORAGE", Locality: "REMOTE"},
			{Kind: KindRemoved, BlockHashes: []EngineHash{2}, Medium: "STORAGE", Locality: "REMOTE"},
			{Kind: KindRemoved, BlockHashes: []EngineHash{1}, Medium: "CPU", Locality: "LOCAL", HasGroup: true},
		}}, VLLMEncoding{Map: m}))
	}
	mismatch := &VLLMBatch{Events: []VLLMEvent{{Kind: KindStored, BlockHashes: []EngineHash{1}, Tokens: tokensFrom(0, 8), BlockSize: 8}}}
	addSeeds(f, AppendVLLMBatch(nil, mismatch, VLLMEncoding{}), nil, []byte{0x92, 0, 0x90})
	f.Fuzz(func(t *testing.T, data []byte) {
		checkPrefixes(t, data, func() func(*Batch, []byte) error {
			d := NewVLLMDecoder(VLLMConfig{Worker: 1, BlockSize: bs})
			return func(b *Batch, msg []byte) error { return d.Decode(b, 0, msg) }
		})
	})
}

func FuzzDecodeDynamo(f *testing.F) {
	for i, e := range dynamoSample() {
		h := DynamoHeader{PublisherID: uint64(i), Sequence: 1 << 40, PublishedAt: 1767225600000, Topic: []byte("kv")}
		addSeeds(f, AppendDynamo(nil, &h, &e))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkPrefixes(t, data, func() func(*Batch, []byte) error {
			return func(b *Batch, msg []byte) error { _, err := DecodeDynamo(b, msg); return err }
		})
		checkPrefixes(t, data, func() func(*Batch, []byte) error { return DecodeDynamoEvent })
	})
}

func FuzzDecodeDynamoJSON(f *testing.F) {
	for _, e := range dynamoSample() {
		addSeeds(f, AppendDynamoJSON(nil, &e))
	}
	addSeeds(f, []byte(`{"worker_id":-1,"storage_tier":null,"event":{"event_id":1,"dp_rank":2,"data":{"removed":{"block_hashes":[1,2]}},"x":[1.5e3,{"a":"\u00e9\n"},true,false,null]}} `))
	// DecodeDynamoAny takes JSON and msgpack alike.
	h := DynamoHeader{Topic: []byte("kv-events")}
	addSeeds(f, AppendDynamo(nil, &h, &dynamoSample()[0]))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkPrefixes(t, data, func() func(*Batch, []byte) error { return DecodeDynamoJSON })
		checkPrefixes(t, data, func() func(*Batch, []byte) error { return DecodeDynamoAny })
	})
}

func FuzzDecodeNative(f *testing.F) {
	addSeeds(f, AppendNative(nil, sampleEvents()), AppendNative(nil, nil))
	for n := range 9 {
		addSeeds(f, AppendNative(nil, []Event{{Kind: KindStored, LoRA: []byte("abcdefgh"[:n]), Blocks: []Block{{1, 2}}}}))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, mode := range []blockMode{blocksView, blocksCopy, blocksLoop} {
			checkPrefixes(t, data, func() func(*Batch, []byte) error {
				return func(b *Batch, msg []byte) error { return decodeNative(b, msg, mode) }
			})
		}
	})
}
