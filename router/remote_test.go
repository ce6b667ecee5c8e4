package router

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvroute/kvroute/internal/promtext"
	"github.com/kvroute/kvroute/node"
	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/wire/plane"
)

// startRemote starts a second router on e's NATS with --use-remote-indexer:
// it keeps no index and looks prompts up in e's (which serves it).
func startRemote(t *testing.T, e *env, approx bool, timeout time.Duration) *env {
	t.Helper()
	sc := sched.DefaultConfig()
	sc.BlockSize = testBlockSize
	cfg := ServiceConfig{
		Router:               Config{Sched: sc, Subjects: e.subj, Approx: approx, TickInterval: 20 * time.Millisecond, QueueTimeout: 5 * time.Second},
		HTTPAddr:             "127.0.0.1:0",
		ShutdownGrace:        3 * time.Second,
		ShutdownReadyDelay:   -1,
		Node:                 node.Config{NATSURL: e.ns.ClientURL(), NATSReconnectWait: 50 * time.Millisecond},
		Logger:               quietLogger(),
		UseRemoteIndexer:     true,
		RemoteIndexerTimeout: timeout,
		RemoteTreeInterval:   20 * time.Millisecond,
	}
	svc, err := StartService(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close() })
	r := &env{t: t, svc: svc, nc: e.nc, ns: e.ns, subj: e.subj, url: "http://" + svc.Addr()}
	r.waitWorkers(len(e.workers().Workers))
	return r
}

// A router with --use-remote-indexer routes a repeated prefix to the worker
// holding it (the serving router's index knows it from KV events), and when
// the serving index goes away it routes with zero overlap, counted, and
// never fails the client.
func TestRemoteIndexer(t *testing.T) {
	e := startEnv(t, envOptions{workers: 4, serveIndexer: true})
	r := startRemote(t, e, false, time.Second)

	toks := tokens(1, 0, 8*testBlockSize, 5)
	first, _ := r.complete(toks, 2)
	holder := e.indexed(toks, 8)
	if holder != first {
		t.Fatalf("the index says worker %d holds the prompt, the first request went to %d", holder, first)
	}
	if ws, _ := r.svc.Index.Workers(nil); len(ws) != 0 {
		t.Fatalf("the remote-indexer router has a local index with %d worker keys; it must ingest nothing", len(ws))
	}
	for i := range 3 {
		w, cached := r.complete(tokens(1, i+1, 8*testBlockSize, 5), 2)
		if w != holder || cached < 8 {
			t.Fatalf("request %d: worker %d with %d cached blocks; want worker %d with >= 8", i, w, cached, holder)
		}
	}
	// The serving index's tree sizes reach the remote router (its
	// tie-break between workers a request does not overlap), for every
	// worker, not only those a lookup overlapped.
	waitFor(t, "the serving index's tree sizes on the remote router", func() bool {
		ws, _ := e.svc.Index.Workers(nil)
		want := map[uint64]uint32{}
		for _, o := range ws {
			want[o.Worker.Worker] = o.TreeSize
		}
		if want[holder] == 0 {
			return false
		}
		for _, x := range r.workers().Workers {
			for _, rk := range x.Ranks {
				if rk.TreeBlocks != want[x.WorkerID] {
					return false
				}
			}
		}
		return true
	})
	if v := r.metric("kvroute_remote_index_lookups_total"); v < 4 {
		t.Fatalf("kvroute_remote_index_lookups_total = %v, want >= 4", v)
	}
	if v := e.metric("kvroute_index_query_prompts_total"); v < 4 {
		t.Fatalf("serving router: kvroute_index_query_prompts_total = %v, want >= 4", v)
	}

	// The serving index stops: requests still succeed, with zero overlap.
	if err := e.svc.IndexServer.Close(); err != nil {
		t.Fatal(err)
	}
	before := r.svc.Remote.Failures()
	for i := range 3 {
		_, cached := r.complete(tokens(1, 10+i, 8*testBlockSize, 5), 2)
		if cached != 0 {
			t.Fatalf("with the serving index stopped: %d cached blocks, want 0", cached)
		}
	}
	if got := r.svc.Remote.Failures() - before; got < 3 {
		t.Fatalf("%d failed lookups counted, want >= 3", got)
	}
	_, body, _ := r.do("GET", "/metrics", "")
	if err := promtext.Check(body); err != nil {
		t.Errorf("remote router /metrics: %v", err)
	}
	if _, sbody, _ := e.do("GET", "/metrics", ""); promtext.Check(sbody) != nil || !strings.Contains(string(sbody), "# TYPE kvroute_index_queries_served_total counter") {
		t.Errorf("serving router /metrics: %v", promtext.Check(sbody))
	}
	if !strings.Contains(string(body), `kvroute_remote_index_failures_total{reason="no_responders"}`) {
		t.Fatal("/metrics has no kvroute_remote_index_failures_total{reason=\"no_responders\"}")
	}
}

// A serving index that answers too late degrades like a dead one: the
// query times out (--remote-indexer-timeout) and is counted as a timeout.
func TestRemoteIndexerTimeout(t *testing.T) {
	e := startEnv(t, envOptions{workers: 2})
	// A responder that never answers stands for a stalled indexer.
	sub, err := e.nc.QueueSubscribe(plane.IndexSubject(e.subj), "kvroute-indexer", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	r := startRemote(t, e, false, 30*time.Millisecond)
	_, cached := r.complete(tokens(2, 0, 4*testBlockSize, 3), 2)
	if cached != 0 {
		t.Fatalf("%d cached blocks, want 0", cached)
	}
	if v := r.metric(`kvroute_remote_index_failures_total{reason="timeout"}`); v < 1 {
		t.Fatalf(`kvroute_remote_index_failures_total{reason="timeout"} = %v, want >= 1`, v)
	}
}

// Approximate mode: the remote router records its decisions in the serving
// index, so a repeated prefix goes back to the same worker through the
// remote lookup; a second approximate-mode serving index refuses to start.
func TestRemoteIndexerApprox(t *testing.T) {
	e := startEnv(t, envOptions{workers: 4, serveIndexer: true, approx: true})
	r := startRemote(t, e, true, time.Second)
	first, _ := r.complete(tokens(3, 0, 6*testBlockSize, 3), 2)
	waitFor(t, "the decision recorded in the serving index", func() bool {
		ws, _ := e.svc.Index.Workers(nil)
		return len(ws) > 0
	})
	w, cached := r.complete(tokens(3, 1, 6*testBlockSize, 3), 2)
	if w != first || cached < 6 {
		t.Fatalf("second request: worker %d with %d cached blocks; want worker %d with >= 6", w, cached, first)
	}

	_, err := node.ServeIndex(e.nc, e.svc.Index, node.IndexServerConfig{Subject: plane.IndexSubject(e.subj), Approx: true, ID: "second"})
	if err == nil || !strings.Contains(err.Error(), "must be the only serving instance") {
		t.Fatalf("a second approximate-mode serving index: %v", err)
	}
}

func TestServeAndRemoteExclusive(t *testing.T) {
	_, err := StartService(ServiceConfig{ServeIndexer: true, UseRemoteIndexer: true, Logger: quietLogger()})
	if err == nil || !strings.Contains(err.Error(), "--serve-indexer") || !strings.Contains(err.Error(), "--use-remote-indexer") {
		t.Fatalf("both flags: %v", err)
	}
}

// A --use-remote-indexer router weighs storage tiers as a local one does:
// the serving index answers per-tier overlaps (plane.FlagTiers), so a
// prompt pushed off its worker's GPU into host memory shows as host
// overlap in the remote router's /route explain, and goes back there.
func TestRemoteIndexerTiers(t *testing.T) {
	e := startEnv(t, envOptions{workers: 2, kvBlocks: 64, hostKV: 2048, serveIndexer: true})
	r := startRemote(t, e, false, time.Second)
	const n = 40 // blocks of the prompt: two such prompts do not fit one GPU
	first, w := e.pushToHost(t, n)
	d := r.explainTiers(t, append(first, 5, 5, 5), "back")
	if dev, host, _ := d.candidate(t, w); dev != 0 || host != n {
		t.Errorf("remote router, worker %d: device %d host %d, want 0 and %d", w, dev, host, n)
	}
	if d.WorkerID != w {
		t.Errorf("the remote router routed to %d, want %d (its host memory holds the prompt)", d.WorkerID, w)
	}
}
