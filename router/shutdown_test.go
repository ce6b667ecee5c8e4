package router

import (
	"bufio"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/sched"
)

// activeRequests reads the scheduler's booked requests from the batcher.
func (e *env) activeRequests() int {
	var st sched.Stats
	if err := e.svc.Router.call(func() { st = e.svc.Router.s.Stats() }, 5*time.Second); err != nil {
		e.t.Fatal(err)
	}
	return st.Active
}

func openStream(t *testing.T, e *env, maxTokens int) (*http.Response, *bufio.Reader) {
	t.Helper()
	body := fmt.Sprintf(`{"prompt":%s,"max_tokens":%d,"stream":true}`, promptJSON(tokens(2, 2, 64, 0)), maxTokens)
	resp, err := http.Post(e.url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(resp.Body)
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	return resp, r
}

// Drain lets an in-flight stream finish, refuses new connections, and
// leaves no load booked.
func TestDrainFinishesStreams(t *testing.T) {
	e := startEnv(t, envOptions{workers: 1, grace: 10 * time.Second})
	resp, r := openStream(t, e, 300)
	defer resp.Body.Close()
	drained := make(chan error, 1)
	go func() { drained <- e.svc.Drain() }()
	rest := ""
	for {
		line, err := r.ReadString('\n')
		rest += line
		if err != nil {
			break
		}
	}
	if !strings.Contains(rest, "[DONE]") {
		t.Errorf("stream cut during drain: %.200s", rest)
	}
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(e.url + "/health"); err == nil {
		t.Error("still accepting connections after Drain")
	}
	waitFor(t, "load freed", func() bool { return e.activeRequests() == 0 })
}

// With nothing in flight, Drain does not wait out the ready delay: it ends
// once no request has been in flight for readyQuiet.
func TestDrainIdleEndsReadyDelay(t *testing.T) {
	e := startEnv(t, envOptions{workers: 1, grace: 60 * time.Second, readyDelay: 30 * time.Second})
	if w, _ := e.complete(tokens(1, 1, 32, 0), 2); w == 0 {
		t.Fatal("no worker served the request")
	}
	start := time.Now()
	if err := e.svc.Drain(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("an idle router drained in %v (ready delay 30s)", d)
	}
	if _, err := http.Get(e.url + "/health"); err == nil {
		t.Error("still accepting connections after Drain")
	}
}

// A stream still running when the grace period ends is cut with an SSE
// error event (code shutting_down), and its load freed.
func TestDrainCutsLongStreams(t *testing.T) {
	e := startEnv(t, envOptions{workers: 1, grace: 200 * time.Millisecond})
	resp, r := openStream(t, e, 50000)
	defer resp.Body.Close()
	if n := e.activeRequests(); n != 1 {
		t.Fatalf("%d active requests while streaming", n)
	}
	start := time.Now()
	if err := e.svc.Drain(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("drain took %v with a 200ms grace", d)
	}
	// The stream's last event is an error event saying why it ends.
	last := ""
	for {
		line, err := r.ReadString('\n')
		if strings.HasPrefix(line, "data: ") {
			last = line
		}
		if err != nil {
			break
		}
	}
	if strings.Contains(last, "[DONE]") || !strings.Contains(last, `"code":"shutting_down"`) {
		t.Errorf("last event of a stream cut at shutdown: %q", last)
	}
	waitFor(t, "load freed", func() bool { return e.activeRequests() == 0 })
}

// --pprof serves profiles and metrics on the admin listener.
func TestAdminListener(t *testing.T) {
	e := startEnv(t, envOptions{workers: 1, pprof: true})
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1", "/metrics"} {
		resp, err := http.Get("http://" + e.svc.AdminAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("admin %s: %d", path, resp.StatusCode)
		}
	}
}
