package router

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/wire/plane"
)

// Requests sharing a prefix go to the worker that holds it, while the
// families spread over the fleet, and the load returns to zero afterwards.
func TestPrefixAffinityAndBalance(t *testing.T) {
	e := startEnv(t, envOptions{})
	const families, perFamily, prefix = 8, 5, 256
	home := map[int]uint64{}
	perWorker := map[uint64]int{}
	for f := range families {
		first := tokens(f, 0, prefix, 8)
		w, cached := e.complete(first, 2)
		if cached != 0 {
			t.Errorf("family %d: first request reported %d cached blocks", f, cached)
		}
		home[f] = w
		perWorker[w]++
		if got := e.indexed(first, prefix/testBlockSize); got != w {
			t.Fatalf("family %d: served by %d but indexed on %d", f, w, got)
		}
	}
	// Affinity: one request at a time, each family's next requests go home
	// and hit the whole prefix, as the router predicts (its cached-blocks
	// header) and as the engine reports (cached_tokens).
	for i := 1; i < perFamily; i++ {
		for f := range families {
			toks := tokens(f, i, prefix, 8)
			w, cached, u := e.post("/v1/completions", fmt.Sprintf(`{"prompt":%s,"max_tokens":2}`, promptJSON(toks)))
			if w != home[f] || cached != prefix/testBlockSize {
				t.Errorf("family %d request %d: worker %d (home %d), %d cached blocks", f, i, w, home[f], cached)
			}
			if got := u.Usage.PromptTokensDetails.CachedTokens; got != prefix || u.Usage.PromptTokens != len(toks) {
				t.Errorf("family %d request %d: the engine found %d of %d prompt tokens cached, want the %d-token prefix of %d",
					f, i, got, u.Usage.PromptTokens, prefix, len(toks))
			}
		}
	}
	// Balance under a burst: 64 concurrent requests over the 8 families.
	// The cost weighs a worker's booked decode blocks against the prefill a
	// cache hit saves (sched.Config.Weight), so a busy home sheds some requests;
	// no worker may get more than 1.5x its share, and most requests must
	// still hit their prefix.
	var (
		mu     sync.Mutex
		wg     sync.WaitGroup
		served = map[uint64]int{}
		hits   int
	)
	const burst = 64
	for i := range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, cached := e.complete(tokens(i%families, 100+i, prefix, 8), 2)
			mu.Lock()
			defer mu.Unlock()
			served[w]++
			if cached == prefix/testBlockSize {
				hits++
			}
		}()
	}
	wg.Wait()
	for w, n := range served {
		if n > burst*3/2/4 {
			t.Errorf("burst: worker %d served %d of %d requests: %v", w, n, burst, served)
		}
	}
	if hits < burst/2 {
		t.Errorf("burst: only %d of %d requests hit their prefix (served %v)", hits, burst, served)
	}
	t.Logf("burst: served %v, %d of %d hit their prefix", served, hits, burst)
	// Balance: 8 families over 4 workers, at most 3 on one worker.
	if len(perWorker) < 3 {
		t.Errorf("families landed on %d workers only: %v", len(perWorker), perWorker)
	}
	for w, n := range perWorker {
		if n > 3 {
			t.Errorf("worker %d got %d of %d families: %v", w, n, families, perWorker)
		}
	}
	waitFor(t, "load back to zero", e.idle)
	if hit := e.metric("kvroute_decision_overlap_blocks_total"); hit < float64((families*(perFamily-1)+hits)*prefix/testBlockSize) {
		t.Errorf("kvroute_decision_overlap_blocks_total = %v", hit)
	}
}

// A streamed completion arrives chunk by chunk through the proxy, with the
// routing headers, and its load is freed at the end.
func TestStreamingThroughProxy(t *testing.T) {
	e := startEnv(t, envOptions{workers: 2})
	body := fmt.Sprintf(`{"prompt":%s,"max_tokens":12,"stream":true}`, promptJSON(tokens(1, 1, 64, 4)))
	resp, err := http.Post(e.url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get(HeaderWorker) == "" {
		t.Fatalf("status %d, worker header %q", resp.StatusCode, resp.Header.Get(HeaderWorker))
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Errorf("content type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	chunks, done := 0, false
	text := ""
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		data := strings.TrimPrefix(line, "data: ")
		if data == "[DONE]" {
			done = true
			break
		}
		var c struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		if len(c.Choices) > 0 {
			text += c.Choices[0].Text
		}
		chunks++
	}
	if !done {
		t.Fatal("stream ended without [DONE]")
	}
	if len(text) != 12 || chunks < 12 {
		t.Errorf("got %d chunks carrying %q, want 12 tokens", chunks, text)
	}
	waitFor(t, "load back to zero", e.idle)
	if v := e.metric("kvroute_proxy_ttft_seconds_count"); v != 1 {
		t.Errorf("ttft observations = %v, want 1", v)
	}
}

// A client that goes away mid-stream frees the request's load.
func TestClientDisconnectFreesLoad(t *testing.T) {
	e := startEnv(t, envOptions{workers: 1})
	body := fmt.Sprintf(`{"prompt":%s,"max_tokens":2000,"stream":true}`, promptJSON(tokens(1, 1, 64, 4)))
	resp, err := http.Post(e.url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(resp.Body)
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if e.idle() {
		t.Fatal("no load booked while streaming")
	}
	resp.Body.Close()
	waitFor(t, "load freed after the client left", e.idle)
	waitFor(t, "client-gone counted", func() bool { return e.metric("kvroute_proxy_client_gone_total") == 1 })
}

// The decision API: /route with explain lists every worker, books load until
// freed, and rejects reused ids and unknown ones.
func TestRouteAPI(t *testing.T) {
	e := startEnv(t, envOptions{workers: 3})
	toks := tokens(3, 1, 128, 0)
	w0, _ := e.complete(toks, 2)
	e.indexed(toks, 8)
	code, body, _ := e.do("POST", "/route", fmt.Sprintf(`{"token_ids":%s,"request_id":"r1","explain":true}`, promptJSON(toks)))
	if code != 200 {
		t.Fatalf("/route: %d %s", code, body)
	}
	var d struct {
		RequestID  string `json:"request_id"`
		WorkerID   uint64 `json:"worker_id"`
		DpRank     uint32 `json:"dp_rank"`
		URL        string `json:"url"`
		Overlap    int    `json:"overlap_blocks"`
		Candidates []struct {
			WorkerID uint64   `json:"worker_id"`
			Overlap  int      `json:"overlap_blocks"`
			Prefill  float64  `json:"prefill_blocks"`
			Decode   float64  `json:"decode_blocks"`
			Cost     *float64 `json:"cost"`
		} `json:"candidates"`
	}
	if err := json.Unmarshal(body, &d); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if d.RequestID != "r1" || d.WorkerID != w0 || d.Overlap != 8 || d.URL != e.fleet.Worker(w0).URL() {
		t.Errorf("decision %+v, want worker %d overlap 8 url %s", d, w0, e.fleet.Worker(w0).URL())
	}
	if len(d.Candidates) != 3 {
		t.Fatalf("%d candidates, want every worker: %s", len(d.Candidates), body)
	}
	for _, c := range d.Candidates {
		if c.Cost == nil {
			t.Errorf("candidate %d without cost", c.WorkerID)
		}
		if (c.WorkerID == w0) != (c.Overlap == 8) {
			t.Errorf("candidate %d overlap %d", c.WorkerID, c.Overlap)
		}
	}
	if e.idle() {
		t.Fatal("a /route decision booked no load")
	}
	if code, body, _ := e.do("POST", "/route", fmt.Sprintf(`{"token_ids":%s,"request_id":"r1"}`, promptJSON(toks))); code != 409 || !strings.Contains(string(body), "already active") {
		t.Errorf("reused id: %d %s", code, body)
	}
	for _, op := range []string{"prefill_done", "free"} {
		if code, body, _ := e.do("POST", "/route/r1/"+op, ""); code != 200 {
			t.Errorf("%s: %d %s", op, code, body)
		}
	}
	waitFor(t, "load freed", e.idle)
	waitFor(t, "id forgotten", func() bool { c, _, _ := e.do("POST", "/route/r1/free", ""); return c == 404 })
	// Text prompts and pins.
	code, body, _ = e.do("POST", "/route", fmt.Sprintf(`{"prompt":"hello","overrides":{"worker_id":%d}}`, w0%3+1))
	if code != 200 || !strings.Contains(string(body), fmt.Sprintf(`"worker_id":%d`, w0%3+1)) {
		t.Errorf("pinned: %d %s", code, body)
	}
}

// Bad requests get 4xx with a JSON error body.
func TestBadRequests(t *testing.T) {
	e := startEnv(t, envOptions{workers: 1})
	cases := []struct {
		method, path, body string
		code               int
		msg                string
		errCode, param     string // OpenAI error code and param ("" for null)
	}{
		{"POST", "/v1/completions", `{"prompt":`, 400, "bad request", "invalid_request_error", ""},
		{"POST", "/v1/completions", `{"max_tokens":3}`, 400, "prompt", "invalid_request_error", "prompt"},
		{"POST", "/v1/completions", `{"prompt":""}`, 400, "empty", "invalid_request_error", "prompt"},
		{"POST", "/v1/chat/completions", `{"messages":7}`, 400, "messages", "invalid_request_error", "messages"},
		{"GET", "/v1/completions", ``, 405, "use POST", "method_not_allowed", ""},
		{"POST", "/workers", ``, 405, "use GET", "method_not_allowed", ""},
		{"POST", "/health", ``, 405, "use GET", "method_not_allowed", ""},
		{"PUT", "/ready", ``, 405, "use GET", "method_not_allowed", ""},
		{"POST", "/metrics", ``, 405, "use GET", "method_not_allowed", ""},
		{"POST", "/v1/models", ``, 405, "use GET", "method_not_allowed", ""},
		{"GET", "/nope", ``, 404, "no such endpoint", "not_found", ""},
		{"POST", "/route", `[1,2]`, 400, "object", "invalid_request_error", ""},
		{"POST", "/route", `{"token_ids":[1,"x"]}`, 400, "token_ids[1]", "invalid_request_error", "token_ids[1]"},
		{"POST", "/route", `{"token_ids":[1],"overrides":{"router_temperature":-1}}`, 400, "router_temperature", "invalid_request_error", "overrides.router_temperature"},
		{"POST", "/route", `{"token_ids":[1],"request_id":"a/b"}`, 400, "request_id", "invalid_request_error", "request_id"},
		{"POST", "/route", `{"token_ids":[1],"overrides":{"worker_id":77}}`, 400, "worker_id 77 names no known worker", "invalid_request_error", "overrides.worker_id"},
		{"POST", "/route", `{"token_ids":[1],"overrides":{"worker_id":1,"dp_rank":5}}`, 400, "dp_rank 5: worker 1 has dp ranks [0]", "invalid_request_error", "overrides.dp_rank"},
		{"POST", "/route", `{"token_ids":[1],"overrides":{"allowed_workers":[1,78]}}`, 400, "allowed_workers[1]: 78 names no known worker", "invalid_request_error", "overrides.allowed_workers[1]"},
		{"POST", "/route", `{"token_ids":[1],"overrides":{"allowed_workers":[79]}}`, 400, "79 names no known worker", "invalid_request_error", "overrides.allowed_workers[0]"},
		{"POST", "/route/unknown/free", ``, 404, "not active", "not_found", ""},
		{"POST", "/route/x/explode", ``, 404, "unknown action", "not_found", ""},
	}
	for _, c := range cases {
		code, body, h := e.do(c.method, c.path, c.body)
		if code != c.code || !strings.Contains(string(body), c.msg) {
			t.Errorf("%s %s: %d %.200s; want %d containing %q", c.method, c.path, code, body, c.code, c.msg)
			continue
		}
		var doc struct {
			Error struct {
				Message string  `json:"message"`
				Type    string  `json:"type"`
				Param   *string `json:"param"`
				Code    *string `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(body, &doc); err != nil || doc.Error.Message == "" || doc.Error.Type == "" || h.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s: error body is not JSON: %v %.200s", c.method, c.path, err, body)
			continue
		}
		if doc.Error.Code == nil || *doc.Error.Code != c.errCode {
			t.Errorf("%s %s: code in %s, want %q", c.method, c.path, body, c.errCode)
		}
		if param := ""; (doc.Error.Param != nil) != (c.param != "") || doc.Error.Param != nil && *doc.Error.Param != c.param {
			if doc.Error.Param != nil {
				param = *doc.Error.Param
			}
			t.Errorf("%s %s: param %q, want %q", c.method, c.path, param, c.param)
		}
		if c.code == 405 && h.Get("Allow") == "" {
			t.Errorf("%s %s: 405 without Allow", c.method, c.path)
		}
	}
	// A body over the limit: 413 as soon as the headers announce it.
	conn, err := net.Dial("tcp", e.svc.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", 17<<20)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 413 || !strings.Contains(string(b), "max-body-bytes") {
		t.Errorf("large body: %d %s", resp.StatusCode, b)
	}
	if v := e.metric(`kvroute_http_requests_total{endpoint="completions",code="400"}`); v != 3 {
		t.Errorf("completions 400 counted %v times, want 3", v)
	}
}

// With no worker the router answers 503, and /ready says why.
func TestNoWorkers(t *testing.T) {
	e := startEnv(t, envOptions{workers: 1})
	_ = e.fleet.Close()
	waitFor(t, "worker gone", func() bool { return len(e.workers().Workers) == 0 })
	code, body, _ := e.do("POST", "/v1/completions", `{"prompt":"hello"}`)
	if code != 503 || !strings.Contains(string(body), "no workers") {
		t.Errorf("no workers: %d %s", code, body)
	}
	if code, body, _ := e.do("GET", "/ready", ""); code != 503 || !strings.Contains(string(body), "no worker") {
		t.Errorf("/ready: %d %s", code, body)
	}
}

// A worker that leaves, or stops heartbeating, stops receiving traffic and
// leaves the index at once.
func TestWorkerDisappears(t *testing.T) {
	e := startEnv(t, envOptions{workers: 3, heartbeat: 100 * time.Millisecond})
	toks := tokens(7, 0, 128, 0)
	w, _ := e.complete(toks, 2)
	e.indexed(toks, 8)
	// Leave: the worker withdraws itself.
	if err := e.fleet.Worker(w).Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "worker removed", func() bool { return len(e.workers().Workers) == 2 })
	ovs, err := e.svc.Index.Workers(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range ovs {
		if o.Worker.Worker == w {
			t.Errorf("worker %d still in the index with %d blocks", w, o.TreeSize)
		}
	}
	for i := range 6 {
		if got, _ := e.complete(tokens(7, i, 128, 0), 1); got == w {
			t.Fatalf("request %d went to departed worker %d", i, w)
		}
	}
	// Expiry: a paused worker stops heartbeating and is dropped after 3 intervals.
	var paused uint64
	for _, x := range e.fleet.Workers() {
		if x.ID() != w {
			paused = x.ID()
			x.Pause()
			break
		}
	}
	waitFor(t, "paused worker expired", func() bool { return len(e.workers().Workers) == 1 })
	if got, _ := e.complete(tokens(8, 0, 32, 0), 1); got == paused || got == w {
		t.Errorf("request went to %d", got)
	}
	if v := e.metric("kvroute_workers_expired_total"); v != 1 {
		t.Errorf("kvroute_workers_expired_total = %v", v)
	}
	e.fleet.Worker(paused).Resume()
	waitFor(t, "resumed worker back", func() bool { return len(e.workers().Workers) == 2 })
}

// ZMQ ingest: workers publishing vLLM-format events on ZMQ announce their
// endpoints; the router subscribes and routes by the events.
func TestZMQIngest(t *testing.T) {
	e := startEnv(t, envOptions{workers: 2, transport: plane.TransportZMQ})
	// A ZMQ PUB drops what it publishes before a subscriber is connected
	// (and the engine's replay socket is asked only once a later batch shows
	// the gap): send the first request only once both SUBs are dialed, which
	// under load can come well after the registrations.
	for _, w := range e.fleet.Workers() {
		name := fmt.Sprintf(`kvroute_ingest_zmq_connected{worker="%d",dp_rank="0"}`, w.ID())
		waitFor(t, name, func() bool { return e.metric(name) == 1 })
	}
	toks := tokens(9, 0, 160, 0)
	w, _ := e.complete(toks, 1) // finishes in its prefill step
	if got := e.indexed(toks, 10); got != w {
		t.Fatalf("indexed on %d, served by %d", got, w)
	}
	w2, cached := e.complete(tokens(9, 1, 160, 5), 2)
	if w2 != w || cached != 10 {
		t.Errorf("second request: worker %d cached %d, want %d and 10", w2, cached, w)
	}
}

// Approximate mode: no KV events; the router's own decisions steer the
// family's next requests.
func TestApproxMode(t *testing.T) {
	e := startEnv(t, envOptions{workers: 3, approx: true})
	toks := tokens(4, 0, 128, 0)
	w, _ := e.complete(toks, 1)
	e.indexed(toks, 8)
	for i := 1; i < 4; i++ {
		got, cached := e.complete(tokens(4, i, 128, 3), 1)
		if got != w || cached != 8 {
			t.Errorf("request %d: worker %d cached %d, want %d and 8", i, got, cached, w)
		}
	}
}

// When every worker is busy and the queue is full, the router answers 429
// with Retry-After, counts it, publishes AllWorkersBusy on NATS and keeps
// throttling for the rejection window; another replica's AllWorkersBusy
// opens the window too.
func TestBusyWindow(t *testing.T) {
	e := startEnv(t, envOptions{workers: 1, sched: func(c *sched.Config) {
		c.BusyPrefillTokens = 100
		c.QueueDepth = 0
		c.RejectionWindow = 300 * time.Millisecond
	}, health: func(c *Config) { c.Peers = []string{"other"} }})
	busy := make(chan *nats.Msg, 16)
	sub, err := e.nc.ChanSubscribe(e.subj.AllBusy, busy)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	_ = e.nc.Flush()
	// A long stream keeps the only worker's prefill booked until its first token.
	body := fmt.Sprintf(`{"token_ids":%s,"request_id":"hold"}`, promptJSON(tokens(1, 0, 400, 0)))
	if code, b, _ := e.do("POST", "/route", body); code != 200 {
		t.Fatalf("/route: %d %s", code, b)
	}
	code, b, h := e.do("POST", "/v1/completions", `{"prompt":"hello there"}`)
	if code != 429 || h.Get("Retry-After") == "" || !strings.Contains(string(b), "busy") {
		t.Fatalf("all busy: %d %s Retry-After %q", code, b, h.Get("Retry-After"))
	}
	select {
	case m := <-busy:
		var ab plane.AllWorkersBusy
		if err := plane.Decode(m.Data, &ab); err != nil || ab.Router == "" || ab.WindowMillis != 300 || ab.AtUnixNano == 0 {
			t.Errorf("AllWorkersBusy message %s: %v", m.Data, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no AllWorkersBusy on NATS")
	}
	// Freed, but the window stays open: still 429, counted as throttled.
	e.do("POST", "/route/hold/free", "")
	waitFor(t, "load freed", e.idle)
	if code, _, _ := e.do("POST", "/v1/completions", `{"prompt":"hello"}`); code != 429 {
		t.Errorf("inside the window: %d", code)
	}
	if v := e.metric("kvroute_requests_throttled_total"); v < 1 {
		t.Errorf("throttled counted %v", v)
	}
	waitFor(t, "window closed", func() bool {
		c, _, _ := e.do("POST", "/v1/completions", `{"prompt":"hello","max_tokens":1}`)
		return c == 200
	})
	// A router that is not a peer (--router-peers) cannot open it, nor can
	// a peer's message whose window already ended.
	if err := e.nc.Publish(e.subj.AllBusy, plane.Encode(plane.AllWorkersBusy{Router: "intruder", QueueDepth: 1})); err != nil {
		t.Fatal(err)
	}
	stale := plane.AllWorkersBusy{Router: "other", QueueDepth: 1, AtUnixNano: time.Now().Add(-time.Hour).UnixNano()}
	if err := e.nc.Publish(e.subj.AllBusy, plane.Encode(stale)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "intruder and stale counted", func() bool {
		return e.metric(`kvroute_refused_total{reason="busy_unknown_router"}`) == 1 && e.metric(`kvroute_refused_total{reason="busy_stale"}`) == 1
	})
	if c, _, _ := e.do("POST", "/v1/completions", `{"prompt":"hello","max_tokens":1}`); c != 200 {
		t.Fatalf("a non-peer's or a stale all-workers-busy throttled: %d", c)
	}
	// A peer's message opens the window here.
	if err := e.nc.Publish(e.subj.AllBusy, plane.Encode(plane.AllWorkersBusy{Router: "other", QueueDepth: 1})); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "remote window", func() bool {
		c, _, _ := e.do("POST", "/v1/completions", `{"prompt":"hello","max_tokens":1}`)
		return c == 429
	})
	if v := e.metric("kvroute_all_workers_busy_remote_total"); v != 1 {
		t.Errorf("remote busy counted %v", v)
	}
	// A peer asking for an hour gets this router's window (300 ms): the
	// window closes again (unclamped, five messages throttled an idle
	// fleet for 9 s).
	waitFor(t, "remote window closed", func() bool {
		c, _, _ := e.do("POST", "/v1/completions", `{"prompt":"hello","max_tokens":1}`)
		return c == 200
	})
	hour := plane.AllWorkersBusy{Router: "other", QueueDepth: 1, AtUnixNano: time.Now().UnixNano(), WindowMillis: 3_600_000}
	if err := e.nc.Publish(e.subj.AllBusy, plane.Encode(hour)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "hour-long remote window opened", func() bool { return e.metric("kvroute_all_workers_busy_remote_total") == 2 })
	waitFor(t, "hour-long remote window clamped and closed", func() bool {
		c, _, _ := e.do("POST", "/v1/completions", `{"prompt":"hello","max_tokens":1}`)
		return c == 200
	})
}

// A registration with another block size is rejected loudly.
func TestBlockSizeMismatchRegistration(t *testing.T) {
	e := startEnv(t, envOptions{workers: 1})
	reg := plane.Registration{WorkerID: 99, URL: "http://127.0.0.1:1", DpRanks: []uint32{0}, BlockSize: 64, KVBlocks: 10,
		EventTransport: plane.TransportDynamo, HeartbeatMillis: 1000}
	if err := e.nc.Publish(e.subj.Heartbeat, plane.Encode(reg)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "mismatch counted", func() bool { return e.metric("kvroute_registration_block_size_mismatch_total") == 1 })
	if n := len(e.workers().Workers); n != 1 {
		t.Errorf("%d workers, want the mismatched one left out", n)
	}
}
