package router

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	"testing"
	"time"

	"github.com/kvroute/kvroute/wire/proxy"
)

// hungClient bounds a test's requests far below the proxy's 5-minute read
// timeout, so a request held for a hung worker's whole hang fails the test
// instead of stalling it.
var hungClient = &http.Client{Timeout: 20 * time.Second}

// postWith sends a completion with extra request headers and returns its
// status, serving worker and body (status -1: no answer within
// hungClient's timeout).
func (e *env) postWith(body string, header map[string]string) (int, string, string) {
	e.t.Helper()
	req, err := http.NewRequest("POST", e.url+"/v1/completions", strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := hungClient.Do(req)
	if err != nil {
		return -1, "", err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get(HeaderWorker), string(b)
}

// Ejecting a worker gives up on the non-streamed requests it holds that
// have had no answer yet and sends them to another worker: a request
// decided onto a hung (SIGSTOP-like) worker is answered by another as soon
// as a streamed request's first-byte timeout ejects the worker, not after
// the hang (here: never; the proxy's read timeout is 5 minutes).
func TestEjectionResendsWaitingRequests(t *testing.T) {
	_, static := staticFleet(t, 2)
	static = append(static, StaticWorker{ID: 3, URL: silentWorker(t)})
	e := startEnv(t, envOptions{noFleet: true, static: static, sched: roundRobin, health: fastProbes,
		proxy: proxy.Config{FirstByteTimeout: 300 * time.Millisecond}})
	e.waitWorkers(3)

	// Three non-streamed requests at once, round-robin: one is decided onto
	// the hung worker 3 and waits there.
	type answer struct {
		code   int
		worker string
		body   string
		after  time.Duration
	}
	answers := make(chan answer, 3)
	start := time.Now()
	for i := range 3 {
		go func() {
			code, w, body := e.postWith(fmt.Sprintf(`{"prompt":%s,"max_tokens":2}`, promptJSON(tokens(i, i, 32, 8))), nil)
			answers <- answer{code, w, body, time.Since(start)}
		}()
	}
	for range 2 {
		if a := <-answers; a.code != 200 {
			t.Fatalf("request on a healthy worker: %d from %q: %s", a.code, a.worker, a.body)
		}
	}
	select {
	case a := <-answers:
		t.Fatalf("the third request was answered before the hung worker was ejected: %+v", a)
	case <-time.After(200 * time.Millisecond):
	}
	// Streamed requests until one reaches worker 3 and times out: that
	// ejects it.
	ejectedAt := time.Duration(0)
	for i := range 3 {
		code, w, body := e.postWith(fmt.Sprintf(`{"prompt":%s,"max_tokens":2,"stream":true}`, promptJSON(tokens(10+i, i, 32, 8))), nil)
		if code != 200 || w == "3" {
			t.Fatalf("streamed request %d: %d from %q: %s", i, code, w, body)
		}
		if e.metric("kvroute_proxy_first_byte_timeouts_total") == 1 {
			ejectedAt = time.Since(start)
			break
		}
	}
	if ejectedAt == 0 {
		t.Fatal("no streamed request reached worker 3")
	}
	a := <-answers
	if a.code != 200 || a.worker == "3" {
		t.Fatalf("the request held by the hung worker: %d from %q after %v: %s", a.code, a.worker, a.after, a.body)
	}
	t.Logf("held request answered %v after the start, the worker ejected at about %v", a.after, ejectedAt)
	if v := e.metric("kvroute_proxy_abandoned_total"); v != 1 {
		t.Errorf("kvroute_proxy_abandoned_total = %v, want 1", v)
	}
	if v := e.metric("kvroute_worker_ejections_total"); v != 1 {
		t.Errorf("kvroute_worker_ejections_total = %v, want 1", v)
	}
}

// A non-streamed request to a worker that accepts but never answers is
// answered by another worker once --worker-response-timeout passes, and
// the silent worker is ejected.
func TestSilentWorkerResponseTimeout(t *testing.T) {
	_, static := staticFleet(t, 2)
	static = append(static, StaticWorker{ID: 3, URL: silentWorker(t)})
	e := startEnv(t, envOptions{noFleet: true, static: static, sched: roundRobin, health: fastProbes,
		proxy: proxy.Config{ResponseTimeout: 300 * time.Millisecond}})
	e.waitWorkers(3)
	for i := range 3 { // round-robin: one of any three is decided onto worker 3
		code, w, body := e.postWith(fmt.Sprintf(`{"prompt":%s,"max_tokens":2}`, promptJSON(tokens(i, i, 32, 8))), nil)
		if code != 200 || (w != "1" && w != "2") {
			t.Fatalf("request %d: %d from worker %q: %s", i, code, w, body)
		}
	}
	if v := e.metric("kvroute_proxy_response_timeouts_total"); v != 1 {
		t.Errorf("kvroute_proxy_response_timeouts_total = %v, want 1", v)
	}
	if v := e.metric("kvroute_proxy_retries_total"); v != 1 {
		t.Errorf("kvroute_proxy_retries_total = %v, want 1", v)
	}
	waitFor(t, "worker 3 down", func() bool { return e.health(3) == "down" })
}

// A client's own deadline (X-Stainless-Timeout, as the OpenAI SDKs send
// it) shorter than --worker-response-timeout ends a non-streamed request's
// wait with 504, and does not count against the worker: a short client
// deadline is no sign of a hung worker.
func TestClientDeadlineBoundsTheWait(t *testing.T) {
	e := startEnv(t, envOptions{noFleet: true, static: []StaticWorker{{ID: 1, URL: silentWorker(t), Model: "m"}}, health: fastProbes,
		proxy: proxy.Config{ResponseTimeout: time.Hour}})
	e.waitWorkers(1)
	start := time.Now()
	code, _, body := e.postWith(fmt.Sprintf(`{"prompt":%s,"max_tokens":2}`, promptJSON(tokens(1, 1, 32, 8))), map[string]string{HeaderClientTimeout: "0.3"})
	if code != 504 || !strings.Contains(body, HeaderClientTimeout) {
		t.Fatalf("request with a 0.3 s client deadline to a silent worker: %d after %v: %s", code, time.Since(start), body)
	}
	if v := e.metric("kvroute_proxy_client_deadline_total"); v != 1 {
		t.Errorf("kvroute_proxy_client_deadline_total = %v, want 1", v)
	}
	if h := e.health(1); h != "ok" || e.metric("kvroute_worker_ejections_total") != 0 {
		t.Errorf("after a client deadline: worker health %q, ejections %v; want ok, 0", h, e.metric("kvroute_worker_ejections_total"))
	}
}

func TestParseSeconds(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"600": 600 * time.Second, "12.5": 12500 * time.Millisecond, "0.3": 300 * time.Millisecond, "1.": time.Second,
		"": 0, "0": 0, "-1": 0, "1e3": 0, "abc": 0, "1.2.3": 0, "999999999999": 0,
	} {
		got, ok := parseSeconds([]byte(in))
		if got != want || ok != (want > 0) {
			t.Errorf("parseSeconds(%q) = %v, %v; want %v", in, got, ok, want)
		}
	}
}
