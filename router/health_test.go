package router

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvroute/kvroute/bench/mock"
	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/wire/plane"
	"github.com/kvroute/kvroute/wire/proxy"
)

// front is a TCP relay in front of a worker: killing it refuses new
// connections and cuts open ones without an answer, as the death of the
// worker's process does; restarting it listens again on the same address.
type front struct {
	t      *testing.T
	addr   string
	target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func startFront(t *testing.T, target string) *front {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &front{t: t, addr: ln.Addr().String(), target: target, conns: map[net.Conn]struct{}{}}
	f.serve(ln)
	t.Cleanup(f.kill)
	return f
}

func (f *front) url() string { return "http://" + f.addr }

func (f *front) serve(ln net.Listener) {
	f.mu.Lock()
	f.ln = ln
	f.mu.Unlock()
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", f.target)
			if err != nil {
				c.Close()
				continue
			}
			f.mu.Lock()
			f.conns[c], f.conns[up] = struct{}{}, struct{}{}
			f.mu.Unlock()
			f.wg.Add(2)
			go f.pipe(c, up)
			go f.pipe(up, c)
		}
	}()
}

func (f *front) pipe(dst, src net.Conn) {
	defer f.wg.Done()
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
	f.mu.Lock()
	delete(f.conns, dst)
	delete(f.conns, src)
	f.mu.Unlock()
}

// kill closes the listener and every connection, and waits for the relay's
// goroutines.
func (f *front) kill() {
	f.mu.Lock()
	if f.ln != nil {
		f.ln.Close()
		f.ln = nil
	}
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

func (f *front) restart() {
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		f.t.Fatalf("relisten on %s: %v", f.addr, err)
	}
	f.serve(ln)
}

// staticFleet starts n simulated workers (ids 1..n, no NATS) behind fronts.
func staticFleet(t *testing.T, n int) ([]*front, []StaticWorker) {
	t.Helper()
	var fronts []*front
	var static []StaticWorker
	for i := 1; i <= n; i++ {
		w, err := mock.StartWorker(mock.WorkerConfig{ID: uint64(i), BlockSize: testBlockSize, KVBlocks: 4096, Speedup: 20,
			Transport: plane.TransportNone, Logger: quietLogger()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Close() })
		f := startFront(t, strings.TrimPrefix(w.URL(), "http://"))
		fronts = append(fronts, f)
		static = append(static, StaticWorker{ID: uint64(i), URL: f.url()})
	}
	return fronts, static
}

func roundRobin(c *sched.Config) { c.Policy = sched.PolicyRoundRobin }

// fastProbes makes down workers probed every 20 ms up to 100 ms.
func fastProbes(c *Config) {
	c.ProbeInterval, c.ProbeMaxInterval = 20*time.Millisecond, 100*time.Millisecond
}

// health returns a worker's health in /workers ("" if absent).
func (e *env) health(id uint64) string {
	for _, w := range e.workers().Workers {
		if w.WorkerID == id {
			return w.Health
		}
	}
	return ""
}

// try sends a completion and returns its status and serving worker.
func (e *env) try(i int) (int, string, string) {
	code, body, h := e.do("POST", "/v1/completions", fmt.Sprintf(`{"prompt":%s,"max_tokens":2}`, promptJSON(tokens(i, i, 32, 8))))
	return code, h.Get(HeaderWorker), string(body)
}

// A worker killed under a stream of requests costs no client an error: the
// requests that hit it are retried on another worker, it is ejected after
// its first failure and gets no more traffic, shows as down, and comes back
// once it answers again.
func TestDeadWorkerEjectedAndRetried(t *testing.T) {
	fronts, static := staticFleet(t, 3)
	e := startEnv(t, envOptions{noFleet: true, static: static, sched: roundRobin, health: fastProbes})
	e.waitWorkers(3)

	var (
		mu     sync.Mutex
		errs   []string
		served = map[string]int{}
		stop   = make(chan struct{})
		wg     sync.WaitGroup
	)
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				code, w, body := e.try(1000*g + i)
				mu.Lock()
				if code != 200 {
					errs = append(errs, fmt.Sprintf("%d %s", code, body))
				}
				served[w]++
				mu.Unlock()
			}
		}()
	}
	waitFor(t, "requests on every worker", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return served["1"] > 0 && served["2"] > 0 && served["3"] > 0
	})
	fronts[1].kill()
	waitFor(t, "worker 2 down", func() bool { return e.health(2) == "down" })
	retries := e.metric("kvroute_proxy_retries_total")
	for range 30 { // round-robin over the two left: worker 2 would get every third
		if code, w, body := e.try(5000); code != 200 || w == "2" {
			t.Fatalf("after ejection: %d from worker %q: %s", code, w, body)
		}
	}
	if got := e.metric("kvroute_proxy_retries_total"); got != retries {
		t.Errorf("retries went from %v to %v after the ejection: the down worker still got traffic", retries, got)
	}
	if retries < 1 {
		t.Errorf("kvroute_proxy_retries_total = %v, want >= 1", retries)
	}
	if v := e.metric("kvroute_worker_ejections_total"); v != 1 {
		t.Errorf("kvroute_worker_ejections_total = %v, want 1", v)
	}
	if v := e.metric(`kvroute_worker_up{worker="2",role="both"}`); v != 0 {
		t.Errorf(`kvroute_worker_up{worker="2",role="both"} = %v while down`, v)
	}
	if code, _, _ := e.do("GET", "/ready", ""); code != 200 {
		t.Errorf("/ready %d with two workers up", code)
	}

	fronts[1].restart()
	waitFor(t, "worker 2 back", func() bool { return e.health(2) == "ok" })
	if v := e.metric(`kvroute_worker_up{worker="2",role="both"}`); v != 1 {
		t.Errorf(`kvroute_worker_up{worker="2",role="both"} = %v after recovery`, v)
	}
	waitFor(t, "traffic on worker 2 again", func() bool { code, w, _ := e.try(9000); return code == 200 && w == "2" })
	close(stop)
	wg.Wait()
	if len(errs) > 0 {
		t.Errorf("%d requests failed, first: %s", len(errs), errs[0])
	}
	if v := e.metric("kvroute_worker_recoveries_total"); v != 1 {
		t.Errorf("kvroute_worker_recoveries_total = %v, want 1", v)
	}
}

// With every worker down /ready answers 503 and says so; it turns 200 when
// one answers its health check again.
func TestReadyFollowsWorkerHealth(t *testing.T) {
	fronts, static := staticFleet(t, 1)
	e := startEnv(t, envOptions{noFleet: true, static: static, health: fastProbes})
	e.waitWorkers(1)
	fronts[0].kill()
	if code, _, body := e.try(1); code != 502 {
		t.Fatalf("request to the only, dead worker: %d %s", code, body)
	}
	// The 502 ejects the worker on the batcher, after the response: wait
	// for /ready to see it rather than racing it.
	var (
		code int
		body []byte
	)
	waitFor(t, "/ready to see the worker down", func() bool {
		code, body, _ = e.do("GET", "/ready", "")
		return code != 200
	})
	if code != 503 || !strings.Contains(string(body), "down") {
		t.Errorf("/ready with the only worker down: %d %s", code, body)
	}
	if code, _, body := e.try(2); code != 503 || !strings.Contains(body, "down") {
		t.Errorf("request with every worker down: %d %s", code, body)
	}
	fronts[0].restart()
	waitFor(t, "ready again", func() bool { c, _, _ := e.do("GET", "/ready", ""); return c == 200 })
	if code, w, body := e.try(3); code != 200 || w != "1" {
		t.Errorf("after recovery: %d from %q: %s", code, w, body)
	}
}

// silentWorker accepts connections and never answers, like a stopped
// (SIGSTOP) engine whose kernel still completes handshakes.
func silentWorker(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		done  = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return "http://" + ln.Addr().String()
}

// A streamed request to a worker that accepts but never answers is
// answered by another worker once --worker-first-byte-timeout passes, and
// the silent worker is ejected.
func TestSilentWorkerFirstByteTimeout(t *testing.T) {
	_, static := staticFleet(t, 2)
	static = append(static, StaticWorker{ID: 3, URL: silentWorker(t)})
	e := startEnv(t, envOptions{noFleet: true, static: static, sched: roundRobin, health: fastProbes,
		proxy: proxy.Config{FirstByteTimeout: 200 * time.Millisecond}})
	e.waitWorkers(3)
	// Round-robin: one of any three requests is decided onto worker 3.
	for i := range 3 {
		body := fmt.Sprintf(`{"prompt":%s,"max_tokens":3,"stream":true}`, promptJSON(tokens(i, i, 32, 0)))
		resp, err := http.Post(e.url+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		w := resp.Header.Get(HeaderWorker)
		if err != nil || resp.StatusCode != 200 || !strings.Contains(string(b), "[DONE]") || (w != "1" && w != "2") {
			t.Fatalf("request %d: %d from worker %q: %s %v", i, resp.StatusCode, w, b, err)
		}
	}
	if v := e.metric("kvroute_proxy_first_byte_timeouts_total"); v != 1 {
		t.Errorf("kvroute_proxy_first_byte_timeouts_total = %v, want 1", v)
	}
	if v := e.metric("kvroute_proxy_retries_total"); v != 1 {
		t.Errorf("kvroute_proxy_retries_total = %v, want 1", v)
	}
	waitFor(t, "worker 3 down", func() bool { return e.health(3) == "down" })
	if v := e.metric("kvroute_worker_ejections_total"); v != 1 {
		t.Errorf("kvroute_worker_ejections_total = %v, want 1", v)
	}
}

// A registered worker whose URL refuses connections keeps heartbeating, so
// it stays registered, but after its first failure it is down and draws no
// traffic; its heartbeats do not put it back.
func TestRegisteredWorkerRefusingIsEjected(t *testing.T) {
	e := startEnv(t, envOptions{workers: 2, sched: roundRobin, health: func(c *Config) {
		c.ProbeInterval, c.ProbeMaxInterval = time.Hour, time.Hour // only passive: no probe can bring it back
	}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String()
	ln.Close()
	reg := plane.Registration{WorkerID: 50, URL: refused, DpRanks: []uint32{0}, BlockSize: testBlockSize, KVBlocks: 4096,
		EventTransport: plane.TransportDynamo, HeartbeatMillis: 2000} // expiry 6 s: a loaded machine must not expire it mid-test
	stop := make(chan struct{})
	beats := make(chan struct{})
	go func() {
		defer close(beats)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			_ = e.nc.Publish(e.subj.Heartbeat, plane.Encode(&reg))
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	defer func() { close(stop); <-beats }()
	e.waitWorkers(3)
	for i := range 3 { // round-robin: one of them is decided onto worker 50
		if code, w, body := e.try(i); code != 200 || w == "50" {
			t.Fatalf("request %d: %d from %q: %s", i, code, w, body)
		}
	}
	if e.health(50) != "down" {
		t.Fatalf("worker 50 is %q, want down", e.health(50))
	}
	retries := e.metric("kvroute_proxy_retries_total")
	for i := range 12 {
		if code, w, body := e.try(100 + i); code != 200 || w == "50" {
			t.Fatalf("request %d: %d from %q: %s", i, code, w, body)
		}
	}
	if v := e.metric("kvroute_proxy_retries_total"); v != retries || retries != 1 {
		t.Errorf("retries %v then %v, want 1 and no more", retries, v)
	}
	if h := e.health(50); h != "down" {
		t.Errorf("worker 50 is %q after more heartbeats, want down", h)
	}
}

// treeBlocks is the number of blocks the index holds for worker.
func (e *env) treeBlocks(worker uint64) uint32 {
	ws, err := e.svc.Index.Workers(nil)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, w := range ws {
		if w.Worker.Worker == worker {
			return w.TreeSize
		}
	}
	return 0
}

// A down worker keeps its blocks in the index (it may come back with its
// cache) until it has been down for ForgetAfter.
func TestDownWorkerKeepsIndexUntilForgotten(t *testing.T) {
	fronts, static := staticFleet(t, 2)
	e := startEnv(t, envOptions{noFleet: true, static: static, approx: true, sched: roundRobin, health: func(c *Config) {
		c.ProbeInterval, c.ProbeMaxInterval = time.Hour, time.Hour
		c.ForgetAfter = time.Hour
	}})
	e.waitWorkers(2)
	for i := range 2 {
		if code, _, body := e.try(i); code != 200 {
			t.Fatalf("request %d: %d %s", i, code, body)
		}
	}
	if e.treeBlocks(1) == 0 {
		t.Fatal("worker 1 has no blocks in the index")
	}
	fronts[0].kill()
	waitFor(t, "worker 1 down", func() bool { e.try(7); return e.health(1) == "down" })
	if e.treeBlocks(1) == 0 {
		t.Error("worker 1 lost its index entries at once")
	}
	// Now shorten ForgetAfter on the batcher: the next tick drops them.
	if err := e.svc.Router.call(func() { e.svc.Router.cfg.ForgetAfter = time.Millisecond }, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "worker 1's blocks dropped", func() bool { return e.treeBlocks(1) == 0 })
}

// A retry keeps the request's model restriction: when a worker serving the
// requested model fails, the request goes to another worker serving it,
// never to a worker of another model. With random routing and four workers
// of another model, a retry that forgot the model would land on one of them
// with probability 4/5 in each of the three rounds.
func TestRetryKeepsModel(t *testing.T) {
	fronts, static := staticFleet(t, 6)
	for i := range static {
		static[i].Model = "b"
	}
	static[0].Model, static[1].Model = "a", "a"
	random := func(c *sched.Config) { c.Policy = sched.PolicyRandom }
	e := startEnv(t, envOptions{noFleet: true, static: static, sched: random, health: fastProbes})
	e.waitWorkers(6)
	for round := range 3 {
		fronts[0].kill()
		for i := 0; e.health(1) != "down"; i++ {
			if i == 200 {
				t.Fatalf("round %d: worker 1 never tried", round)
			}
			body := fmt.Sprintf(`{"model":"a","prompt":%s,"max_tokens":2}`, promptJSON(tokens(i, i, 32, 8)))
			code, b, h := e.do("POST", "/v1/completions", body)
			if code != 200 || h.Get(HeaderWorker) != "2" {
				t.Fatalf("round %d, request %d for model a: %d from worker %q: %s", round, i, code, h.Get(HeaderWorker), b)
			}
		}
		fronts[0].restart()
		waitFor(t, "worker 1 back", func() bool { return e.health(1) == "ok" })
	}
	if v := e.metric("kvroute_proxy_retries_total"); v != 3 {
		t.Errorf("kvroute_proxy_retries_total = %v, want 3 (one per round)", v)
	}
}
