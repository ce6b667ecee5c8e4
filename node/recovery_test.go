package node

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvroute/kvroute/bench/mock"
	"github.com/kvroute/kvroute/ingest"
	"github.com/kvroute/kvroute/ingest/recovery"
	"github.com/kvroute/kvroute/internal/natstest"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/plane"
)

// entry is one (block, worker) entry: what the index holds and what a
// worker's cache holds.
type entry struct {
	k      wire.WorkerKey
	engine wire.EngineHash
	local  wire.BlockHash
}

// fleetEntries returns the blocks the fleet's engines hold that an index can
// place: every cached block whose ancestors are all cached (a block whose
// parent was evicted has no known prefix).
func fleetEntries(f *mock.Fleet) map[entry]bool {
	out := map[entry]bool{}
	for _, fw := range f.Workers() {
		for r := range fw.DPSize() {
			fleetRankEntries(out, fw.Rank(r), wire.WorkerKey{Worker: fw.ID(), Dp: uint32(r)})
		}
	}
	return out
}

// fleetRankEntries adds one dp rank's placeable blocks to out.
func fleetRankEntries(out map[entry]bool, w *mock.Worker, k wire.WorkerKey) {
	{
		held := w.Held(nil)
		byEngine := map[wire.EngineHash]int{}
		for i, b := range held {
			byEngine[b.Engine] = i
		}
		placeable := make([]int8, len(held)) // 0 unknown, 1 yes, -1 no
		var ok func(i int) bool
		ok = func(i int) bool {
			if placeable[i] == 0 {
				placeable[i] = -1
				b := held[i]
				if !b.HasParent {
					placeable[i] = 1
				} else if p, found := byEngine[b.Parent]; found && ok(p) {
					placeable[i] = 1
				}
			}
			return placeable[i] == 1
		}
		for i, b := range held {
			if ok(i) {
				out[entry{k, b.Engine, b.Local}] = true
			}
		}
	}
}

// indexEntries returns the index's (block, worker) entries (shard.Index.Dump).
func indexEntries(t *testing.T, ix *shard.Index) map[entry]bool {
	t.Helper()
	evs, err := ix.Dump(nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[entry]bool{}
	for _, ev := range evs {
		for _, b := range ev.Blocks {
			out[entry{ev.Worker, b.Engine, b.Local}] = true
		}
	}
	return out
}

// agreement compares the index's (block, worker) entries with the fleet's
// true caches: |both| / |either|, and the sizes. It fails the test when the
// fleet holds no placeable block: two empty sets would count as full
// agreement, and a test whose traffic stored nothing would pass unchecked.
func agreement(t *testing.T, ix *shard.Index, f *mock.Fleet) (frac float64, index, fleet, both int) {
	t.Helper()
	a, b := indexEntries(t, ix), fleetEntries(f)
	if len(b) == 0 {
		t.Fatalf("the fleet's caches hold no placeable block (the index holds %d entries): there is no agreement to measure", len(a))
	}
	for e := range a {
		if b[e] {
			both++
		}
	}
	return float64(both) / float64(len(a)+len(b)-both), len(a), len(b), both
}

// recoveryRig is a node (index, ingest, recovery) and a mock fleet on one
// in-process nats-server.
type recoveryRig struct {
	n *Node
	f *mock.Fleet
}

func startRecoveryRig(t *testing.T, fc mock.Config) *recoveryRig {
	t.Helper()
	s := natstest.Server(t)
	subj := subjects(t)
	n, err := Start(Config{
		Index: shard.Config{Shards: 2}, BlockSize: fc.BlockSize, Subjects: subj, NATSURL: s.ClientURL(),
		Recovery: recovery.Config{Interval: 250 * time.Millisecond, Timeout: 2 * time.Second, MinBackoff: 20 * time.Millisecond, MaxBackoff: 500 * time.Millisecond},
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	f, err := mock.Start(fc, natstest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return &recoveryRig{n: n, f: f}
}

// faultyFleet is a fleet under cache pressure whose event messages are
// dropped (10%) and duplicated (5%).
func faultyFleet(transport string) mock.Config {
	return mock.Config{Workers: 3, BlockSize: 4, KVBlocks: 96, MaxNumSeqs: 8, MaxBatchedTokens: 64, Speedup: 2000,
		Transport: transport, Heartbeat: 100 * time.Millisecond, DropFraction: 0.1, DupFraction: 0.05, Seed: 11, RecoveryRing: 256}
}

// traffic sends n prefix-sharing requests spread over the fleet's workers
// and waits for every answer and for the workers to be idle.
func traffic(t *testing.T, f *mock.Fleet, seed uint64, n int) {
	t.Helper()
	if err := sendTraffic(f.Workers(), seed, n); err != nil {
		t.Fatal(err)
	}
	if err := waitIdle(f.Workers(), 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// sendTraffic sends n prefix-sharing requests spread over workers and
// waits for every answer; it returns the first failure (callable from any
// goroutine).
func sendTraffic(workers []*mock.Worker, seed uint64, n int) error {
	return sendProbed(workers, seed, n, nil)
}

// hitProbe measures what a stale index costs the router while traffic
// runs: for each request it looks up the prompt in the index for the worker
// it goes to (the overlap a router would credit), and compares it with the
// blocks the engine served from its cache (usage cached_tokens).
type hitProbe struct {
	ix        *shard.Index
	blockSize int

	mu                              sync.Mutex
	blocks, cached, missed, phantom int
}

// predict returns the worker's overlap for prompt in the index, capped as
// the engine caps a hit (the last prompt token is always computed).
func (h *hitProbe) predict(worker uint64, prompt []uint32) int {
	local := wire.LocalHashes(nil, prompt, h.blockSize, wire.Seed)
	ovs, err := h.ix.Match(nil, local)
	if err != nil {
		return 0
	}
	for _, o := range ovs {
		if o.Worker.Worker == worker {
			return min(int(o.Blocks), (len(prompt)-1)/h.blockSize)
		}
	}
	return 0
}

func (h *hitProbe) record(prompt []uint32, known, cachedTokens int) {
	cached := cachedTokens / h.blockSize
	h.mu.Lock()
	defer h.mu.Unlock()
	h.blocks += len(prompt) / h.blockSize
	h.cached += cached
	h.missed += max(0, cached-known)
	h.phantom += max(0, known-cached)
}

// lost returns the hit ratio lost (cached blocks the index did not know,
// over all prompt blocks), the phantom ratio (blocks the index credited
// that the engine did not have) and the engines' hit ratio.
func (h *hitProbe) lost() (lost, phantom, hit float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.blocks == 0 {
		return 0, 0, 0
	}
	b := float64(h.blocks)
	return float64(h.missed) / b, float64(h.phantom) / b, float64(h.cached) / b
}

// sendProbed is sendTraffic measuring each request with probe (nil: none).
func sendProbed(workers []*mock.Worker, seed uint64, n int, probe *hitProbe) error {
	rng := rand.New(rand.NewPCG(seed, 3))
	fams := make([][]uint32, 4)
	for i := range fams {
		for j := range 48 {
			fams[i] = append(fams[i], uint32(1000*(i+1)+j))
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 8)
	for i := range n {
		fam := fams[rng.IntN(len(fams))]
		p := append(append([]uint32(nil), fam[:rng.IntN(len(fam)+1)]...), uint32(seed*100000)+uint32(i), uint32(i))
		out := 1 + rng.IntN(24)
		w := workers[rng.IntN(len(workers))]
		url := w.URL()
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			known := 0
			if probe != nil {
				known = probe.predict(w.ID(), p)
			}
			b, _ := json.Marshal(map[string]any{"prompt": p, "max_tokens": out})
			resp, err := http.Post(url+"/v1/completions", "application/json", bytes.NewReader(b))
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				errs <- fmt.Errorf("request %d: %d %s", i, resp.StatusCode, body)
				return
			}
			if probe != nil {
				var r struct {
					Usage struct {
						PromptTokensDetails struct {
							CachedTokens int `json:"cached_tokens"`
						} `json:"prompt_tokens_details"`
					} `json:"usage"`
				}
				if err := json.Unmarshal(body, &r); err != nil {
					errs <- fmt.Errorf("request %d: %v: %s", i, err, body)
					return
				}
				probe.record(p, known, r.Usage.PromptTokensDetails.CachedTokens)
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// waitIdle waits (up to limit) for the workers to be idle.
func waitIdle(workers []*mock.Worker, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for _, w := range workers {
		for !w.Idle() {
			if time.Now().After(deadline) {
				return fmt.Errorf("worker %d not idle", w.ID())
			}
			time.Sleep(5 * time.Millisecond) // polling the engine: it announces no idleness
		}
	}
	return nil
}

// waitAgreement polls until the index agrees with the fleet (a safety
// deadline of 15 s) and fails with the last counts otherwise.
func waitAgreement(t *testing.T, rg *recoveryRig, what string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		frac, ni, nf, both := agreement(t, rg.n.Index, rg.f)
		if frac == 1 {
			t.Logf("%s: agreement 1 (%d entries); recovery %+v", what, ni, rg.n.Recovery.Stats())
			return
		}
		if time.Now().After(deadline) {
			a, b := indexEntries(t, rg.n.Index), fleetEntries(rg.f)
			held := map[wire.EngineHash]bool{}
			for _, w := range rg.f.Workers() {
				for r := range w.DPSize() {
					for _, h := range w.Rank(r).Held(nil) {
						held[h.Engine] = true
					}
				}
			}
			for e := range a {
				if !b[e] {
					t.Logf("index only: %+v (held unplaceable: %v)", e, held[e.engine])
				}
			}
			for e := range b {
				if !a[e] {
					t.Logf("fleet only: %+v", e)
				}
			}
			t.Fatalf("%s: agreement %.4f (index %d, fleet %d, both %d); recovery %+v; ingest gaps %d",
				what, frac, ni, nf, both, rg.n.Recovery.Stats(), len(rg.n.Ingest.Gaps()))
		}
		time.Sleep(50 * time.Millisecond) // polling: convergence has no single event to await
	}
}

// With 10% of the event messages dropped and 5% duplicated under a
// prefix-sharing workload with evictions, the index reaches full agreement
// with the workers' caches once traffic stops, through recovery.
//
// dynamo-dp2 runs workers of two dp ranks each (one URL, an engine, event
// ids and a recovery ring per rank): recovery asks for and applies each
// rank's own events and dumps.
func TestRecoveryUnderDropsAndDuplicates(t *testing.T) {
	for _, tr := range []string{plane.TransportNative, plane.TransportDynamo, plane.TransportDynamo + "-dp2"} {
		t.Run(tr, func(t *testing.T) {
			fc := faultyFleet(strings.TrimSuffix(tr, "-dp2"))
			if strings.HasSuffix(tr, "-dp2") {
				fc.Workers, fc.DPSize = 2, 2
			}
			rg := startRecoveryRig(t, fc)
			traffic(t, rg.f, 1, 300)
			frac, _, _, _ := agreement(t, rg.n.Index, rg.f)
			t.Logf("agreement right after traffic: %.4f", frac)
			waitAgreement(t, rg, "after drops and duplicates")
			st := rg.n.Recovery.Stats()
			if st.Events+st.DumpBlocks == 0 {
				t.Fatalf("nothing was recovered (%+v): the faults did not bite", st)
			}
			if fc.DPSize > 1 {
				for _, w := range rg.f.Workers() {
					if len(w.Rank(1).Held(nil)) == 0 {
						t.Fatalf("worker %d's rank 1 holds no block: the traffic never reached it", w.ID())
					}
				}
			}
			var sb bytes.Buffer
			rg.n.Recovery.WriteMetrics(&sb)
			if !bytes.Contains(sb.Bytes(), []byte("kvroute_recovery_requests_total ")) {
				t.Fatalf("metrics:\n%s", sb.String())
			}
		})
	}
}

// A worker restarted (its cache cleared, its ids starting over) while its
// events are being dropped: the index agrees with the fleet again.
func TestRecoveryAfterRestart(t *testing.T) {
	rg := startRecoveryRig(t, faultyFleet(plane.TransportNative))
	traffic(t, rg.f, 2, 150)
	waitAgreement(t, rg, "before the restart")
	w := rg.f.Workers()[0]
	w.Restart()
	traffic(t, rg.f, 3, 60)
	waitAgreement(t, rg, "after the restart")
}

// A worker paused past its heartbeat expiry (the router forgets it and
// removes its blocks, as router.health does) and resumed (it registers
// again): the index agrees with the fleet again.
func TestRecoveryAfterPause(t *testing.T) {
	rg := startRecoveryRig(t, faultyFleet(plane.TransportDynamo))
	traffic(t, rg.f, 4, 150)
	waitAgreement(t, rg, "before the pause")
	w := rg.f.Workers()[1]
	w.Pause()
	// What the router does when the worker's heartbeats expire.
	rg.n.WorkerLeft(w.ID())
	if _, err := rg.n.Index.RemoveWorker(w.ID()); err != nil {
		t.Fatal(err)
	}
	w.Resume()
	rg.n.WorkerJoined(w.Registration()) // its next heartbeat registers it again
	traffic(t, rg.f, 5, 60)
	waitAgreement(t, rg, "after the pause")
}

// A Stored event the index drops because its parent is missing, with no
// event-id gap to show it (here an event without an id), makes the node ask
// that worker for a dump: the ids alone would never show the loss.
func TestParentMissingAsksForADump(t *testing.T) {
	fc := faultyFleet(plane.TransportNative)
	fc.DropFraction, fc.DupFraction = 0, 0
	fc.Heartbeat = time.Second
	rg := startRecoveryRig(t, fc)
	traffic(t, rg.f, 6, 60)
	waitAgreement(t, rg, "before the orphan")
	dumps := rg.n.Recovery.Stats().Dumps
	w := rg.f.Workers()[0].ID()
	orphan := wire.Event{Worker: wire.WorkerKey{Worker: w}, Kind: wire.KindStored, Parent: 0xdead, HasParent: true,
		Blocks: []wire.Block{{Engine: 0xbeef, Local: 0xfeed}}}
	if err := rg.n.NC.Publish(subjects(t).KVEventsNative, wire.AppendNative(nil, []wire.Event{orphan})); err != nil {
		t.Fatal(err)
	}
	waitCond(t, "a dump of the orphan's worker", func() bool { return rg.n.Recovery.Stats().Dumps > dumps })
	waitAgreement(t, rg, "after the dump")
}

// The NATS server comes back on the same port without its store (a fresh
// disk): the KV-event stream and the snapshot bucket are gone and the
// ordered consumer cannot recreate itself. The node recreates both after
// the reconnection, consumes the new stream from its first message, asks
// the workers for what was published meanwhile, agrees with the fleet
// again and stores a snapshot in the recreated bucket.
func TestStreamLostWithTheStore(t *testing.T) {
	s := natstest.ServerStore(t, -1, t.TempDir())
	port := natstest.Port(s)
	fc := faultyFleet(plane.TransportNative)
	fc.DropFraction, fc.DupFraction = 0, 0
	n, err := Start(Config{Index: shard.Config{Shards: 2}, BlockSize: fc.BlockSize, Subjects: subjects(t), NATSURL: s.ClientURL(),
		JetStream: true, Stream: ingest.StreamConfig{MaxAge: time.Minute}, NATSReconnectWait: 50 * time.Millisecond,
		Snapshot: SnapshotConfig{Bucket: "KVSNAP", Interval: time.Hour},
		Recovery: recovery.Config{Interval: 250 * time.Millisecond, Timeout: 2 * time.Second, MinBackoff: 20 * time.Millisecond, MaxBackoff: 500 * time.Millisecond},
		Logger:   slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	fnc, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fnc.Close)
	f, err := mock.Start(fc, fnc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	rg := &recoveryRig{n: n, f: f}
	traffic(t, f, 81, 200)
	waitAgreement(t, rg, "before the store is lost")
	s.Shutdown()
	s.WaitForShutdown()
	natstest.ServerStore(t, port, t.TempDir()) // same port, empty store
	waitCond(t, "the stream recreated", func() bool { return n.Ingest.Stats().StreamRestarts == 1 })
	traffic(t, f, 82, 200)
	waitAgreement(t, rg, "after the store was lost")
	if seq := n.Ingest.LastSeq(); seq == 0 {
		t.Error("ingest applied nothing from the recreated stream")
	}
	n.TriggerSnapshot()
	traffic(t, f, 83, 20)
	waitCond(t, "a snapshot stored in the recreated bucket", func() bool { st, _ := n.Snapshots(); return st == 1 })
}
