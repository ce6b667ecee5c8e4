package plane

import (
	"strings"
	"testing"
	"time"
)

func TestSubjects(t *testing.T) {
	s, err := SubjectsFor("dynamo", "backend")
	if err != nil {
		t.Fatal(err)
	}
	if s.KVEvents != "namespace.dynamo.component.backend.kv-events" || s.Heartbeat != "namespace.dynamo.component.backend.workers.heartbeat" {
		t.Fatalf("%+v", s)
	}
	if _, err := SubjectsFor("a.b", "c"); err == nil || !strings.Contains(err.Error(), "namespace") {
		t.Fatalf("dotted namespace accepted: %v", err)
	}
}

func reg(id uint64) Registration {
	return Registration{WorkerID: id, URL: "http://127.0.0.1:9100", DpRanks: []uint32{0}, BlockSize: 16, KVBlocks: 100, EventTransport: TransportNative, HeartbeatMillis: 100}
}

func TestRegistrationRoundTripAndValidate(t *testing.T) {
	r := reg(3)
	var got Registration
	if err := Decode(Encode(r), &got); err != nil || !sameRegistration(r, got) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := r
	bad.BlockSize = 0
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "block_size") {
		t.Fatalf("got %v", err)
	}
	bad = r
	bad.EventTransport = "zmq"
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "zmq_endpoint") {
		t.Fatalf("got %v", err)
	}
	if err := Decode([]byte("{"), &got); err == nil {
		t.Fatal("bad JSON accepted")
	}
}

func TestRegistryLifecycle(t *testing.T) {
	r := NewRegistry()
	t0 := time.Unix(1000, 0)
	ch := r.Heartbeat(reg(1), t0, nil)
	ch = r.Heartbeat(reg(2), t0, ch)
	if len(ch) != 2 || ch[0].Kind != Joined || ch[1].Kind != Joined {
		t.Fatalf("%v", ch)
	}
	if ch = r.Heartbeat(reg(1), t0.Add(100*time.Millisecond), nil); len(ch) != 0 {
		t.Fatalf("unchanged heartbeat reported %v", ch)
	}
	changed := reg(1)
	changed.DpRanks = []uint32{0, 1}
	if ch = r.Heartbeat(changed, t0.Add(200*time.Millisecond), nil); len(ch) != 1 || ch[0].Kind != Updated {
		t.Fatalf("%v", ch)
	}
	// Worker 2 last beat at t0: gone after 3 intervals (300ms); worker 1 beat at t0+200ms.
	if ch = r.Tick(t0.Add(300*time.Millisecond), nil); len(ch) != 0 {
		t.Fatalf("expired too early: %v", ch)
	}
	ch = r.Tick(t0.Add(301*time.Millisecond), nil)
	if len(ch) != 1 || ch[0].Kind != Expired || ch[0].Reg.WorkerID != 2 {
		t.Fatalf("%v", ch)
	}
	if ch = r.Leave(1, nil); len(ch) != 1 || ch[0].Kind != Left || r.Len() != 0 {
		t.Fatalf("%v len %d", ch, r.Len())
	}
	if ch = r.Leave(1, nil); len(ch) != 0 {
		t.Fatal("leaving twice reported twice")
	}
}
