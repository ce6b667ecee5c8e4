package router

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/bench/mock"
	"github.com/kvroute/kvroute/wire/plane"
)

type errorDoc struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func parseError(t *testing.T, body []byte) errorDoc {
	t.Helper()
	var d errorDoc
	if err := json.Unmarshal(body, &d); err != nil || d.Error.Message == "" {
		t.Fatalf("not an OpenAI error body (%v): %.300s", err, body)
	}
	return d
}

func (d errorDoc) code() string {
	if d.Error.Code == nil {
		return "<null>"
	}
	return *d.Error.Code
}

func (e *env) modelIDs() []string {
	e.t.Helper()
	code, body, _ := e.do("GET", "/v1/models", "")
	if code != 200 {
		e.t.Fatalf("/v1/models: %d %s", code, body)
	}
	var d struct {
		Object string `json:"object"`
		Data   []struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Created int64  `json:"created"`
			OwnedBy string `json:"owned_by"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &d); err != nil || d.Object != "list" {
		e.t.Fatalf("/v1/models: %v: %s", err, body)
	}
	var ids []string
	for _, m := range d.Data {
		if m.Object != "model" || m.OwnedBy != "kvroute" || m.Created == 0 {
			e.t.Errorf("/v1/models entry %+v", m)
		}
		ids = append(ids, m.ID)
	}
	return ids
}

// GET /v1/models lists the union of the fleet's models: registered ones,
// a static worker's model= and the models a static worker lists itself. A
// request naming a model goes only to its workers; an unknown model gets
// 404 model_not_found; no model keeps the whole fleet. /route too.
func TestModels(t *testing.T) {
	// A worker outside the fleet, reached as a static worker that lists
	// its model itself (GET /v1/models), and as another given model=.
	solo, err := mock.StartWorker(mock.WorkerConfig{ID: 50, Model: "gamma", Speedup: 20, BlockSize: testBlockSize, Transport: plane.TransportNone}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer solo.Close()
	e := startEnv(t, envOptions{workers: 2, model: "alpha", static: []StaticWorker{
		{ID: 50, URL: solo.URL()},
		{ID: 51, URL: solo.URL(), Model: "delta"},
	}})
	beta, err := mock.Start(mock.Config{Workers: 1, WorkerIDs: []uint64{3}, Model: "beta", BlockSize: testBlockSize, Speedup: 20,
		Namespace: "test", Component: "backend", Heartbeat: time.Second, Logger: quietLogger()}, e.nc)
	if err != nil {
		t.Fatal(err)
	}
	defer beta.Close()
	waitFor(t, "every model listed", func() bool {
		return slices.Equal(e.modelIDs(), []string{"alpha", "beta", "delta", "gamma"})
	})
	served := func(model string) map[uint64]int {
		got := map[uint64]int{}
		for i := range 12 {
			code, body, h := e.do("POST", "/v1/chat/completions",
				fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"q%d"}],"max_tokens":1}`, model, i))
			if code != 200 {
				t.Fatalf("model %s: %d %s", model, code, body)
			}
			var w uint64
			fmt.Sscan(h.Get(HeaderWorker), &w)
			got[w]++
		}
		return got
	}
	for model, want := range map[string][]uint64{"alpha": {1, 2}, "beta": {3}, "gamma": {50}, "delta": {51}} {
		for w := range served(model) {
			if !slices.Contains(want, w) {
				t.Errorf("model %s served by worker %d, want one of %v", model, w, want)
			}
		}
	}
	if got := served(""); len(got) < 2 {
		t.Errorf("requests without a model went to %v only", got)
	}
	code, body, _ := e.do("POST", "/v1/completions", `{"model":"nope","prompt":"hi"}`)
	if d := parseError(t, body); code != 404 || d.code() != "model_not_found" || d.Error.Param == nil || *d.Error.Param != "model" ||
		!strings.Contains(d.Error.Message, `"nope"`) {
		t.Errorf("unknown model: %d %s", code, body)
	}
	// /route with a model: only its workers; combined with overrides.
	for range 6 {
		code, body, _ := e.do("POST", "/route", `{"prompt":"x","model":"beta"}`)
		if code != 200 || !strings.Contains(string(body), `"worker_id":3,`) {
			t.Errorf("/route model beta: %d %s", code, body)
		}
		var d struct {
			RequestID string `json:"request_id"`
		}
		_ = json.Unmarshal(body, &d)
		e.do("POST", "/route/"+d.RequestID+"/free", "")
	}
	code, body, _ = e.do("POST", "/route", `{"prompt":"x","model":"nope"}`)
	if d := parseError(t, body); code != 404 || d.code() != "model_not_found" {
		t.Errorf("/route unknown model: %d %s", code, body)
	}
	code, body, _ = e.do("POST", "/route", `{"prompt":"x","model":"beta","overrides":{"allowed_workers":[1,2]}}`)
	if d := parseError(t, body); code != 400 || !strings.Contains(d.Error.Message, `serves model "beta"`) {
		t.Errorf("/route allowed workers without the model: %d %s", code, body)
	}
	code, body, _ = e.do("POST", "/route", `{"prompt":"x","model":"alpha","overrides":{"worker_id":3}}`)
	if d := parseError(t, body); code != 400 || !strings.Contains(d.Error.Message, `does not serve model "alpha"`) {
		t.Errorf("/route pinned to a worker without the model: %d %s", code, body)
	}
	waitFor(t, "load freed", e.idle)
}

// Without declared models (static workers that list none), a request's
// model does not restrict routing and /v1/models is an empty list.
func TestModelsUndeclared(t *testing.T) {
	e := startEnv(t, envOptions{workers: 1, static: []StaticWorker{{ID: 60, URL: "http://127.0.0.1:1"}}})
	// The fleet declares "mock"; the unreachable static worker declares
	// nothing, so it is a candidate for any model, "mock" included.
	if ids := e.modelIDs(); !slices.Equal(ids, []string{"mock"}) {
		t.Errorf("models %v", ids)
	}
	code, body, _ := e.do("POST", "/route", `{"prompt":"x","model":"other","overrides":{"worker_id":60}}`)
	if code != 200 || !strings.Contains(string(body), `"worker_id":60,`) {
		t.Errorf("undeclared worker takes any model: %d %s", code, body)
	}
}

// A worker that dies mid-stream: the client gets an SSE error event, not a
// stream that looks complete; it is counted and the load freed.
func TestWorkerDiesMidStream(t *testing.T) {
	e := startEnv(t, envOptions{workers: 1})
	body := fmt.Sprintf(`{"prompt":%s,"max_tokens":5000,"stream":true}`, promptJSON(tokens(1, 1, 64, 4)))
	resp, err := http.Post(e.url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: {") {
		t.Fatalf("first event %q %v", line, err)
	}
	e.fleet.Workers()[0].CutConnections()
	rest, _ := io.ReadAll(r)
	if strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("stream ended with [DONE] after the worker died")
	}
	events := strings.Split(strings.TrimSpace(string(rest)), "\n\n")
	last, ok := strings.CutPrefix(events[len(events)-1], "data: ")
	if !ok {
		t.Fatalf("last event %q", events[len(events)-1])
	}
	if d := parseError(t, []byte(last)); d.code() != "worker_stream_interrupted" || d.Error.Type != "server_error" {
		t.Errorf("error event %s", last)
	}
	waitFor(t, "worker gone counted", func() bool { return e.metric("kvroute_proxy_worker_gone_total") == 1 })
	waitFor(t, "load freed", e.idle)
}

// A body over --max-body-bytes sent in full by a client that reads the
// answer only afterwards (as Node's HTTP clients do) gets the 413 JSON
// answer, not a connection reset in the middle of its upload.
func TestOversizedBodyWhileSending(t *testing.T) {
	e := startEnv(t, envOptions{workers: 1, maxBody: 1 << 20})
	conn, err := net.Dial("tcp", e.svc.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const size = 17 << 20
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", size); err != nil {
		t.Fatal(err)
	}
	chunk := []byte(strings.Repeat("x", 64<<10))
	for sent := 0; sent < size; sent += len(chunk) {
		if _, err := conn.Write(chunk); err != nil {
			t.Fatalf("upload failed after %d bytes: %v", sent, err)
		}
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if d := parseError(t, b); resp.StatusCode != 413 || d.code() != "request_too_large" || !strings.Contains(d.Error.Message, "--max-body-bytes") {
		t.Errorf("oversized body: %d %s", resp.StatusCode, b)
	}
	if !resp.Close {
		t.Error("413 without Connection: close")
	}
	if v := e.metric(`kvroute_http_requests_total{endpoint="completions",code="413"}`); v != 1 {
		t.Errorf("413 counted %v times", v)
	}
}

// Connection-level errors: oversized headers get 431, a malformed request
// 400, both as JSON that does not echo the request (its Authorization
// header), and both are counted.
func TestConnectionErrors(t *testing.T) {
	e := startEnv(t, envOptions{workers: 1})
	raw := func(req string) (*http.Response, string) {
		t.Helper()
		conn, err := net.Dial("tcp", e.svc.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(conn, req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	const secret = "Bearer sk-very-secret-token"
	big := "GET /health HTTP/1.1\r\nHost: x\r\nAuthorization: " + secret + "\r\nX-Pad: " + strings.Repeat("p", DefaultMaxHeaderBytes) + "\r\n\r\n"
	resp, body431 := raw(big)
	body := body431
	if d := parseError(t, []byte(body)); resp.StatusCode != 431 || d.code() != "request_header_fields_too_large" ||
		!strings.Contains(body, "--max-header-bytes") {
		t.Errorf("oversized headers: %d %s", resp.StatusCode, body)
	}
	resp, body = raw("GE\x01T /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: " + secret + "\r\n\r\n")
	if d := parseError(t, []byte(body)); resp.StatusCode != 400 || d.code() != "invalid_request_error" {
		t.Errorf("bad method: %d %s", resp.StatusCode, body)
	}
	for _, b := range []string{body, body431} {
		if strings.Contains(b, "secret") || strings.Contains(b, "Authorization") {
			t.Errorf("error answer echoes the request: %s", b)
		}
	}
	if v := e.metric(`kvroute_http_requests_total{endpoint="connection",code="431"}`); v != 1 {
		t.Errorf("431 counted %v times", v)
	}
	if v := e.metric(`kvroute_http_requests_total{endpoint="connection",code="400"}`); v != 1 {
		t.Errorf("400 counted %v times", v)
	}
}
