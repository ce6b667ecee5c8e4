package wire

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// Test fixtures shared by the round-trip, fuzz, allocation and benchmark
// tests.

// realisticVLLM is the benchmark batch: 8 Stored events of 64 blocks of 16
// tokens each (a prefix chain, with parents) and 1 Removed of 512 blocks.
func realisticVLLM(seed uint64) *VLLMBatch {
	const bs, stored, perEvent, removed = 16, 8, 64, 512
	rng := rand.New(rand.NewPCG(seed, 1))
	batch := &VLLMBatch{TS: 1767225600.5, HasDPRank: true, DPRank: 0}
	var prev EngineHash
	for e := range stored {
		ev := VLLMEvent{Kind: KindStored, BlockSize: bs, Medium: "GPU", HasParent: e > 0, Parent: prev}
		for range perEvent {
			h := EngineHash(rng.Uint64())
			ev.BlockHashes = append(ev.BlockHashes, h)
			prev = h
		}
		for range perEvent * bs {
			ev.Tokens = append(ev.Tokens, uint32(rng.IntN(152064))) // a Qwen-sized vocabulary
		}
		batch.Events = append(batch.Events, ev)
	}
	rm := VLLMEvent{Kind: KindRemoved, Medium: "GPU"}
	for range removed {
		rm.BlockHashes = append(rm.BlockHashes, EngineHash(rng.Uint64()))
	}
	batch.Events = append(batch.Events, rm)
	return batch
}

// expectVLLM returns the events a decoder configured for blockSize must
// produce for batch, with ids from firstID on.
func expectVLLM(batch *VLLMBatch, worker uint64, blockSize int, firstID uint64) []Event {
	key := WorkerKey{Worker: worker}
	if batch.HasDPRank {
		key.Dp = uint32(batch.DPRank)
	}
	var out []Event
	for i := range batch.Events {
		e := &batch.Events[i]
		ev := Event{Worker: key, ID: firstID + uint64(i), Kind: e.Kind, Tier: tierOf(optBytes(e.Medium))}
		switch e.Kind {
		case KindStored:
			ev.HasParent, ev.Parent = e.HasParent, e.Parent
			local := LocalHashes(nil, e.Tokens, blockSize, LoRASeed(e.LoRA))
			for j, h := range e.BlockHashes {
				ev.Blocks = append(ev.Blocks, Block{Engine: h, Local: local[j]})
			}
			ev.LoRA = optBytes(e.LoRA)
		case KindRemoved:
			for _, h := range e.BlockHashes {
				ev.Blocks = append(ev.Blocks, Block{Engine: h})
			}
		case KindCleared:
			ev.Tier = TierDevice
		}
		out = append(out, ev)
	}
	return out
}

func optBytes(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}

// realisticEvents is the same workload as normalized events, for the formats
// that carry local hashes (Dynamo) or everything (native).
func realisticEvents(seed uint64) []Event {
	return expectVLLM(realisticVLLM(seed), 7, 16, 1)
}

// eventString renders an event for comparison and failure messages; nil and
// empty slices render alike.
func eventString(e *Event) string {
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "{w=%d dp=%d id=%d %s tier=%s", e.Worker.Worker, e.Worker.Dp, e.ID, e.Kind, e.Tier)
	if e.HasParent {
		fmt.Fprintf(&buf, " parent=%d", e.Parent)
	}
	if len(e.LoRA) > 0 {
		fmt.Fprintf(&buf, " lora=%q", e.LoRA)
	}
	fmt.Fprintf(&buf, " blocks=%v}", e.Blocks)
	return buf.String()
}

func checkEvents(t testing.TB, got, want []Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d\ngot:  %v", len(got), len(want), eventsString(got))
	}
	for i := range got {
		if g, w := eventString(&got[i]), eventString(&want[i]); g != w {
			t.Fatalf("event %d:\ngot  %s\nwant %s", i, g, w)
		}
	}
}

func eventsString(evs []Event) string {
	var buf bytes.Buffer
	for i := range evs {
		buf.WriteString(eventString(&evs[i]))
		buf.WriteByte('\n')
	}
	return buf.String()
}

// sampleEvents covers every kind, tier, parent and LoRA case, with hashes
// across the whole uint64 range, on two dp ranks.
func sampleEvents() []Event {
	return []Event{
		{Worker: WorkerKey{Worker: 1<<63 + 5, Dp: 0}, ID: 1, Kind: KindStored, Tier: TierDevice,
			Blocks: []Block{{Engine: 1, Local: 2}, {Engine: 1<<64 - 1, Local: 1 << 63}}},
		{Worker: WorkerKey{Worker: 1<<63 + 5, Dp: 3}, ID: 2, Kind: KindStored, Tier: TierHost, HasParent: true, Parent: 1<<64 - 1,
			Blocks: []Block{{Engine: 0x0123456789abcdef, Local: 42}}, LoRA: []byte("my-adapter")},
		{Worker: WorkerKey{Worker: 9, Dp: 1}, ID: 3, Kind: KindRemoved, Tier: TierDisk,
			Blocks: []Block{{Engine: 7}, {Engine: 1 << 40}, {Engine: 1<<64 - 2}}},
		{Worker: WorkerKey{Worker: 9, Dp: 1}, ID: 4, Kind: KindRemoved, Tier: TierExternal, Blocks: []Block{{Engine: 0}}},
		{Worker: WorkerKey{Worker: 9, Dp: 1}, ID: 1 << 50, Kind: KindCleared, Tier: TierDevice},
		{Worker: WorkerKey{Worker: 0, Dp: 1<<32 - 1}, ID: 0, Kind: KindStored, Tier: TierDevice, HasParent: true, Parent: 0},
	}
}

// fidelityVLLM covers the engine-fidelity shapes in one batch of block size
// 16: a hybrid model's sliding-window group beside its main group, multimodal
// extra_keys (with the LoRA name among them), SGLang's EAGLE bigrams on
// CPU_PINNED, a salted event and a child inheriting its salt.
func fidelityVLLM() *VLLMBatch {
	toks := tokensFrom(3, 65)
	return &VLLMBatch{Events: []VLLMEvent{
		{Kind: KindStored, BlockHashes: []EngineHash{1, 2, 3, 4}, Tokens: toks[:64], BlockSize: 16, HasGroup: true, Group: 1, SpecKind: "sliding_window"},
		{Kind: KindStored, BlockHashes: []EngineHash{1, 2, 3, 4}, Tokens: toks[:64], BlockSize: 16, HasGroup: true, Group: 0,
			ExtraKeys: [][]string{nil, {"ad", imageA}, {imageA, imageB}, nil}, LoRA: "ad"},
		{Kind: KindRemoved, BlockHashes: []EngineHash{4}, HasGroup: true, Group: 1},
		{Kind: KindStored, BlockHashes: []EngineHash{5, 6, 7, 8}, Tokens: toks, BlockSize: 16, Bigram: true, Medium: "CPU_PINNED"},
		{Kind: KindStored, BlockHashes: []EngineHash{9}, Tokens: toks[:16], BlockSize: 16, Salt: "tenant"},
		{Kind: KindStored, BlockHashes: []EngineHash{10}, HasParent: true, Parent: 9, Tokens: toks[16:32], BlockSize: 16},
	}}
}
