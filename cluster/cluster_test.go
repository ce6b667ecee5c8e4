package cluster

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/kvroute/kvroute/bench/mock"
	"github.com/kvroute/kvroute/indexer"
	"github.com/kvroute/kvroute/ingest"
	"github.com/kvroute/kvroute/internal/natstest"
	"github.com/kvroute/kvroute/node"
	"github.com/kvroute/kvroute/router"
	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/plane"
)

const (
	blockSize    = 16
	prefixBlocks = 8
	suffixTokens = 8
	// syncExpiry is the replicas' --router-sync-expiry: long enough that a
	// survivor reconnecting to another NATS node on a loaded machine does
	// not expire its live peers, short enough to keep the test short.
	syncExpiry = 2 * time.Second
)

// scenario sizes one run of the kill test.
type scenario struct {
	name string
	// families and follow size a quality phase: new prefix families, and
	// the requests per family sent once its first one is indexed.
	families, follow int
	// clients send traffic concurrently to each replica during the kills;
	// between tells how many requests complete between the steps (start,
	// replica killed, NATS node killed, end).
	clients, between int
}

// rig is the scale-out topology on loopback: a 3-node NATS cluster,
// one standalone indexer (JetStream R3 event stream), router replicas with
// replica sync and the remote indexer, and a simulated fleet.
type rig struct {
	t       *testing.T
	ss      []*server.Server
	urls    string
	subj    plane.Subjects
	ix      *indexer.Service
	fleet   *mock.Fleet
	reps    []*replica
	client  *http.Client
	workers int
}

// replica is one router replica and the test's view of it.
type replica struct {
	id       string
	svc      *router.Service
	url      string
	dead     atomic.Bool
	inflight atomic.Int64
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func startRig(t *testing.T, replicas, workers int) *rig {
	t.Helper()
	g := &rig{t: t, workers: workers, client: &http.Client{Timeout: 30 * time.Second}}
	g.ss = natstest.Cluster(t, 3)
	g.urls = natstest.ClientURLs(g.ss)
	var err error
	if g.subj, err = plane.SubjectsFor("test", "backend"); err != nil {
		t.Fatal(err)
	}

	icfg := indexer.Config{
		Node: node.Config{NATSURL: g.urls, NATSReconnectWait: 50 * time.Millisecond, BlockSize: blockSize, Subjects: g.subj,
			JetStream: true, Stream: ingest.StreamConfig{Replicas: 3, MaxAge: 10 * time.Minute}, Index: shard.Config{Shards: 2}},
		HTTPAddr: "127.0.0.1:0", ID: "indexer-1", Logger: quiet(),
	}
	deadline := time.Now().Add(30 * time.Second)
	for { // the cluster may still be placing its first stream
		if g.ix, err = indexer.Start(icfg); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // polling: the cluster announces no placement
	}
	t.Cleanup(func() { _ = g.ix.Close() })

	for i := range replicas {
		g.reps = append(g.reps, g.startReplica(fmt.Sprintf("r%d", i+1)))
	}

	fnc, err := nats.Connect(g.urls, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fnc.Close)
	g.fleet, err = mock.Start(mock.Config{Workers: workers, BlockSize: blockSize, KVBlocks: 4096, Speedup: 20,
		Namespace: "test", Component: "backend", Transport: plane.TransportDynamo, Heartbeat: time.Second,
		LoadInterval: 10 * time.Millisecond, Logger: quiet()}, fnc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.fleet.Close() })
	for _, r := range g.reps {
		g.waitFor(r.id+" sees the fleet and is ready", func() bool {
			return len(g.workerLoads(r)) == workers && g.status(r, "/ready") == 200
		})
	}
	return g
}

func (g *rig) startReplica(id string) *replica {
	g.t.Helper()
	sc := sched.DefaultConfig()
	sc.BlockSize = blockSize
	svc, err := router.StartService(router.ServiceConfig{
		Router: router.Config{Sched: sc, Subjects: g.subj, TickInterval: 20 * time.Millisecond, QueueTimeout: 10 * time.Second,
			ID: id, Sync: true, SyncExpiry: syncExpiry},
		HTTPAddr: "127.0.0.1:0",
		// A short grace: Close of the killed replica cuts what is in
		// flight on it, as a crash would.
		ShutdownGrace:        100 * time.Millisecond,
		ShutdownReadyDelay:   -1,
		Node:                 node.Config{NATSURL: g.urls, NATSReconnectWait: 50 * time.Millisecond},
		Logger:               quiet(),
		UseRemoteIndexer:     true,
		RemoteIndexerTimeout: 250 * time.Millisecond, // a safety limit for a loaded machine; a healthy lookup takes ~100 µs
	})
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() { _ = svc.Close() })
	return &replica{id: id, svc: svc, url: "http://" + svc.Addr()}
}

// waitFor polls cond until it holds; 20 s is a safety limit.
func (g *rig) waitFor(what string, cond func() bool) {
	g.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			g.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling: these states have no event to await
	}
}

func (g *rig) get(r *replica, path string) (int, []byte) {
	resp, err := g.client.Get(r.url + path)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (g *rig) status(r *replica, path string) int {
	c, _ := g.get(r, path)
	return c
}

// workerLoads is r's /workers: the requests booked per worker (all ranks).
func (g *rig) workerLoads(r *replica) map[uint64]int {
	_, body := g.get(r, "/workers")
	var d struct {
		Workers []struct {
			WorkerID uint64 `json:"worker_id"`
			Ranks    []struct {
				Requests     int   `json:"requests"`
				ActiveBlocks int64 `json:"active_blocks"`
			} `json:"ranks"`
		} `json:"workers"`
	}
	if json.Unmarshal(body, &d) != nil {
		return nil
	}
	out := map[uint64]int{}
	for _, w := range d.Workers {
		out[w.WorkerID] = 0
		for _, rk := range w.Ranks {
			out[w.WorkerID] += rk.Requests + int(rk.ActiveBlocks)
		}
	}
	return out
}

// idle reports whether r's scheduler holds no load on any worker.
func (g *rig) idle(r *replica) bool {
	loads := g.workerLoads(r)
	for _, n := range loads {
		if n != 0 {
			return false
		}
	}
	return len(loads) > 0
}

// metric is the value of the first /metrics line of r starting with name.
func (g *rig) metric(r *replica, name string) float64 {
	_, body := g.get(r, "/metrics")
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, name+" ") {
			var v float64
			fmt.Sscan(line[len(name)+1:], &v)
			return v
		}
	}
	return -1
}

// prompt is family f's shared prefix followed by request i's own suffix.
func prompt(f, i int) []uint32 {
	out := make([]uint32, 0, prefixBlocks*blockSize+suffixTokens)
	for j := range prefixBlocks * blockSize {
		out = append(out, uint32(1000*f+j%997+1))
	}
	for j := range suffixTokens {
		out = append(out, uint32(5_000_000+1000*i+j))
	}
	return out
}

// result is one completion as the client saw it.
type result struct {
	code           int
	err            error
	worker         uint64
	prompt, cached int // tokens, as the engine reported them
	routerCached   int // blocks, as the router estimated them
}

func (g *rig) complete(r *replica, toks []uint32) result {
	b, _ := json.Marshal(toks)
	resp, err := g.client.Post(r.url+"/v1/completions", "application/json",
		strings.NewReader(fmt.Sprintf(`{"prompt":%s,"max_tokens":4}`, b)))
	if err != nil {
		return result{err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	res := result{code: resp.StatusCode, err: err}
	fmt.Sscan(resp.Header.Get(router.HeaderWorker), &res.worker)
	fmt.Sscan(resp.Header.Get(router.HeaderCachedBlocks), &res.routerCached)
	var d struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
			Details      struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if res.code == 200 && err == nil {
		if jerr := json.Unmarshal(body, &d); jerr != nil {
			res.err = fmt.Errorf("answer: %v: %.200s", jerr, body)
		}
	} else if err == nil {
		res.err = fmt.Errorf("%d %.200s", res.code, body)
	}
	res.prompt, res.cached = d.Usage.PromptTokens, d.Usage.Details.CachedTokens
	return res
}

// indexed waits until the indexer's index holds family f's whole prefix on
// some worker.
func (g *rig) indexed(f int) {
	g.t.Helper()
	hashes := wire.LocalHashes(nil, prompt(f, 0)[:prefixBlocks*blockSize], blockSize, wire.Seed)
	g.waitFor(fmt.Sprintf("family %d in the indexer", f), func() bool {
		ovs, err := g.ix.Index.Match(nil, hashes)
		if err != nil {
			g.t.Fatal(err)
		}
		for _, o := range ovs {
			if o.Blocks >= prefixBlocks {
				return true
			}
		}
		return false
	})
}

// quality is one measured phase on the live replicas: families new prefix
// families from base; each family's first request is sent and awaited in
// the indexer, then follow more per family go round robin over the
// replicas, one at a time. It returns the hit ratio of
// the follow-ups as the engines report it (cached / prompt tokens); a
// follow-up routed to the family's holder scores 128/136, elsewhere 0.
func (g *rig) quality(live []*replica, base int, sc scenario) float64 {
	g.t.Helper()
	for f := base; f < base+sc.families; f++ {
		if res := g.complete(live[f%len(live)], prompt(f, 0)); res.err != nil {
			g.t.Fatalf("family %d, first request: %v", f, res.err)
		}
		g.indexed(f)
	}
	// One at a time, each once every replica shows the workers idle: where
	// a follow-up goes then depends on the index only. (The load of a
	// request just answered is freed on the batcher a moment after the
	// client has its answer; a follow-up decided before that sees the
	// holder busy with the seed's prefill, and the scheduler may send it
	// to an idle worker: a spill that varies from run to run.)
	var cached, total atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	wg.Go(func() {
		for k := range sc.families * sc.follow {
			f := base + k%sc.families
			r := live[k%len(live)]
			for _, x := range live {
				g.waitFor(x.id+" idle", func() bool { return g.idle(x) })
			}
			res := g.complete(r, prompt(f, 1+k))
			if res.err != nil {
				errs <- fmt.Errorf("%s, family %d: %w", r.id, f, res.err)
				return
			}
			if testing.Verbose() && res.cached == 0 {
				g.t.Logf("miss: %s family %d worker %d router-estimated %d blocks", r.id, f, res.worker, res.routerCached)
			}
			cached.Add(int64(res.cached))
			total.Add(int64(res.prompt))
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		g.t.Fatal(err)
	}
	return float64(cached.Load()) / float64(total.Load())
}

// tally counts the traffic of the kill phase.
type tally struct {
	mu       sync.Mutex
	done     atomic.Int64
	ok       atomic.Int64
	rerouted atomic.Int64 // sent to another replica because theirs was killed
	liveErrs []string     // failures of requests sent to a live replica
	// killed replica: the requests in flight on it when it was killed,
	// and those of them that failed.
	inflightAtKill, failedOnKilled int64
}

// traffic runs sc.clients clients per replica until stop is closed: each
// sends requests of 6 rotating families to its replica, and once that
// replica is dead (as a load balancer would) to the next live one.
func (g *rig) traffic(sc scenario, base int, stop <-chan struct{}, tl *tally) *sync.WaitGroup {
	var wg sync.WaitGroup
	for ri := range g.reps {
		for c := range sc.clients {
			wg.Go(func() {
				for k := 0; ; k++ {
					select {
					case <-stop:
						return
					default:
					}
					r := g.reps[ri]
					for j := 1; r.dead.Load() && j <= len(g.reps); j++ { // find a live one
						r = g.reps[(ri+j)%len(g.reps)]
					}
					r.inflight.Add(1)
					if r.dead.Load() { // killed between the check and the count
						r.inflight.Add(-1)
						continue
					}
					if r != g.reps[ri] {
						tl.rerouted.Add(1)
					}
					res := g.complete(r, prompt(base+(k+c)%6, 100000*ri+1000*c+k))
					killed := r.dead.Load()
					r.inflight.Add(-1)
					tl.done.Add(1)
					switch {
					case res.err == nil:
						tl.ok.Add(1)
					case killed:
						tl.mu.Lock()
						tl.failedOnKilled++
						tl.mu.Unlock()
					default:
						tl.mu.Lock()
						tl.liveErrs = append(tl.liveErrs, fmt.Sprintf("%s: %v", r.id, res.err))
						tl.mu.Unlock()
					}
				}
			})
		}
	}
	return &wg
}

// connected reports whether every live replica and the indexer are
// connected to NATS.
func (g *rig) connected(live []*replica) bool {
	for _, r := range live {
		if !r.svc.NC.IsConnected() {
			return false
		}
	}
	return g.ix.NC.IsConnected()
}

// runKills is the scenario: a quality phase, traffic during which a
// replica and then the NATS node the indexer is connected to are killed,
// a quality phase on the survivors, and the checks of the package doc.
func runKills(t *testing.T, sc scenario) {
	g := startRig(t, 3, 4)
	before := g.quality(g.reps, 100, sc)

	stop := make(chan struct{})
	var tl tally
	wg := g.traffic(sc, 200, stop, &tl)
	awaitDone := func(n int64, what string) {
		g.waitFor(what, func() bool {
			tl.mu.Lock()
			defer tl.mu.Unlock()
			return tl.done.Load() >= n || len(tl.liveErrs) > 0
		})
	}
	step := int64(sc.between)
	awaitDone(step, "traffic before the kills")

	// Kill replica r3: its NATS connection goes first (no leaving
	// message, so the others must expire its bookings), then its
	// listener, cutting what is in flight on it after 100 ms.
	killed := g.reps[2]
	killed.dead.Store(true)
	tl.inflightAtKill = killed.inflight.Load()
	killed.svc.NC.Close()
	_ = killed.svc.Close()
	live := g.reps[:2]
	awaitDone(2*step, "traffic after the replica kill")

	// Kill the NATS node surviving replica r1 is connected to (its
	// clients reconnect to the other two; the R3 event stream keeps a
	// quorum): r1 misses what the others publish meanwhile.
	var ns *server.Server
	for _, s := range g.ss {
		if s.Name() == live[0].svc.NC.ConnectedServerName() {
			ns = s
		}
	}
	if ns == nil {
		t.Fatalf("r1 is connected to %q, not a node of the cluster", live[0].svc.NC.ConnectedServerName())
	}
	indexerOnIt := g.ix.NC.ConnectedServerName() == ns.Name()
	ns.Shutdown()
	awaitDone(3*step, "traffic after the NATS node kill")
	close(stop)
	wg.Wait()

	t.Logf("%s: %d requests during the kills, %d answered 200, %d rerouted from the killed replica; %d in flight on it when killed, %d of them failed; NATS node %s killed (r1's; the indexer's too: %v)",
		sc.name, tl.done.Load(), tl.ok.Load(), tl.rerouted.Load(), tl.inflightAtKill, tl.failedOnKilled, ns.Name(), indexerOnIt)
	if len(tl.liveErrs) > 0 {
		t.Fatalf("%d requests to live replicas failed, first: %s", len(tl.liveErrs), tl.liveErrs[0])
	}
	if tl.failedOnKilled > tl.inflightAtKill {
		t.Fatalf("%d requests failed on the killed replica, but only %d were in flight on it", tl.failedOnKilled, tl.inflightAtKill)
	}
	if lost := tl.done.Load() - tl.ok.Load(); lost != tl.failedOnKilled {
		t.Fatalf("%d requests not answered 200, %d accounted for as in flight on the killed replica", lost, tl.failedOnKilled)
	}

	// The survivors forget the killed replica's bookings and hold no load
	// once traffic has stopped: nothing leaks.
	for _, r := range live {
		g.waitFor(r.id+": the killed replica expired", func() bool { return g.metric(r, "kvroute_sync_replicas_expired_total") >= 1 })
		t.Logf("%s: sync messages missed %v, bookings dropped on the gaps %v", r.id, g.metric(r, "kvroute_sync_messages_missed_total"), g.metric(r, "kvroute_sync_bookings_dropped_on_gap_total"))
		g.waitFor(r.id+": no load left", func() bool { return g.idle(r) })
		if v := g.metric(r, "kvroute_sync_items_applied_total"); v <= 0 {
			t.Errorf("%s applied %v items of the other replicas: sync is not on", r.id, v)
		}
		if ws, _ := r.svc.Index.Workers(nil); len(ws) != 0 {
			t.Errorf("%s has a local index of %d worker keys; with --use-remote-indexer it must keep none", r.id, len(ws))
		}
	}

	// Routing quality recovers once the survivors are reconnected.
	g.waitFor("the survivors and the indexer reconnected to NATS", func() bool { return g.connected(live) })
	failuresBefore := 0.0
	for _, r := range live {
		failuresBefore += float64(r.svc.Remote.Failures())
	}
	after := g.quality(live, 300, sc)
	failuresAfter := 0.0
	for _, r := range live {
		failuresAfter += float64(r.svc.Remote.Failures())
	}
	t.Logf("%s: hit ratio (engine cached_tokens / prompt tokens of the follow-ups) before the kills %.3f, after %.3f (ideal 0.941); remote lookups failed during the after phase: %.0f",
		sc.name, before, after, failuresAfter-failuresBefore)
	fmt.Printf("chaos: %s requests=%d ok=%d inflight_on_killed=%d failed_on_killed=%d hit_before=%.3f hit_after=%.3f\n",
		sc.name, tl.done.Load(), tl.ok.Load(), tl.inflightAtKill, tl.failedOnKilled, before, after)
	// Cache-blind routing over 4 workers would score about 0.94/4; every
	// follow-up on its family's holder scores 0.941. 0.8 shows the remote
	// index steering requests, before and after.
	if before < 0.8 {
		t.Fatalf("hit ratio %.3f before the kills: the remote index does not steer routing", before)
	}
	if after < before-0.1 {
		t.Fatalf("hit ratio %.3f after the kills, %.3f before: routing quality did not recover", after, before)
	}
}

// The short run of the kill scenario, for make test.
func TestClusterKills(t *testing.T) {
	runKills(t, scenario{name: "cluster-kills", families: 4, follow: 6, clients: 2, between: 30})
}
