package router

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/wire/plane"
)

// refused reads kvroute_refused_total{reason=...}.
func (e *env) refused(reason string) float64 {
	return e.metric(fmt.Sprintf("kvroute_refused_total{reason=%q}", reason))
}

func (e *env) publish(subject string, v any) {
	e.t.Helper()
	if err := e.nc.Publish(subject, plane.Encode(v)); err != nil {
		e.t.Fatal(err)
	}
}

// TestRegistrationsValidatedAndOwned sends hostile control-plane messages
// to a live router: invalid registrations (worker 0, ftp://,
// an empty URL, transport bogus, zmq without an endpoint, 100,000 dp ranks)
// are refused and counted; a registration reusing the live worker's id from
// another URL does not take its traffic; a withdrawal without the worker's
// instance id does not remove it; --max-workers bounds the rest.
func TestRegistrationsValidatedAndOwned(t *testing.T) {
	e := startEnv(t, envOptions{workers: 1, health: func(c *Config) { c.MaxWorkers = 2 }})
	real := e.fleet.Workers()[0].Registration()
	if real.Instance == "" {
		t.Fatal("the mock sends no instance_id")
	}
	base := plane.Registration{WorkerID: 50, URL: "http://127.0.0.1:1", DpRanks: []uint32{0}, BlockSize: testBlockSize,
		KVBlocks: 100, EventTransport: plane.TransportDynamo, HeartbeatMillis: 1000}
	var bad []plane.Registration
	for _, edit := range []func(r *plane.Registration){
		func(r *plane.Registration) { r.WorkerID = 0 },
		func(r *plane.Registration) { r.URL = "ftp://127.0.0.1:21" },
		func(r *plane.Registration) { r.URL = "" },
		func(r *plane.Registration) { r.EventTransport = "bogus" },
		func(r *plane.Registration) { r.EventTransport = plane.TransportZMQ },
		func(r *plane.Registration) {
			r.DpRanks = make([]uint32, 100_000)
			for i := range r.DpRanks {
				r.DpRanks[i] = uint32(i % 65536)
			}
		},
	} {
		r := base
		edit(&r)
		bad = append(bad, r)
	}
	for _, r := range bad {
		e.publish(e.subj.Heartbeat, r)
	}
	waitFor(t, "invalid registrations refused", func() bool { return e.refused("registration_invalid") == float64(len(bad)) })

	// Hijack: the live worker's id from another URL, with or without an instance.
	thief := real
	thief.URL, thief.Instance = "http://127.0.0.1:1", "impostor"
	e.publish(e.subj.Heartbeat, thief)
	thief.Instance = ""
	e.publish(e.subj.Heartbeat, thief)
	// Spoofed withdrawals: the right URL without or with a wrong instance id.
	e.publish(e.subj.Leave, plane.Registration{WorkerID: real.WorkerID, URL: real.URL})
	e.publish(e.subj.Leave, plane.Registration{WorkerID: real.WorkerID, URL: real.URL, Instance: "impostor"})
	waitFor(t, "conflicts and spoofed leaves refused", func() bool {
		return e.refused("registration_conflict") == 2 && e.refused("leave_mismatch") == 2
	})
	ws := e.workers().Workers
	if len(ws) != 1 || ws[0].URL != real.URL {
		t.Fatalf("workers after the hijack attempts: %+v", ws)
	}
	if w, _ := e.complete(tokens(1, 0, 64, 4), 1); w != real.WorkerID {
		t.Fatalf("served by %d", w)
	}

	// --max-workers 2: the fleet's worker and one more.
	for id := uint64(60); id < 63; id++ {
		r := base
		r.WorkerID = id
		e.publish(e.subj.Heartbeat, r)
	}
	waitFor(t, "excess workers refused", func() bool { return e.refused("too_many_workers") == 2 })
	if n := len(e.workers().Workers); n != 2 {
		t.Fatalf("%d workers with --max-workers 2", n)
	}
	// The real worker's own withdrawal (its instance) is honoured.
	e.publish(e.subj.Leave, real)
	waitFor(t, "real withdrawal", func() bool { return len(e.workers().Workers) == 1 })
}

// TestPromptBounds: a prompt longer than --max-prompt-tokens, or needing
// more blocks than the largest worker's KV cache, is answered 400 before it
// is booked (unbounded, four 15 MB prompts made the fleet refuse all
// traffic).
func TestPromptBounds(t *testing.T) {
	e := startEnv(t, envOptions{workers: 2, kvBlocks: 64}) // 64 blocks × 16 tokens = 1,024 tokens
	long := promptJSON(tokens(1, 0, 1100, 0))
	for _, path := range []string{"/v1/completions", "/route"} {
		field := "prompt"
		if path == "/route" {
			field = "token_ids"
		}
		code, b, _ := e.do("POST", path, fmt.Sprintf(`{%q:%s}`, field, long))
		if code != 400 || !strings.Contains(string(b), "1024 allowed") {
			t.Errorf("%s with 1,100 tokens: %d %s", path, code, b)
		}
	}
	if !e.idle() {
		t.Fatal("a refused prompt was booked")
	}
	if v := e.refused("prompt_too_long"); v != 2 {
		t.Errorf("prompt_too_long counted %v", v)
	}
	e.complete(tokens(1, 0, 1000, 0), 1)
}

func TestMaxPromptTokensFlag(t *testing.T) {
	e := startEnv(t, envOptions{workers: 1, health: func(c *Config) { c.MaxPromptTokens = 100 }})
	code, b, _ := e.do("POST", "/v1/chat/completions", fmt.Sprintf(`{"messages":[{"role":"user","content":%q}]}`, strings.Repeat("x", 200)))
	if code != 400 || !strings.Contains(string(b), `"param":"messages"`) || !strings.Contains(string(b), "--max-prompt-tokens") {
		t.Fatalf("%d %s", code, b)
	}
}

// TestRouteIDsUnguessable: /route's ids are random; a guessed one frees
// nothing, the given one frees its booking.
func TestRouteIDsUnguessable(t *testing.T) {
	e := startEnv(t, envOptions{workers: 1})
	idRe := regexp.MustCompile(`"request_id":"(kvr-[0-9a-f]{32})"`)
	var ids []string
	for i := range 2 {
		code, b, _ := e.do("POST", "/route", fmt.Sprintf(`{"token_ids":%s}`, promptJSON(tokens(2, i, 32, 4))))
		m := idRe.FindSubmatch(b)
		if code != 200 || m == nil {
			t.Fatalf("/route: %d %s", code, b)
		}
		ids = append(ids, string(m[1]))
	}
	if ids[0] == ids[1] {
		t.Fatal("two bookings got one id")
	}
	for _, guess := range []string{"kvr-1", "kvr-2", "kvr-0"} {
		if code, _, _ := e.do("POST", "/route/"+guess+"/free", ""); code != 404 {
			t.Errorf("guessed id %s: %d", guess, code)
		}
	}
	if e.idle() {
		t.Fatal("a guessed id freed a booking")
	}
	for _, id := range ids {
		if code, b, _ := e.do("POST", "/route/"+id+"/free", ""); code != 200 {
			t.Fatalf("free %s: %d %s", id, code, b)
		}
	}
	waitFor(t, "freed", e.idle)
}

// trickle opens a connection that declares a body of n bytes and sends
// only its first byte.
func trickle(t *testing.T, addr string, n int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", n)
	return c
}

// TestInflightBodyBudget: unbounded, 50 connections trickling 16 MB bodies
// took 847 MB. Bodies are accounted by declared length before fasthttp
// allocates them; one that does not fit gets 503 unread, and the budget
// comes back when the trickling connections go.
func TestInflightBodyBudget(t *testing.T) {
	const mb = 1 << 20
	e := startEnv(t, envOptions{workers: 1, maxBody: mb, health: func(c *Config) { c.MaxInflightBodyBytes = 2 * mb }})
	a, b := trickle(t, e.svc.Addr(), mb), trickle(t, e.svc.Addr(), mb)
	waitFor(t, "two bodies in flight", func() bool { return e.metric("kvroute_http_inflight_body_bytes") == 2*mb })
	c := trickle(t, e.svc.Addr(), mb)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("third body: %d Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if v := e.refused("body_budget"); v != 1 {
		t.Errorf("body_budget counted %v", v)
	}
	// Requests without a body still pass.
	if code, _, _ := e.do("GET", "/workers", ""); code != 200 {
		t.Fatalf("GET /workers with the budget spent: %d", code)
	}
	a.Close()
	b.Close()
	waitFor(t, "budget released", func() bool { return e.metric("kvroute_http_inflight_body_bytes") == 0 })
	if w, _ := e.complete(tokens(1, 0, 16, 0), 1); w == 0 {
		t.Fatal("no worker")
	}
}

// TestMaxConns: connections beyond --max-conns are answered 503 and
// closed, and counted.
func TestMaxConns(t *testing.T) {
	e := startEnv(t, envOptions{workers: 1, health: func(c *Config) { c.MaxConns = 3 }})
	http.DefaultClient.CloseIdleConnections()
	waitFor(t, "the harness's connections closed", func() bool { return e.svc.http.GetOpenConnectionsCount() == 0 })
	var held []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", e.svc.Addr())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	waitFor(t, "3 connections served", func() bool { return e.svc.http.GetOpenConnectionsCount() == 3 })
	c, err := net.Dial("tcp", e.svc.Addr())
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprint(c, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	c.Close()
	if resp.StatusCode != 503 {
		t.Fatalf("connection over --max-conns: %d", resp.StatusCode)
	}
	for _, h := range held {
		h.Close()
	}
	waitFor(t, "connections closed", func() bool { return e.svc.http.GetOpenConnectionsCount() == 0 })
	if v := e.refused("conn_limit"); v < 1 {
		t.Errorf("conn_limit counted %v", v)
	}
}

// TestBookingFitsCapacity: a prompt of more blocks than a worker's KV cache
// is never booked on it (unbounded, workers of 16,384 blocks were booked
// 983,040): it goes to a worker it fits, and pinning it on one it does not
// fit is a 400.
func TestBookingFitsCapacity(t *testing.T) {
	big := StaticWorker{ID: 200, URL: "http://127.0.0.1:1", Capacity: sched.Capacity{TotalBlocks: 1000}}
	e := startEnv(t, envOptions{workers: 1, kvBlocks: 64, static: []StaticWorker{big}})
	small := e.fleet.Workers()[0].ID()
	for i := range 4 {
		code, b, _ := e.do("POST", "/route", fmt.Sprintf(`{"token_ids":%s}`, promptJSON(tokens(3, i, 100*testBlockSize, 0))))
		if code != 200 || !strings.Contains(string(b), `"worker_id":200`) {
			t.Fatalf("100-block prompt: %d %s", code, b)
		}
	}
	code, b, _ := e.do("POST", "/route", fmt.Sprintf(`{"token_ids":%s,"overrides":{"worker_id":%d}}`, promptJSON(tokens(3, 9, 100*testBlockSize, 0)), small))
	if code != 400 || !strings.Contains(string(b), "overrides.worker_id") {
		t.Fatalf("pinned on a worker of 64 blocks: %d %s", code, b)
	}
	for _, w := range e.workers().Workers {
		for _, r := range w.Ranks {
			if r.KVTotal > 0 && r.ActiveBlocks > int64(r.KVTotal) {
				t.Errorf("worker %d books %d blocks, capacity %d", w.WorkerID, r.ActiveBlocks, r.KVTotal)
			}
		}
	}
}
