package epp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvroute/kvroute/bench/mock"
	"github.com/kvroute/kvroute/internal/natstest"
	"github.com/kvroute/kvroute/node"
	"github.com/kvroute/kvroute/router"
	"github.com/kvroute/kvroute/router/epp"
	"github.com/kvroute/kvroute/router/epp/eppcheck"
	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/wire/plane"
)

const blockSize = 16

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// env is a real `kvroute epp`: a router service on an in-process NATS, a
// simulated fleet, the EPP on a gRPC listener.
type env struct {
	svc   *router.Service
	fleet *mock.Fleet
	epp   *epp.Server
	addr  string
}

func start(t *testing.T, workers int, tune func(*sched.Config)) *env {
	t.Helper()
	ns := natstest.Server(t)
	subj, err := plane.SubjectsFor("test", "backend")
	if err != nil {
		t.Fatal(err)
	}
	sc := sched.DefaultConfig()
	sc.BlockSize = blockSize
	if tune != nil {
		tune(&sc)
	}
	svc, err := router.StartService(router.ServiceConfig{
		Router:             router.Config{Sched: sc, Subjects: subj, TickInterval: 20 * time.Millisecond, QueueTimeout: 10 * time.Second},
		HTTPAddr:           "127.0.0.1:0",
		ShutdownGrace:      time.Second,
		ShutdownReadyDelay: -1,
		Node:               node.Config{NATSURL: ns.ClientURL(), NATSReconnectWait: 50 * time.Millisecond},
		Logger:             quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close() })
	nc := natstest.Connect(t, ns)
	fleet, err := mock.Start(mock.Config{Workers: workers, BlockSize: blockSize, KVBlocks: 4096, Speedup: 50, Model: "mock",
		Namespace: "test", Component: "backend", Transport: plane.TransportDynamo, Heartbeat: time.Second,
		LoadInterval: 10 * time.Millisecond, Logger: quiet()}, nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fleet.Close() })
	s, err := epp.New(epp.Config{Router: svc.Router, Fallbacks: 2, Logger: quiet(), HealthInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.MaxRecvMsgSize(64 << 20))
	s.Register(g)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(func() { g.Stop(); s.Close() })
	e := &env{svc: svc, fleet: fleet, epp: s, addr: ln.Addr().String()}
	deadline := time.Now().Add(10 * time.Second)
	for svc.Router.Routable() != nil || !allJoined(svc, workers) {
		if time.Now().After(deadline) {
			t.Fatalf("the fleet did not join: %v", svc.Router.Routable())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // the health loop's next turn
	return e
}

func allJoined(svc *router.Service, n int) bool {
	k := 0
	for i := range n + 1 {
		if svc.Router.AnyEndpoint(uint64(i), nil) != "" {
			k++
		}
	}
	return k > 0 && len(svc.Router.Endpoints()) == n
}

// TestConformance runs the whole harness against kvroute epp: every check
// must pass (the overload check in TestConformanceOverload).
func TestConformance(t *testing.T) {
	e := start(t, 4, nil)
	k, err := eppcheck.Dial(eppcheck.Config{Target: e.addr, Model: "mock"})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	results := k.Run(context.Background())
	names := map[string]bool{}
	for _, r := range results {
		t.Log(r)
		names[r.Name] = true
		if !r.OK {
			t.Errorf("%s failed: %s", r.Name, r.Detail)
		}
		if r.Skipped && r.Name != "overload-429" {
			t.Errorf("%s skipped", r.Name)
		}
	}
	for _, n := range []string{"health", "body-5mb", "subset", "subset-empty-503", "bad-body-400", "cancel-mid-body", "concurrent-streams", "response-path"} {
		if !names[n] {
			t.Errorf("check %s did not run", n)
		}
	}
	// Every booking made by the checks was freed (the cancelled stream's
	// included); the response-path check's fallback moved its booking.
	waitIdle(t, e)
	st := e.epp.Stats()
	if st.Moved < 1 || st.Immediate < 4 || st.Picked < 100 || st.Streams < st.Picked+st.Immediate {
		t.Errorf("stats %+v", st)
	}
	t.Logf("%+v", st)
}

func waitIdle(t *testing.T, e *env) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := e.svc.Router.SchedStats()
		if err == nil && st.Active == 0 && st.QueueDepth == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("bookings left: %+v %v", st, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestConformanceOverload: with one busy-prone worker per stream and a
// queue of two, holding streams open ends in a 429 with Retry-After and
// the JSON error shape.
func TestConformanceOverload(t *testing.T) {
	e := start(t, 2, func(c *sched.Config) {
		c.BusyPrefillTokens = 100
		c.QueueDepth = 2
	})
	k, err := eppcheck.Dial(eppcheck.Config{Target: e.addr, Model: "mock", Overload: 20, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	var got *eppcheck.Result
	for _, r := range k.Run(context.Background()) {
		if r.Name == "overload-429" {
			got = &r
		}
	}
	if got == nil || !got.OK || got.Skipped {
		t.Fatalf("overload check: %+v", got)
	}
	t.Log(got)
}

// TestGatewayPrefixAffinity plays Envoy (eppcheck.Gateway over real gRPC)
// in front of the fleet: answers and streams come through, and a repeated
// prompt lands on the pod holding its prefix.
func TestGatewayPrefixAffinity(t *testing.T) {
	e := start(t, 4, nil)
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	gw := httptest.NewServer(eppcheck.NewGateway(conn))
	defer gw.Close()
	prompt := strings.Repeat("a long shared system prompt about KV caches. ", 40)
	post := func(stream bool) (string, string) {
		body := fmt.Sprintf(`{"model":"mock","prompt":%q,"max_tokens":4,"stream":%v}`, prompt, stream)
		resp, err := http.Post(gw.URL+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		return resp.Header.Get("x-gateway-destination-endpoint-served"), string(b)
	}
	first, b := post(false)
	var doc struct {
		Choices []struct{ Text string } `json:"choices"`
		Usage   struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(b), &doc); err != nil || len(doc.Choices) != 1 || doc.Usage.CompletionTokens != 4 {
		t.Fatalf("answer %s (%v)", b, err)
	}
	// The pod's KV events reach the index: a decision sees the prefix.
	waitFor(t, "the prompt's blocks in the index", func() bool {
		var pk router.Pick
		err := e.svc.Router.Pick(&pk, &router.PickRequest{Body: []byte(fmt.Sprintf(`{"model":"mock","prompt":%q}`, prompt))})
		if err != nil {
			return false
		}
		defer e.svc.Router.PickDone(&pk)
		return pk.Overlap > 0 && pk.Endpoints[0] == first
	})
	for i := range 5 {
		served, body := post(i%2 == 1)
		if served != first {
			t.Fatalf("repeat %d served by %s, the prefix is on %s", i, served, first)
		}
		if i%2 == 1 && (!strings.Contains(body, "data: ") || !strings.Contains(body, "[DONE]")) {
			t.Fatalf("stream answer is not SSE: %q", body)
		}
	}
	// GET /v1/models: the fleet's models, as serve answers.
	resp, err := http.Get(gw.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(mb), `"id":"mock"`) || !strings.Contains(string(mb), `"owned_by":"kvroute"`) {
		t.Fatalf("/v1/models: %d %s", resp.StatusCode, mb)
	}
	waitIdle(t, e)
}

// TestEndpointsFile: pods from a file become workers and are re-read on
// change; a broken file keeps the workers.
func TestEndpointsFile(t *testing.T) {
	e := start(t, 1, nil)
	dir := t.TempDir()
	path := filepath.Join(dir, "pods.yaml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("- {ip: 127.0.0.1, port: 1, worker_id: 901, model: mock}\n- {ip: 127.0.0.1, port: 2, worker_id: 902, model: mock, role: prefill}\n")
	w, err := epp.WatchEndpoints(epp.EndpointsConfig{Path: path, Interval: 10 * time.Millisecond, Router: e.svc.Router, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	has := func(ep string) bool { return containsEP(e.svc.Router.Endpoints(), ep) }
	if !has("127.0.0.1:1") || has("127.0.0.1:2") {
		t.Fatalf("endpoints %v: want 127.0.0.1:1 and not the prefill pod", e.svc.Router.Endpoints())
	}
	write(`[{"ip": "127.0.0.1", "port": 3, "worker_id": 903}]`)
	waitFor(t, "the file re-read", func() bool { return has("127.0.0.1:3") && !has("127.0.0.1:1") })
	write("- {ip: nope, port: 3, worker_id: 903}\n")
	time.Sleep(50 * time.Millisecond)
	if !has("127.0.0.1:3") {
		t.Fatalf("a broken file dropped the workers: %v", e.svc.Router.Endpoints())
	}
}

// A file truncated on its way to being rewritten keeps the workers; an
// explicit empty list drops them.
func TestEndpointsFileRewritten(t *testing.T) {
	e := start(t, 1, nil)
	path := filepath.Join(t.TempDir(), "pods.yaml")
	if err := os.WriteFile(path, []byte(`[{"ip": "127.0.0.1", "port": 3, "worker_id": 903}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := epp.WatchEndpoints(epp.EndpointsConfig{Path: path, Interval: time.Hour, Router: e.svc.Router, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	has := func() bool { return containsEP(e.svc.Router.Endpoints(), "127.0.0.1:3") }
	if !has() {
		t.Fatalf("endpoints %v: want 127.0.0.1:3", e.svc.Router.Endpoints())
	}
	for _, c := range []struct {
		content string
		want    bool
	}{{"", true}, {"  \n", true}, {"[]", false}} {
		if err := os.WriteFile(path, []byte(c.content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := w.LoadForTesting(); err != nil {
			t.Fatal(err)
		}
		if has() != c.want {
			t.Fatalf("after %q: endpoints %v, want 127.0.0.1:3 kept %v", c.content, e.svc.Router.Endpoints(), c.want)
		}
	}
}

func containsEP(eps []string, ep string) bool {
	for _, e := range eps {
		if e == ep {
			return true
		}
	}
	return false
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestParseEndpointsErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"- {ip: 10.0.0.1, port: 0, worker_id: 1}", "[0].port"},
		{"- {ip: x, port: 80, worker_id: 1}", "[0].ip"},
		{"- {ip: 10.0.0.1, port: 80}", "[0].worker_id"},
		{"- {ip: 10.0.0.1, port: 80, worker_id: 1, role: boss}", "[0].role"},
		{"- {ip: 10.0.0.1, port: 80, worker_id: 1, colour: red}", "colour"},
		{"- {ip: 10.0.0.1, port: 80, worker_id: 1}\n- {ip: 10.0.0.2, port: 80, worker_id: 1}", "[1].worker_id"},
		{"- {ip: 10.0.0.1, port: 80, worker_id: 1}\n- {ip: 10.0.0.1, port: 80, worker_id: 2}", "[1]: 10.0.0.1:80"},
		{`{"ip": "10.0.0.1"}`, "list of pods"},
	} {
		_, err := epp.ParseEndpoints([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %s", c.in, err, c.want)
		}
	}
	ws, err := epp.ParseEndpoints([]byte(`[{"ip":"10.0.0.1","port":8000,"worker_id":7,"model":"m","role":"decode","dp_ranks":[0,1]}]`))
	if err != nil || len(ws) != 1 || ws[0].ID != 7 || ws[0].URL != "http://10.0.0.1:8000" || ws[0].Model != "m" || len(ws[0].DpRanks) != 2 {
		t.Fatalf("%+v %v", ws, err)
	}
}

func FuzzParseEndpoints(f *testing.F) {
	f.Add([]byte("- {ip: 10.0.0.1, port: 80, worker_id: 1}"))
	f.Add([]byte(`[{"ip":"::1","port":8000,"worker_id":7,"role":"prefill"}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ws, err := epp.ParseEndpoints(data)
		if err != nil {
			return
		}
		for _, w := range ws {
			if router.HostPort(w.URL) == "" {
				t.Fatalf("worker %d has URL %q", w.ID, w.URL)
			}
		}
	})
}
