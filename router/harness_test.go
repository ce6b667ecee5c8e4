package router

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/kvroute/kvroute/bench/mock"
	"github.com/kvroute/kvroute/internal/natstest"
	"github.com/kvroute/kvroute/node"
	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/openai"
	"github.com/kvroute/kvroute/wire/plane"
	"github.com/kvroute/kvroute/wire/proxy"
)

const testBlockSize = 16

// env is a router service and a simulated fleet on a real in-process NATS
// server, talking over real HTTP on 127.0.0.1.
type env struct {
	t     *testing.T
	svc   *Service
	fleet *mock.Fleet
	nc    *nats.Conn // the test's own connection
	ns    *server.Server
	subj  plane.Subjects
	url   string
}

type envOptions struct {
	workers   int
	transport string
	sched     func(*sched.Config)
	approx    bool
	heartbeat time.Duration
	kvBlocks  int
	hostKV    int // the fleet's host tier per worker (mock.Config.HostKVBlocks)
	maxBatch  int
	grace     time.Duration
	pprof     bool
	// readyDelay is ShutdownReadyDelay; 0 here means none (tests close
	// many services).
	readyDelay time.Duration
	// static are static workers (--worker) besides the fleet; proxy and
	// health tune the proxy and the passive health checks.
	static []StaticWorker
	proxy  proxy.Config
	health func(*Config)
	// noFleet starts no simulated fleet.
	noFleet bool
	// eagle is --eagle-windows (Config.EagleWindows).
	eagle bool
	// node tunes the node's configuration (e.g. its fleet bounds).
	node    func(*node.Config)
	model   string // the fleet's model (default mock's "mock")
	maxBody int
	// chatTemplate renders chat messages in the router and the fleet.
	chatTemplate openai.ChatTemplate
	// serveIndexer: --serve-indexer (remote_test.go).
	serveIndexer bool
	// tokenizer, modelTokenizers and forwardIDs are the router's
	// (--tokenizer, --model-tokenizer, --forward-token-ids); fleetTokenizer
	// the simulated fleet's (kvroute mock --tokenizer). Default bytes.
	tokenizer       openai.Tokenizer
	modelTokenizers map[string]openai.Tokenizer
	forwardIDs      bool
	fleetTokenizer  openai.Tokenizer
	// routerID, sync and syncExpiry are --router-id,
	// --router-replica-sync and --router-sync-expiry (sync_test.go).
	routerID   string
	sync       bool
	syncExpiry time.Duration
	// dpSize is the fleet's dp ranks per worker (kvroute mock --dp-size).
	dpSize int
	// speedup divides the fleet's step times (default 20).
	speedup float64
	// tenants is --tenants (Config.TenantsPath).
	tenants string
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func startEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	if o.workers == 0 {
		o.workers = 4
	}
	if o.transport == "" {
		o.transport = plane.TransportDynamo
	}
	if o.heartbeat == 0 {
		o.heartbeat = time.Second // expiry after 3 s: a loaded machine must not expire a live worker
	}
	if o.grace == 0 {
		o.grace = 3 * time.Second
	}
	if o.kvBlocks == 0 {
		o.kvBlocks = 4096
	}
	if o.readyDelay == 0 {
		o.readyDelay = -1
	}
	if o.speedup == 0 {
		o.speedup = 20
	}
	ns := natstest.Server(t)
	subj, err := plane.SubjectsFor("test", "backend")
	if err != nil {
		t.Fatal(err)
	}
	sc := sched.DefaultConfig()
	sc.BlockSize = testBlockSize
	if o.sched != nil {
		o.sched(&sc)
	}
	cfg := ServiceConfig{
		Router: Config{Sched: sc, Subjects: subj, Approx: o.approx, TickInterval: 20 * time.Millisecond, QueueTimeout: 5 * time.Second,
			Workers: o.static, Proxy: o.proxy, MaxBodyBytes: o.maxBody, ChatTemplate: o.chatTemplate,
			Tokenizer: o.tokenizer, ModelTokenizers: o.modelTokenizers, ForwardTokenIDs: o.forwardIDs, EagleWindows: o.eagle,
			ID: o.routerID, Sync: o.sync, SyncExpiry: o.syncExpiry, TenantsPath: o.tenants},
		HTTPAddr:           "127.0.0.1:0",
		ShutdownGrace:      o.grace,
		ShutdownReadyDelay: o.readyDelay,
		Pprof:              o.pprof,
		AdminAddr:          "127.0.0.1:0",
		Node:               node.Config{NATSURL: ns.ClientURL(), NATSReconnectWait: 50 * time.Millisecond},
		Logger:             quietLogger(),
		ServeIndexer:       o.serveIndexer,
	}
	if o.health != nil {
		o.health(&cfg.Router)
	}
	if o.node != nil {
		o.node(&cfg.Node)
	}
	if o.approx {
		cfg.Node.Index.Core.Approx = shard.ApproxConfig{TTL: time.Minute, MaxBlocks: 1 << 16}
	}
	svc, err := StartService(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, svc: svc, nc: natstest.Connect(t, ns), ns: ns, subj: subj, url: "http://" + svc.Addr()}
	t.Cleanup(func() {
		if err := svc.Close(); err != nil {
			t.Errorf("service close: %v", err)
		}
	})
	if o.noFleet {
		return e
	}
	transport := o.transport
	if o.approx {
		transport = plane.TransportNone
	}
	e.fleet, err = mock.Start(mock.Config{
		Workers: o.workers, Port: 0, BlockSize: testBlockSize, KVBlocks: o.kvBlocks, HostKVBlocks: o.hostKV, Speedup: o.speedup,
		MaxBatchedTokens: o.maxBatch, Model: o.model, ChatTemplate: o.chatTemplate,
		Namespace: "test", Component: "backend", Transport: transport, Heartbeat: o.heartbeat,
		LoadInterval: 10 * time.Millisecond, Logger: quietLogger(), Tokenizer: o.fleetTokenizer, DPSize: o.dpSize,
	}, e.nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.fleet.Close() })
	e.waitWorkers(o.workers + len(o.static))
	return e
}

// waitFor polls cond until it holds or 10 s pass.
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

type workersDoc struct {
	Workers []struct {
		WorkerID uint64 `json:"worker_id"`
		URL      string `json:"url"`
		Health   string `json:"health"`
		Ranks    []struct {
			DpRank        uint32 `json:"dp_rank"`
			Requests      int    `json:"requests"`
			ActiveBlocks  int64  `json:"active_blocks"`
			PrefillTokens int64  `json:"prefill_tokens"`
			Decisions     uint64 `json:"decisions"`
			KVTotal       uint64 `json:"kv_total_blocks"`
			TreeBlocks    uint32 `json:"tree_blocks"`
		} `json:"ranks"`
	} `json:"workers"`
}

func (e *env) workers() workersDoc {
	e.t.Helper()
	var d workersDoc
	code, body, _ := e.do("GET", "/workers", "")
	if code != 200 {
		e.t.Fatalf("/workers: %d %s", code, body)
	}
	if err := json.Unmarshal(body, &d); err != nil {
		e.t.Fatalf("/workers: %v: %s", err, body)
	}
	return d
}

func (e *env) waitWorkers(n int) {
	e.t.Helper()
	waitFor(e.t, fmt.Sprintf("%d workers", n), func() bool { return len(e.workers().Workers) == n })
	waitFor(e.t, "ready", func() bool { c, _, _ := e.do("GET", "/ready", ""); return c == 200 })
}

// idle reports whether the scheduler holds no load anywhere.
func (e *env) idle() bool {
	for _, w := range e.workers().Workers {
		for _, r := range w.Ranks {
			if r.Requests != 0 || r.ActiveBlocks != 0 || r.PrefillTokens != 0 {
				return false
			}
		}
	}
	return true
}

func (e *env) do(method, path, body string) (int, []byte, http.Header) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: read: %v", method, path, err)
	}
	return resp.StatusCode, b, resp.Header
}

// tokens returns a prompt of family f (a shared prefix of prefix tokens)
// followed by a unique suffix of suffix tokens.
func tokens(f, i, prefix, suffix int) []uint32 {
	out := make([]uint32, 0, prefix+suffix)
	for j := range prefix {
		out = append(out, uint32(1000*f+j%997+1))
	}
	for j := range suffix {
		out = append(out, uint32(500000+1000*i+j))
	}
	return out
}

func promptJSON(toks []uint32) string {
	b, _ := json.Marshal(toks)
	return string(b)
}

// complete sends a non-streaming completion and returns the serving worker
// and the cached blocks the router reported.
func (e *env) complete(toks []uint32, maxTokens int) (worker uint64, cached int) {
	e.t.Helper()
	code, body, h := e.do("POST", "/v1/completions", fmt.Sprintf(`{"prompt":%s,"max_tokens":%d}`, promptJSON(toks), maxTokens))
	if code != 200 {
		e.t.Fatalf("completion: %d %s", code, body)
	}
	fmt.Sscan(h.Get(HeaderWorker), &worker)
	fmt.Sscan(h.Get(HeaderCachedBlocks), &cached)
	if h.Get(HeaderWorker) == "" {
		e.t.Fatalf("no %s header", HeaderWorker)
	}
	return worker, cached
}

// indexed waits until some worker holds the prompt's first n blocks in the index.
func (e *env) indexed(toks []uint32, n int) uint64 {
	e.t.Helper()
	hashes := wire.LocalHashes(nil, toks, testBlockSize, wire.Seed)
	var w uint64
	waitFor(e.t, "KV events in the index", func() bool {
		ovs, err := e.svc.Index.Match(nil, hashes)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, o := range ovs {
			if int(o.Blocks) >= n {
				w = o.Worker.Worker
				return true
			}
		}
		return false
	})
	// And until the batcher has refreshed the scheduler's tree sizes (the
	// tie-break between workers without overlap), so tests are repeatable.
	waitFor(e.t, "tree sizes in the scheduler", func() bool {
		ovs, _ := e.svc.Index.Workers(nil)
		want := map[wire.WorkerKey]uint32{}
		for _, o := range ovs {
			want[o.Worker] = o.TreeSize
		}
		for _, x := range e.workers().Workers {
			for _, r := range x.Ranks {
				if r.TreeBlocks != want[wire.WorkerKey{Worker: x.WorkerID, Dp: r.DpRank}] {
					return false
				}
			}
		}
		return true
	})
	return w
}

// metric returns the value of a metric line of /metrics (the first that
// starts with name), or -1.
func (e *env) metric(name string) float64 {
	e.t.Helper()
	_, body, _ := e.do("GET", "/metrics", "")
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, name+" ") {
			var v float64
			fmt.Sscan(line[len(name)+1:], &v)
			return v
		}
	}
	return -1
}
