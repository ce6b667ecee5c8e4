package plane

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/kvroute/kvroute/wire"
)

// A session binding survives the round trip, beside bookings, and a
// truncated one is refused.
func TestSyncSessionRoundTrip(t *testing.T) {
	var w SyncWriter
	w.Book(7, wire.WorkerKey{Worker: 1}, 64, 0, 64, []wire.SeqHash{5})
	w.Session(1<<63|9, wire.WorkerKey{Worker: 1 << 40, Dp: 2}, 31)
	h := SyncHeader{Router: "r", Instance: 3, Seq: 1}
	b := w.AppendMessage(nil, h)
	var m SyncMessage
	if err := DecodeSync(b, &m); err != nil {
		t.Fatal(err)
	}
	want := SyncItem{Kind: SyncSession, ID: 1<<63 | 9, Worker: wire.WorkerKey{Worker: 1 << 40, Dp: 2}, ISL: 31}
	if len(m.Items) != 2 || !reflect.DeepEqual(m.Items[1], want) {
		t.Fatalf("decoded %+v, want the second item %+v", m.Items, want)
	}
	if re := AppendSync(nil, &m); !bytes.Equal(re, b) {
		t.Fatalf("re-encoded differs:\n%x\n%x", re, b)
	}
	if err := DecodeSync(b[:len(b)-1], &m); err == nil {
		t.Fatal("a truncated session item decoded")
	}
}
