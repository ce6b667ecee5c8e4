//go:build !race

package wire

import "testing"

// Allocation gates: decoding the realistic batch into a warmed-up Batch
// allocates nothing, in every format and form.

func checkNoAllocs(t *testing.T, name string, decode func(b *Batch)) {
	t.Helper()
	var b Batch
	decode(&b) // warm up: the batch grows to the workload once
	if got := testing.AllocsPerRun(50, func() { b.Reset(); decode(&b) }); got != 0 {
		t.Errorf("%s: %.1f allocs per decode, want 0", name, got)
	}
	if len(b.Events) == 0 {
		t.Fatalf("%s decoded nothing", name)
	}
}

func TestDecodeAllocs(t *testing.T) {
	batch := realisticVLLM(1)
	batch.Events[0].LoRA = "adapter" // exercise the seed path
	for _, enc := range []VLLMEncoding{{}, {Map: true}, {Hashes: HashBytes, Extras: true}, {Hashes: HashInt, Compact: true}} {
		payload := AppendVLLMBatch(nil, batch, enc)
		d := NewVLLMDecoder(VLLMConfig{Worker: 1, BlockSize: 16})
		seq := uint64(0)
		checkNoAllocs(t, "vllm", func(b *Batch) {
			if err := d.Decode(b, seq, payload); err != nil || b.Rejected != 0 {
				t.Fatal(err, b.Err)
			}
			seq += 2 // a gap every time: the gap path must not allocate either
		})
	}
	// The fidelity shapes: a hybrid model's groups, multimodal extra_keys,
	// SGLang's EAGLE bigrams and salted events.
	shapes := fidelityVLLM()
	for _, m := range []bool{false, true} {
		payload := AppendVLLMBatch(nil, shapes, VLLMEncoding{Map: m})
		d := NewVLLMDecoder(VLLMConfig{Worker: 1, BlockSize: 16})
		checkNoAllocs(t, "vllm fidelity shapes", func(b *Batch) {
			if err := d.Decode(b, 0, payload); err != nil || b.Rejected != 0 || b.OtherGroups != 2 {
				t.Fatal(err, b.Err, b.OtherGroups)
			}
		})
	}
	// vLLM 0.26's locality and STORAGE medium.
	located := &VLLMBatch{Events: []VLLMEvent{
		{Kind: KindStored, BlockHashes: []EngineHash{1, 2}, Tokens: tokensFrom(5, 32), BlockSize: 16, Medium: "GPU", Locality: "REMOTE"},
		{Kind: KindStored, BlockHashes: []EngineHash{1, 2}, Tokens: []uint32{}, BlockSize: 16, Medium: "STORAGE", Locality: "REMOTE"},
		{Kind: KindRemoved, BlockHashes: []EngineHash{2}, Medium: "STORAGE", Locality: "LOCAL"},
	}}
	for _, m := range []bool{false, true} {
		payload := AppendVLLMBatch(nil, located, VLLMEncoding{Map: m})
		d := NewVLLMDecoder(VLLMConfig{Worker: 1, BlockSize: 16})
		checkNoAllocs(t, "vllm locality", func(b *Batch) {
			if err := d.Decode(b, 0, payload); err != nil || b.Rejected != 0 || b.Events[1].Tier != TierExternal {
				t.Fatal(err, b.Err, eventsString(b.Events))
			}
		})
	}
	// A stream of rejected events builds its error once.
	bad := &VLLMBatch{Events: []VLLMEvent{{Kind: KindStored, BlockHashes: []EngineHash{1}, Tokens: make([]uint32, 32), BlockSize: 32}}}
	badPayload := AppendVLLMBatch(nil, bad, VLLMEncoding{})
	d := NewVLLMDecoder(VLLMConfig{Worker: 1, BlockSize: 16})
	var b Batch
	_ = d.Decode(&b, 0, badPayload)
	if got := testing.AllocsPerRun(50, func() { _ = d.Decode(&b, 0, badPayload) }); got != 0 || b.SizeMismatches < 50 {
		t.Errorf("rejections: %.1f allocs per decode (%d mismatches), want 0", got, b.SizeMismatches)
	}

	msgs := dynamoMessages(false)
	checkNoAllocs(t, "dynamo", func(b *Batch) {
		for _, m := range msgs {
			if _, err := DecodeDynamo(b, m); err != nil {
				t.Fatal(err)
			}
		}
	})
	jsonMsgs := dynamoMessages(true)
	checkNoAllocs(t, "dynamo json", func(b *Batch) {
		for _, m := range jsonMsgs {
			if err := DecodeDynamoJSON(b, m); err != nil {
				t.Fatal(err)
			}
		}
	})
	native := AppendNative(nil, realisticEvents(1))
	for _, mode := range []blockMode{blocksView, blocksCopy, blocksLoop} {
		for _, shift := range []int{0, 4} {
			msg := alignedCopy(native, shift)
			checkNoAllocs(t, "native", func(b *Batch) {
				if err := decodeNative(b, msg, mode); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}
