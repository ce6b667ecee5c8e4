package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tinylib/msgp/msgp"
)

func tokensFrom(start, n int) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = uint32(start + i*977) // crosses the fixint/uint16/uint32 encodings
	}
	return t
}

// sampleVLLM covers every field: nil and set parent, LoRA, every medium,
// hashes across the uint64 range, Removed and Cleared.
func sampleVLLM(bs int) *VLLMBatch {
	return &VLLMBatch{TS: 12.5, Events: []VLLMEvent{
		{Kind: KindStored, BlockHashes: []EngineHash{1, 1<<64 - 1}, Tokens: tokensFrom(0, 2*bs), BlockSize: bs},
		{Kind: KindStored, BlockHashes: []EngineHash{1 << 63}, HasParent: true, Parent: 1<<64 - 1,
			Tokens: tokensFrom(70000, bs), BlockSize: bs, LoRAID: 3, LoRA: "my-adapter", Medium: "CPU"},
		{Kind: KindStored, BlockHashes: []EngineHash{5, 6, 7}, HasParent: true, Parent: 3,
			Tokens: tokensFrom(100, 3*bs), BlockSize: bs, Medium: "GPU"},
		{Kind: KindRemoved, BlockHashes: []EngineHash{5, 1<<64 - 1}, Medium: "DISK"},
		{Kind: KindRemoved, BlockHashes: []EngineHash{1 << 62}},
		{Kind: KindStored, BlockHashes: []EngineHash{9}, Tokens: tokensFrom(3, bs), BlockSize: bs, Medium: "lmcache"},
		{Kind: KindCleared},
	}}
}

func TestVLLMRoundTrip(t *testing.T) {
	const bs = 4
	for _, m := range []bool{false, true} {
		for _, h := range []HashEncoding{HashUint, HashInt, HashBytes} {
			for _, compact := range []bool{false, true} {
				for _, extras := range []bool{false, true} {
					for _, rank := range []int{-1, 0, 5} {
						enc := VLLMEncoding{Map: m, Hashes: h, Compact: compact, Extras: extras}
						t.Run(fmt.Sprintf("map=%v/hash=%d/compact=%v/extras=%v/rank=%d", m, h, compact, extras, rank), func(t *testing.T) {
							batch := sampleVLLM(bs)
							if rank >= 0 {
								batch.HasDPRank, batch.DPRank = true, rank
							}
							payload := AppendVLLMBatch(nil, batch, enc)
							frames := VLLMFrames([]byte("kv@0"), 41, payload)
							d := NewVLLMDecoder(VLLMConfig{Worker: 77, BlockSize: bs})
							var b Batch
							if err := d.DecodeFrames(&b, frames); err != nil {
								t.Fatal(err)
							}
							if b.Rejected != 0 || b.Ignored != 0 {
								t.Fatalf("rejected %d ignored %d: %v", b.Rejected, b.Ignored, b.Err)
							}
							checkEvents(t, b.Events, expectVLLM(batch, 77, bs, 1))
						})
					}
				}
			}
		}
	}
}

func TestVLLMEncodingShapes(t *testing.T) {
	e := VLLMEvent{Kind: KindStored, BlockHashes: []EngineHash{1}, Tokens: []uint32{1, 2}, BlockSize: 2}
	batch := &VLLMBatch{Events: []VLLMEvent{e, {Kind: KindRemoved, BlockHashes: []EngineHash{1}}}}
	full := AppendVLLMBatch(nil, batch, VLLMEncoding{})
	compact := AppendVLLMBatch(nil, batch, VLLMEncoding{Compact: true})
	// [ts, [stored(8), removed(3)], nil] vs [ts, [stored(5), removed(2)]]
	shape := func(p []byte) (top uint32, ev []uint32) {
		top, p, _ = msgp.ReadArrayHeaderBytes(p)
		p, _ = msgp.Skip(p)
		n, p, _ := msgp.ReadArrayHeaderBytes(p)
		for range n {
			sz, _, _ := msgp.ReadArrayHeaderBytes(p)
			ev = append(ev, sz)
			p, _ = msgp.Skip(p)
		}
		return top, ev
	}
	if top, ev := shape(full); top != 3 || fmt.Sprint(ev) != "[8 3]" {
		t.Errorf("full form: batch of %d, events %v; want 3, [8 3]", top, ev)
	}
	if top, ev := shape(compact); top != 2 || fmt.Sprint(ev) != "[5 2]" {
		t.Errorf("compact form: batch of %d, events %v; want 2, [5 2]", top, ev)
	}
}

// A map-form event with "type" last, fields in another order, unknown keys,
// and hashes as short and long byte strings and negative ints.
func TestVLLMMapOrderAndHashForms(t *testing.T) {
	tokens := []uint32{1, 2, 3, 4, 5, 6}
	var p []byte
	p = msgp.AppendMapHeader(p, 3)
	p = msgp.AppendString(p, "data_parallel_rank")
	p = msgp.AppendInt(p, 2)
	p = msgp.AppendString(p, "events")
	p = msgp.AppendArrayHeader(p, 1)
	p = msgp.AppendMapHeader(p, 7)
	p = msgp.AppendString(p, "token_ids")
	p = msgp.AppendArrayHeader(p, uint32(len(tokens)))
	for _, tok := range tokens {
		p = msgp.AppendUint32(p, tok)
	}
	p = msgp.AppendString(p, "lora_name")
	p = msgp.AppendString(p, "ad")
	p = msgp.AppendString(p, "something_new")
	p = msgp.AppendMapHeader(p, 1)
	p = msgp.AppendString(p, "nested")
	p = msgp.AppendArrayHeader(p, 2)
	p = msgp.AppendNil(p)
	p = msgp.AppendFloat64(p, 1)
	p = msgp.AppendString(p, "block_hashes")
	p = msgp.AppendArrayHeader(p, 3)
	p = msgp.AppendBytes(p, []byte{0x01, 0x02, 0x03})                                        // short: zero-extended on the left
	p = msgp.AppendBytes(p, []byte{9, 9, 9, 9, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0, 0, 1, 2}) // long: the last 8
	p = msgp.AppendInt64(p, -2)
	p = msgp.AppendString(p, "parent_block_hash")
	p = msgp.AppendBytes(p, nil)
	p = msgp.AppendString(p, "medium")
	p = msgp.AppendString(p, "cpu")
	p = msgp.AppendString(p, "type")
	p = msgp.AppendString(p, "BlockStored")
	p = msgp.AppendString(p, "ts")
	p = msgp.AppendFloat32(p, 3)

	d := NewVLLMDecoder(VLLMConfig{Worker: 1, BlockSize: 2})
	var b Batch
	if err := d.Decode(&b, 0, p); err != nil {
		t.Fatal(err)
	}
	seed := LoRASeed("ad")
	want := []Event{{
		Worker: WorkerKey{Worker: 1, Dp: 2}, ID: 1, Kind: KindStored, Tier: TierHost, HasParent: true, Parent: 0,
		LoRA: []byte("ad"),
		Blocks: []Block{
			{Engine: 0x010203, Local: BlockHashOf(tokens[0:2], seed)},
			{Local: BlockHashOf(tokens[2:4], seed)}, // Engine: the last 8 bytes, set below
			{Engine: 1<<64 - 2, Local: BlockHashOf(tokens[4:6], seed)},
		},
	}}
	want[0].Blocks[1].Engine = EngineHash(binary.BigEndian.Uint64([]byte{0xef, 0, 0, 0, 0, 0, 1, 2}))
	checkEvents(t, b.Events, want)
}

func TestVLLMEventIDs(t *testing.T) {
	d := NewVLLMDecoder(VLLMConfig{Worker: 3, BlockSize: 2})
	stored := VLLMEvent{Kind: KindStored, BlockHashes: []EngineHash{1}, Tokens: []uint32{1, 2}, BlockSize: 2}
	bad := VLLMEvent{Kind: KindStored, BlockHashes: []EngineHash{1}, Tokens: []uint32{1, 2, 3, 4}, BlockSize: 4}
	var b Batch
	decode := func(seq uint64, rank int, evs ...VLLMEvent) []uint64 {
		t.Helper()
		b.Reset()
		p := AppendVLLMBatch(nil, &VLLMBatch{HasDPRank: true, DPRank: rank, Events: evs}, VLLMEncoding{})
		if err := d.Decode(&b, seq, p); err != nil {
			t.Fatal(err)
		}
		var ids []uint64
		for _, e := range b.Events {
			if e.Worker != (WorkerKey{Worker: 3, Dp: uint32(rank)}) {
				t.Fatalf("worker key %+v", e.Worker)
			}
			ids = append(ids, e.ID)
		}
		return ids
	}
	unknown := func(seq uint64, rank int) []uint64 { // a batch with an event kind from the future
		t.Helper()
		b.Reset()
		var p []byte
		p = msgp.AppendArrayHeader(p, 3)
		p = msgp.AppendFloat64(p, 0)
		p = msgp.AppendArrayHeader(p, 2)
		p = msgp.AppendArrayHeader(p, 2)
		p = msgp.AppendString(p, "KVCacheSpecChanged")
		p = msgp.AppendInt(p, 1)
		p = appendVLLMEvent(p, &stored, VLLMEncoding{})
		p = msgp.AppendInt(p, rank)
		if err := d.Decode(&b, seq, p); err != nil {
			t.Fatal(err)
		}
		if b.Ignored != 1 {
			t.Fatalf("ignored %d, want 1", b.Ignored)
		}
		return []uint64{b.Events[0].ID}
	}
	steps := []struct {
		name string
		got  []uint64
		want string
	}{
		{"first batch starts at 1", decode(10, 0, stored, stored), "[1 2]"},
		{"contiguous", decode(11, 0, stored), "[3]"},
		{"other rank has its own counter", decode(500, 1, stored, stored), "[1 2]"},
		{"a lost batch leaves a gap of one", decode(13, 0, stored), "[5]"},
		{"rejected events take their id", decode(14, 0, stored, bad, stored), "[6 8]"},
		{"an empty batch moves the sequence on", decode(15, 0), "[]"},
		{"and keeps contiguity", decode(16, 0, stored), "[9]"},
		{"unknown kinds take no id", unknown(17, 0), "[10]"},
		{"engine restart (seq back to 0) is a gap", decode(0, 0, stored), "[12]"},
		{"rank 1 still contiguous", decode(501, 1, stored), "[3]"},
	}
	for _, s := range steps {
		if fmt.Sprint(s.got) != s.want {
			t.Errorf("%s: ids %v, want %s", s.name, s.got, s.want)
		}
	}
}

func TestVLLMBlockSizeMismatch(t *testing.T) {
	good := VLLMEvent{Kind: KindStored, BlockHashes: []EngineHash{1}, Tokens: tokensFrom(0, 16), BlockSize: 16}
	for _, tc := range []struct {
		name    string
		ev      VLLMEvent
		enc     VLLMEncoding
		numbers []string
	}{
		{"block_size field", VLLMEvent{Kind: KindStored, BlockHashes: []EngineHash{1, 2}, Tokens: tokensFrom(0, 64), BlockSize: 32},
			VLLMEncoding{}, []string{"32", "16"}},
		{"block_size field alone", VLLMEvent{Kind: KindStored, BlockHashes: []EngineHash{1, 2}, Tokens: tokensFrom(0, 32), BlockSize: 64},
			VLLMEncoding{}, []string{"block_size 64", "16"}},
		{"token count", VLLMEvent{Kind: KindStored, BlockHashes: []EngineHash{1, 2}, Tokens: tokensFrom(0, 48), BlockSize: 16},
			VLLMEncoding{Map: true}, []string{"48", "2 blocks", "block size 24", "16"}},
		{"partial block", VLLMEvent{Kind: KindStored, BlockHashes: []EngineHash{1, 2}, Tokens: tokensFrom(0, 33), BlockSize: 16},
			VLLMEncoding{}, []string{"33", "16"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := NewVLLMDecoder(VLLMConfig{Worker: 1, BlockSize: 16})
			p := AppendVLLMBatch(nil, &VLLMBatch{Events: []VLLMEvent{good, tc.ev, tc.ev, good}}, tc.enc)
			var b Batch
			if err := d.Decode(&b, 1, p); err != nil {
				t.Fatal(err)
			}
			if len(b.Events) != 2 || b.Events[0].ID != 1 || b.Events[1].ID != 4 {
				t.Fatalf("the valid events must survive with their ids:\n%s", eventsString(b.Events))
			}
			if b.Rejected != 2 || b.SizeMismatches != 2 {
				t.Fatalf("rejected %d, size mismatches %d; want 2, 2", b.Rejected, b.SizeMismatches)
			}
			if !errors.Is(b.Err, ErrBlockSizeMismatch) {
				t.Fatalf("err %v is not ErrBlockSizeMismatch", b.Err)
			}
			for _, n := range tc.numbers {
				if !strings.Contains(b.Err.Error(), n) {
					t.Errorf("error %q does not name %q", b.Err, n)
				}
			}
		})
	}
}

// Invalid events are dropped one by one; the rest of the batch is kept.
func TestVLLMBadEventsKeepOthers(t *testing.T) {
	good := VLLMEvent{Kind: KindStored, BlockHashes: []EngineHash{1}, Tokens: []uint32{1, 2}, BlockSize: 2}
	var p []byte
	p = msgp.AppendArrayHeader(p, 3)
	p = msgp.AppendFloat64(p, 0)
	arr := func(tag string, n uint32, rest func(p []byte) []byte) []byte {
		p := msgp.AppendArrayHeader(nil, n)
		if tag != "" {
			p = msgp.AppendString(p, tag)
		}
		return rest(p)
	}
	list := func(p []byte, vs ...func(p []byte) []byte) []byte {
		p = msgp.AppendArrayHeader(p, uint32(len(vs)))
		for _, v := range vs {
			p = v(p)
		}
		return p
	}
	one := func(p []byte) []byte { return msgp.AppendUint64(p, 1) }
	bad := [][]byte{
		arr("BlockStored", 5, func(p []byte) []byte { // a token id as a string
			p = list(p, one)
			p = msgp.AppendNil(p)
			p = list(p, func(p []byte) []byte { return msgp.AppendString(p, "x") })
			return msgp.AppendInt(p, 2)
		}),
		arr("BlockRemoved", 2, func(p []byte) []byte { // a hash as a float
			return list(p, func(p []byte) []byte { return msgp.AppendFloat64(p, 1.5) })
		}),
		arr("BlockStored", 4, func(p []byte) []byte { // a negative token id
			p = list(p, one)
			p = msgp.AppendNil(p)
			return list(p, func(p []byte) []byte { return msgp.AppendInt(p, -1) })
		}),
		arr("", 0, func(p []byte) []byte { return p }),                            // an empty array
		msgp.AppendInt(nil, 4),                                                    // not an event at all
		msgp.AppendNil(msgp.AppendString(msgp.AppendMapHeader(nil, 1), "medium")), // a map without type
		arr("BlockStored", 2, func(p []byte) []byte { return list(p) }),           // no token_ids
		arr("BlockRemoved", 1, func(p []byte) []byte { return p }),                // no block_hashes
	}
	p = msgp.AppendArrayHeader(p, uint32(2*len(bad)+1))
	p = appendVLLMEvent(p, &good, VLLMEncoding{})
	for _, e := range bad {
		p = append(p, e...)
		p = appendVLLMEvent(p, &good, VLLMEncoding{})
	}
	p = msgp.AppendNil(p)
	d := NewVLLMDecoder(VLLMConfig{Worker: 1, BlockSize: 2})
	var b Batch
	if err := d.Decode(&b, 0, p); err != nil {
		t.Fatal(err)
	}
	if len(b.Events) != len(bad)+1 || b.Rejected != len(bad) || b.SizeMismatches != 0 {
		t.Fatalf("%d events, %d rejected (%v); want %d, %d", len(b.Events), b.Rejected, b.Err, len(bad)+1, len(bad))
	}
	for i, e := range b.Events {
		if e.ID != uint64(2*i+1) || len(e.Blocks) != 1 || e.Blocks[0].Engine != 1 {
			t.Fatalf("event %d: %s", i, eventString(&e))
		}
	}
	if !errors.Is(b.Err, ErrMalformed) {
		t.Fatalf("first error %v", b.Err)
	}
}

// A message-level error leaves the batch as it was, and is an error for
// every truncation of a valid payload.
func TestVLLMMalformedMessage(t *testing.T) {
	d := NewVLLMDecoder(VLLMConfig{Worker: 1, BlockSize: 4})
	var b Batch
	first := AppendVLLMBatch(nil, sampleVLLM(4), VLLMEncoding{})
	if err := d.Decode(&b, 0, first); err != nil {
		t.Fatal(err)
	}
	before := eventsString(b.Events)
	blocks := len(b.blocks)
	for _, p := range [][]byte{
		nil,
		{0xc0},
		msgp.AppendArrayHeader(nil, 1),
		append(append([]byte{}, first...), 0), // trailing byte
		first[:len(first)-1],                  // truncated
		msgp.AppendInt(msgp.AppendArrayHeader(msgp.AppendFloat64(msgp.AppendArrayHeader(nil, 3), 0), 0), -1), // negative rank
		msgp.AppendInt(msgp.AppendArrayHeader(msgp.AppendFloat64(msgp.AppendArrayHeader(nil, 3), 0), 0), MaxDPRank+1),
		msgp.AppendArrayHeader(msgp.AppendFloat64(msgp.AppendArrayHeader(nil, 2), 0), 1<<31), // a lying count
		msgp.AppendFloat64(msgp.AppendString(msgp.AppendMapHeader(nil, 1), "ts"), 0),         // map without events
	} {
		err := d.Decode(&b, 1, p)
		if err == nil || !errors.Is(err, ErrMalformed) {
			t.Errorf("payload %x: err %v, want ErrMalformed", p, err)
		}
		if eventsString(b.Events) != before || len(b.blocks) != blocks || b.Rejected != 0 {
			t.Fatalf("payload %x changed the batch", p)
		}
	}
	for _, frames := range [][][]byte{nil, {{}, {1, 2}, first}, {{}, make([]byte, 8)}} {
		if err := d.DecodeFrames(&b, frames); err == nil {
			t.Errorf("frames %v: no error", frames)
		}
	}
	topic, seq, payload, err := ParseVLLMFrames(VLLMFrames([]byte("t"), 1<<56+3, []byte{0x90}))
	if err != nil || string(topic) != "t" || seq != 1<<56+3 || !bytes.Equal(payload, []byte{0x90}) {
		t.Fatalf("frames round trip: %q %d %x %v", topic, seq, payload, err)
	}
}

func TestVLLMBatchReuse(t *testing.T) {
	d := NewVLLMDecoder(VLLMConfig{Worker: 5, BlockSize: 16})
	batch := realisticVLLM(1)
	p := AppendVLLMBatch(nil, batch, VLLMEncoding{})
	var b Batch
	for i := range 3 {
		b.Reset()
		if err := d.Decode(&b, uint64(i), p); err != nil {
			t.Fatal(err)
		}
		checkEvents(t, b.Events, expectVLLM(batch, 5, 16, uint64(1+i*len(batch.Events))))
	}
	// Two messages in one batch: the second's blocks do not disturb the first's.
	b.Reset()
	for i := range 2 {
		if err := d.Decode(&b, uint64(3+i), p); err != nil {
			t.Fatal(err)
		}
	}
	want := append(expectVLLM(batch, 5, 16, 28), expectVLLM(batch, 5, 16, 37)...)
	checkEvents(t, b.Events, want)
	if b.Blocks() != 2*(8*64+512) {
		t.Fatalf("Blocks() = %d", b.Blocks())
	}
}

func TestNewVLLMDecoderPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("block size 0 accepted")
		}
	}()
	NewVLLMDecoder(VLLMConfig{})
}
