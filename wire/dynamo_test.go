package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/tinylib/msgp/msgp"
)

// dynamoSample is sampleEvents without LoRA names (Dynamo folds the adapter
// into tokens_hash and does not send it).
func dynamoSample() []Event {
	evs := sampleEvents()
	for i := range evs {
		evs[i].LoRA = nil
	}
	return evs
}

func TestDynamoRoundTrip(t *testing.T) {
	want := dynamoSample()
	var b Batch
	var msgs [][]byte
	for i := range want {
		h := DynamoHeader{PublisherID: 1<<63 + uint64(i), Sequence: uint64(i), PublishedAt: 1767225600000, Topic: []byte("namespace.dynamo.kv_events")}
		msg := AppendDynamo(nil, &h, &want[i])
		msgs = append(msgs, msg)
		got, err := DecodeDynamo(&b, msg)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if got.PublisherID != h.PublisherID || got.Sequence != h.Sequence || got.PublishedAt != h.PublishedAt || !bytes.Equal(got.Topic, h.Topic) {
			t.Fatalf("header %+v, want %+v", got, h)
		}
	}
	checkEvents(t, b.Events, want)

	// The bare RouterEvent and the JSON form decode to the same events.
	var bare, js Batch
	for i := range want {
		if err := DecodeDynamoEvent(&bare, AppendDynamoEvent(nil, &want[i])); err != nil {
			t.Fatal(err)
		}
		if err := DecodeDynamoJSON(&js, AppendDynamoJSON(nil, &want[i])); err != nil {
			t.Fatalf("event %d: %v\n%s", i, err, AppendDynamoJSON(nil, &want[i]))
		}
	}
	checkEvents(t, bare.Events, want)
	checkEvents(t, js.Events, want)
}

// Variants a Rust publisher may produce: keys in another order, unknown keys,
// "cleared" as a map, blocks as arrays, signed hashes, tier spellings, no
// storage_tier and no dp_rank.
func TestDynamoVariants(t *testing.T) {
	str := msgp.AppendString
	var p []byte
	p = msgp.AppendMapHeader(p, 3)
	p = str(p, "event")
	p = msgp.AppendMapHeader(p, 3)
	p = str(p, "data")
	p = msgp.AppendMapHeader(p, 1)
	p = str(p, "stored")
	p = msgp.AppendMapHeader(p, 3)
	p = str(p, "blocks")
	p = msgp.AppendArrayHeader(p, 2)
	p = msgp.AppendArrayHeader(p, 3)
	p = msgp.AppendInt64(p, -1)
	p = msgp.AppendUint64(p, 2)
	p = msgp.AppendNil(p)
	p = msgp.AppendMapHeader(p, 3)
	p = str(p, "mm_extra_info")
	p = msgp.AppendMapHeader(p, 1)
	p = str(p, "mm_objects")
	p = msgp.AppendArrayHeader(p, 0)
	p = str(p, "tokens_hash")
	p = msgp.AppendUint64(p, 4)
	p = str(p, "block_hash")
	p = msgp.AppendUint64(p, 3)
	p = str(p, "start_position")
	p = msgp.AppendUint64(p, 32)
	p = str(p, "parent_hash")
	p = msgp.AppendInt64(p, -5)
	p = str(p, "event_id")
	p = msgp.AppendUint64(p, 9)
	p = str(p, "something_new")
	p = msgp.AppendBool(p, true)
	p = str(p, "worker_id")
	p = msgp.AppendInt64(p, 12)
	p = str(p, "storage_tier")
	p = str(p, "Host_Pinned")

	var b Batch
	if err := DecodeDynamoEvent(&b, p); err != nil {
		t.Fatal(err)
	}
	checkEvents(t, b.Events, []Event{{Worker: WorkerKey{Worker: 12}, ID: 9, Kind: KindStored, Tier: TierHost,
		HasParent: true, Parent: 1<<64 - 5, Blocks: []Block{{Engine: 1<<64 - 1, Local: 2}, {Engine: 3, Local: 4}}}})

	b.Reset()
	p = p[:0]
	p = msgp.AppendMapHeader(p, 2)
	p = str(p, "worker_id")
	p = msgp.AppendUint64(p, 1)
	p = str(p, "event")
	p = msgp.AppendMapHeader(p, 2)
	p = str(p, "event_id")
	p = msgp.AppendUint64(p, 2)
	p = str(p, "data")
	p = msgp.AppendMapHeader(p, 1)
	p = str(p, "cleared")
	p = msgp.AppendNil(p)
	if err := DecodeDynamoEvent(&b, p); err != nil {
		t.Fatal(err)
	}
	checkEvents(t, b.Events, []Event{{Worker: WorkerKey{Worker: 1}, ID: 2, Kind: KindCleared, Tier: TierDevice}})

	for tier, want := range map[string]Tier{"device": TierDevice, "DEVICE": TierDevice, "Host": TierHost, "disk": TierDisk, "G4": TierExternal, "external": TierExternal} {
		if got := tierOf([]byte(tier)); got != want {
			t.Errorf("tier %q = %s, want %s", tier, got, want)
		}
	}
	// An unknown data variant is ignored, not an error.
	b.Reset()
	js := `{"worker_id":1,"event":{"event_id":3,"data":{"resized":{"to":5}}}}`
	if err := DecodeDynamoJSON(&b, []byte(js)); err != nil || len(b.Events) != 0 || b.Ignored != 1 {
		t.Fatalf("unknown variant: err %v, %d events, %d ignored", err, len(b.Events), b.Ignored)
	}
}

func TestDynamoJSONVariants(t *testing.T) {
	js := ` {
	  "event": {"dp_rank": 2, "data": {"removed": {"block_hashes": [1, -1, 18446744073709551615], "x": [{}]}},
	            "event_id": 0},
	  "storage_tier": null, "unknown": {"a": [1.5e-3, true, false, null, "s\"\\\u00e9"]},
	  "worker_id": 4
	} `
	var b Batch
	if err := DecodeDynamoJSON(&b, []byte(js)); err != nil {
		t.Fatal(err)
	}
	checkEvents(t, b.Events, []Event{{Worker: WorkerKey{Worker: 4, Dp: 2}, Kind: KindRemoved, Tier: TierDevice,
		Blocks: []Block{{Engine: 1}, {Engine: 1<<64 - 1}, {Engine: 1<<64 - 1}}}})
}

func TestDynamoMalformed(t *testing.T) {
	good := dynamoSample()[1]
	msg := AppendDynamo(nil, &DynamoHeader{Topic: []byte("t")}, &good)
	event := AppendDynamoEvent(nil, &good)
	js := AppendDynamoJSON(nil, &good)
	var b Batch
	if _, err := DecodeDynamo(&b, msg); err != nil {
		t.Fatal(err)
	}
	before := eventsString(b.Events)
	check := func(name string, err error) {
		t.Helper()
		if err == nil || !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err %v, want ErrMalformed", name, err)
		}
		if eventsString(b.Events) != before {
			t.Fatalf("%s changed the batch", name)
		}
	}
	for i := range len(msg) {
		_, err := DecodeDynamo(&b, msg[:i])
		check("envelope prefix", err)
	}
	for i := range len(event) {
		check("event prefix", DecodeDynamoEvent(&b, event[:i]))
	}
	for i := range len(js) {
		check("json prefix", DecodeDynamoJSON(&b, js[:i]))
	}
	_, err := DecodeDynamo(&b, append(append([]byte{}, msg...), 0xc0))
	check("envelope with a trailing byte", err)
	for _, bad := range []string{
		`{"worker_id":1}`,
		`{"worker_id":1,"event":{"event_id":1}}`,
		`{"worker_id":1,"event":{"event_id":1,"data":{}}}`,
		`{"worker_id":1,"event":{"event_id":1,"data":{"stored":{"blocks":[{"block_hash":1}]}}}}`,
		`{"worker_id":1,"event":{"event_id":1,"data":{"stored":{"blocks":[]},"removed":{"block_hashes":[]}}}}`,
		`{"worker_id":1,"event":{"event_id":1.5,"data":"cleared"}}`,
		`{"worker_id":1,"event":{"event_id":1,"dp_rank":4294967296,"data":"cleared"}}`,
		`{"worker_id":18446744073709551616,"event":{"event_id":1,"data":"cleared"}}`,
		`{"worker_id":-9223372036854775809,"event":{"event_id":1,"data":"cleared"}}`,
		`{"worker_id":01,"event":{"event_id":1,"data":"cleared"}}`,
		`{"worker_id":1,,"event":{"event_id":1,"data":"cleared"}}`,
		`{"worker_id":1,"event":{"event_id":1,"data":"cleared"}} x`,
		`{"x":"\q","worker_id":1,"event":{"event_id":1,"data":"cleared"}}`,
		`{"x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `,"worker_id":1,"event":{"event_id":1,"data":"cleared"}}`,
	} {
		check(bad, DecodeDynamoJSON(&b, []byte(bad)))
	}
}

// TestDecodeBlockFastPath: readBlockMapFast takes exactly the block maps
// it can read in full (fixmap of 2, block_hash then tokens_hash, fixint or
// 64-bit values) and gives the values readIntBits gives; every other shape
// is left to the general path, which decodes it the same.
func TestDecodeBlockFastPath(t *testing.T) {
	enc := func(keys []string, vals []func([]byte) []byte) []byte {
		b := msgp.AppendMapHeader(nil, uint32(len(keys)))
		for i, k := range keys {
			b = msgp.AppendString(b, k)
			b = vals[i](b)
		}
		return append(b, 0xc0) // a trailing nil: rest must point at it
	}
	u := func(v uint64) func([]byte) []byte { return func(b []byte) []byte { return msgp.AppendUint64(b, v) } }
	i64 := func(v int64) func([]byte) []byte { return func(b []byte) []byte { return msgp.AppendInt64(b, v) } }
	full := func(c byte, v uint64) func([]byte) []byte {
		return func(b []byte) []byte { return binary.BigEndian.AppendUint64(append(b, c), v) }
	}
	bh, th := "block_hash", "tokens_hash"
	for _, tc := range []struct {
		name string
		msg  []byte
		fast bool
		e, l uint64
	}{
		{"u64", enc([]string{bh, th}, []func([]byte) []byte{u(1 << 63), u(1<<62 + 5)}), true, 1 << 63, 1<<62 + 5},
		{"fixint", enc([]string{bh, th}, []func([]byte) []byte{u(7), u(0)}), true, 7, 0},
		{"u64 then fixint", enc([]string{bh, th}, []func([]byte) []byte{u(1 << 63), u(5)}), true, 1 << 63, 5},
		{"fixint then u64", enc([]string{bh, th}, []func([]byte) []byte{u(5), u(1 << 63)}), true, 5, 1 << 63},
		{"i64 full width", enc([]string{bh, th}, []func([]byte) []byte{full(0xd3, 1<<63|9), full(0xcf, 3)}), true, 1<<63 | 9, 3},
		{"negative", enc([]string{bh, th}, []func([]byte) []byte{i64(-2), u(1 << 40)}), false, 1<<64 - 2, 1 << 40},
		{"u32", enc([]string{bh, th}, []func([]byte) []byte{u(1 << 20), u(1 << 63)}), false, 1 << 20, 1 << 63},
		{"reversed keys", enc([]string{th, bh}, []func([]byte) []byte{u(1 << 63), u(1<<63 + 1)}), false, 1<<63 + 1, 1 << 63},
		{"extra key", enc([]string{bh, th, "mm_extra_info"}, []func([]byte) []byte{u(1 << 63), u(1<<63 + 1), u(1)}), false, 1 << 63, 1<<63 + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, l, rest, ok := readBlockMapFast(tc.msg)
			if ok != tc.fast {
				t.Fatalf("fast path taken %v, want %v", ok, tc.fast)
			}
			if ok && (e != tc.e || l != tc.l || len(rest) != 1 || rest[0] != 0xc0) {
				t.Errorf("fast path read %x %x rest %x, want %x %x and the trailing nil", e, l, rest, tc.e, tc.l)
			}
			if !ok && len(rest) != len(tc.msg) {
				t.Errorf("a refused fast path consumed %d bytes", len(tc.msg)-len(rest))
			}
			// The general path through the Stored decoder gives the same.
			var b Batch
			var ev Event
			list := append(msgp.AppendArrayHeader(nil, 1), tc.msg[:len(tc.msg)-1]...)
			if _, err := decodeStoredBlocks(&b, list, &ev); err != nil {
				t.Fatal(err)
			}
			if len(ev.Blocks) != 1 || uint64(ev.Blocks[0].Engine) != tc.e || uint64(ev.Blocks[0].Local) != tc.l {
				t.Errorf("decoded %+v, want engine %x local %x", ev.Blocks, tc.e, tc.l)
			}
		})
	}
}

// TestDecodeRemovedEncodings: a Removed event's hashes in every width the
// publisher's encoder picks (fixint, uint32, uint64) decode alike, the
// 64-bit ones through decodeRemoved's inline path.
func TestDecodeRemovedEncodings(t *testing.T) {
	ev := Event{Worker: WorkerKey{Worker: 3}, ID: 9, Kind: KindRemoved, Blocks: []Block{
		{Engine: 5}, {Engine: 1 << 63}, {Engine: 1 << 20}, {Engine: 1<<64 - 1}, {Engine: 0},
	}}
	var b Batch
	if err := DecodeDynamoEvent(&b, AppendDynamoEvent(nil, &ev)); err != nil {
		t.Fatal(err)
	}
	checkEvents(t, b.Events, []Event{ev})
}
