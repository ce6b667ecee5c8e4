package shard

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvroute/kvroute/radix"
	"github.com/kvroute/kvroute/wire"
)

// benchLoad is a steady-state KV event stream: every worker stores 4-block
// chains (2 blocks of one of 64 shared prefixes, then 2 blocks of its own)
// and later removes the private part of its oldest chain, so the tree stays
// bounded; probes are prefixes some worker holds plus a miss.
type benchLoad struct {
	batches [][]wire.Event
	probes  [][]wire.BlockHash
	blocks  int // total blocks in batches
	events  int
}

func makeLoad(workers, batches, batchSize int) *benchLoad {
	const prefixes, live = 64, 32
	return genLoad(workers, batches, batchSize, live, func(l *benchLoad, k wire.WorkerKey, uniq uint64) (wire.Event, wire.BlockHash) {
		// Worker w's k-th chain uses prefix k mod 64: every prefix is shared
		// by every worker.
		l1 := childHash(0, (uniq/uint64(workers))%prefixes)
		l2 := childHash(l1, 0)
		l3 := childHash(l2, uniq)
		l4 := childHash(l3, 0)
		ev := wire.Event{Worker: k, Kind: wire.KindStored}
		for _, h := range []wire.BlockHash{l1, l2, l3, l4} {
			ev.Blocks = append(ev.Blocks, wire.Block{Engine: engineOf(k, h), Local: h})
		}
		if len(l.probes) < 1024 {
			l.probes = append(l.probes, []wire.BlockHash{l1, l2, l3, l4, childHash(l4, 1)})
		}
		return ev, l3
	})
}

// genLoad is the event stream's skeleton: workers take turns, each storing
// the event store builds (the uniq-th chain) until it holds live chains,
// then removing, one block, the private head (store's second result) of its
// oldest chain, which drops the chain's private part.
func genLoad(workers, batches, batchSize, live int, store func(l *benchLoad, k wire.WorkerKey, uniq uint64) (wire.Event, wire.BlockHash)) *benchLoad {
	l := &benchLoad{}
	fifo := make([][]wire.BlockHash, workers)
	uniq := uint64(0)
	w := 0
	for range batches {
		var b []wire.Event
		for range batchSize {
			k := wire.WorkerKey{Worker: uint64(w + 1)}
			if len(fifo[w]) >= live {
				head := fifo[w][0]
				fifo[w] = fifo[w][1:]
				b = append(b, wire.Event{Worker: k, Kind: wire.KindRemoved,
					Blocks: []wire.Block{{Engine: engineOf(k, head)}}})
				l.blocks++
			} else {
				uniq++
				ev, head := store(l, k, uniq)
				b = append(b, ev)
				l.blocks += len(ev.Blocks)
				fifo[w] = append(fifo[w], head)
			}
			l.events++
			w = (w + 1) % workers
		}
		l.batches = append(l.batches, b)
	}
	return l
}

// BenchmarkIndexApply measures event throughput through the facade: Apply
// (copying into per-shard batches, queueing) and the shards applying them.
func BenchmarkIndexApply(b *testing.B) {
	load := makeLoad(32, 1024, 64)
	for _, shards := range []int{1, 2} {
		b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) {
			ix := newTestIndex(b, Config{Shards: shards})
			b.ReportAllocs()
			i, events, blocks := 0, 0, 0
			start := time.Now()
			for b.Loop() {
				batch := load.batches[i%len(load.batches)]
				if err := ix.Apply(batch); err != nil {
					b.Fatal(err)
				}
				events += len(batch)
				for j := range batch {
					blocks += len(batch[j].Blocks)
				}
				i++
			}
			if err := ix.Flush(); err != nil {
				b.Fatal(err)
			}
			sec := time.Since(start).Seconds()
			b.ReportMetric(float64(events)/sec, "events/s")
			b.ReportMetric(float64(blocks)/sec, "blocks/s")
		})
	}
}

// BenchmarkCoreApply is the same stream applied synchronously to one Core:
// the facade's overhead is the difference.
func BenchmarkCoreApply(b *testing.B) {
	load := makeLoad(32, 1024, 64)
	c := NewCore(CoreConfig{})
	b.ReportAllocs()
	i, events, blocks := 0, 0, 0
	for b.Loop() {
		batch := load.batches[i%len(load.batches)]
		c.Apply(batch)
		events += len(batch)
		for j := range batch {
			blocks += len(batch[j].Blocks)
		}
		i++
	}
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(events)/sec, "events/s")
	b.ReportMetric(float64(blocks)/sec, "blocks/s")
}

func loadedIndex(b *testing.B, shards int, load *benchLoad) *Index {
	ix := newTestIndex(b, Config{Shards: shards, LockOSThread: true})
	for _, batch := range load.batches {
		if err := ix.Apply(batch); err != nil {
			b.Fatal(err)
		}
	}
	if err := ix.Flush(); err != nil {
		b.Fatal(err)
	}
	return ix
}

// BenchmarkIndexMatch measures one lookup through the facade (broadcast to
// every shard, merged), single and in batches of 32; ns/op is per request.
func BenchmarkIndexMatch(b *testing.B) {
	load := makeLoad(32, 1024, 64)
	for _, shards := range []int{1, 2} {
		b.Run(fmt.Sprintf("shards=%d/single-locked", shards), func(b *testing.B) {
			ix := loadedIndex(b, shards, load)
			b.ReportAllocs()
			var ov []radix.Overlap
			i := 0
			for b.Loop() {
				ov, _ = ix.Match(ov[:0], load.probes[i%len(load.probes)])
				i++
			}
			b.ReportMetric(float64(len(ov)), "workers/match")
		})
		b.Run(fmt.Sprintf("shards=%d/single-unlocked", shards), func(b *testing.B) {
			ix := newTestIndex(b, Config{Shards: shards})
			for _, batch := range load.batches {
				_ = ix.Apply(batch)
			}
			_ = ix.Flush()
			b.ReportAllocs()
			var ov []radix.Overlap
			i := 0
			for b.Loop() {
				ov, _ = ix.Match(ov[:0], load.probes[i%len(load.probes)])
				i++
			}
		})
		b.Run(fmt.Sprintf("shards=%d/batch=32", shards), func(b *testing.B) {
			ix := loadedIndex(b, shards, load)
			b.ReportAllocs()
			reqs := make([]MatchRequest, 32)
			i := 0
			for b.Loop() {
				for j := range reqs {
					reqs[j].Hashes, reqs[j].Overlaps = load.probes[i%len(load.probes)], reqs[j].Overlaps[:0]
					i++
				}
				if err := ix.MatchBatch(reqs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(i), "ns/request")
		})
	}
	b.Run("core", func(b *testing.B) { // no goroutine hop: the floor
		c := NewCore(CoreConfig{})
		for _, batch := range load.batches {
			c.Apply(batch)
		}
		b.ReportAllocs()
		var ov []radix.Overlap
		i := 0
		for b.Loop() {
			ov = c.Match(ov[:0], load.probes[i%len(load.probes)])
			i++
		}
	})
}

// mutexIndex is the naive baseline: one tree behind one mutex, written in
// the same batches.
type mutexIndex struct {
	mu   sync.Mutex
	tree *radix.Tree
}

func (m *mutexIndex) apply(evs []wire.Event) {
	m.mu.Lock()
	for i := range evs {
		_, _ = m.tree.Apply(&evs[i])
	}
	m.mu.Unlock()
}

func (m *mutexIndex) match(dst []radix.Overlap, h []wire.BlockHash) []radix.Overlap {
	m.mu.Lock()
	dst = m.tree.Match(dst, h)
	m.mu.Unlock()
	return dst
}

// latencies keeps a uniform sample (reservoir) of up to cap durations.
type latencies struct {
	seen int
	s    []time.Duration
	rng  uint64
}

func (l *latencies) add(d time.Duration) {
	l.seen++
	if len(l.s) < cap(l.s) {
		l.s = append(l.s, d)
		return
	}
	l.rng ^= l.rng << 13
	l.rng ^= l.rng >> 7
	l.rng ^= l.rng << 17
	if i := l.rng % uint64(l.seen); i < uint64(len(l.s)) {
		l.s[i] = d
	}
}

// quantile sorts the sample and returns its p-quantile in ns.
func (l *latencies) quantile(p float64) float64 {
	slices.Sort(l.s)
	return float64(l.s[int(p*float64(len(l.s)-1))].Nanoseconds())
}

func (l *latencies) report(b *testing.B) {
	b.ReportMetric(l.quantile(0.50), "p50-ns")
	b.ReportMetric(l.quantile(0.99), "p99-ns")
	b.ReportMetric(l.quantile(0.999), "p99.9-ns")
}

// BenchmarkMatchUnderLoad is the lookup-latency-under-ingest benchmark: it
// times single Match calls while another goroutine saturates Apply, and
// reports latency percentiles and the write rate achieved, for several step
// sizes (blocks applied between two looks at the lookup queue), with the
// queued lookup path (Config.QueuedLookups, /queued), and against a
// mutex-guarded tree under the same write load.
func BenchmarkMatchUnderLoad(b *testing.B) {
	load := makeLoad(32, 1024, 64)
	run := func(b *testing.B, apply func([]wire.Event), match func([]radix.Overlap, []wire.BlockHash) []radix.Overlap) {
		runUnderIngest(b, load, 0, apply, match)
	}
	for _, c := range []struct {
		shards, step     int
		unlocked, queued bool
	}{
		{1, 64, false, false}, {1, 256, false, false}, {1, 1024, false, false}, {1, 256, true, false}, {2, 256, false, false},
		// The queued lookup path (Config.QueuedLookups), in the same binary:
		// Match queued to the shard's goroutine and answered between steps.
		{1, 256, false, true}, {1, 256, true, true},
	} {
		name := fmt.Sprintf("index/shards=%d/step=%d", c.shards, c.step)
		if c.unlocked {
			name += "/unlocked"
		}
		if c.queued {
			name += "/queued"
		}
		b.Run(name, func(b *testing.B) {
			ix := newTestIndex(b, Config{Shards: c.shards, StepBlocks: c.step, LockOSThread: !c.unlocked, QueuedLookups: c.queued})
			run(b, applyVia(ix), matchVia(ix))
		})
	}
	b.Run("mutex-baseline", func(b *testing.B) {
		m := &mutexIndex{tree: radix.New()}
		run(b, m.apply, m.match)
	})
}

// runUnderIngest applies load's batches at full rate on another goroutine
// while b.Loop times one Match per iteration, every pace (time.Sleep between
// lookups, so the lookup goroutine takes no CPU in between) or back to back
// (pace 0). It reports Match latency percentiles, events/s and lookups/s.
func runUnderIngest(b *testing.B, load *benchLoad, pace time.Duration, apply func([]wire.Event), match func([]radix.Overlap, []wire.BlockHash) []radix.Overlap) {
	for _, batch := range load.batches {
		apply(batch)
	}
	var stop atomic.Bool
	var writes atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; !stop.Load(); i++ {
			apply(load.batches[i%len(load.batches)])
			writes.Add(int64(len(load.batches[i%len(load.batches)])))
		}
	})
	b.ReportAllocs()
	lat := latencies{s: make([]time.Duration, 0, 1<<16), rng: 88172645463325252}
	var ov []radix.Overlap
	i := 0
	for b.Loop() {
		if pace > 0 {
			time.Sleep(pace)
		}
		t0 := time.Now()
		ov = match(ov[:0], load.probes[i%len(load.probes)])
		lat.add(time.Since(t0))
		i++
	}
	stop.Store(true)
	wg.Wait()
	lat.report(b)
	b.ReportMetric(float64(writes.Load())/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(i)/b.Elapsed().Seconds(), "lookups/s")
}

// BenchmarkLookupUnderIngest measures lookup latency under ingest with a
// lookup load both paths can serve: one Match every millisecond from its
// own goroutine while another applies events at full rate
// (BenchmarkMatchUnderLoad's lookups come back to back, so there the inline
// path, which never parks its caller, takes a whole P from the writes).
// Cases: the default unlocked shard and one locked to its thread, each with
// lookups on the caller's goroutine and /queued (Config.QueuedLookups).
// events/s compares the ingest each leaves.
func BenchmarkLookupUnderIngest(b *testing.B) {
	load := makeLoad(32, 1024, 64)
	for _, c := range []struct {
		name           string
		locked, queued bool
	}{{"unlocked", false, false}, {"unlocked/queued", false, true}, {"locked", true, false}, {"locked/queued", true, true}} {
		b.Run(c.name, func(b *testing.B) {
			ix := newTestIndex(b, Config{Shards: 1, LockOSThread: c.locked, QueuedLookups: c.queued})
			indexUnderIngest(b, ix, load)
		})
	}
}

// makeLongLoad is makeLoad with long events: every worker stores chains
// of chainLen blocks (the first 8 shared by every worker, the rest its
// own), one Stored event each, and removes its oldest chain's private part
// once it holds live chains: the shape of long prompts, where an event takes
// tens of µs to apply and a lookup may wait for it.
func makeLongLoad(workers, batches, batchSize, chainLen int) *benchLoad {
	return makeChainLoad(workers, batches, batchSize, func(uint64) int { return chainLen })
}

// makeChainLoad is makeLongLoad with the uniq-th chain lenOf(uniq) blocks
// long (at least 9).
func makeChainLoad(workers, batches, batchSize int, lenOf func(uniq uint64) int) *benchLoad {
	const live = 8
	return genLoad(workers, batches, batchSize, live, func(l *benchLoad, k wire.WorkerKey, uniq uint64) (wire.Event, wire.BlockHash) {
		ev := wire.Event{Worker: k, Kind: wire.KindStored}
		var h, head wire.BlockHash
		var probe []wire.BlockHash
		for i := range lenOf(uniq) {
			salt := uint64(i)
			if i >= 8 {
				salt = uniq<<16 | uint64(i)
			}
			h = childHash(h, salt)
			ev.Blocks = append(ev.Blocks, wire.Block{Engine: engineOf(k, h), Local: h})
			if i == 8 {
				head = h
			}
			if len(l.probes) < 1024 && i < 16 {
				probe = append(probe, h)
			}
		}
		if probe != nil {
			l.probes = append(l.probes, probe)
		}
		return ev, head
	})
}

// BenchmarkLookupUnderLongIngest is BenchmarkLookupUnderIngest with
// 256-block Stored events (makeLongLoad): what a lookup waits for when the
// event the runner is applying is long
// (docs/decisions/0008-lookups-on-the-callers-goroutine.md).
func BenchmarkLookupUnderLongIngest(b *testing.B) {
	load := makeLongLoad(32, 64, 16, 256)
	ix := newTestIndex(b, Config{Shards: 1})
	indexUnderIngest(b, ix, load)
}

// BenchmarkLookupAfterApply is the trace replay's shape (kvroute bench
// index) and reports how lookups wait for the runner: one goroutine queues
// a Stored event (Index.Apply returns at once) and matches at once, so the
// lookup often finds the runner applying the event just queued. Chains
// are 12–256 blocks (mean 62: the synthetic trace's events average 41
// with a long tail), 256 workers holding 8 chains each. Besides the Match
// latency percentiles it reports the share of lookups that found the core
// taken and waited (waited/op), that parked (parked/op), the latency of
// the lookups that waited (waited-p50-ns, waited-p99-ns), and the events
// applied per second. It measured the designs that would bound that wait
// (a spin bounded by the runner's progress, Stored events applied in
// pieces: branch wait-spin-experiment, not kept;
// docs/decisions/0008-lookups-on-the-callers-goroutine.md).
func BenchmarkLookupAfterApply(b *testing.B) {
	lens := []int{12, 16, 24, 32, 41, 41, 48, 64, 96, 256}
	load := makeChainLoad(256, 4096, 1, func(u uint64) int { return lens[(u*7)%uint64(len(lens))] })
	ix := newTestIndex(b, Config{Shards: 1})
	r := ix.runners[0]
	for _, batch := range load.batches {
		if err := ix.Apply(batch); err != nil {
			b.Fatal(err)
		}
	}
	if err := ix.Flush(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	all := latencies{s: make([]time.Duration, 0, 1<<16), rng: 88172645463325252}
	waited := latencies{s: make([]time.Duration, 0, 1<<16), rng: 88172645463325253}
	w0, p0 := r.arrived.Load(), r.lookupParks.Load()
	var ov []radix.Overlap
	i, events := 0, 0
	for b.Loop() {
		batch := load.batches[i%len(load.batches)]
		if err := ix.Apply(batch); err != nil {
			b.Fatal(err)
		}
		events += len(batch)
		a := r.arrived.Load()
		t0 := time.Now()
		ov, _ = ix.Match(ov[:0], load.probes[i%len(load.probes)])
		d := time.Since(t0)
		all.add(d)
		if r.arrived.Load() != a {
			waited.add(d)
		}
		i++
	}
	if err := ix.Flush(); err != nil {
		b.Fatal(err)
	}
	sec := b.Elapsed().Seconds()
	all.report(b)
	if len(waited.s) > 0 {
		b.ReportMetric(waited.quantile(0.50), "waited-p50-ns")
		b.ReportMetric(waited.quantile(0.99), "waited-p99-ns")
	}
	b.ReportMetric(float64(r.arrived.Load()-w0)/float64(b.N), "waited/op")
	b.ReportMetric(float64(r.lookupParks.Load()-p0)/float64(b.N), "parked/op")
	b.ReportMetric(float64(events)/sec, "events/s")
}

// indexUnderIngest is runUnderIngest through an Index: its Apply from the
// writer, a Match every millisecond.
func indexUnderIngest(b *testing.B, ix *Index, load *benchLoad) {
	runUnderIngest(b, load, time.Millisecond, applyVia(ix), matchVia(ix))
}

// applyVia and matchVia are an Index's Apply and Match as the load
// runners take them; an error is a broken benchmark.
func applyVia(ix *Index) func([]wire.Event) {
	return func(evs []wire.Event) {
		if err := ix.Apply(evs); err != nil {
			panic(err)
		}
	}
}

func matchVia(ix *Index) func([]radix.Overlap, []wire.BlockHash) []radix.Overlap {
	return func(dst []radix.Overlap, h []wire.BlockHash) []radix.Overlap {
		dst, err := ix.Match(dst, h)
		if err != nil {
			panic(err)
		}
		return dst
	}
}

// BenchmarkRecordDecision measures approximate-mode recording on one Core:
// a 16-block request, its blocks already recorded (refresh) or new.
func BenchmarkRecordDecision(b *testing.B) {
	local := make([]wire.BlockHash, 16)
	for i := range local {
		local[i] = wire.BlockHash(i + 1)
	}
	b.Run("refresh", func(b *testing.B) {
		c := NewCore(CoreConfig{})
		seq := wire.SequenceHashes(nil, local)
		k := wire.WorkerKey{Worker: 1}
		_ = c.RecordDecision(k, local, seq, 0)
		b.ReportAllocs()
		now := time.Duration(0)
		for b.Loop() {
			now += time.Microsecond
			_ = c.RecordDecision(k, local, seq, now)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(16*b.N), "ns/block")
	})
	b.Run("new-with-expiry", func(b *testing.B) {
		c := NewCore(CoreConfig{Approx: ApproxConfig{TTL: time.Millisecond}})
		b.ReportAllocs()
		now := time.Duration(0)
		seq := make([]wire.SeqHash, 0, 16)
		var n uint64
		for b.Loop() {
			n++
			local[0] = wire.BlockHash(n) // a new sequence every time
			seq = wire.SequenceHashes(seq[:0], local)
			now += 10 * time.Microsecond
			_ = c.RecordDecision(wire.WorkerKey{Worker: n % 8}, local, seq, now)
			c.Tick(now)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(16*b.N), "ns/block")
	})
}
