package router

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvroute/kvroute/node"
	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/plane"
)

// startReplica starts another router replica on e's NATS, in front of e's
// fleet, with its own index fed by the same KV events.
func startReplica(t *testing.T, e *env, id string, syncOn bool, expiry time.Duration, tune ...func(*sched.Config)) *env {
	t.Helper()
	sc := sched.DefaultConfig()
	sc.BlockSize = testBlockSize
	for _, f := range tune {
		f(&sc)
	}
	cfg := ServiceConfig{
		Router: Config{Sched: sc, Subjects: e.subj, TickInterval: 20 * time.Millisecond, QueueTimeout: 5 * time.Second,
			ID: id, Sync: syncOn, SyncExpiry: expiry},
		HTTPAddr:           "127.0.0.1:0",
		ShutdownGrace:      3 * time.Second,
		ShutdownReadyDelay: -1,
		Node:               node.Config{NATSURL: e.ns.ClientURL(), NATSReconnectWait: 50 * time.Millisecond},
		Logger:             quietLogger(),
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

// rankLoad is one rank's load as /workers shows it.
type rankLoad struct {
	requests      int
	blocks, tokns int64
}

func (e *env) load(worker uint64) rankLoad {
	for _, w := range e.workers().Workers {
		if w.WorkerID == worker && len(w.Ranks) > 0 {
			r := w.Ranks[0]
			return rankLoad{r.Requests, r.ActiveBlocks, r.PrefillTokens}
		}
	}
	return rankLoad{}
}

// routeOn books a /route decision on e and returns the worker chosen.
func routeOn(t *testing.T, e *env, id string, toks []uint32) uint64 {
	t.Helper()
	code, body, _ := e.do("POST", "/route", fmt.Sprintf(`{"token_ids":%s,"request_id":%q}`, promptJSON(toks), id))
	if code != 200 {
		t.Fatalf("/route: %d %s", code, body)
	}
	var d struct {
		WorkerID uint64 `json:"worker_id"`
	}
	if err := json.Unmarshal(body, &d); err != nil || d.WorkerID == 0 {
		t.Fatalf("/route: %v: %s", err, body)
	}
	return d.WorkerID
}

// A booking made on replica A shows as load on replica B, its prefill
// completion and its end too.
func TestReplicaSyncSharesLoad(t *testing.T) {
	a := startEnv(t, envOptions{workers: 4, routerID: "a", sync: true})
	b := startReplica(t, a, "b", true, 0)

	toks := tokens(1, 0, 4*testBlockSize, 8) // 4 full blocks, 72 tokens
	w := routeOn(t, a, "r1", toks)
	waitFor(t, "A's booking on B", func() bool {
		l := b.load(w)
		return l.requests == 1 && l.blocks == 4 && l.tokns == 72
	})
	if v := b.metric("kvroute_sync_remote_requests"); v != 1 {
		t.Fatalf("B: kvroute_sync_remote_requests = %v, want 1", v)
	}
	if c, _, _ := a.do("POST", "/route/r1/prefill_done", ""); c != 200 {
		t.Fatalf("prefill_done: %d", c)
	}
	waitFor(t, "A's prefill done on B", func() bool {
		l := b.load(w)
		return l.requests == 1 && l.blocks == 4 && l.tokns == 0
	})
	if c, _, _ := a.do("POST", "/route/r1/free", ""); c != 200 {
		t.Fatalf("free: %d", c)
	}
	waitFor(t, "A's free on B", b.idle)
	if v := b.metric("kvroute_sync_remote_requests"); v != 0 {
		t.Fatalf("B: kvroute_sync_remote_requests = %v after the free, want 0", v)
	}
	if v := b.metric("kvroute_sync_items_applied_total"); v != 3 {
		t.Fatalf("B: kvroute_sync_items_applied_total = %v, want 3 (book, prefill done, free)", v)
	}
	// And the other way round: B's booking is A's load; A ignores its own.
	w = routeOn(t, b, "r2", toks)
	waitFor(t, "B's booking on A", func() bool { return a.load(w).requests == 1 })
	if v := a.metric("kvroute_sync_remote_requests"); v != 1 {
		t.Fatalf("A: kvroute_sync_remote_requests = %v, want 1", v)
	}
	if v := b.metric("kvroute_sync_remote_requests"); v != 0 {
		t.Fatalf("B holds %v remote requests: it applied its own booking", v)
	}

	// A leaves gracefully: B drops A's bookings at once (no expiry).
	routeOn(t, a, "r3", tokens(2, 0, 4*testBlockSize, 8))
	waitFor(t, "A's second booking on B", func() bool { return b.metric("kvroute_sync_remote_requests") == 1 })
	if err := a.svc.Router.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "A's bookings dropped on B", func() bool { return b.metric("kvroute_sync_remote_requests") == 0 })
	if v := b.metric("kvroute_sync_replicas_expired_total"); v != 0 {
		t.Fatalf("B expired %v replicas; a leaving replica is dropped, not expired", v)
	}
}

// A replica that stops publishing (its NATS connection gone, as in a
// crash) has its bookings expired on the others after --router-sync-expiry.
func TestReplicaSyncExpiresDeadReplica(t *testing.T) {
	b := startEnv(t, envOptions{workers: 4, routerID: "b", sync: true, syncExpiry: time.Second})
	a := startReplica(t, b, "a", true, 0)

	w := routeOn(t, a, "r1", tokens(1, 0, 4*testBlockSize, 8))
	waitFor(t, "A's booking on B", func() bool { return b.load(w).requests == 1 })
	if v := b.metric("kvroute_sync_replicas"); v != 1 {
		t.Fatalf("B: kvroute_sync_replicas = %v, want 1", v)
	}
	start := time.Now()
	a.svc.NC.Close() // A can no longer publish: no free, no heartbeat, no leaving message
	waitFor(t, "A's booking expired on B", b.idle)
	t.Logf("A's booking dropped %v after A went silent (expiry 1 s)", time.Since(start).Round(10*time.Millisecond))
	if v := b.metric("kvroute_sync_replicas_expired_total"); v != 1 {
		t.Fatalf("B: kvroute_sync_replicas_expired_total = %v, want 1", v)
	}
	if v := b.metric("kvroute_sync_replicas"); v != 0 {
		t.Fatalf("B: kvroute_sync_replicas = %v, want 0", v)
	}
	if a.idle() {
		t.Fatal("A freed its booking: the test would not show expiry")
	}
}

// Without --router-replica-sync the same booking never shows on the other
// replica, and nothing is published: sync is what made it show above.
func TestReplicaWithoutSyncSeesNoRemoteLoad(t *testing.T) {
	a := startEnv(t, envOptions{workers: 4, routerID: "a"})
	b := startReplica(t, a, "b", false, 0)
	msgs := make(chan *nats.Msg, 16)
	sub, err := a.nc.ChanSubscribe(plane.SyncSubject(a.subj), msgs)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := a.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	w := routeOn(t, a, "r1", tokens(1, 0, 4*testBlockSize, 8))
	if a.load(w).requests != 1 {
		t.Fatal("A did not book its own decision")
	}
	// No event can show that something did not arrive: watch B for 100
	// sync intervals (with sync on, the booking shows within one).
	deadline := time.Now().Add(100 * DefaultSyncInterval)
	for time.Now().Before(deadline) {
		if !b.idle() {
			t.Fatalf("B shows load on worker %d without replica sync", w)
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case m := <-msgs:
		t.Fatalf("a replica-sync message was published without --router-replica-sync: %d bytes", len(m.Data))
	default:
	}
	if v := a.metric("kvroute_sync_messages_sent_total"); v != 0 {
		t.Fatalf("A: kvroute_sync_messages_sent_total = %v without sync, want 0", v)
	}
	if v := b.metric("kvroute_sync_remote_requests"); v != 0 {
		t.Fatalf("B: kvroute_sync_remote_requests = %v without sync, want 0", v)
	}
}

// syncQuality is the routing quality of one setup of the replica-sync
// measure.
type syncQuality struct {
	maxMean, hit float64
}

// measureReplicas sends a bursty workload through routers (round robin)
// in front of 8 workers and returns the mean over bursts of the max/mean
// of the requests per worker, and the hit ratio: the blocks the engines
// found cached (usage.prompt_tokens_details.cached_tokens over the block
// size) over the prompts' full blocks.
func measureReplicas(t *testing.T, routers []*env, workers int) syncQuality {
	const (
		bursts   = 12
		perBurst = 16
		families = 2
		prefix   = 8 * testBlockSize
		gap      = 5 * time.Millisecond // between arrivals in a burst
	)
	var maxMean float64
	var cached, prompt int
	for burst := range bursts {
		counts := map[uint64]int{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range perBurst {
			wg.Add(1)
			time.Sleep(gap) // the workload's arrival process, not synchronization
			go func() {
				defer wg.Done()
				toks := tokens((burst*perBurst+i)%families+1, burst*perBurst+i, prefix, 24)
				w, _, u := routers[i%len(routers)].post("/v1/completions", fmt.Sprintf(`{"prompt":%s,"max_tokens":64}`, promptJSON(toks)))
				if u.Usage.PromptTokens != len(toks) {
					t.Errorf("the engine counted %d prompt tokens, sent %d", u.Usage.PromptTokens, len(toks))
				}
				mu.Lock()
				counts[w]++
				cached += u.Usage.PromptTokensDetails.CachedTokens / testBlockSize
				prompt += len(toks) / testBlockSize
				mu.Unlock()
			}()
		}
		wg.Wait()
		mx := 0
		for _, c := range counts {
			mx = max(mx, c)
		}
		maxMean += float64(mx) / (float64(perBurst) / float64(workers))
	}
	return syncQuality{maxMean: maxMean / bursts, hit: float64(cached) / float64(prompt)}
}

// The routing-quality measure of replica sync: 3 replicas in front of 8
// simulated workers, each replica taking a third of a bursty workload,
// with and without replica sync, against one router taking all of it
// (the table in docs/benchmarks.md, docs/decisions/0031-replica-sync.md).
// The routers use the load-driven cost (--cache-affinity 1, no queue
// affinity hold): with the defaults a family's burst waits for its home
// worker whichever replica routes it (max/mean 4.000 in all three setups),
// so there is no load for sync to share. The fleet runs at speedup 2, so a
// request (64 tokens, about 190 ms) outlives its burst (16 arrivals 5 ms
// apart) and the requests per worker in a burst are its concurrent load.
// The claims, with margins a loaded 2-core machine under -race keeps:
// synced replicas balance the bursts as one router does (1.000 to 1.083
// measured, 1.292 with three CI runs sharing two cores; at most
// syncBalanced asserted, below the 1.542 of replicas that publish nothing; one router 1.000, sometimes
// 1.500 when a family's prefix is on fewer workers), replicas without sync
// pile onto the same workers (1.500 to 2.708 measured, at least syncGain
// above the synced replicas asserted), and every setup keeps the hit ratio
// the engines report in usage.prompt_tokens_details.cached_tokens (0.833
// to 0.866 measured, at least minSyncHit asserted; 8/9 is the most a
// prompt of 8 shared blocks and a ninth of its own can hit).
func TestReplicaSyncRoutingQuality(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 7 routers and 3 fleets of 8 workers")
	}
	const (
		workers      = 8
		syncBalanced = 1.4  // below 1.5: a max/mean of 1.5 in most bursts
		syncGain     = 0.15 // what sync removes: 0.21 to 1.63 measured
		minSyncHit   = 0.8  // below the 0.815 of each worker's first request of each family a miss
	)
	loadCost := func(c *sched.Config) {
		c.CacheAffinity, c.QueueAffinityHold, c.QueueAffinityHoldPerBlock = 1, 0, 0
	}
	setup := func(replicas int, syncOn bool, name string) syncQuality {
		e := startEnv(t, envOptions{workers: workers, routerID: name + "-0", sync: syncOn, maxBatch: 512, sched: loadCost, speedup: 2})
		rs := []*env{e}
		for i := 1; i < replicas; i++ {
			rs = append(rs, startReplica(t, e, fmt.Sprintf("%s-%d", name, i), syncOn, 0, loadCost))
		}
		q := measureReplicas(t, rs, workers)
		if syncOn {
			for _, r := range rs {
				if v := r.metric("kvroute_sync_items_applied_total"); v <= 0 {
					t.Errorf("%s: replica applied %v synced items", name, v)
				}
			}
		}
		return q
	}
	one := setup(1, false, "one")
	noSync := setup(3, false, "nosync")
	synced := setup(3, true, "sync")
	t.Logf("8 workers, 12 bursts of 16 requests 5 ms apart (2 prefix families, 8-block prefix), --cache-affinity 1, no hold:")
	t.Logf("  1 router            max/mean %.3f  hit ratio %.3f", one.maxMean, one.hit)
	t.Logf("  3 replicas, no sync max/mean %.3f  hit ratio %.3f", noSync.maxMean, noSync.hit)
	t.Logf("  3 replicas, sync    max/mean %.3f  hit ratio %.3f", synced.maxMean, synced.hit)
	if synced.maxMean > syncBalanced {
		t.Errorf("3 replicas with sync: max/mean %.3f, want at most %v (1 router: %.3f)", synced.maxMean, syncBalanced, one.maxMean)
	}
	if noSync.maxMean < synced.maxMean+syncGain {
		t.Errorf("3 replicas without sync: max/mean %.3f, with sync %.3f: want sync to lower it by at least %v", noSync.maxMean, synced.maxMean, syncGain)
	}
	for _, q := range []struct {
		name string
		syncQuality
	}{{"1 router", one}, {"3 replicas, no sync", noSync}, {"3 replicas, sync", synced}} {
		if q.hit < minSyncHit || q.hit > 8.0/9 {
			t.Errorf("%s: hit ratio %.3f from the engines, want %v to 8/9", q.name, q.hit, minSyncHit)
		}
	}
}

// A duplicate booking is ignored; a gap in a replica's messages drops its
// bookings made before the gap (a lost message may have freed them); a
// replica that restarts under the same --router-id (a new instance) has
// its old bookings dropped; a message claiming this router's own id from
// another instance, and a malformed one, are counted and ignored.
func TestReplicaSyncRestartAndForgedMessages(t *testing.T) {
	b := startEnv(t, envOptions{workers: 2, routerID: "b", sync: true})
	w := b.workers().Workers[0].WorkerID
	subject := plane.SyncSubject(b.subj)
	send := func(h plane.SyncHeader, book bool) {
		t.Helper()
		var sw plane.SyncWriter
		if book {
			sw.Book(5, wire.WorkerKey{Worker: w}, 40, 0, 40, []wire.SeqHash{11, 12})
		}
		if err := b.nc.Publish(subject, sw.AppendMessage(nil, h)); err != nil {
			t.Fatal(err)
		}
	}
	send(plane.SyncHeader{Router: "x", Instance: 1, Seq: 1}, true)
	waitFor(t, "x's booking", func() bool { l := b.load(w); return l.requests == 1 && l.blocks == 2 && l.tokns == 40 })
	send(plane.SyncHeader{Router: "x", Instance: 1, Seq: 2}, true) // the same id again
	waitFor(t, "the duplicate ignored", func() bool { return b.metric("kvroute_sync_items_ignored_total") == 1 })
	if n := b.load(w).requests; n != 1 {
		t.Fatalf("a duplicate booking: %d requests, want 1", n)
	}
	// Message 3 lost: it may have freed request 5, so the booking made
	// before the gap is dropped (no phantom load), and message 4's new
	// booking is kept.
	var sw plane.SyncWriter
	sw.Book(6, wire.WorkerKey{Worker: w}, 24, 0, 24, []wire.SeqHash{21})
	if err := b.nc.Publish(subject, sw.AppendMessage(nil, plane.SyncHeader{Router: "x", Instance: 1, Seq: 4})); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the lost message counted", func() bool { return b.metric("kvroute_sync_messages_missed_total") == 1 })
	if l := b.load(w); l.requests != 1 || l.blocks != 1 || l.tokns != 24 {
		t.Fatalf("after the gap: %+v; want only the booking after it (1 request, 1 block, 24 tokens)", l)
	}
	if v := b.metric("kvroute_sync_bookings_dropped_on_gap_total"); v != 1 {
		t.Fatalf("kvroute_sync_bookings_dropped_on_gap_total = %v, want 1", v)
	}
	send(plane.SyncHeader{Router: "x", Instance: 2, Seq: 1}, false) // x restarted: a heartbeat of its new instance
	waitFor(t, "x's old booking dropped", b.idle)

	send(plane.SyncHeader{Router: "b", Instance: 7, Seq: 1}, true) // not this process, but its id
	waitFor(t, "own id from another instance refused", func() bool { return b.metric("kvroute_sync_messages_refused_total") == 1 })
	before := b.metric("kvroute_control_messages_invalid_total")
	if err := b.nc.Publish(subject, []byte{plane.SyncVersion, 0, 200}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "malformed message counted", func() bool { return b.metric("kvroute_control_messages_invalid_total") == before+1 })
	if !b.idle() {
		t.Fatal("a refused or malformed message booked load")
	}
}
