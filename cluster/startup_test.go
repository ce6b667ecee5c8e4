package cluster

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvroute/kvroute/bench/mock"
	"github.com/kvroute/kvroute/indexer"
	"github.com/kvroute/kvroute/ingest"
	"github.com/kvroute/kvroute/internal/natstest"
	"github.com/kvroute/kvroute/node"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire/plane"
)

// The scale-out topology started in the order that used to fail: the
// indexer first, while the 3-node NATS cluster has no JetStream leader
// (one node of three is up, no quorum). The indexer's port answers from
// the start, /health and /ready 503 "starting: waiting for JetStream"; its
// start waits, retrying, and ends ready once the other nodes have joined;
// a router replica and the fleet started after it route on its index (a
// repeated prefix is a cache hit).
func TestClusterIndexerStartedFirst(t *testing.T) {
	g := &rig{t: t, workers: 2, client: &http.Client{Timeout: 5 * time.Second}}
	urls, startNode := natstest.ClusterNodes(t, 3)
	g.urls = urls
	var err error
	if g.subj, err = plane.SubjectsFor("test", "backend"); err != nil {
		t.Fatal(err)
	}
	g.ss = append(g.ss, startNode(0))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	icfg := indexer.Config{
		Node: node.Config{NATSURL: urls, NATSReconnectWait: 50 * time.Millisecond, BlockSize: blockSize, Subjects: g.subj,
			JetStream: true, Stream: ingest.StreamConfig{Replicas: 3, MaxAge: 10 * time.Minute}, Index: shard.Config{Shards: 2}},
		HTTPAddr: addr, ID: "indexer-1", Logger: quiet(),
	}
	type started struct {
		ix  *indexer.Service
		err error
	}
	done := make(chan started, 1)
	go func() {
		ix, err := indexer.Start(icfg)
		done <- started{ix, err}
	}()
	get := func(path string) (int, string) {
		resp, err := g.client.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	g.waitFor("the indexer's /health answering 503 while it waits for JetStream", func() bool {
		code, body := get("/health")
		return code == 503 && strings.Contains(body, "starting: waiting for JetStream")
	})
	if code, body := get("/ready"); code != 503 || !strings.Contains(body, "starting: waiting for JetStream") {
		t.Errorf("/ready while waiting for JetStream: %d %s", code, body)
	}
	select {
	case r := <-done:
		t.Fatalf("the indexer's start ended with one NATS node of three up (no JetStream leader): %v", r.err)
	default:
	}

	g.ss = append(g.ss, startNode(1), startNode(2))
	var r started
	select {
	case r = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the indexer did not start within 2 minutes of the cluster's quorum")
	}
	if r.err != nil {
		t.Fatalf("the indexer's start: %v", r.err)
	}
	g.ix = r.ix
	t.Cleanup(func() { _ = g.ix.Close() })
	if code, body := get("/ready"); code != 200 {
		t.Fatalf("/ready once started: %d %s", code, body)
	}

	rep := g.startReplica("r1")
	g.reps = append(g.reps, rep)
	fnc, err := nats.Connect(g.urls, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fnc.Close)
	if g.fleet, err = mock.Start(mock.Config{Workers: g.workers, BlockSize: blockSize, KVBlocks: 4096, Speedup: 20,
		Namespace: "test", Component: "backend", Transport: plane.TransportDynamo, Heartbeat: time.Second,
		LoadInterval: 10 * time.Millisecond, Logger: quiet()}, fnc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.fleet.Close() })
	g.waitFor("r1 sees the fleet and is ready", func() bool {
		return len(g.workerLoads(rep)) == g.workers && g.status(rep, "/ready") == 200
	})
	first := g.complete(rep, prompt(1, 0))
	if first.err != nil {
		t.Fatal(first.err)
	}
	g.indexed(1)
	g.waitFor("r1 idle", func() bool { return g.idle(rep) })
	again := g.complete(rep, prompt(1, 1))
	if again.err != nil {
		t.Fatal(again.err)
	}
	if again.worker != first.worker || again.routerCached < prefixBlocks {
		t.Errorf("repeated prefix: worker %d with %d cached blocks; want worker %d with >= %d (routed on the indexer's index)",
			again.worker, again.routerCached, first.worker, prefixBlocks)
	}
}
