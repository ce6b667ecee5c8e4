package indexer_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/kvroute/kvroute/bench/mock"
	"github.com/kvroute/kvroute/indexer"
	"github.com/kvroute/kvroute/internal/natstest"
	"github.com/kvroute/kvroute/internal/promtext"
	"github.com/kvroute/kvroute/node"
	"github.com/kvroute/kvroute/router"
	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/plane"
)

const bs = 16

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func startIndexer(t *testing.T, ns *server.Server, namespace string, peers ...string) *indexer.Service {
	t.Helper()
	subj, err := plane.SubjectsFor(namespace, "backend")
	if err != nil {
		t.Fatal(err)
	}
	s, err := indexer.Start(indexer.Config{
		Node:     node.Config{NATSURL: ns.ClientURL(), BlockSize: bs, Subjects: subj, NATSReconnectWait: 50 * time.Millisecond},
		HTTPAddr: "127.0.0.1:0", Peers: peers, ID: namespace, Logger: quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func startFleet(t *testing.T, ns *server.Server, workers int) *mock.Fleet {
	t.Helper()
	f, err := mock.Start(mock.Config{Workers: workers, BlockSize: bs, KVBlocks: 4096, Speedup: 20, Namespace: "test", Component: "backend",
		Transport: plane.TransportZMQ, Heartbeat: time.Second, Logger: quiet()}, natstest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func call(t *testing.T, method, url, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
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

func prompt(f, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(1000*f + i + 1)
	}
	return out
}

func query(t *testing.T, base, path string, body any) indexer.QueryResponse {
	t.Helper()
	b, _ := json.Marshal(body)
	code, out := call(t, "POST", base+path, string(b))
	if code != 200 {
		t.Fatalf("POST %s: %d %s", path, code, out)
	}
	var r indexer.QueryResponse
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("POST %s: %v: %s", path, err, out)
	}
	return r
}

func register(t *testing.T, base string, w *mock.Worker, model string) {
	t.Helper()
	code, out := call(t, "POST", base+"/register", fmt.Sprintf(`{"instance_id":%d,"endpoint":%q,"model_name":%q,"block_size":%d}`, w.ID(), w.ZMQEndpoint(), model, bs))
	if code != 200 {
		t.Fatalf("/register %d: %d %s", w.ID(), code, out)
	}
}

// The HTTP API end to end: workers registered over HTTP publish ZMQ KV
// events; queries by tokens and by hash score the holder in tokens, only
// for its model; /dump loaded by a peer (--peers) answers the same; the
// NATS query protocol answers too; unregister forgets the worker.
func TestIndexerHTTP(t *testing.T) {
	ns := natstest.Server(t)
	ix := startIndexer(t, ns, "test")
	base := "http://" + ix.Addr()
	if code, out := call(t, "GET", base+"/health", ""); code != 200 || !strings.Contains(string(out), `"ok"`) {
		t.Fatalf("/health: %d %s", code, out)
	}
	fleet := startFleet(t, ns, 2)
	w1, w2 := fleet.Workers()[0], fleet.Workers()[1]
	register(t, base, w1, "m1")
	register(t, base, w2, "m2")

	for _, bad := range []struct{ body, want string }{
		{fmt.Sprintf(`{"instance_id":9,"endpoint":"tcp://127.0.0.1:1","model_name":"m1","block_size":%d}`, bs*2), "--block-size"},
		{`{"instance_id":9,"endpoint":"tcp://127.0.0.1:1","block_size":16}`, "model_name"},
		{`{"instance_id":9,"model_name":"m","block_size":16}`, "endpoint"},
		{`{"instance_id":9,"endpoint":"tcp://127.0.0.1:1","model_name":"m1","block_size":16,"colour":1}`, "colour"},
		{`{"instance_id":`, "invalid JSON"},
	} {
		code, out := call(t, "POST", base+"/register", bad.body)
		if code != 400 || !strings.Contains(string(out), bad.want) || !strings.Contains(string(out), `"error"`) {
			t.Errorf("/register %s: %d %s; want 400 naming %q", bad.body, code, out, bad.want)
		}
	}
	if code, out := call(t, "POST", base+"/query", `{"token_ids":[1,2]}`); code != 400 || !strings.Contains(string(out), "model_name") {
		t.Errorf("/query without model_name: %d %s", code, out)
	}
	if code, _ := call(t, "GET", base+"/query", ""); code != 405 {
		t.Errorf("GET /query: %d, want 405", code)
	}

	// Worker 1 serves a 4-block prompt: its KV events reach the indexer.
	toks := prompt(1, 4*bs+3)
	code, out := call(t, "POST", w1.URL()+"/v1/completions", fmt.Sprintf(`{"model":"mock","prompt":%s,"max_tokens":1}`, mustJSON(toks)))
	if code != 200 {
		t.Fatalf("completion on worker 1: %d %s", code, out)
	}
	id1, id2 := fmt.Sprint(w1.ID()), fmt.Sprint(w2.ID())
	waitFor(t, "worker 1's blocks in the indexer", func() bool {
		r := query(t, base, "/query", map[string]any{"token_ids": toks, "model_name": "m1"})
		return r.Scores[id1]["0"] == 4*bs
	})
	r := query(t, base, "/query", map[string]any{"token_ids": toks, "model_name": "m1"})
	if len(r.Frequencies) < 4 || r.Frequencies[0] != 1 || r.TreeSizes[id1]["0"] < 4 {
		t.Fatalf("/query: %+v", r)
	}
	if _, ok := r.Scores[id2]; ok {
		t.Fatalf("/query for m1 scores worker 2 (model m2): %+v", r)
	}
	if r := query(t, base, "/query", map[string]any{"token_ids": toks, "model_name": "m2"}); len(r.Scores[id1]) != 0 {
		t.Fatalf("/query for m2 scores worker 1 (model m1): %+v", r)
	}
	if r := query(t, base, "/query", map[string]any{"token_ids": toks, "model_name": "m1", "lora_name": "adapter"}); len(r.Scores[id1]) != 0 {
		t.Fatalf("/query with a LoRA the worker never served scores it: %+v", r)
	}
	local := wire.LocalHashes(nil, toks, bs, wire.Seed)
	hashes := make([]uint64, len(local))
	for i, h := range local {
		hashes[i] = uint64(h)
	}
	if r := query(t, base, "/query_by_hash", map[string]any{"block_hashes": hashes[:2], "model_name": "m1"}); r.Scores[id1]["0"] != 2*bs {
		t.Fatalf("/query_by_hash of 2 blocks: %+v, want %d tokens", r, 2*bs)
	}

	code, out = call(t, "GET", base+"/workers", "")
	if code != 200 || !strings.Contains(string(out), `"model_name":"m1"`) || !strings.Contains(string(out), w2.ZMQEndpoint()) {
		t.Fatalf("/workers: %d %s", code, out)
	}
	code, out = call(t, "GET", base+"/dump", "")
	var dump map[string][]indexer.DumpEvent
	if code != 200 || json.Unmarshal(out, &dump) != nil || len(dump["m1:default"]) == 0 {
		t.Fatalf("/dump: %d %s", code, out)
	}

	// The NATS query protocol (what --use-remote-indexer speaks).
	subj, _ := plane.SubjectsFor("test", "backend")
	ri := node.NewRemoteIndex(natstest.Connect(t, ns), node.RemoteIndexConfig{Subject: plane.IndexSubject(subj), Timeout: 5 * time.Second})
	mrs := []shard.MatchRequest{{Hashes: local}}
	if err := ri.MatchBatch(mrs); err != nil {
		t.Fatal(err)
	}
	if len(mrs[0].Overlaps) != 1 || mrs[0].Overlaps[0].Worker.Worker != w1.ID() || mrs[0].Overlaps[0].Blocks != 4 {
		t.Fatalf("NATS query: %+v", mrs[0].Overlaps)
	}

	// A peer loads the dump at start: same answer without any ingest.
	peer := startIndexer(t, ns, "peer", "http://127.0.0.1:1", base)
	pbase := "http://" + peer.Addr()
	if code, _ := call(t, "GET", pbase+"/health", ""); code != 200 {
		t.Fatalf("peer /health: %d", code)
	}
	if r := query(t, pbase, "/query", map[string]any{"token_ids": toks, "model_name": "m1"}); r.Scores[id1]["0"] != 4*bs {
		t.Fatalf("peer /query: %+v, want %d tokens for worker %s", r, 4*bs, id1)
	}
	if r := query(t, pbase, "/query", map[string]any{"token_ids": toks, "model_name": "m2"}); len(r.Scores[id1]) != 0 {
		t.Fatalf("peer /query for m2 scores worker 1: the dump's model was lost: %+v", r)
	}

	code, out = call(t, "POST", base+"/unregister", fmt.Sprintf(`{"instance_id":%d,"model_name":"m1"}`, w1.ID()))
	if code != 200 {
		t.Fatalf("/unregister: %d %s", code, out)
	}
	if r := query(t, base, "/query", map[string]any{"token_ids": toks, "model_name": "m1"}); len(r.Scores[id1]) != 0 {
		t.Fatalf("/query after /unregister: %+v", r)
	}
	if code, _ := call(t, "POST", base+"/unregister", fmt.Sprintf(`{"instance_id":%d,"model_name":"m1"}`, w1.ID())); code != 404 {
		t.Fatalf("second /unregister: %d, want 404", code)
	}
	code, out = call(t, "GET", base+"/metrics", "")
	if err := promtext.Check(out); err != nil {
		t.Errorf("/metrics is not valid exposition: %v", err)
	}
	if code != 200 || !strings.Contains(string(out), `kvroute_indexer_http_requests_total{endpoint="query"}`) || !strings.Contains(string(out), "kvroute_index_query_prompts_total 1") {
		t.Fatalf("/metrics: %d\n%s", code, out)
	}
}

// --peers with no answering peer: the indexer does not start.
func TestIndexerPeersUnreachable(t *testing.T) {
	ns := natstest.Server(t)
	subj, _ := plane.SubjectsFor("test", "backend")
	_, err := indexer.Start(indexer.Config{Node: node.Config{NATSURL: ns.ClientURL(), BlockSize: bs, Subjects: subj},
		HTTPAddr: "127.0.0.1:0", Peers: []string{"http://127.0.0.1:1"}, PeerTimeout: time.Second, Logger: quiet()})
	if err == nil || !strings.Contains(err.Error(), "--peers") {
		t.Fatalf("unreachable peer: %v", err)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// A router started with --use-remote-indexer routes against `kvroute
// indexer` as it does against `serve --serve-indexer`: a repeated prefix
// goes to the worker holding it.
func TestRouterAgainstIndexer(t *testing.T) {
	ns := natstest.Server(t)
	ix := startIndexer(t, ns, "test")
	base := "http://" + ix.Addr()
	// The fleet registers on NATS only (model "mock", ZMQ events): the
	// indexer subscribes to their ZMQ publishers from the registrations.
	startFleet(t, ns, 3)
	subj, _ := plane.SubjectsFor("test", "backend")
	sc := sched.DefaultConfig()
	sc.BlockSize = bs
	svc, err := router.StartService(router.ServiceConfig{
		Router:   router.Config{Sched: sc, Subjects: subj, TickInterval: 20 * time.Millisecond},
		HTTPAddr: "127.0.0.1:0", ShutdownGrace: 2 * time.Second, ShutdownReadyDelay: -1,
		Node:             node.Config{NATSURL: ns.ClientURL()},
		UseRemoteIndexer: true, RemoteIndexerTimeout: time.Second, Logger: quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close() })
	url := "http://" + svc.Addr()
	waitFor(t, "the router ready with 3 workers", func() bool {
		code, out := call(t, "GET", url+"/workers", "")
		c, _ := call(t, "GET", url+"/ready", "")
		return code == 200 && strings.Count(string(out), `"worker_id"`) == 3 && c == 200
	})
	complete := func(toks []uint32) (string, string) {
		req, _ := http.NewRequest("POST", url+"/v1/completions", strings.NewReader(fmt.Sprintf(`{"prompt":%s,"max_tokens":1}`, mustJSON(toks))))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("completion: %d %s", resp.StatusCode, b)
		}
		return resp.Header.Get(router.HeaderWorker), resp.Header.Get(router.HeaderCachedBlocks)
	}
	toks := prompt(7, 6*bs+2)
	first, _ := complete(toks)
	waitFor(t, "the prompt in the indexer", func() bool {
		r := query(t, base, "/query", map[string]any{"token_ids": toks, "model_name": "mock"})
		return r.Scores[first]["0"] == 6*bs
	})
	if r := query(t, base, "/query", map[string]any{"token_ids": toks, "model_name": "other"}); len(r.Scores) != 0 {
		t.Fatalf("/query for a model no worker registered: %+v", r)
	}
	again := append(prompt(7, 6*bs), 99999, 99998)
	w, cached := complete(again)
	if w != first || cached != "6" {
		t.Fatalf("repeated prefix: worker %s with %s cached blocks; want worker %s with 6", w, cached, first)
	}
}

// A NATS outage longer than the heartbeat expiry keeps the indexer's
// workers: none expires while its connection is down (their ZMQ events
// still arrive and their blocks are still answered), none right after it
// comes back (a fresh grace), and a worker that registers and falls silent
// afterwards expires as before.
func TestIndexerNATSOutageKeepsWorkers(t *testing.T) {
	const heartbeat = 200 * time.Millisecond // expiry after 600 ms; the indexer ticks every second
	ns := natstest.Server(t)
	ix := startIndexer(t, ns, "test")
	f, err := mock.Start(mock.Config{Workers: 2, BlockSize: bs, KVBlocks: 4096, Speedup: 20, Namespace: "test", Component: "backend",
		Transport: plane.TransportZMQ, Heartbeat: heartbeat, Logger: quiet()}, natstest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	holds := func() int { // workers the index holds blocks of
		ws, err := ix.Index.Workers(nil)
		if err != nil {
			t.Fatal(err)
		}
		return len(ws)
	}
	attempt := 0
	for i, w := range f.Workers() {
		waitFor(t, "the worker's blocks in the index", func() bool {
			// A new prompt each time: events published before the indexer's
			// ZMQ subscription took hold are lost, and a cached prompt
			// publishes none.
			attempt++
			code, _ := call(t, "POST", w.URL()+"/v1/completions", fmt.Sprintf(`{"prompt":%s,"max_tokens":1}`, mustJSON(prompt(attempt, 4*bs))))
			return code == 200 && holds() > i
		})
	}
	port := natstest.Port(ns)
	ns.Shutdown()
	ns.WaitForShutdown()
	waitFor(t, "the indexer sees the outage", func() bool { up, _ := ix.ControlPlane(); return !up })
	time.Sleep(5 * plane.ExpiryFactor * heartbeat) // five expiry periods (three of the indexer's ticks)
	if n := holds(); n != 2 {
		t.Errorf("the index holds %d workers after the outage outlasted their expiry, want 2", n)
	}
	natstest.Restart(t, port)
	waitFor(t, "the indexer reconnected", func() bool { up, _ := ix.ControlPlane(); return up })
	time.Sleep(2 * time.Second) // two ticks after the reconnection
	if n := holds(); n != 2 {
		t.Errorf("the index holds %d workers after the reconnection, want 2", n)
	}
	// Expiry is back: a worker that registers, stores a block and falls
	// silent is removed.
	nc := natstest.Connect(t, ns)
	subj, _ := plane.SubjectsFor("test", "backend")
	silent := plane.Registration{WorkerID: 77, URL: "http://127.0.0.1:1", DpRanks: []uint32{0}, BlockSize: bs, KVBlocks: 100,
		EventTransport: plane.TransportNative, HeartbeatMillis: int(heartbeat.Milliseconds())}
	if err := nc.Publish(subj.Heartbeat, plane.Encode(silent)); err != nil {
		t.Fatal(err)
	}
	ev := wire.Event{Worker: wire.WorkerKey{Worker: 77}, ID: 1, Kind: wire.KindStored,
		Blocks: []wire.Block{{Engine: 1, Local: wire.LocalHashes(nil, prompt(9, bs), bs, wire.Seed)[0]}}}
	waitFor(t, "the silent worker's block in the index", func() bool {
		_ = nc.Publish(subj.KVEventsNative, wire.AppendNative(nil, []wire.Event{ev}))
		return holds() == 3
	})
	waitFor(t, "the silent worker expired", func() bool { return holds() == 2 })
}
