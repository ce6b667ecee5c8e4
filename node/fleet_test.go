package node

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/ingest"
	"github.com/kvroute/kvroute/internal/natstest"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/plane"
)

// chain returns n Stored events' worth of blocks: one event of n chained
// blocks, distinct per (worker, seed).
func chain(worker, seed uint64, n int) []wire.Block {
	out := make([]wire.Block, n)
	for i := range out {
		h := worker<<40 | seed<<20 | uint64(i+1)
		out[i] = wire.Block{Engine: wire.EngineHash(h), Local: wire.BlockHash(h*0x9e3779b97f4a7c15 | 1)}
	}
	return out
}

func treeBlocks(t *testing.T, n *Node) map[uint64]uint32 {
	t.Helper()
	if err := n.Index.Flush(); err != nil {
		t.Fatal(err)
	}
	ws, err := n.Index.Workers(nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint64]uint32{}
	for _, w := range ws {
		out[w.Worker.Worker] += w.TreeSize
	}
	return out
}

func metricsText(n *Node) string {
	var b strings.Builder
	n.WriteMetrics(&b)
	return b.String()
}

// TestUnknownWorkersBounded floods the index with unregistered worker ids
// (here 40 × 20 blocks): at most MaxPending unknown workers reach the index,
// capped, and only for the grace; a worker that registers within its grace
// keeps its blocks; a static (Known) worker is never filtered; the rest are
// counted.
func TestUnknownWorkersBounded(t *testing.T) {
	s := natstest.Server(t)
	pub := natstest.Connect(t, s)
	sub := subjects(t)
	n, err := Start(Config{BlockSize: 16, Subjects: sub, NATSURL: s.ClientURL(), Logger: slog.New(slog.DiscardHandler),
		Fleet: FleetConfig{Filter: true, Grace: 500 * time.Millisecond, MaxPending: 4, PendingCap: 10, Known: []uint64{7}}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	// Worker 1 is about to register: its events come first.
	publishStored(t, pub, sub, 1, 1, chain(1, 0, 5))
	for w := uint64(100); w < 140; w++ {
		publishStored(t, pub, sub, w, 1, chain(w, 0, 20))
	}
	publishStored(t, pub, sub, 7, 1, chain(7, 0, 30)) // static: no cap, no filter
	if err := pub.Flush(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "all messages handled", func() bool {
		st := n.Ingest.Stats().Sources[ingest.SourceNATSNative]
		return st.Messages == 42
	})
	tb := treeBlocks(t, n)
	if len(tb) > 5 { // workers 1, 7 and at most 3 more unknown ones (MaxPending 4 counts worker 1)
		t.Fatalf("%d workers in the index, want at most 5: %v", len(tb), tb)
	}
	for w, b := range tb {
		if w != 7 && b > 10 {
			t.Errorf("unknown worker %d holds %d blocks, over the pending cap of 10", w, b)
		}
	}
	if tb[7] != 30 {
		t.Errorf("static worker 7 holds %d blocks, want 30", tb[7])
	}
	n.WorkerJoined(plane.Registration{WorkerID: 1, KVBlocks: 100})
	waitFor(t, "grace over: unknown workers evicted", func() bool { return n.fleet.pending() == 0 && n.fleet.evicted.Load() > 0 })
	tb = treeBlocks(t, n)
	if len(tb) != 2 || tb[1] != 5 || tb[7] != 30 {
		t.Fatalf("after the grace: %v, want workers 1 (5 blocks) and 7 (30)", tb)
	}
	// An evicted worker's later events are dropped at once.
	publishStored(t, pub, sub, 100, 2, chain(100, 1, 3))
	waitFor(t, "dropped", func() bool {
		return strings.Contains(metricsText(n), `kvroute_refused_total{reason="unknown_worker_events"} 38`)
	})
	if tb = treeBlocks(t, n); len(tb) != 2 {
		t.Fatalf("evicted worker came back: %v", tb)
	}
}

// TestWorkerCapRefusesAndAsksForADump reproduces the worker whose tree grew
// to 122× its declared kv_blocks: Stored events over CapFactor × kv_blocks
// per rank are refused, counted, and a dump is asked for.
func TestWorkerCapRefusesAndAsksForADump(t *testing.T) {
	s := natstest.Server(t)
	pub := natstest.Connect(t, s)
	sub := subjects(t)
	n, err := Start(Config{BlockSize: 16, Subjects: sub, NATSURL: s.ClientURL(), Logger: slog.New(slog.DiscardHandler),
		Fleet: FleetConfig{Filter: true, CapFactor: 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	n.WorkerJoined(plane.Registration{WorkerID: 3, DpRanks: []uint32{0}, KVBlocks: 16, EventTransport: plane.TransportNative})
	for i := range uint64(10) { // 10 × 8 blocks against a cap of 32
		publishStored(t, pub, sub, 3, i+1, chain(3, i, 8))
	}
	waitFor(t, "over-cap events refused", func() bool {
		return strings.Contains(metricsText(n), `kvroute_refused_total{reason="worker_over_capacity"} 6`)
	})
	if tb := treeBlocks(t, n); tb[3] != 32 {
		t.Fatalf("worker 3 holds %d blocks, want its cap of 32", tb[3])
	}
	// One dump is asked for; the rest wait a minute (a lying worker would
	// refuse its own dump again).
	waitFor(t, "a dump asked for", func() bool { return n.gapsDump.Load() == 1 && n.gapsThrottled.Load() == 5 })
	var stats []shard.ShardStats
	if stats, err = n.Index.Stats(nil); err != nil || shard.Sum(stats).OverCapBlocks != 48 {
		t.Fatalf("over-cap blocks %d %v", shard.Sum(stats).OverCapBlocks, err)
	}
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

// TestGapsOfUntrackedWorkersCounted: a Stored event dropped for a missing
// parent is counted even when no dump can be asked for (the worker's id
// tracking is forgotten, or its events carry no ids).
func TestGapsOfUntrackedWorkersCounted(t *testing.T) {
	s := natstest.Server(t)
	pub := natstest.Connect(t, s)
	sub := subjects(t)
	n, err := Start(Config{BlockSize: 16, Subjects: sub, NATSURL: s.ClientURL(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ev := wire.Event{Worker: wire.WorkerKey{Worker: 5}, ID: 0, Kind: wire.KindStored, HasParent: true, Parent: 12345, Blocks: chain(5, 0, 2)}
	if err := pub.Publish(sub.KVEventsNative, wire.AppendNative(nil, []wire.Event{ev})); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "untracked gap counted", func() bool {
		return strings.Contains(metricsText(n), `kvroute_index_gaps_total{action="none"} 1`)
	})
	if n.gapsDump.Load() != 0 {
		t.Fatal("a dump was asked of an untracked worker")
	}
}
