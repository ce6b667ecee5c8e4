package plane

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/kvroute/kvroute/wire"
)

func TestSyncRoundTrip(t *testing.T) {
	var w SyncWriter
	w.Book(7, wire.WorkerKey{Worker: 1 << 40, Dp: 3}, 1000, 12, 808, []wire.SeqHash{1, 1 << 63, 42})
	w.Op(SyncPrefillDone, 7)
	w.Book(8, wire.WorkerKey{Worker: 2}, 5, 0, 5, nil)
	w.Op(SyncFree, 7)
	h := SyncHeader{Router: "r-a", Instance: 0xdeadbeef, Seq: 9}
	b := w.AppendMessage(nil, h)
	var m SyncMessage
	if err := DecodeSync(b, &m); err != nil {
		t.Fatal(err)
	}
	want := SyncMessage{SyncHeader: h, Items: []SyncItem{
		{Kind: SyncBook, ID: 7, Worker: wire.WorkerKey{Worker: 1 << 40, Dp: 3}, ISL: 1000, Overlap: 12, PrefillTokens: 808, Blocks: []wire.SeqHash{1, 1 << 63, 42}},
		{Kind: SyncPrefillDone, ID: 7},
		{Kind: SyncBook, ID: 8, Worker: wire.WorkerKey{Worker: 2}, ISL: 5, PrefillTokens: 5, Blocks: []wire.SeqHash{}},
		{Kind: SyncFree, ID: 7},
	}}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("decoded %+v\nwant    %+v", m, want)
	}
	if re := AppendSync(nil, &m); !bytes.Equal(re, b) {
		t.Fatalf("re-encoded differs:\n%x\n%x", re, b)
	}
	// A heartbeat of a leaving replica.
	w.Reset()
	b = w.AppendMessage(b[:0], SyncHeader{Router: "x", Seq: 1, Leaving: true})
	if err := DecodeSync(b, &m); err != nil || !m.Leaving || len(m.Items) != 0 || m.Router != "x" {
		t.Fatalf("heartbeat: %+v, %v", m, err)
	}
}

func TestSyncRejects(t *testing.T) {
	var w SyncWriter
	w.Book(1, wire.WorkerKey{Worker: 1}, 16, 0, 16, []wire.SeqHash{5})
	good := w.AppendMessage(nil, SyncHeader{Router: "a", Seq: 1})
	bad := map[string][]byte{
		"empty":       nil,
		"version":     append([]byte{9}, good[1:]...),
		"flags":       append([]byte{SyncVersion, 0x80}, good[2:]...),
		"truncated":   good[:len(good)-3],
		"trailing":    append(append([]byte{}, good...), 0),
		"long router": w.AppendMessage(nil, SyncHeader{Router: string(make([]byte, MaxSyncRouterLen+1))}),
		"kind":        append(appendSyncHeader(nil, SyncHeader{Router: "a"}, 1), 9, 1),
		"count":       append(appendSyncHeader(nil, SyncHeader{Router: "a"}, 1000), 2, 1),
	}
	for name, b := range bad {
		var m SyncMessage
		if err := DecodeSync(b, &m); !errors.Is(err, ErrBadSync) {
			t.Errorf("%s: err = %v, want ErrBadSync", name, err)
		}
	}
}

func TestSyncWriterNoAllocs(t *testing.T) {
	var w SyncWriter
	blocks := make([]wire.SeqHash, 64)
	w.Book(1, wire.WorkerKey{Worker: 1}, 1024, 3, 900, blocks)
	w.Reset()
	if n := testing.AllocsPerRun(100, func() {
		w.Book(1, wire.WorkerKey{Worker: 1}, 1024, 3, 900, blocks)
		w.Op(SyncFree, 1)
		w.Reset()
	}); n != 0 {
		t.Fatalf("%v allocs per book", n)
	}
}

func FuzzDecodeSync(f *testing.F) {
	var w SyncWriter
	w.Book(7, wire.WorkerKey{Worker: 3, Dp: 1}, 100, 2, 68, []wire.SeqHash{1, 2, 3})
	w.Op(SyncPrefillDone, 7)
	w.Op(SyncFree, 7)
	w.Session(11, wire.WorkerKey{Worker: 3}, 4)
	f.Add(w.AppendMessage(nil, SyncHeader{Router: "a", Instance: 1, Seq: 1}))
	f.Add(appendSyncHeader(nil, SyncHeader{Router: "b", Leaving: true}, 0))
	f.Add([]byte{SyncVersion, 0, 1, 'a', 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		var m SyncMessage
		if err := DecodeSync(b, &m); err != nil {
			return
		}
		blocks := 0
		for _, it := range m.Items {
			blocks += len(it.Blocks)
		}
		if blocks*8 > len(b) || len(m.Items)*2 > len(b) {
			t.Fatalf("decoded %d items, %d blocks from %d bytes", len(m.Items), blocks, len(b))
		}
		re := AppendSync(nil, &m)
		var m2 SyncMessage
		if err := DecodeSync(re, &m2); err != nil {
			t.Fatalf("re-encoded message does not decode: %v", err)
		}
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("round trip changed the message:\n%+v\n%+v", m, m2)
		}
	})
}
