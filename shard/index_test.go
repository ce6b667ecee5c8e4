package shard

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kvroute/kvroute/internal/promtext"
	"github.com/kvroute/kvroute/internal/promtext/promtexttest"
	"github.com/kvroute/kvroute/radix"
	"github.com/kvroute/kvroute/wire"
)

func cmpOverlap(a, b radix.Overlap) int {
	return cmp.Or(cmp.Compare(a.Worker.Worker, b.Worker.Worker), cmp.Compare(a.Worker.Dp, b.Worker.Dp),
		cmp.Compare(a.Blocks, b.Blocks), cmp.Compare(a.TreeSize, b.TreeSize))
}

func sortedOverlaps(ov []radix.Overlap) []radix.Overlap {
	ov = slices.Clone(ov)
	slices.SortFunc(ov, cmpOverlap)
	return ov
}

var quiet = slog.New(slog.DiscardHandler)

func newTestIndex(t testing.TB, cfg Config) *Index {
	t.Helper()
	if cfg.TickInterval == 0 {
		cfg.TickInterval = -1
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	ix, err := NewIndex(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ix.Close() })
	return ix
}

// producerOp is one step of a producer's log, replayed against the model.
type producerOp struct {
	events  []wire.Event    // Apply
	worker  uint64          // RemoveWorker when dp == nil and events == nil
	dp      *wire.WorkerKey // RemoveDpRank
	removed int             // what the Index returned
}

// TestIndexConcurrentDifferential runs producers (each owning distinct
// workers, so per-worker order is defined), removals and lookups
// concurrently, then checks the quiescent Index against radix trees fed the
// same operations: one tree for the whole index and one per shard.
func TestIndexConcurrentDifferential(t *testing.T) {
	const (
		producers = 4
		rounds    = 150
		shards    = 3
	)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	ix := newTestIndex(t, Config{Shards: shards, QueueSize: 8, StepBlocks: 16})

	logs := make([][]producerOp, producers)
	gens := make([]*eventGen, producers)
	for p := range producers {
		var keys []wire.WorkerKey
		for w := range 3 {
			for dp := range 2 {
				keys = append(keys, wire.WorkerKey{Worker: uint64(p*10 + w + 1), Dp: uint32(dp)})
			}
		}
		gens[p] = newEventGen(seed+uint64(p), keys)
	}

	var producersWG, matchersWG sync.WaitGroup
	done := make(chan struct{})
	errc := make(chan error, producers+2)
	for p := range producers {
		producersWG.Go(func() {
			g := gens[p]
			for range rounds {
				switch r := g.rng.IntN(100); {
				case r < 92:
					var evs []wire.Event
					for range 1 + g.rng.IntN(12) {
						evs = g.event(evs)
					}
					logs[p] = append(logs[p], producerOp{events: cloneEvents(evs)})
					if err := ix.Apply(evs); err != nil {
						errc <- err
						return
					}
					for i := range evs { // the Index must have copied them
						for j := range evs[i].Blocks {
							evs[i].Blocks[j] = wire.Block{Engine: 0xdead, Local: 0xbeef}
						}
					}
				case r < 96:
					k := g.workers[g.rng.IntN(len(g.workers))]
					n, err := ix.RemoveDpRank(k)
					if err != nil {
						errc <- err
						return
					}
					logs[p] = append(logs[p], producerOp{dp: &k, removed: n})
					delete(g.known, k)
				default:
					w := g.workers[g.rng.IntN(len(g.workers))].Worker
					n, err := ix.RemoveWorker(w)
					if err != nil {
						errc <- err
						return
					}
					logs[p] = append(logs[p], producerOp{worker: w, removed: n})
					for _, k := range g.workers {
						if k.Worker == w {
							delete(g.known, k)
						}
					}
				}
			}
		})
	}
	for m := range 2 {
		matchersWG.Go(func() {
			g := newEventGen(seed+100+uint64(m), gens[m].workers)
			var ov []radix.Overlap
			reqs := make([]MatchRequest, 4)
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				probe := g.probe()
				var err error
				if ov, err = ix.Match(ov[:0], probe); err != nil {
					errc <- err
					return
				}
				if err := sane(ov, probe); err != nil {
					errc <- err
					return
				}
				for j := range reqs {
					reqs[j] = MatchRequest{Hashes: g.probe(), Overlaps: reqs[j].Overlaps[:0]}
				}
				if err := ix.MatchBatch(reqs); err != nil {
					errc <- err
					return
				}
				for _, r := range reqs {
					if err := sane(r.Overlaps, r.Hashes); err != nil {
						errc <- err
						return
					}
				}
				if i%50 == 0 {
					if _, err := ix.Stats(nil); err != nil {
						errc <- err
						return
					}
					if _, err := ix.Workers(nil); err != nil {
						errc <- err
						return
					}
				}
			}
		})
	}
	producersWG.Wait()
	close(done)
	matchersWG.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := ix.CheckInvariants(); err != nil {
		t.Fatal(err)
	}

	// Replay into the models.
	whole := radix.New()
	perShard := make([]*radix.Tree, shards)
	for s := range perShard {
		perShard[s] = radix.New()
	}
	var want Counters
	for p, log := range logs {
		for i, op := range log {
			switch {
			case op.events != nil:
				for j := range op.events {
					ev := &op.events[j]
					s, ok := ix.ShardOf(ev.Worker.Worker)
					if !ok {
						t.Fatalf("worker %d has no shard", ev.Worker.Worker)
					}
					res, err := whole.Apply(ev)
					if _, err2 := perShard[s].Apply(ev); !errors.Is(err2, err) && err2 != err {
						t.Fatalf("model trees disagree: %v vs %v", err, err2)
					}
					countEvent(&want, ev, res, err)
				}
			case op.dp != nil:
				if n := whole.RemoveDpRank(*op.dp); n != op.removed {
					t.Errorf("producer %d op %d: RemoveDpRank(%v) = %d, model %d", p, i, *op.dp, op.removed, n)
				}
				s, _ := ix.ShardOf(op.dp.Worker)
				perShard[s].RemoveDpRank(*op.dp)
				want.BlocksRemoved += uint64(op.removed)
			default:
				if n := whole.RemoveWorker(op.worker); n != op.removed {
					t.Errorf("producer %d op %d: RemoveWorker(%d) = %d, model %d", p, i, op.worker, op.removed, n)
				}
				s, _ := ix.ShardOf(op.worker)
				perShard[s].RemoveWorker(op.worker)
				want.BlocksRemoved += uint64(op.removed)
			}
		}
	}
	if err := whole.CheckInvariants(); err != nil {
		t.Fatal(err)
	}

	// Lookups: single, batched, and after a dump/rebuild.
	dump, err := ix.Dump(nil)
	if err != nil {
		t.Fatal(err)
	}
	rebuilt := radix.New()
	for i := range dump {
		if _, err := rebuilt.Apply(&dump[i]); err != nil {
			t.Fatalf("replaying dump event %d: %v", i, err)
		}
	}
	var reqs []MatchRequest
	for p := range producers {
		for range 100 {
			probe := gens[p].probe()
			reqs = append(reqs, MatchRequest{Hashes: probe})
			got, err := ix.Match(nil, probe)
			if err != nil {
				t.Fatal(err)
			}
			want := whole.Match(nil, probe)
			if g, w := sortedOverlaps(got), sortedOverlaps(want); !slices.Equal(g, w) {
				t.Fatalf("Match(%x):\n index %v\n model %v", probe, g, w)
			}
			if g, w := sortedOverlaps(rebuilt.Match(nil, probe)), sortedOverlaps(want); !slices.Equal(g, w) {
				t.Fatalf("Match(%x) on rebuilt dump:\n %v\n model %v", probe, g, w)
			}
		}
	}
	if err := ix.MatchBatch(reqs); err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		if g, w := sortedOverlaps(r.Overlaps), sortedOverlaps(whole.Match(nil, r.Hashes)); !slices.Equal(g, w) {
			t.Fatalf("MatchBatch(%x):\n index %v\n model %v", r.Hashes, g, w)
		}
	}
	gotWorkers, err := ix.Workers(nil)
	if err != nil {
		t.Fatal(err)
	}
	if g, w := sortedOverlaps(gotWorkers), sortedOverlaps(whole.Workers(nil)); !slices.Equal(g, w) {
		t.Fatalf("Workers:\n index %v\n model %v", g, w)
	}

	// Stats and counters.
	stats, err := ix.Stats(nil)
	if err != nil {
		t.Fatal(err)
	}
	for s, st := range stats {
		ms := perShard[s].Stats()
		if st.Tree.Nodes != ms.Nodes || st.Tree.Entries != ms.Entries || st.Tree.Workers != ms.Workers || st.Tree.Blocks != ms.Blocks {
			t.Errorf("shard %d tree stats %+v, model %+v", s, st.Tree, ms)
		}
		if st.EventQueueHighWater < 1 || st.EventQueueHighWater > 8 {
			t.Errorf("shard %d event queue high water %d, want 1..8", s, st.EventQueueHighWater)
		}
	}
	total := Sum(stats)
	if total.Tree.Entries != whole.Stats().Entries || total.Tree.Workers != whole.Stats().Workers {
		t.Errorf("total tree stats %+v, whole-tree model %+v", total.Tree, whole.Stats())
	}
	if total.Events != want.Events {
		t.Errorf("event outcomes %v, model %v", total.Events, want.Events)
	}
	if total.BlocksConflicting != want.BlocksConflicting {
		t.Errorf("conflicting blocks %d, model %d", total.BlocksConflicting, want.BlocksConflicting)
	}
	if total.BlocksStored != want.BlocksStored || total.BlocksRemoved != want.BlocksRemoved || total.BlocksUnknown != want.BlocksUnknown {
		t.Errorf("blocks stored/removed/unknown %d/%d/%d, model %d/%d/%d", total.BlocksStored, total.BlocksRemoved,
			total.BlocksUnknown, want.BlocksStored, want.BlocksRemoved, want.BlocksUnknown)
	}
	gaps, err := ix.Gaps(nil)
	if err != nil {
		t.Fatal(err)
	}
	if missing := want.Events[wire.KindStored][OutcomeParentMissing]; uint64(len(gaps)) != missing || missing == 0 {
		t.Errorf("%d gaps drained, %d parent-missing events in the model (want equal and > 0)", len(gaps), missing)
	}
	if again, _ := ix.Gaps(nil); len(again) != 0 {
		t.Errorf("gap outbox not drained: %d left", len(again))
	}
	t.Logf("events %v; tree %+v; queue high water %d", total.Events, total.Tree, total.EventQueueHighWater)
}

func countEvent(c *Counters, ev *wire.Event, res radix.Result, err error) {
	k := ev.Kind
	switch {
	case err == nil:
		c.Events[k][OutcomeOK]++
	case errors.Is(err, radix.ErrParentMissing):
		c.Events[k][OutcomeParentMissing]++
	default:
		c.Events[k][OutcomeBad]++
	}
	c.BlocksStored += uint64(res.Stored)
	c.BlocksRemoved += uint64(res.Removed)
	c.BlocksUnknown += uint64(res.Unknown)
	c.BlocksConflicting += uint64(res.Conflicts)
}

// sane checks what can be checked of a Match result taken under concurrent
// writes: one entry per worker key, at least one and at most len(probe)
// blocks, and no more matched blocks than the worker holds.
func sane(ov []radix.Overlap, probe []wire.BlockHash) error {
	seen := map[wire.WorkerKey]bool{}
	for _, o := range ov {
		if seen[o.Worker] {
			return fmt.Errorf("worker %v twice in %v", o.Worker, ov)
		}
		seen[o.Worker] = true
		if o.Blocks < 1 || int(o.Blocks) > len(probe) || o.Blocks > o.TreeSize {
			return fmt.Errorf("implausible overlap %+v for a %d-block probe", o, len(probe))
		}
	}
	return nil
}

func stored(k wire.WorkerKey, parent wire.EngineHash, blocks ...uint64) wire.Event {
	ev := wire.Event{Worker: k, Kind: wire.KindStored, HasParent: parent != 0, Parent: parent}
	for _, b := range blocks {
		ev.Blocks = append(ev.Blocks, wire.Block{Engine: wire.EngineHash(b), Local: wire.BlockHash(b * 1000)})
	}
	return ev
}

func locals(blocks ...uint64) []wire.BlockHash {
	var h []wire.BlockHash
	for _, b := range blocks {
		h = append(h, wire.BlockHash(b*1000))
	}
	return h
}

func TestWorkerAssignment(t *testing.T) {
	ix := newTestIndex(t, Config{Shards: 3})
	shardOf := func(w uint64) int {
		t.Helper()
		s, ok := ix.ShardOf(w)
		if !ok {
			t.Fatalf("worker %d not assigned", w)
		}
		return s
	}
	if _, ok := ix.ShardOf(10); ok {
		t.Fatal("worker 10 assigned before it was seen")
	}
	// First sight by event, by decision, by event: least loaded, ties to the
	// lowest shard.
	if err := ix.Apply([]wire.Event{stored(wire.WorkerKey{Worker: 10}, 0, 1, 2)}); err != nil {
		t.Fatal(err)
	}
	loc := locals(1, 2)
	seq := wire.SequenceHashes(nil, loc)
	if err := ix.RecordDecision(wire.WorkerKey{Worker: 20}, loc, seq); err != nil {
		t.Fatal(err)
	}
	if err := ix.Apply([]wire.Event{stored(wire.WorkerKey{Worker: 30}, 0, 1)}); err != nil {
		t.Fatal(err)
	}
	if got := []int{shardOf(10), shardOf(20), shardOf(30)}; !slices.Equal(got, []int{0, 1, 2}) {
		t.Fatalf("shards of workers 10, 20, 30 = %v, want [0 1 2]", got)
	}
	// Every dp rank of worker 10 lives on its shard, including ranks seen
	// later and through decisions.
	var evs []wire.Event
	for dp := range uint32(4) {
		evs = append(evs, stored(wire.WorkerKey{Worker: 10, Dp: dp}, 0, 1, 2, 3))
	}
	if err := ix.Apply(evs); err != nil {
		t.Fatal(err)
	}
	if err := ix.RecordDecision(wire.WorkerKey{Worker: 10, Dp: 7}, loc, seq); err != nil {
		t.Fatal(err)
	}
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	stats, err := ix.Stats(nil)
	if err != nil {
		t.Fatal(err)
	}
	if w := []int{stats[0].Tree.Workers, stats[1].Tree.Workers, stats[2].Tree.Workers}; !slices.Equal(w, []int{5, 1, 1}) {
		t.Fatalf("worker keys per shard %v, want [5 1 1]", w)
	}
	if w := []int{stats[0].Workers, stats[1].Workers, stats[2].Workers}; !slices.Equal(w, []int{1, 1, 1}) {
		t.Fatalf("assigned worker ids per shard %v, want [1 1 1]", w)
	}
	ov, err := ix.Match(nil, locals(1, 2, 3))
	if err != nil {
		t.Fatal(err)
	}
	if len(ov) != 7 {
		t.Fatalf("Match found %d worker keys, want 7: %v", len(ov), ov)
	}
	// Removal finds the worker on its shard; its shard's load drops, so the
	// next new worker goes there; the removed worker, seen again, returns
	// to its shard.
	n, err := ix.RemoveWorker(20)
	if err != nil || n != 2 {
		t.Fatalf("RemoveWorker(20) = %d, %v; want 2 blocks", n, err)
	}
	if n, err := ix.RemoveWorker(99); err != nil || n != 0 {
		t.Fatalf("RemoveWorker(99) = %d, %v; want 0, nil", n, err)
	}
	ov, _ = ix.Match(ov[:0], locals(1, 2))
	for _, o := range ov {
		if o.Worker.Worker == 20 {
			t.Fatalf("removed worker 20 still matches: %v", ov)
		}
	}
	if err := ix.Apply([]wire.Event{stored(wire.WorkerKey{Worker: 40}, 0, 5)}); err != nil {
		t.Fatal(err)
	}
	if s := shardOf(40); s != 1 {
		t.Fatalf("worker 40 on shard %d, want 1 (emptied by the removal)", s)
	}
	if err := ix.Apply([]wire.Event{stored(wire.WorkerKey{Worker: 20}, 0, 5)}); err != nil {
		t.Fatal(err)
	}
	if s := shardOf(20); s != 1 {
		t.Fatalf("worker 20 came back on shard %d, want 1", s)
	}
	n, err = ix.RemoveDpRank(wire.WorkerKey{Worker: 10, Dp: 2})
	if err != nil || n != 3 {
		t.Fatalf("RemoveDpRank(10/2) = %d, %v; want 3", n, err)
	}
	if sz, err := ix.TreeSize(wire.WorkerKey{Worker: 10, Dp: 1}); err != nil || sz != 3 {
		t.Fatalf("TreeSize(10/1) = %d, %v; want 3", sz, err)
	}
	if sz, err := ix.TreeSize(wire.WorkerKey{Worker: 10, Dp: 2}); err != nil || sz != 0 {
		t.Fatalf("TreeSize(10/2) = %d, %v; want 0", sz, err)
	}
	// Cleared reaches every dp rank of the worker, on its shard.
	if err := ix.Apply([]wire.Event{{Worker: wire.WorkerKey{Worker: 10, Dp: 3}, Kind: wire.KindCleared}}); err != nil {
		t.Fatal(err)
	}
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	stats, _ = ix.Stats(stats[:0])
	if stats[0].Tree.Workers != 0 {
		t.Fatalf("shard 0 still holds %d worker keys after Cleared", stats[0].Tree.Workers)
	}
	if err := ix.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestApplyOrderAndGaps(t *testing.T) {
	ix := newTestIndex(t, Config{Shards: 2})
	k := wire.WorkerKey{Worker: 1}
	evs := []wire.Event{
		stored(k, 0, 1, 2),
		stored(k, 2, 3),
		stored(k, 77, 9), // parent 77 unknown: a gap
		{Worker: k, Kind: wire.KindRemoved, Blocks: []wire.Block{{Engine: 3}, {Engine: 55}}},
		{Worker: k, Kind: 9}, // bad kind
	}
	evs[2].ID = 42
	if err := ix.Apply(evs); err != nil {
		t.Fatal(err)
	}
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	ov, err := ix.Match(nil, locals(1, 2, 3))
	if err != nil {
		t.Fatal(err)
	}
	if want := []radix.Overlap{{Worker: k, Blocks: 2, TreeSize: 2}}; !slices.Equal(ov, want) {
		t.Fatalf("Match = %v, want %v", ov, want)
	}
	gaps, err := ix.Gaps(nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Gap{{Worker: k, EventID: 42, Parent: 77}}; !slices.Equal(gaps, want) {
		t.Fatalf("Gaps = %v, want %v", gaps, want)
	}
	st, _ := ix.Stats(nil)
	c := Sum(st).Counters
	var want [NumKinds][NumOutcomes]uint64
	want[wire.KindStored][OutcomeOK] = 2
	want[wire.KindStored][OutcomeParentMissing] = 1
	want[wire.KindRemoved][OutcomeOK] = 1
	want[0][OutcomeBad] = 1
	if c.Events != want {
		t.Fatalf("event outcomes %v, want %v", c.Events, want)
	}
	if c.BlocksStored != 3 || c.BlocksRemoved != 1 || c.BlocksUnknown != 1 {
		t.Fatalf("blocks stored/removed/unknown = %d/%d/%d, want 3/1/1", c.BlocksStored, c.BlocksRemoved, c.BlocksUnknown)
	}
	var buf bytes.Buffer
	ix.WriteMetrics(&buf)
	for _, line := range []string{
		`kvroute_shard_events_total{shard="0",kind="stored",outcome="parent_missing"} 1`,
		`kvroute_shard_events_total{shard="0",kind="unknown",outcome="bad"} 1`,
		`kvroute_shard_blocks_total{shard="0",op="unknown"} 1`,
		`kvroute_shard_workers{shard="0"} 1`,
		`kvroute_shard_workers{shard="1"} 0`,
		`kvroute_shard_event_queue_depth{shard="0"} 0`,
	} {
		if !strings.Contains(buf.String(), line+"\n") {
			t.Errorf("metrics lack %q:\n%s", line, buf.String())
		}
	}
	// Through a registry: valid Prometheus text (two shards' samples
	// grouped by family), every declared family written.
	var expo bytes.Buffer
	promtext.NewRegistry(MetricFamilies).Write(&expo, ix.WriteMetrics)
	promtexttest.Check(t, "the shard metrics", expo.Bytes())
	for _, f := range MetricFamilies {
		if !strings.Contains(expo.String(), "\n# TYPE "+f.Name+" ") {
			t.Errorf("family %s not written", f.Name)
		}
	}
}

// TestBackpressure fills a tiny queue while its shard is stalled: the
// producer waits (it neither fails nor drops), and once the shard resumes
// every event is applied.
func TestBackpressure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ix := newTestIndex(t, Config{Shards: 1, QueueSize: 2})
		release := make(chan struct{})
		stalled := make(chan struct{})
		go func() {
			_ = ix.ordered(func(int, *Core) { close(stalled); <-release })
		}()
		<-stalled
		const batches = 50
		var sent atomic.Int64
		producerDone := make(chan error)
		go func() {
			for i := range batches {
				ev := stored(wire.WorkerKey{Worker: uint64(i % 5)}, 0, uint64(i+1))
				if err := ix.Apply([]wire.Event{ev}); err != nil {
					producerDone <- err
					return
				}
				sent.Add(1)
			}
			producerDone <- nil
		}()
		synctest.Wait() // the producer is now durably blocked on the full queue
		if n := sent.Load(); n != 2 {
			t.Fatalf("%d batches queued while the shard was stalled, want 2 (the queue's capacity)", n)
		}
		close(release)
		if err := <-producerDone; err != nil {
			t.Fatal(err)
		}
		if err := ix.Flush(); err != nil {
			t.Fatal(err)
		}
		st, err := ix.Stats(nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := st[0].Events[wire.KindStored][OutcomeOK]; got != batches {
			t.Fatalf("%d events applied, want %d", got, batches)
		}
		if st[0].BlocksStored != batches || st[0].EventBatches != batches {
			t.Fatalf("blocks %d, batches %d; want %d each", st[0].BlocksStored, st[0].EventBatches, batches)
		}
		if st[0].ProducerStalls == 0 || st[0].EventQueueHighWater != 2 {
			t.Fatalf("stalls %d, high water %d; want > 0 and 2", st[0].ProducerStalls, st[0].EventQueueHighWater)
		}
	})
}

// TestLookupsOvertakeWrites shows a lookup waiting behind writes is
// answered before them: the shard is stalled in a write-queue function, a
// write queues up behind it and a Match waits for the core; on release the
// Match sees the state before the queued write. Matches run on the caller's
// goroutine and wait on the core's lock (not a durable block for synctest),
// so the test waits for the runner's count of waiting lookups instead.
func TestLookupsOvertakeWrites(t *testing.T) {
	ix := newTestIndex(t, Config{Shards: 1})
	r := ix.runners[0]
	k := wire.WorkerKey{Worker: 1}
	if err := ix.Apply([]wire.Event{stored(k, 0, 1, 2)}); err != nil {
		t.Fatal(err)
	}
	inside, release := make(chan struct{}), make(chan struct{})
	go func() { _ = ix.ordered(func(int, *Core) { close(inside); <-release }) }()
	<-inside // the shard now holds its core
	if err := ix.Apply([]wire.Event{stored(k, 2, 3)}); err != nil {
		t.Fatal(err)
	}
	got := make(chan []radix.Overlap)
	go func() {
		ov, err := ix.Match(nil, locals(1, 2, 3))
		if err != nil {
			t.Error(err)
		}
		got <- ov
	}()
	for !r.lookupsWaiting() { // the lookup waits for the core
		runtime.Gosched()
	}
	close(release)
	if ov, want := <-got, []radix.Overlap{{Worker: k, Blocks: 2, TreeSize: 2}}; !slices.Equal(ov, want) {
		t.Fatalf("lookup waiting behind a write saw %v, want the state before the write %v", ov, want)
	}
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	ov, _ := ix.Match(nil, locals(1, 2, 3))
	if want := []radix.Overlap{{Worker: k, Blocks: 3, TreeSize: 3}}; !slices.Equal(ov, want) {
		t.Fatalf("after Flush Match = %v, want %v", ov, want)
	}
}

// TestQueuedLookupsOvertakeWrites is TestLookupsOvertakeWrites with
// Config.QueuedLookups: the lookup is queued (a durable block) and answered
// by the shard between work items.
func TestQueuedLookupsOvertakeWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ix := newTestIndex(t, Config{Shards: 1, QueuedLookups: true})
		k := wire.WorkerKey{Worker: 1}
		if err := ix.Apply([]wire.Event{stored(k, 0, 1, 2)}); err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		go func() { _ = ix.ordered(func(int, *Core) { <-release }) }()
		synctest.Wait() // the shard is now inside the function
		if err := ix.Apply([]wire.Event{stored(k, 2, 3)}); err != nil {
			t.Fatal(err)
		}
		got := make(chan []radix.Overlap)
		go func() {
			ov, err := ix.Match(nil, locals(1, 2, 3))
			if err != nil {
				t.Error(err)
			}
			got <- ov
		}()
		synctest.Wait() // the lookup is queued
		close(release)
		if ov, want := <-got, []radix.Overlap{{Worker: k, Blocks: 2, TreeSize: 2}}; !slices.Equal(ov, want) {
			t.Fatalf("lookup queued behind a write saw %v, want the state before the write %v", ov, want)
		}
	})
}

func TestPinning(t *testing.T) {
	allowed, err := threadAffinity()
	if err != nil || len(allowed) == 0 {
		t.Skipf("cannot read the thread's CPU affinity: %v", err)
	}
	cpu := allowed[len(allowed)-1]
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	ix := newTestIndex(t, Config{Shards: 2, CPUs: []int{cpu}, Logger: logger})
	stats, err := ix.Stats(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range stats {
		if !slices.Equal(st.CPUs, []int{cpu}) {
			t.Errorf("shard %d pinned to %v, want [%d]", st.Shard, st.CPUs, cpu)
		}
	}
	affinity := make([][]int, 2)
	if err := ix.ordered(func(s int, _ *Core) { affinity[s], _ = threadAffinity() }); err != nil {
		t.Fatal(err)
	}
	for s, a := range affinity {
		if !slices.Equal(a, []int{cpu}) {
			t.Errorf("shard %d thread affinity %v, want [%d]", s, a, cpu)
		}
	}
	if strings.Contains(logs.String(), "pinning") {
		t.Errorf("successful pinning logged: %s", logs.String())
	}

	// A CPU outside the allowed set cannot be pinned to: the shards run
	// unpinned, with one warning for all of them.
	bad := -1
	for c := 1023; c >= 0; c-- {
		if !slices.Contains(allowed, c) {
			bad = c
			break
		}
	}
	if bad < 0 {
		t.Skip("every CPU is allowed; cannot provoke a pinning failure")
	}
	ix2 := newTestIndex(t, Config{Shards: 2, CPUs: []int{bad}, Logger: logger})
	if n := strings.Count(logs.String(), "CPU pinning not permitted"); n != 1 {
		t.Fatalf("%d pinning warnings, want 1:\n%s", n, logs.String())
	}
	stats, err = ix2.Stats(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range stats {
		if st.CPUs != nil {
			t.Errorf("shard %d reports CPUs %v after a failed pin", st.Shard, st.CPUs)
		}
	}
	if err := ix2.ordered(func(s int, _ *Core) { affinity[s], _ = threadAffinity() }); err != nil {
		t.Fatal(err)
	}
	for s, a := range affinity {
		if !slices.Equal(a, allowed) {
			t.Errorf("unpinned shard %d thread affinity %v, want the process's %v", s, a, allowed)
		}
	}
	r := NewRunner(NewCore(CoreConfig{}), RunnerConfig{CPUs: []int{bad}})
	r.Start()
	defer r.Close()
	if r.PinError() == nil {
		t.Fatal("Runner.PinError is nil after pinning to a disallowed CPU")
	}
}

func TestClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ix, err := NewIndex(Config{Shards: 2, QueueSize: 2, TickInterval: time.Second, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		// A producer blocked on a full queue is released by Close.
		release := make(chan struct{})
		go func() { _ = ix.ordered(func(int, *Core) { <-release }) }()
		synctest.Wait()
		blocked := make(chan error)
		go func() {
			for {
				ev := stored(wire.WorkerKey{Worker: 1}, 0, 1)
				if err := ix.Apply([]wire.Event{ev}); err != nil {
					blocked <- err
					return
				}
			}
		}()
		synctest.Wait()
		closed := make(chan error)
		go func() { closed <- ix.Close() }()
		synctest.Wait() // Close waits for the stalled shard
		close(release)
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		if err := <-blocked; !errors.Is(err, ErrClosed) {
			t.Fatalf("blocked Apply returned %v after Close, want ErrClosed", err)
		}
		if err := ix.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		k := wire.WorkerKey{Worker: 1}
		for name, err := range map[string]error{
			"Apply":           ix.Apply([]wire.Event{stored(k, 0, 1)}),
			"RecordDecision":  ix.RecordDecision(k, nil, nil),
			"Flush":           ix.Flush(),
			"MatchBatch":      ix.MatchBatch([]MatchRequest{{}}),
			"CheckInvariants": ix.CheckInvariants(),
			"Match":           func() error { _, err := ix.Match(nil, locals(1)); return err }(),
			"Workers":         func() error { _, err := ix.Workers(nil); return err }(),
			"Stats":           func() error { _, err := ix.Stats(nil); return err }(),
			"Gaps":            func() error { _, err := ix.Gaps(nil); return err }(),
			"Dump":            func() error { _, err := ix.Dump(nil); return err }(),
			"Tick":            func() error { _, err := ix.Tick(time.Now()); return err }(),
			"RemoveWorker":    func() error { _, err := ix.RemoveWorker(1); return err }(),
			"RemoveDpRank":    func() error { _, err := ix.RemoveDpRank(k); return err }(),
			"TreeSize":        func() error { _, err := ix.TreeSize(k); return err }(),
		} {
			if !errors.Is(err, ErrClosed) {
				t.Errorf("%s after Close: %v, want ErrClosed", name, err)
			}
		}
	})
}

// TestIndexApprox drives approximate mode through the Index, with its own
// ticker, on synctest's fake clock.
func TestIndexApprox(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ix, err := NewIndex(Config{Shards: 2, TickInterval: time.Second, Logger: quiet,
			Core: CoreConfig{Approx: ApproxConfig{TTL: 10 * time.Second}}})
		if err != nil {
			t.Fatal(err)
		}
		defer ix.Close()
		loc := locals(1, 2, 3)
		seq := wire.SequenceHashes(nil, loc)
		if err := ix.RecordDecision(wire.WorkerKey{Worker: 7}, loc[:2], seq); !errors.Is(err, ErrLengthMismatch) {
			t.Fatalf("mismatched lengths: %v, want ErrLengthMismatch", err)
		}
		if err := ix.RecordDecision(wire.WorkerKey{Worker: 7}, loc, seq); err != nil {
			t.Fatal(err)
		}
		if err := ix.RecordDecision(wire.WorkerKey{Worker: 8, Dp: 1}, loc[:1], seq[:1]); err != nil {
			t.Fatal(err)
		}
		if err := ix.Flush(); err != nil {
			t.Fatal(err)
		}
		match := func() []radix.Overlap {
			t.Helper()
			ov, err := ix.Match(nil, loc)
			if err != nil {
				t.Fatal(err)
			}
			return sortedOverlaps(ov)
		}
		want := []radix.Overlap{{Worker: wire.WorkerKey{Worker: 7}, Blocks: 3, TreeSize: 3}, {Worker: wire.WorkerKey{Worker: 8, Dp: 1}, Blocks: 1, TreeSize: 1}}
		if ov := match(); !slices.Equal(ov, want) {
			t.Fatalf("Match = %v, want %v", ov, want)
		}
		time.Sleep(6 * time.Second) // fake time
		// Refresh worker 7's first two blocks.
		if err := ix.RecordDecision(wire.WorkerKey{Worker: 7}, loc[:2], seq[:2]); err != nil {
			t.Fatal(err)
		}
		time.Sleep(4*time.Second + time.Millisecond) // the ticker expires the 10 s old blocks
		synctest.Wait()
		if err := ix.Flush(); err != nil {
			t.Fatal(err)
		}
		want = []radix.Overlap{{Worker: wire.WorkerKey{Worker: 7}, Blocks: 2, TreeSize: 2}}
		if ov := match(); !slices.Equal(ov, want) {
			t.Fatalf("after 10 s Match = %v, want %v", ov, want)
		}
		time.Sleep(6 * time.Second)
		synctest.Wait()
		if err := ix.Flush(); err != nil {
			t.Fatal(err)
		}
		if ov := match(); len(ov) != 0 {
			t.Fatalf("after 16 s Match = %v, want none", ov)
		}
		st, _ := ix.Stats(nil)
		c := Sum(st)
		if c.BlocksExpired != 4 || c.BlocksRefreshed != 2 || c.BlocksRecorded != 4 || c.ApproxBlocks != 0 {
			t.Fatalf("expired %d refreshed %d recorded %d left %d; want 4, 2, 4, 0",
				c.BlocksExpired, c.BlocksRefreshed, c.BlocksRecorded, c.ApproxBlocks)
		}
		if err := ix.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestRunnerDo runs a standalone Runner: Do runs after the work queued
// before it, on the runner's goroutine, and fails after Close.
func TestRunnerDo(t *testing.T) {
	r := NewRunner(NewCore(CoreConfig{}), RunnerConfig{QueueSize: 1})
	r.Start()
	k := wire.WorkerKey{Worker: 3}
	if err := r.Do(func(c *Core) { c.Apply([]wire.Event{stored(k, 0, 1, 2)}) }); err != nil {
		t.Fatal(err)
	}
	var sizes []uint32
	for range 10 { // more than the queue holds: Do waits for room
		if err := r.Do(func(c *Core) { sizes = append(sizes, c.TreeSize(k)) }); err != nil {
			t.Fatal(err)
		}
	}
	if len(sizes) != 10 || sizes[0] != 2 || sizes[9] != 2 {
		t.Fatalf("tree sizes seen by Do: %v, want ten 2s", sizes)
	}
	if r.PinError() != nil {
		t.Fatalf("PinError without pinning: %v", r.PinError())
	}
	r.Close()
	r.Close()
	if err := r.Do(func(*Core) {}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Do after Close: %v, want ErrClosed", err)
	}
}

// TestStepEndsForWaitingLookup checks the bound on a lookup's wait: with a
// lookup caller waiting for the core, a step ends after the event in
// progress once the runner has applied lookupStepBlocks since lookups last
// took the core (however large StepBlocks is; the credit carries across
// steps and is full after an idle spell), and with none it runs to its
// budget. The runner is not started: step is called directly.
func TestStepEndsForWaitingLookup(t *testing.T) {
	r := NewRunner(NewCore(CoreConfig{}), RunnerConfig{StepBlocks: 1 << 20})
	k := wire.WorkerKey{Worker: 1}
	w := r.cfg.works.get()
	w.kind = wkEvents
	// Ten 40-block chains (a step counts 41 each), then forty 1-block
	// chains (2 each).
	for i := range 10 {
		blocks := make([]uint64, 40)
		for j := range blocks {
			blocks[j] = uint64(i*100 + j + 1)
		}
		ev := stored(k, 0, blocks...)
		w.add(&ev)
	}
	for i := range 40 {
		ev := stored(k, 0, uint64(5000+i))
		w.add(&ev)
	}
	w.seal()
	step := func(w *work) bool { // as the runner does, holding the core (its quiet stretches let it go)
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.step(w)
	}
	r.arrived.Add(1) // a lookup caller waits for the core
	if done := step(w); done || w.pos != 1 {
		t.Fatalf("with a lookup waiting: done %v after %d events, want 1 event and not done", done, w.pos)
	}
	w.pos = 10
	// The credit of the 41-block event is still there: one event.
	if done := step(w); done || w.pos != 11 {
		t.Fatalf("with a lookup waiting and credit %d: done %v at event %d, want 11", r.credit, done, w.pos)
	}
	r.credit = 0 // lookups took the core (yieldToLookups)
	if done := step(w); done || w.pos != 11+lookupStepBlocks/2 {
		t.Fatalf("with a lookup waiting: done %v at event %d, want %d", done, w.pos, 11+lookupStepBlocks/2)
	}
	r.credit = lookupStepBlocks // the runner idled
	if done := step(w); done || w.pos != 12+lookupStepBlocks/2 {
		t.Fatalf("with a lookup waiting after idling: done %v at event %d, want %d", done, w.pos, 12+lookupStepBlocks/2)
	}
	r.entered.Add(1) // it took the core
	if done := step(w); !done || w.pos != 50 {
		t.Fatalf("with no lookup waiting: done %v at event %d, want all 50", done, w.pos)
	}
	if ov := r.match(nil, locals(1, 2, 3)); len(ov) != 1 || ov[0].Blocks != 3 {
		t.Fatalf("Match = %v, want 3 blocks of worker 1", ov)
	}
}

// TestLookupWaitCounters checks the counts of how lookups met the runner
// (ShardStats.LookupWaits, LookupParks, RunnerParks and their metrics): a
// Match that finds the core taken waits (and, with no spinning, parks),
// and a step that finds a Match holding the core parks the runner.
func TestLookupWaitCounters(t *testing.T) {
	r := NewRunner(NewCore(CoreConfig{}), RunnerConfig{})
	r.spin = false // park at once, as with one P: the counts are then exact
	r.Start()
	t.Cleanup(r.Close)
	k := wire.WorkerKey{Worker: 1}
	ev := stored(k, 0, 1, 2, 3)
	if err := r.Do(func(c *Core) { c.Apply([]wire.Event{ev}) }); err != nil {
		t.Fatal(err)
	}
	if r.arrived.Load() != 0 || r.lookupParks.Load() != 0 || r.runnerParks.Load() != 0 {
		t.Fatalf("before any contention: waits %d, lookup parks %d, runner parks %d", r.arrived.Load(), r.lookupParks.Load(), r.runnerParks.Load())
	}
	if ov := r.match(nil, locals(1, 2, 3)); len(ov) != 1 {
		t.Fatalf("uncontended Match = %v", ov)
	}

	// A lookup that finds the core taken (held here, as the runner holds it
	// for a step).
	r.mu.Lock()
	got := make(chan []radix.Overlap)
	go func() { got <- r.match(nil, locals(1, 2, 3)) }()
	for r.arrived.Load() == 0 {
		runtime.Gosched()
	}
	r.mu.Unlock()
	if ov := <-got; len(ov) != 1 || ov[0].Blocks != 3 {
		t.Fatalf("waiting Match = %v, want 3 blocks of worker 1", ov)
	}
	if r.arrived.Load() != 1 || r.lookupParks.Load() != 1 {
		t.Fatalf("after one waiting lookup: waits %d, parks %d, want 1 and 1", r.arrived.Load(), r.lookupParks.Load())
	}

	// A step that finds the core taken by a lookup.
	r.mu.Lock()
	done := make(chan error)
	go func() { done <- r.Do(func(*Core) {}) }()
	for !r.writer.Load() {
		runtime.Gosched()
	}
	r.mu.Unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := r.runnerParks.Load(); n != 1 {
		t.Fatalf("runner parks %d, want 1", n)
	}

	var b strings.Builder
	writeShardMetrics(&b, &ShardStats{LookupWaits: 5, LookupParks: 3, RunnerParks: 2})
	for _, want := range []string{
		`kvroute_shard_lookup_waits_total{shard="0"} 5`,
		`kvroute_shard_lookup_parks_total{shard="0"} 3`,
		`kvroute_shard_runner_parks_total{shard="0"} 2`,
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestMatchInQuietStretches runs Matches against a runner applying long
// Stored events, announcements of them again, and removals of their tails
// (named by their first block, so the removal frees a detached subtree and
// sweeps the table), so that they
// take the core in the events' quiet stretches
// (radix.Tree.SetQuiet: the runner lets the core go while the tree writes
// only what no Match reads). Under -race this checks that claim on memory;
// in any build, that every overlap a matcher sees is one the tree could
// hold between two events' blocks: at most the probe's length (the shared
// prefix for other workers), a tree size no smaller than its blocks, and
// for other workers' shared prefix never less than the same matcher saw
// before (nothing removes it).
func TestMatchInQuietStretches(t *testing.T) {
	ix := newTestIndex(t, Config{Shards: 1})
	r := ix.runners[0]
	const (
		workers = 16
		shared  = 48 // blocks of a round every worker stores
		own     = 48 // then blocks of its own
		// At least minRounds rounds, and more (up to maxRounds) until a
		// Match has held the core in a quiet stretch: on a loaded machine
		// the matchers may not run during the first rounds' stretches.
		minRounds = 30
		maxRounds = 600
	)
	local := func(round, w, j int) wire.BlockHash {
		return wire.BlockHash(uint64(round)<<32 | uint64(w)<<16 | uint64(j) + 1)
	}
	event := func(round, w int) wire.Event {
		ev := wire.Event{Worker: wire.WorkerKey{Worker: uint64(w + 1)}, Kind: wire.KindStored}
		for j := range shared + own {
			l := local(round, 0, j) // the shared prefix
			if j >= shared {
				l = local(round, w+1, j)
			}
			ev.Blocks = append(ev.Blocks, wire.Block{Engine: wire.EngineHash(l), Local: l})
		}
		return ev
	}
	probe := func(round, w int) []wire.BlockHash {
		ev := event(round, w)
		hs := make([]wire.BlockHash, len(ev.Blocks))
		for j, b := range ev.Blocks {
			hs[j] = b.Local
		}
		return hs
	}
	var applied atomic.Int32 // rounds queued
	stop := make(chan struct{})
	errs := make(chan error, 2)
	var wg sync.WaitGroup
	for m := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(m), 7))
			seen := map[[3]int]uint32{} // (round, probe's worker, worker) → blocks seen
			var dst []radix.Overlap
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				n := int(applied.Load())
				if n == 0 {
					runtime.Gosched()
					continue
				}
				round, w := rng.IntN(n), rng.IntN(workers)
				dst = r.match(dst[:0], probe(round, w))
				for _, o := range dst {
					ow := int(o.Worker.Worker) - 1
					limit := uint32(shared)
					if ow == w {
						limit = shared + own
					}
					key := [3]int{round, w, ow}
					if o.Blocks == 0 || o.Blocks > limit || o.TreeSize < o.Blocks || (ow != w && o.Blocks < seen[key]) {
						errs <- fmt.Errorf("round %d, worker %d's probe: overlap %+v (limit %d, seen %d before)", round, w, o, limit, seen[key])
						return
					}
					seen[key] = o.Blocks
				}
			}
		}()
	}
	quietShared := func() uint64 {
		var n uint64
		if err := r.Do(func(*Core) { n = r.quietShared }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	rounds := 0
	for round := 0; round < minRounds || (round < maxRounds && quietShared() == 0); round++ {
		rounds = round + 1
		evs := make([]wire.Event, workers)
		for w := range workers {
			evs[w] = event(round, w)
		}
		if round >= 1 { // each worker announces the last round again (a check of held blocks)
			for w := range workers {
				evs = append(evs, event(round-1, w))
			}
		}
		if round >= 2 { // each worker drops its own blocks of two rounds ago, named by the first
			for w := range workers {
				first := local(round-2, w+1, shared)
				evs = append(evs, wire.Event{Worker: wire.WorkerKey{Worker: uint64(w + 1)}, Kind: wire.KindRemoved,
					Blocks: []wire.Block{{Engine: wire.EngineHash(first), Local: first}}})
			}
		}
		if err := ix.Apply(evs); err != nil {
			t.Fatal(err)
		}
		applied.Store(int32(round + 1))
	}
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	shared2 := quietShared()
	t.Logf("%d quiet stretches ended with a Match holding the core, in %d rounds", shared2, rounds)
	if shared2 == 0 {
		t.Fatal("no Match ran in a quiet stretch: the test did not exercise them")
	}
	for w := range workers { // and after the last event: the last round whole, an older one without its own part
		for round, ownKept := range map[int]bool{rounds - 1: true, rounds - 3: false} {
			ov, err := ix.Match(nil, probe(round, w))
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range ov {
				want := uint32(shared)
				if int(o.Worker.Worker) == w+1 && ownKept {
					want = shared + own
				}
				if o.Blocks != want {
					t.Fatalf("after the last round, worker %d's probe of round %d: %+v, want %d blocks", w, round, o, want)
				}
			}
			if len(ov) != workers {
				t.Fatalf("after the last round, worker %d's probe of round %d: %d overlaps, want %d", w, round, len(ov), workers)
			}
		}
	}
}
