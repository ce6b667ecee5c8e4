package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"testing"

	"github.com/tinylib/msgp/msgp"
)

// Decoder benchmarks on the realistic batch (realisticVLLM: 8 Stored × 64
// blocks of 16 tokens + 1 Removed × 512 blocks = 1024 blocks), each next to a
// naive baseline that decodes into generic values first.

const realisticBlocks = 8*64 + 512

func reportBlocks(b *testing.B, perOp int) {
	b.ReportMetric(float64(perOp*b.N)/b.Elapsed().Seconds(), "blocks/s")
}

// dynamoMessages is the realistic workload as Dynamo publishes it: one
// RouterEvent per message.
func dynamoMessages(asJSON bool) [][]byte {
	var msgs [][]byte
	for i, e := range realisticEvents(1) {
		if asJSON {
			msgs = append(msgs, AppendDynamoJSON(nil, &e))
			continue
		}
		h := DynamoHeader{PublisherID: 99, Sequence: uint64(i), PublishedAt: 1767225600000, Topic: []byte("ns.dynamo.kv_events")}
		msgs = append(msgs, AppendDynamo(nil, &h, &e))
	}
	return msgs
}

func totalLen(msgs [][]byte) int64 {
	n := 0
	for _, m := range msgs {
		n += len(m)
	}
	return int64(n)
}

func BenchmarkDecodeVLLM(b *testing.B) {
	batch := realisticVLLM(1)
	located := realisticVLLM(1) // vLLM 0.26's locality on every event
	for i := range located.Events {
		located.Events[i].Locality = "REMOTE"
	}
	for _, tc := range []struct {
		name    string
		enc     VLLMEncoding
		located bool
	}{
		{"array", VLLMEncoding{}, false},
		{"map", VLLMEncoding{Map: true}, false},
		{"map-locality", VLLMEncoding{Map: true}, true},
		{"array-bytes-hashes", VLLMEncoding{Hashes: HashBytes}, false},
	} {
		payload := AppendVLLMBatch(nil, batch, tc.enc)
		if tc.located {
			payload = AppendVLLMBatch(nil, located, tc.enc)
		}
		b.Run(tc.name, func(b *testing.B) {
			d := NewVLLMDecoder(VLLMConfig{Worker: 7, BlockSize: 16})
			var out Batch
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			seq := uint64(0)
			for b.Loop() {
				out.Reset()
				if err := d.Decode(&out, seq, payload); err != nil || len(out.Events) != 9 {
					b.Fatal(err, out.Err)
				}
				seq++
			}
			reportBlocks(b, realisticBlocks)
		})
	}
	payload := AppendVLLMBatch(nil, batch, VLLMEncoding{})
	b.Run("array/naive", func(b *testing.B) {
		b.SetBytes(int64(len(payload)))
		b.ReportAllocs()
		for b.Loop() {
			if evs, err := naiveDecodeVLLM(payload, 7, 16); err != nil || len(evs) != 9 {
				b.Fatal(err)
			}
		}
		reportBlocks(b, realisticBlocks)
	})
}

func BenchmarkDecodeDynamo(b *testing.B) {
	msgs := dynamoMessages(false)
	b.Run("msgpack", func(b *testing.B) {
		var out Batch
		b.SetBytes(totalLen(msgs))
		b.ReportAllocs()
		for b.Loop() {
			out.Reset()
			for _, m := range msgs {
				if _, err := DecodeDynamo(&out, m); err != nil {
					b.Fatal(err)
				}
			}
		}
		reportBlocks(b, realisticBlocks)
	})
	b.Run("msgpack/naive", func(b *testing.B) {
		b.SetBytes(totalLen(msgs))
		b.ReportAllocs()
		for b.Loop() {
			for _, m := range msgs {
				if _, err := naiveDecodeDynamo(m); err != nil {
					b.Fatal(err)
				}
			}
		}
		reportBlocks(b, realisticBlocks)
	})
}

func BenchmarkDecodeDynamoJSON(b *testing.B) {
	msgs := dynamoMessages(true)
	b.Run("json", func(b *testing.B) {
		var out Batch
		b.SetBytes(totalLen(msgs))
		b.ReportAllocs()
		for b.Loop() {
			out.Reset()
			for _, m := range msgs {
				if err := DecodeDynamoJSON(&out, m); err != nil {
					b.Fatal(err)
				}
			}
		}
		reportBlocks(b, realisticBlocks)
	})
	b.Run("json/naive", func(b *testing.B) {
		b.SetBytes(totalLen(msgs))
		b.ReportAllocs()
		for b.Loop() {
			for _, m := range msgs {
				if _, err := naiveDecodeDynamoJSON(m); err != nil {
					b.Fatal(err)
				}
			}
		}
		reportBlocks(b, realisticBlocks)
	})
}

func BenchmarkDecodeNative(b *testing.B) {
	msg := alignedCopy(AppendNative(nil, realisticEvents(1)), 0)
	for _, tc := range []struct {
		name string
		mode blockMode
	}{{"view", blocksView}, {"memmove", blocksCopy}, {"loop", blocksLoop}} {
		b.Run(tc.name, func(b *testing.B) {
			var out Batch
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			for b.Loop() {
				out.Reset()
				if err := decodeNative(&out, msg, tc.mode); err != nil {
					b.Fatal(err)
				}
			}
			reportBlocks(b, realisticBlocks)
		})
	}
	b.Run("naive", func(b *testing.B) {
		b.SetBytes(int64(len(msg)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := naiveDecodeNative(msg); err != nil {
				b.Fatal(err)
			}
		}
		reportBlocks(b, realisticBlocks)
	})
}

// The naive baselines must decode to the same events, or the ratio means
// nothing.
func TestNaiveDecodersAgree(t *testing.T) {
	batch := realisticVLLM(1)
	evs, err := naiveDecodeVLLM(AppendVLLMBatch(nil, batch, VLLMEncoding{}), 7, 16)
	if err != nil {
		t.Fatal(err)
	}
	checkEvents(t, evs, expectVLLM(batch, 7, 16, 1))
	want := realisticEvents(1)
	var got []Event
	for _, m := range dynamoMessages(false) {
		e, err := naiveDecodeDynamo(m)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e)
	}
	checkEvents(t, got, want)
	got = got[:0]
	for _, m := range dynamoMessages(true) {
		e, err := naiveDecodeDynamoJSON(m)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e)
	}
	checkEvents(t, got, want)
	if got, err = naiveDecodeNative(AppendNative(nil, want)); err != nil {
		t.Fatal(err)
	}
	checkEvents(t, got, want)
}

var errNaive = errors.New("naive: unexpected shape")

func toU64(v any) (uint64, error) {
	switch x := v.(type) {
	case uint64:
		return x, nil
	case int64:
		return uint64(x), nil
	case []byte:
		var h uint64
		if len(x) > 8 {
			x = x[len(x)-8:]
		}
		for _, c := range x {
			h = h<<8 | uint64(c)
		}
		return h, nil
	}
	return 0, errNaive
}

// naiveDecodeVLLM decodes the array form with msgp.ReadIntfBytes into generic
// values, then converts.
func naiveDecodeVLLM(payload []byte, worker uint64, bs int) ([]Event, error) {
	v, _, err := msgp.ReadIntfBytes(payload)
	if err != nil {
		return nil, err
	}
	top, ok := v.([]any)
	if !ok || len(top) < 2 {
		return nil, errNaive
	}
	key := WorkerKey{Worker: worker}
	if len(top) > 2 && top[2] != nil {
		r, err := toU64(top[2])
		if err != nil {
			return nil, err
		}
		key.Dp = uint32(r)
	}
	raw, ok := top[1].([]any)
	if !ok {
		return nil, errNaive
	}
	var out []Event
	for i, re := range raw {
		f, ok := re.([]any)
		if !ok || len(f) == 0 {
			return nil, errNaive
		}
		ev := Event{Worker: key, ID: uint64(i + 1)}
		tier := func(v any) Tier {
			if s, ok := v.(string); ok {
				return tierOf([]byte(s))
			}
			return TierDevice
		}
		hashes := func(v any) ([]Block, error) {
			l, ok := v.([]any)
			if !ok {
				return nil, errNaive
			}
			var blocks []Block
			for _, h := range l {
				e, err := toU64(h)
				if err != nil {
					return nil, err
				}
				blocks = append(blocks, Block{Engine: EngineHash(e)})
			}
			return blocks, nil
		}
		switch f[0] {
		case "BlockStored":
			ev.Kind = KindStored
			if ev.Blocks, err = hashes(f[1]); err != nil {
				return nil, err
			}
			if f[2] != nil {
				p, err := toU64(f[2])
				if err != nil {
					return nil, err
				}
				ev.HasParent, ev.Parent = true, EngineHash(p)
			}
			var tokens []uint32
			for _, t := range f[3].([]any) {
				u, err := toU64(t)
				if err != nil {
					return nil, err
				}
				tokens = append(tokens, uint32(u))
			}
			var lora string
			if len(f) > 7 && f[7] != nil {
				lora = f[7].(string)
				ev.LoRA = []byte(lora)
			}
			if len(f) > 6 {
				ev.Tier = tier(f[6])
			}
			for j, l := range naiveLocalHashes(tokens, bs, LoRASeed(lora)) {
				ev.Blocks[j].Local = l
			}
		case "BlockRemoved":
			ev.Kind = KindRemoved
			if ev.Blocks, err = hashes(f[1]); err != nil {
				return nil, err
			}
			if len(f) > 2 {
				ev.Tier = tier(f[2])
			}
		default:
			ev.Kind = KindCleared
		}
		out = append(out, ev)
	}
	return out, nil
}

// naiveRouterEvent converts a generic RouterEvent (from msgpack or JSON).
func naiveRouterEvent(m map[string]any, num func(any) (uint64, error)) (Event, error) {
	var ev Event
	var err error
	if ev.Worker.Worker, err = num(m["worker_id"]); err != nil {
		return ev, err
	}
	if s, ok := m["storage_tier"].(string); ok {
		ev.Tier = tierOf([]byte(s))
	}
	inner, ok := m["event"].(map[string]any)
	if !ok {
		return ev, errNaive
	}
	if ev.ID, err = num(inner["event_id"]); err != nil {
		return ev, err
	}
	dp, err := num(inner["dp_rank"])
	if err != nil {
		return ev, err
	}
	ev.Worker.Dp = uint32(dp)
	switch data := inner["data"].(type) {
	case string:
		ev.Kind = KindCleared
	case map[string]any:
		if st, ok := data["stored"].(map[string]any); ok {
			ev.Kind = KindStored
			if st["parent_hash"] != nil {
				p, err := num(st["parent_hash"])
				if err != nil {
					return ev, err
				}
				ev.HasParent, ev.Parent = true, EngineHash(p)
			}
			blocks, _ := st["blocks"].([]any)
			for _, bl := range blocks {
				bm, _ := bl.(map[string]any)
				e, err1 := num(bm["block_hash"])
				l, err2 := num(bm["tokens_hash"])
				if err1 != nil || err2 != nil {
					return ev, errNaive
				}
				ev.Blocks = append(ev.Blocks, Block{Engine: EngineHash(e), Local: BlockHash(l)})
			}
		} else if rm, ok := data["removed"].(map[string]any); ok {
			ev.Kind = KindRemoved
			hs, _ := rm["block_hashes"].([]any)
			for _, h := range hs {
				e, err := num(h)
				if err != nil {
					return ev, err
				}
				ev.Blocks = append(ev.Blocks, Block{Engine: EngineHash(e)})
			}
		} else {
			return ev, errNaive
		}
	default:
		return ev, errNaive
	}
	return ev, nil
}

func naiveDecodeDynamo(msg []byte) (Event, error) {
	v, _, err := msgp.ReadIntfBytes(msg)
	if err != nil {
		return Event{}, err
	}
	env, ok := v.(map[string]any)
	if !ok {
		return Event{}, errNaive
	}
	payload, ok := env["payload"].([]byte)
	if !ok {
		return Event{}, errNaive
	}
	if v, _, err = msgp.ReadIntfBytes(payload); err != nil {
		return Event{}, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return Event{}, errNaive
	}
	return naiveRouterEvent(m, toU64)
}

// naiveDecodeDynamoJSON uses encoding/json into interface{} (with UseNumber:
// hashes do not fit a float64).
func naiveDecodeDynamoJSON(msg []byte) (Event, error) {
	d := json.NewDecoder(bytes.NewReader(msg))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return Event{}, err
	}
	return naiveRouterEvent(m, func(v any) (uint64, error) {
		n, ok := v.(json.Number)
		if !ok {
			return 0, errNaive
		}
		return strconv.ParseUint(string(n), 10, 64)
	})
}

// naiveDecodeNative reads the native format with encoding/binary.Read.
func naiveDecodeNative(msg []byte) ([]Event, error) {
	r := bytes.NewReader(msg)
	var hdr struct {
		Magic [4]byte
		Count uint32
	}
	if err := binary.Read(r, binary.LittleEndian, &hdr); err != nil {
		return nil, err
	}
	var out []Event
	for range hdr.Count {
		var h struct {
			Kind, Tier, Flags, Reserved uint8
			Dp                          uint32
			Worker, ID, Parent          uint64
			LoRALen, Blocks             uint32
		}
		if err := binary.Read(r, binary.LittleEndian, &h); err != nil {
			return nil, err
		}
		ev := Event{Worker: WorkerKey{Worker: h.Worker, Dp: h.Dp}, ID: h.ID, Kind: Kind(h.Kind), Tier: Tier(h.Tier),
			HasParent: h.Flags == 1, Parent: EngineHash(h.Parent)}
		if h.LoRALen > 0 {
			lora := make([]byte, pad8(int(h.LoRALen)))
			if _, err := io.ReadFull(r, lora); err != nil {
				return nil, err
			}
			ev.LoRA = lora[:h.LoRALen]
		}
		if h.Blocks > 0 {
			ev.Blocks = make([]Block, h.Blocks)
			if err := binary.Read(r, binary.LittleEndian, ev.Blocks); err != nil {
				return nil, err
			}
		}
		out = append(out, ev)
	}
	if r.Len() != 0 {
		return nil, fmt.Errorf("naive: %d trailing bytes", r.Len())
	}
	return out, nil
}

// BenchmarkDecodeVLLMFidelity is the realistic batch as a newer vLLM
// publishes it for a hybrid multimodal model (map form): every Stored event
// twice, in the full-attention group and in a sliding-window group (skipped),
// every 8th block holding an image (extra_keys), the first event salted and
// its children inheriting the salt. Compare with DecodeVLLM/map: the blocks
// indexed are the same 1024.
func BenchmarkDecodeVLLMFidelity(b *testing.B) {
	base := realisticVLLM(1)
	batch := &VLLMBatch{TS: base.TS, HasDPRank: true}
	for i, e := range base.Events {
		if e.Kind != KindStored {
			e.HasGroup = true
			batch.Events = append(batch.Events, e)
			continue
		}
		e.HasGroup, e.SpecKind = true, "full_attention"
		e.ExtraKeys = make([][]string, len(e.BlockHashes))
		for j := 0; j < len(e.ExtraKeys); j += 8 {
			e.ExtraKeys[j] = []string{imageA}
		}
		if i == 0 {
			e.Salt = "tenant"
		}
		slide := e
		slide.Group, slide.SpecKind, slide.ExtraKeys, slide.Salt = 1, "sliding_window", nil, ""
		batch.Events = append(batch.Events, e, slide)
	}
	payload := AppendVLLMBatch(nil, batch, VLLMEncoding{Map: true})
	d := NewVLLMDecoder(VLLMConfig{Worker: 7, BlockSize: 16})
	var out Batch
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	seq := uint64(0)
	for b.Loop() {
		out.Reset()
		if err := d.Decode(&out, seq, payload); err != nil || len(out.Events) != 9 || out.OtherGroups != 8 {
			b.Fatal(err, out.Err, len(out.Events), out.OtherGroups)
		}
		seq++
	}
	reportBlocks(b, realisticBlocks)
}
