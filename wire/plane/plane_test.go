package plane

import (
	"encoding/json"
	"errors"
	"maps"
	"net"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/wire"
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
	ch, _ := r.Heartbeat(reg(1), t0, nil)
	ch, _ = r.Heartbeat(reg(2), t0, ch)
	if len(ch) != 2 || ch[0].Kind != Joined || ch[1].Kind != Joined {
		t.Fatalf("%v", ch)
	}
	if ch, _ = r.Heartbeat(reg(1), t0.Add(100*time.Millisecond), nil); len(ch) != 0 {
		t.Fatalf("unchanged heartbeat reported %v", ch)
	}
	changed := reg(1)
	changed.DpRanks = []uint32{0, 1}
	if ch, _ = r.Heartbeat(changed, t0.Add(200*time.Millisecond), nil); len(ch) != 1 || ch[0].Kind != Updated {
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
	if ch, _ = r.Leave(reg(1), nil); len(ch) != 1 || ch[0].Kind != Left || r.Len() != 0 {
		t.Fatalf("%v len %d", ch, r.Len())
	}
	if ch, _ = r.Leave(reg(1), nil); len(ch) != 0 {
		t.Fatal("leaving twice reported twice")
	}
}

// TestRegistrationValidateRefusesHostileRegistrations: registrations that an
// unchecked control plane let join and draw traffic are refused, each error
// naming its field.
func TestRegistrationValidateRefusesHostileRegistrations(t *testing.T) {
	cases := []struct {
		name, want string
		edit       func(r *Registration)
	}{
		{"worker 0", "worker_id", func(r *Registration) { r.WorkerID = 0 }},
		{"ftp url", "http", func(r *Registration) { r.URL = "ftp://127.0.0.1:21" }},
		{"empty url", "http", func(r *Registration) { r.URL = "" }},
		{"no host", "no host", func(r *Registration) { r.URL = "http://:8080" }},
		{"credentials", "credentials", func(r *Registration) { r.URL = "http://u:p@h:1" }},
		{"bogus transport", "event_transport", func(r *Registration) { r.EventTransport = "bogus" }},
		{"zmq without endpoint", "zmq_endpoint", func(r *Registration) { r.EventTransport = TransportZMQ }},
		{"zmq bad endpoint", "tcp://", func(r *Registration) { r.EventTransport, r.ZMQEndpoint = TransportZMQ, "ipc:///x" }},
		{"no ranks", "dp_ranks", func(r *Registration) { r.DpRanks = nil }},
		{"100k ranks", "--max-dp-ranks", func(r *Registration) {
			r.DpRanks = make([]uint32, 100_000)
			for i := range r.DpRanks {
				r.DpRanks[i] = uint32(i)
			}
		}},
		{"duplicate rank", "twice", func(r *Registration) { r.DpRanks = []uint32{1, 1} }},
		{"rank too large", "dp rank", func(r *Registration) { r.DpRanks = []uint32{1 << 20} }},
		{"block size 0", "block_size", func(r *Registration) { r.BlockSize = 0 }},
		{"negative capacity", "kv_blocks", func(r *Registration) { r.KVBlocks = -1 }},
		{"eternal heartbeat", "heartbeat_ms", func(r *Registration) { r.HeartbeatMillis = 1 << 40 }},
		{"huge model", "model", func(r *Registration) { r.Model = strings.Repeat("m", 300) }},
	}
	for _, c := range cases {
		r := reg(7)
		c.edit(&r)
		err := r.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error naming %q", c.name, err, c.want)
		}
	}
	ok := reg(7)
	ok.EventTransport, ok.ZMQEndpoint, ok.ZMQReplay = TransportZMQ, "tcp://127.0.0.1:5557", "tcp://127.0.0.1:5558"
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := ok.ValidateRanks(0); err == nil {
		t.Fatal("1 rank accepted with a bound of 0")
	}
}

// TestRegistryIdentity: another URL cannot take a live id over, a new
// instance at the same URL is a restart, a withdrawal must match, and
// MaxWorkers bounds the live set.
// TestRegistryRenew: after its owner could not hear heartbeats for longer
// than the expiry (and did not Tick meanwhile), Renew gives every worker
// ExpiryFactor intervals from then (at least the floor given), not from
// its last heartbeat; a worker that stays silent after that expires as
// before.
func TestRegistryRenew(t *testing.T) {
	r := NewRegistry()
	t0 := time.Unix(1000, 0)
	r.Heartbeat(reg(1), t0, nil)
	slow := reg(2)
	slow.URL, slow.HeartbeatMillis = "http://127.0.0.1:9101", 1000
	r.Heartbeat(slow, t0, nil)
	back := t0.Add(30 * time.Second) // every deadline long past
	r.Renew(back, 0)
	if ch := r.Tick(back.Add(300*time.Millisecond), nil); len(ch) != 0 {
		t.Fatalf("expired within the fresh grace: %v", ch)
	}
	ch := r.Tick(back.Add(301*time.Millisecond), nil)
	if len(ch) != 1 || ch[0].Kind != Expired || ch[0].Reg.WorkerID != 1 {
		t.Fatalf("worker 1 (100 ms heartbeats) silent for 3 intervals after the renewal: got %v, want it expired", ch)
	}
	if ch = r.Tick(back.Add(3*time.Second), nil); len(ch) != 0 {
		t.Fatalf("worker 2 (1 s heartbeats) expired at 3 intervals: %v", ch)
	}
	if ch = r.Tick(back.Add(3*time.Second+time.Millisecond), nil); len(ch) != 1 || ch[0].Reg.WorkerID != 2 {
		t.Fatalf("worker 2 silent for 3 of its intervals after the renewal: got %v, want it expired", ch)
	}
	r.Heartbeat(reg(1), back, nil)
	later := back.Add(time.Minute)
	r.Renew(later, 5*time.Second) // longer than worker 1's 300 ms
	if ch = r.Tick(later.Add(5*time.Second), nil); len(ch) != 0 {
		t.Fatalf("expired within the floor: %v", ch)
	}
	if ch = r.Tick(later.Add(5*time.Second+time.Millisecond), nil); len(ch) != 1 || ch[0].Reg.WorkerID != 1 {
		t.Fatalf("worker 1 silent past the floor: got %v, want it expired", ch)
	}
}

func TestRegistryIdentity(t *testing.T) {
	r := NewRegistry()
	r.MaxWorkers = 2
	t0 := time.Unix(1000, 0)
	a := reg(1)
	a.Instance = "run-a"
	if ch, err := r.Heartbeat(a, t0, nil); err != nil || len(ch) != 1 || ch[0].Kind != Joined {
		t.Fatalf("%v %v", ch, err)
	}
	thief := a
	thief.URL, thief.Instance = "http://10.0.0.66:80", "run-x"
	if ch, err := r.Heartbeat(thief, t0, nil); !errors.Is(err, ErrConflict) || len(ch) != 0 {
		t.Fatalf("hijack: %v %v", ch, err)
	}
	if got, _ := r.Get(1); got.URL != a.URL {
		t.Fatalf("hijacked: %+v", got)
	}
	// A spoofed withdrawal: wrong instance, wrong URL, no instance.
	for _, l := range []Registration{{WorkerID: 1, URL: a.URL, Instance: "run-x"}, {WorkerID: 1, URL: thief.URL, Instance: "run-a"}, {WorkerID: 1, URL: a.URL}} {
		if ch, err := r.Leave(l, nil); !errors.Is(err, ErrLeaveMismatch) || len(ch) != 0 || r.Len() != 1 {
			t.Fatalf("spoofed leave %+v: %v %v", l, ch, err)
		}
	}
	restarted := a
	restarted.Instance = "run-b"
	if ch, err := r.Heartbeat(restarted, t0, nil); err != nil || len(ch) != 1 || ch[0].Kind != Restarted {
		t.Fatalf("restart: %v %v", ch, err)
	}
	if _, err := r.Heartbeat(reg(2), t0, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Heartbeat(reg(3), t0, nil); !errors.Is(err, ErrFull) || r.Len() != 2 {
		t.Fatalf("third worker with MaxWorkers 2: %v, %d live", err, r.Len())
	}
	if ch, err := r.Leave(Registration{WorkerID: 1, URL: a.URL, Instance: "run-b"}, nil); err != nil || len(ch) != 1 {
		t.Fatalf("real leave: %v %v", ch, err)
	}
	// Once the id is free, another URL may take it.
	if _, err := r.Heartbeat(thief, t0, nil); err != nil {
		t.Fatal(err)
	}
}

// registrationRule restates the validation rules of a registration
// (Registration.Validate with DefaultMaxDpRanks) independently of it: ""
// when r is valid, else the field (as its JSON key or Validate's message
// spells it) that the error must name, with the rules taken in Validate's
// order.
func registrationRule(r Registration) string {
	if r.WorkerID == 0 {
		return "worker_id"
	}
	if len(r.URL) > MaxURLBytes {
		return "url"
	}
	if u, err := url.Parse(r.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil {
		return "url"
	}
	if len(r.Model) > MaxNameBytes || len(r.Instance) > MaxNameBytes {
		return "instance_id"
	}
	if len(r.DpRanks) == 0 || len(r.DpRanks) > DefaultMaxDpRanks {
		return "dp_ranks"
	}
	if r.BlockSize < 1 || r.BlockSize > MaxBlockSize {
		return "block_size"
	}
	if r.KVBlocks < 0 || r.MaxBatchedTokens < 0 || r.MaxModelLen < 0 {
		return "kv_blocks"
	}
	if r.HeartbeatMillis < 1 || r.HeartbeatMillis > MaxHeartbeatMillis {
		return "heartbeat_ms"
	}
	for i, rank := range r.DpRanks {
		if rank > wire.MaxDPRank || slices.Contains(r.DpRanks[:i], rank) {
			return "dp rank"
		}
	}
	switch r.EventTransport {
	case TransportDynamo, TransportNative, TransportNone:
		return pdRule(r)
	case TransportZMQ:
		if r.ZMQEndpoint == "" {
			return "zmq_endpoint"
		}
		for _, ep := range []string{r.ZMQEndpoint, r.ZMQReplay} {
			if ep == "" {
				continue
			}
			hostPort, ok := strings.CutPrefix(ep, "tcp://")
			if _, _, err := net.SplitHostPort(hostPort); len(ep) > MaxURLBytes || !ok || err != nil {
				return "zmq endpoint"
			}
		}
		return pdRule(r)
	}
	return "event_transport"
}

// pdRule restates the disaggregation fields' rules: role and pd_protocol
// empty or known, bootstrap_port 0 or a port, and only with sglang.
func pdRule(r Registration) string {
	if !slices.Contains([]string{"", "prefill", "decode", "both"}, r.Role) {
		return "role"
	}
	if !slices.Contains([]string{"", "vllm-nixl", "sglang"}, r.PDProtocol) {
		return "pd_protocol"
	}
	if r.BootstrapPort < 0 || r.BootstrapPort > 65535 || (r.BootstrapPort != 0 && r.PDProtocol != "sglang") {
		return "bootstrap_port"
	}
	return ""
}

// roundTrip checks that v survives Encode and Decode unchanged and that
// Encode writes exactly the JSON keys in keys (the wire names engines and
// other routers use).
func roundTrip[T any](t *testing.T, v T, keys ...string) {
	t.Helper()
	enc := Encode(v)
	var got T
	if err := Decode(enc, &got); err != nil {
		t.Fatalf("%s does not decode: %v", enc, err)
	}
	if !reflect.DeepEqual(got, v) {
		t.Fatalf("round trip changed the message:\n%+v\n%+v", v, got)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(enc, &fields); err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(fields)); !slices.Equal(got, slices.Sorted(slices.Values(keys))) {
		t.Fatalf("%s: keys %v, want %v", enc, got, keys)
	}
}

// decodeErr checks that a decoding error names the message type.
func decodeErr(t *testing.T, err error, typ string) {
	t.Helper()
	if !strings.Contains(err.Error(), typ) {
		t.Fatalf("decode error %q does not name %s", err, typ)
	}
}

// FuzzRegistration: any bytes either fail to decode with an error naming
// the message, or decode to a registration that survives the round trip
// and that Validate accepts exactly when the rules (registrationRule) do,
// refusing it with an error that names the field; a registration it
// accepts joins a registry.
func FuzzRegistration(f *testing.F) {
	r := reg(3)
	f.Add(Encode(r))
	r.EventTransport, r.ZMQEndpoint = TransportZMQ, "tcp://127.0.0.1:5557"
	f.Add(Encode(r))
	f.Add([]byte(`{"worker_id":1,"url":"ftp://x","dp_ranks":[0,0]}`))
	f.Add([]byte(`{"worker_id":-1}`))
	for _, field := range []string{
		`"worker_id":0`, `"url":"http://u:p@h:1"`, `"url":"http://:80"`, `"model":"` + strings.Repeat("m", MaxNameBytes+1) + `"`,
		`"dp_ranks":[]`, `"dp_ranks":[1,1]`, `"dp_ranks":[65536]`, `"block_size":65537`, `"kv_blocks":-1`, `"max_model_len":-1`,
		`"heartbeat_ms":0`, `"heartbeat_ms":600001`, `"event_transport":"grpc"`, `"event_transport":"zmq"`,
		`"event_transport":"zmq","zmq_endpoint":"ipc:///x"`, `"event_transport":"zmq","zmq_endpoint":"tcp://h:1","zmq_replay":"tcp://h"`,
		`"role":"prefill"`, `"role":"decode","pd_protocol":"sglang"`, `"role":"Prefill"`, `"role":"router"`, `"pd_protocol":"nixl"`,
		`"role":"prefill","pd_protocol":"sglang","bootstrap_port":8998`, `"pd_protocol":"sglang","bootstrap_port":65536`,
		`"pd_protocol":"sglang","bootstrap_port":-1`, `"bootstrap_port":8998`, `"pd_protocol":"vllm-nixl","bootstrap_port":1`,
		`"role":"both","pd_protocol":"vllm-nixl"`, `"role":""`,
	} {
		f.Add([]byte(`{"worker_id":2,"url":"https://w:9100","dp_ranks":[0,7],"block_size":16,"kv_blocks":8,"event_transport":"native","heartbeat_ms":100,` + field + `}`))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var g Registration
		if err := Decode(data, &g); err != nil {
			decodeErr(t, err, "plane.Registration")
			return
		}
		roundTrip(t, g, registrationKeys(g)...)
		want, err := registrationRule(g), g.Validate()
		switch {
		case want == "" && err != nil:
			t.Fatalf("valid registration %+v refused: %v", g, err)
		case want != "" && err == nil:
			t.Fatalf("registration %+v accepted, breaking the %s rule", g, want)
		case err != nil && !strings.Contains(err.Error(), want):
			t.Fatalf("refusal %q does not name %s", err, want)
		case err != nil:
			return
		}
		reg := NewRegistry()
		if _, err := reg.Heartbeat(g, time.Unix(0, 0), nil); err != nil {
			t.Fatal(err)
		}
	})
}

// registrationKeys is the JSON keys Encode writes for r: omitempty fields
// only when set.
func registrationKeys(r Registration) []string {
	keys := []string{"worker_id", "url", "dp_ranks", "block_size", "kv_blocks", "event_transport", "heartbeat_ms"}
	for k, set := range map[string]bool{"instance_id": r.Instance != "", "model": r.Model != "", "max_batched_tokens": r.MaxBatchedTokens != 0,
		"max_model_len": r.MaxModelLen != 0, "zmq_endpoint": r.ZMQEndpoint != "", "zmq_replay": r.ZMQReplay != "",
		"role": r.Role != "", "pd_protocol": r.PDProtocol != "", "bootstrap_port": r.BootstrapPort != 0} {
		if set {
			keys = append(keys, k)
		}
	}
	return keys
}

// FuzzLoad: any bytes either fail to decode with an error naming the
// message, or decode to a load that survives the round trip under its six
// wire names.
func FuzzLoad(f *testing.F) {
	f.Add(Encode(Load{WorkerID: 1, KVUsed: 3, KVTotal: 10}))
	f.Add([]byte(`{"worker_id":-1}`))
	f.Add([]byte(`{"WORKER_ID":7,"dp_rank":4294967295,"waiting":-3,"extra":[1]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var l Load
		if err := Decode(data, &l); err != nil {
			decodeErr(t, err, "plane.Load")
			return
		}
		roundTrip(t, l, "worker_id", "dp_rank", "kv_used_blocks", "kv_total_blocks", "waiting", "running")
	})
}

// FuzzAllWorkersBusy: any bytes either fail to decode with an error naming
// the message, or decode to a message that survives the round trip, with
// window_ms written only when set.
func FuzzAllWorkersBusy(f *testing.F) {
	f.Add(Encode(AllWorkersBusy{Router: "r1", QueueDepth: 3, AtUnixNano: 1, WindowMillis: 5000}))
	f.Add([]byte(`{"router":"","window_ms":-9}`))
	f.Add([]byte(`{"router":"r\u00e9\ud800","window_ms":0,"at_unix_nano":-1}`))
	f.Add([]byte(`{"queue_depth":"3"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var b AllWorkersBusy
		if err := Decode(data, &b); err != nil {
			decodeErr(t, err, "plane.AllWorkersBusy")
			return
		}
		keys := []string{"router", "queue_depth", "at_unix_nano"}
		if b.WindowMillis != 0 {
			keys = append(keys, "window_ms")
		}
		roundTrip(t, b, keys...)
	})
}
