package wire

import (
	"errors"
	"strings"
	"testing"

	"github.com/tinylib/msgp/msgp"
)

// vLLM 0.26 adds locality ("LOCAL" or "REMOTE", where a copy lives relative
// to the publishing engine; absent: unspecified) to BlockStored and
// BlockRemoved, after every field before it, and its native offload to a file
// system or object store publishes medium "STORAGE" (FS and OBJ in 0.26).
// vLLM writes the events as msgspec maps (tag=True, omit_defaults); the
// payloads here are built key by key as msgspec writes them.

// storedMap writes one BlockStored map event as vLLM 0.26 does: the fields
// that are None are omitted.
func storedMap(p []byte, hash uint64, tokens []uint32, bs int, medium, locality string) []byte {
	n := uint32(5)
	if locality != "" {
		n++
	}
	p = msgp.AppendMapHeader(p, n)
	p = msgp.AppendString(p, "type")
	p = msgp.AppendString(p, "BlockStored")
	p = msgp.AppendString(p, "block_hashes")
	p = msgp.AppendArrayHeader(p, 1)
	p = msgp.AppendUint64(p, hash)
	p = msgp.AppendString(p, "token_ids")
	p = msgp.AppendArrayHeader(p, uint32(len(tokens)))
	for _, tok := range tokens {
		p = msgp.AppendUint32(p, tok)
	}
	p = msgp.AppendString(p, "block_size")
	p = msgp.AppendInt(p, bs)
	p = msgp.AppendString(p, "medium")
	p = msgp.AppendString(p, medium)
	if locality != "" {
		p = msgp.AppendString(p, "locality")
		p = msgp.AppendString(p, locality)
	}
	return p
}

func removedMap(p []byte, hash uint64, medium, locality string) []byte {
	p = msgp.AppendMapHeader(p, 4)
	p = msgp.AppendString(p, "type")
	p = msgp.AppendString(p, "BlockRemoved")
	p = msgp.AppendString(p, "block_hashes")
	p = msgp.AppendArrayHeader(p, 1)
	p = msgp.AppendUint64(p, hash)
	p = msgp.AppendString(p, "medium")
	p = msgp.AppendString(p, medium)
	p = msgp.AppendString(p, "locality")
	return msgp.AppendString(p, locality)
}

func mapBatch(events int, body []byte) []byte {
	p := msgp.AppendMapHeader(nil, 2)
	p = msgp.AppendString(p, "ts")
	p = msgp.AppendFloat64(p, 1)
	p = msgp.AppendString(p, "events")
	p = msgp.AppendArrayHeader(p, uint32(events))
	return append(p, body...)
}

func TestVLLMLocalityAndStorage(t *testing.T) {
	const bs = 4
	toks := tokensFrom(7, bs)
	local := refHash(toks, nil, Seed)
	cases := []struct {
		medium, locality string
		tokens           []uint32
		tier             Tier
		byEngine         bool
	}{
		// A decode worker publishes the blocks it pulled as its own GPU
		// blocks: the device tier, hashed from the tokens like any other.
		{"GPU", "REMOTE", toks, TierDevice, false},
		{"GPU", "LOCAL", toks, TierDevice, false},
		{"GPU", "", toks, TierDevice, false},
		// Native offload to storage: a rich event and a hash-only one.
		{"STORAGE", "LOCAL", toks, TierDisk, false},
		{"STORAGE", "", []uint32{}, TierDisk, true},
		{"STORAGE", "REMOTE", toks, TierExternal, false},
		{"STORAGE", "REMOTE", []uint32{}, TierExternal, true},
		{"FS", "local", []uint32{}, TierDisk, true},
		{"OBJ", "LOCAL", []uint32{}, TierExternal, true},
		// A shared CPU pool is not the worker's host memory.
		{"CPU", "REMOTE", []uint32{}, TierExternal, true},
		{"CPU", "LOCAL", []uint32{}, TierHost, true},
		{"CPU", "RACK", []uint32{}, TierExternal, true}, // a future value: not local
	}
	for _, c := range cases {
		d := NewVLLMDecoder(VLLMConfig{Worker: 1, BlockSize: bs})
		b := decodeOne(t, d, 0, mapBatch(1, storedMap(nil, 0xabc, c.tokens, bs, c.medium, c.locality)))
		if len(b.Events) != 1 {
			t.Fatalf("%s/%s: %s", c.medium, c.locality, eventsString(b.Events))
		}
		e := b.Events[0]
		if e.Kind != KindStored || e.Tier != c.tier || e.ByEngine != c.byEngine || len(e.Blocks) != 1 || e.Blocks[0].Engine != 0xabc {
			t.Errorf("%s/%s: got %s, want tier %s byEngine %v", c.medium, c.locality, eventString(&e), c.tier, c.byEngine)
		}
		if !c.byEngine && e.Blocks[0].Local != local {
			t.Errorf("%s/%s: local hash %x, want %x (indexed like any other block)", c.medium, c.locality, e.Blocks[0].Local, local)
		}
	}

	// A removal names the same tier as the store it undoes.
	d := NewVLLMDecoder(VLLMConfig{Worker: 1, BlockSize: bs})
	body := removedMap(nil, 0xabc, "STORAGE", "REMOTE")
	body = removedMap(body, 0xabd, "STORAGE", "LOCAL")
	body = removedMap(body, 0xabe, "GPU", "REMOTE")
	b := decodeOne(t, d, 0, mapBatch(3, body))
	if len(b.Events) != 3 || b.Events[0].Tier != TierExternal || b.Events[1].Tier != TierDisk || b.Events[2].Tier != TierDevice {
		t.Fatalf("removals: %s", eventsString(b.Events))
	}

	// A locality that is not a string rejects its event, naming the field.
	bad := msgp.AppendMapHeader(nil, 3)
	bad = msgp.AppendString(bad, "type")
	bad = msgp.AppendString(bad, "BlockRemoved")
	bad = msgp.AppendString(bad, "block_hashes")
	bad = msgp.AppendArrayHeader(bad, 1)
	bad = msgp.AppendUint64(bad, 1)
	bad = msgp.AppendString(bad, "locality")
	bad = msgp.AppendInt(bad, 2)
	var rb Batch
	if err := NewVLLMDecoder(VLLMConfig{Worker: 1, BlockSize: bs}).Decode(&rb, 0, mapBatch(1, bad)); err != nil {
		t.Fatal(err)
	}
	if rb.Rejected != 1 || len(rb.Events) != 0 || rb.Err == nil || !errors.Is(rb.Err, ErrMalformed) || !strings.Contains(rb.Err.Error(), "locality") {
		t.Fatalf("locality 2: rejected %d, events %d, err %v", rb.Rejected, len(rb.Events), rb.Err)
	}
}

// The array form (older vLLM's array_like structs, SGLang): locality follows
// kv_cache_spec_sliding_window in BlockStored and group_idx in BlockRemoved.
// AppendVLLMBatch writes it there; the decoder reads it there, in both forms,
// and an event without it decodes exactly as before.
func TestVLLMLocalityArrayForm(t *testing.T) {
	const bs = 4
	toks := tokensFrom(1, 2*bs)
	for _, m := range []bool{false, true} {
		batch := &VLLMBatch{Events: []VLLMEvent{
			{Kind: KindStored, BlockHashes: []EngineHash{1, 2}, Tokens: toks, BlockSize: bs, Medium: "STORAGE", Locality: "REMOTE"},
			{Kind: KindStored, BlockHashes: []EngineHash{1, 2}, Tokens: toks, BlockSize: bs, Medium: "STORAGE"},
			{Kind: KindRemoved, BlockHashes: []EngineHash{2}, Medium: "STORAGE", Locality: "REMOTE"},
			{Kind: KindRemoved, BlockHashes: []EngineHash{2}, Medium: "CPU", Locality: "LOCAL"},
		}}
		p := AppendVLLMBatch(nil, batch, VLLMEncoding{Map: m})
		if !m {
			// ["BlockStored", hashes, parent, tokens, block_size, lora_id,
			//  medium, lora_name, extra_keys, group_idx, kind, window, locality]
			_, o, _ := msgp.ReadArrayHeaderBytes(p)
			_, o, _ = msgp.ReadFloat64Bytes(o)
			_, o, _ = msgp.ReadArrayHeaderBytes(o)
			sz, _, err := msgp.ReadArrayHeaderBytes(o)
			if err != nil || sz != 13 {
				t.Fatalf("array-form BlockStored has %d elements, want 13 (%v)", sz, err)
			}
		}
		b := decodeOne(t, NewVLLMDecoder(VLLMConfig{Worker: 1, BlockSize: bs}), 0, p)
		want := []Tier{TierExternal, TierDisk, TierExternal, TierHost}
		if len(b.Events) != len(want) {
			t.Fatalf("map %v: %s", m, eventsString(b.Events))
		}
		for i, tier := range want {
			if b.Events[i].Tier != tier {
				t.Errorf("map %v: event %d tier %s, want %s", m, i, b.Events[i].Tier, tier)
			}
		}
		if b.Events[0].Blocks[1].Local != b.Events[1].Blocks[1].Local || b.Events[0].Blocks[1].Local == 0 {
			t.Errorf("map %v: a remote copy hashes differently: %s", m, eventsString(b.Events))
		}
	}
}
