package radix

import (
	"math"
	"runtime"
	"sync"
	"testing"

	"github.com/kvroute/kvroute/wire"
)

// Benchmarks run against the benchParams fleet: ≈1.3M (block, worker)
// entries over 64 workers. Each layout has a sub-benchmark:
//
//	runs        the Tree as shipped (canonical runs of blocks)
//	block       the same Tree capped at one block per node (maxRun 1): the
//	            simple one-block-per-node arena that
//	            docs/decisions/0001-arena-tree-of-runs.md compares against
//	tiered      the shipped Tree with a host tier (workload.tieredTree):
//	            tier sets on every node, per-tier Match and removals
//	flatmap     the naive baseline: map[sequence hash]worker bitmask, given
//	            precomputed sequence hashes (which a real caller would have to
//	            compute: ≈5 ns a block, not counted)

var bench struct {
	once       sync.Once
	wl         *workload
	runs       *Tree
	block      *Tree
	tiered     *Tree
	tieredOnce sync.Once
	flat       *flatIndex
	sched      *schedule
	layout     []string
}

// tieredSetup builds bench.tiered apart, so the other layouts' numbers are
// measured with the same heap as before tiers existed.
func tieredSetup(b *testing.B) {
	benchSetup(b)
	bench.tieredOnce.Do(func() { bench.tiered = bench.wl.tieredTree(b) })
}

func benchSetup(b *testing.B) {
	bench.once.Do(func() {
		bench.wl = newWorkload(benchParams, 1)
		bench.runs = bench.wl.tree(b, 0)
		bench.block = bench.wl.tree(b, 1)
		bench.flat = bench.wl.flat()
		bench.sched = bench.wl.schedule()
	})
}

// flatIndex is the naive baseline: one flat map from a block's sequence hash
// to the bitmask of workers (index into keys) holding it.
type flatIndex struct {
	m     map[uint64]uint64
	keys  []wire.WorkerKey
	sizes []uint32
}

func (wl *workload) flat() *flatIndex {
	f := &flatIndex{m: map[uint64]uint64{}, keys: wl.keys, sizes: make([]uint32, len(wl.keys))}
	for i := range wl.build {
		f.store(f.index(wl.build[i].Worker), wl.seqs[i])
	}
	return f
}

func (f *flatIndex) index(k wire.WorkerKey) int {
	return int(k.Worker-1000)*2 + int(k.Dp) // workload keys: see newWorkload
}

func (f *flatIndex) store(w int, seqs []wire.SeqHash) {
	bit := uint64(1) << w
	for _, s := range seqs {
		if v := f.m[uint64(s)]; v&bit == 0 {
			f.m[uint64(s)] = v | bit
			f.sizes[w]++
		}
	}
}

func (f *flatIndex) remove(w int, seqs []wire.SeqHash) {
	bit := uint64(1) << w
	for _, s := range seqs {
		if v := f.m[uint64(s)]; v&bit != 0 {
			if v &^= bit; v == 0 {
				delete(f.m, uint64(s))
			} else {
				f.m[uint64(s)] = v
			}
			f.sizes[w]--
		}
	}
}

// match walks the request's sequence hashes until no worker is left.
func (f *flatIndex) match(dst []Overlap, seqs []wire.SeqHash) []Overlap {
	var mask uint64
	depth := 0
	for i, s := range seqs {
		m := f.m[uint64(s)]
		if i > 0 {
			m &= mask
			for d := mask &^ m; d != 0; d &= d - 1 {
				dst = f.emit(dst, d, i)
			}
		}
		mask, depth = m, i+1
		if mask == 0 {
			return dst
		}
	}
	for ; mask != 0; mask &= mask - 1 {
		dst = f.emit(dst, mask, depth)
	}
	return dst
}

func (f *flatIndex) emit(dst []Overlap, bitsLeft uint64, depth int) []Overlap {
	w := 0
	for bitsLeft&(1<<w) == 0 {
		w++
	}
	return append(dst, Overlap{Worker: f.keys[w], Blocks: uint32(depth), TreeSize: f.sizes[w]})
}

func BenchmarkMatch(b *testing.B) {
	benchSetup(b)
	reqs := bench.wl.reqs
	var matched int
	for _, r := range reqs {
		for _, o := range bench.runs.Match(nil, r) {
			matched = max(matched, int(o.Blocks))
		}
	}
	for _, layout := range []struct {
		name   string
		tr     *Tree
		tiered bool
	}{{"runs", bench.runs, false}, {"block", bench.block, false}, {"tiered", nil, true}} {
		b.Run(layout.name, func(b *testing.B) {
			if layout.tiered {
				tieredSetup(b)
				layout.tr = bench.tiered
			}
			dst := make([]Overlap, 0, 64)
			i := 0
			b.ReportAllocs()
			cpu := cpuNanos()
			for b.Loop() {
				dst = layout.tr.Match(dst[:0], reqs[i%len(reqs)])
				i++
			}
			reportCPU(b, cpu)
			b.ReportMetric(float64(len(reqs[0])), "blocks/req")
		})
	}
	b.Run("flatmap", func(b *testing.B) {
		dst := make([]Overlap, 0, 64)
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			dst = bench.flat.match(dst[:0], bench.wl.reqSeq[i%len(reqs)])
			i++
		}
		b.ReportMetric(float64(len(reqs[0])), "blocks/req")
	})
}

// BenchmarkApply replays the periodic schedule: a 64-block Stored turn and a
// 64-block tail-first Removed per step, so the tree stays at its size.
// blocks/s counts the blocks of both.
func BenchmarkApply(b *testing.B) {
	benchSetup(b)
	sc := bench.sched
	for _, layout := range []struct {
		name   string
		maxRun int
		tiered bool
	}{{"runs", 0, false}, {"block", 1, false}, {"tiered", 0, true}} {
		b.Run(layout.name, func(b *testing.B) {
			tr := bench.wl.tree(b, layout.maxRun) // fresh: the schedule mutates it
			if layout.tiered {
				tr = bench.wl.tieredTree(b)
			}
			for i := range sc.warm {
				if _, err := tr.Apply(&sc.warm[i]); err != nil {
					b.Fatal(err)
				}
			}
			applyLoop(b, tr, sc.events)
		})
	}
	b.Run("flatmap", func(b *testing.B) {
		f := bench.wl.flat()
		for i := range sc.warm {
			f.store(f.index(sc.warm[i].Worker), sc.warmSeqs[i])
		}
		blocks, i := 0, 0
		b.ReportAllocs()
		for b.Loop() {
			j := i % len(sc.events)
			ev := &sc.events[j]
			if ev.Kind == wire.KindStored {
				f.store(f.index(ev.Worker), sc.seqs[j])
			} else {
				f.remove(f.index(ev.Worker), sc.seqs[j])
			}
			blocks += len(ev.Blocks)
			i++
		}
		b.ReportMetric(float64(blocks)/b.Elapsed().Seconds(), "blocks/s")
	})
}

// heapGrowth returns the live-heap growth caused by build (after a GC) and
// what build returned, kept alive until measured.
func heapGrowth[T any](build func() T) (int64, T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	v := build()
	runtime.GC()
	runtime.ReadMemStats(&after)
	return int64(after.HeapAlloc) - int64(before.HeapAlloc), v
}

// BenchmarkBuild builds the whole index from empty (one op = ≈1.3M entries
// from ≈9k Stored events) and reports its memory per (block, worker) entry:
// B/entry from Stats().Bytes, heapB/entry from runtime.MemStats.
func BenchmarkBuild(b *testing.B) {
	benchSetup(b)
	wl := bench.wl
	for _, layout := range []struct {
		name   string
		maxRun int
		tiered bool
	}{{"runs", 0, false}, {"block", 1, false}, {"tiered", 0, true}} {
		b.Run(layout.name, func(b *testing.B) {
			build := func() *Tree {
				if layout.tiered {
					return wl.tieredTree(b)
				}
				return wl.tree(b, layout.maxRun)
			}
			heap, tr := heapGrowth(build)
			st := tr.Stats()
			b.ReportAllocs()
			for b.Loop() {
				build()
			}
			b.ReportMetric(float64(wl.blocks)*float64(b.N)/b.Elapsed().Seconds(), "blocks/s")
			b.ReportMetric(float64(st.Bytes)/float64(st.Entries), "B/entry")
			b.ReportMetric(float64(heap)/float64(st.Entries), "heapB/entry")
		})
	}
	b.Run("flatmap", func(b *testing.B) {
		heap, f := heapGrowth(wl.flat)
		entries := 0
		for _, s := range f.sizes {
			entries += int(s)
		}
		b.ReportAllocs()
		for b.Loop() {
			wl.flat()
		}
		b.ReportMetric(float64(wl.blocks)*float64(b.N)/b.Elapsed().Seconds(), "blocks/s")
		b.ReportMetric(float64(heap)/float64(entries), "heapB/entry")
	})
}

// BenchmarkEngineTable compares the per-worker engine-hash tables with Go
// maps per worker at the benchmark fleet's scale (64 workers × 20k blocks):
// one op stores 64 new engine hashes in one worker's table and deletes them.
func BenchmarkEngineTable(b *testing.B) {
	const workers, perWorker = 64, 20000
	key := func(w, i int) wire.EngineHash { return wire.EngineHash(splitmix(uint64(w)<<32 | uint64(i))) }
	batch := make([]wire.Block, 64)
	b.Run("table", func(b *testing.B) {
		heap, tabs := heapGrowth(func() []engineTable {
			tabs := make([]engineTable, workers)
			for w := range tabs {
				for i := range perWorker {
					tabs[w].insertNew(nil, key(w, i), uint32(i+1))
				}
			}
			return tabs
		})
		n := 0
		b.ReportAllocs()
		for b.Loop() {
			tab := &tabs[n%workers]
			for i := range batch {
				batch[i].Engine = key(n%workers, perWorker+i+n&1023)
			}
			tab.touch(batch)
			for i := range batch {
				tab.insertNew(nil, batch[i].Engine, 1)
			}
			tab.touch(batch)
			for i := range batch {
				tab.del(nil, batch[i].Engine)
			}
			n++
		}
		b.ReportMetric(float64(heap)/(workers*perWorker), "heapB/entry")
	})
	b.Run("gomap", func(b *testing.B) {
		heap, maps := heapGrowth(func() []map[wire.EngineHash]uint32 {
			maps := make([]map[wire.EngineHash]uint32, workers)
			for w := range maps {
				maps[w] = map[wire.EngineHash]uint32{}
				for i := range perWorker {
					maps[w][key(w, i)] = uint32(i + 1)
				}
			}
			return maps
		})
		n := 0
		b.ReportAllocs()
		for b.Loop() {
			m := maps[n%workers]
			for i := range batch {
				batch[i].Engine = key(n%workers, perWorker+i+n&1023)
			}
			for i := range batch {
				m[batch[i].Engine] = 1
			}
			for i := range batch {
				delete(m, batch[i].Engine)
			}
			n++
		}
		b.ReportMetric(float64(heap)/(workers*perWorker), "heapB/entry")
	})
}

// applyLoop applies events to tr round robin, one per iteration, and
// reports allocations and blocks applied per second.
func applyLoop(b *testing.B, tr *Tree, events []wire.Event) {
	b.ReportAllocs()
	blocks, i := 0, 0
	cpu := cpuNanos()
	for b.Loop() {
		ev := &events[i%len(events)]
		if _, err := tr.Apply(ev); err != nil {
			b.Fatal(err)
		}
		blocks += len(ev.Blocks)
		i++
	}
	reportCPU(b, cpu)
	b.ReportMetric(float64(blocks)/b.Elapsed().Seconds(), "blocks/s")
}

// BenchmarkEngineTableGrowth fills one engine table to 100k entries and
// reports its bytes per entry averaged over 400 sizes spaced evenly on a
// log scale from 1k: a figure free of where in its growth cycle a table
// happens to be (a single snapshot, like BenchmarkBuild's, is not).
func BenchmarkEngineTableGrowth(b *testing.B) {
	var mean float64
	for b.Loop() {
		var m engineTable
		var sum float64
		n, next := 0, 1000.0
		for k := 1; k <= 100_000; k++ {
			m.insertNew(nil, wire.EngineHash(splitmix(uint64(k))), uint32(k))
			if float64(k) >= next {
				sum += float64(m.bytes()) / float64(m.count)
				n++
				next *= math.Pow(100, 1.0/400)
			}
		}
		mean = sum / float64(n)
	}
	b.ReportMetric(mean, "B/entry")
}

// BenchmarkEngineTableFill fills 256 empty engine tables to 460 entries
// each, 41 at a time round robin: the shape of the 256-worker trace replay
// (kvroute bench index), where every worker's table grows from empty and
// resizes ≈10 times on the way. ns/op is per insert.
func BenchmarkEngineTableFill(b *testing.B) {
	const workers, perWorker, batch = 256, 460, 41
	tabs := make([]engineTable, workers)
	b.ReportAllocs()
	cpu := cpuNanos()
	n := 0
	for b.Loop() {
		for w := range tabs {
			tabs[w] = engineTable{}
		}
		pool := engPool{} // one tree's pool
		for lo := 0; lo < perWorker; lo += batch {
			for w := range tabs {
				for i := lo; i < min(lo+batch, perWorker); i++ {
					tabs[w].insertNew(&pool, wire.EngineHash(splitmix(uint64(w)<<32|uint64(i))), uint32(i+1))
				}
			}
		}
		n++
	}
	if c := cpuNanos() - cpu; c > 0 && n > 0 {
		b.ReportMetric(float64(c)/float64(n*workers*perWorker), "cpu-ns/insert")
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n*workers*perWorker), "ns/insert")
}

// ingestCycle is BenchmarkNATSIngest's event cycle (ingest): 16 workers,
// each storing 32 prefixes of 16..64 fresh blocks from the root and removing
// each, head first, four prefixes later, interleaved round robin; the tree is
// empty again at the end of a cycle.
func ingestCycle() []wire.Event {
	const workers, prefixes, window = 16, 32, 4
	per := make([][]wire.Event, workers)
	for w := range workers {
		k := wire.WorkerKey{Worker: uint64(w + 1)}
		pre := make([][]wire.Block, prefixes)
		rm := func(bl []wire.Block) wire.Event {
			r := make([]wire.Block, len(bl))
			for i := range bl {
				r[i].Engine = bl[i].Engine
			}
			return wire.Event{Worker: k, Kind: wire.KindRemoved, Blocks: r}
		}
		for j := range prefixes {
			n := 16 + j*17%49
			bl := make([]wire.Block, n)
			for i := range bl {
				x := uint64(w+1)<<40 | uint64(j+1)<<20 | uint64(i+1)
				bl[i] = wire.Block{Engine: wire.EngineHash(x * 0x9e3779b97f4a7c15), Local: wire.BlockHash(x * 0xbf58476d1ce4e5b9)}
			}
			pre[j] = bl
			per[w] = append(per[w], wire.Event{Worker: k, Kind: wire.KindStored, Blocks: bl})
			if j >= window {
				per[w] = append(per[w], rm(pre[j-window]))
			}
		}
		for j := prefixes - window; j < prefixes; j++ {
			per[w] = append(per[w], rm(pre[j]))
		}
	}
	var evs []wire.Event
	for i := range per[0] {
		for w := range workers {
			evs = append(evs, per[w][i])
		}
	}
	return evs
}

// BenchmarkApplyIngest applies BenchmarkNATSIngest's events to a tree (one
// op = one event, ≈40 blocks): the tree's share of NATS ingest. flatmap is
// the floor any index pays: one Go map insert or delete per block (engine
// hash → block), nothing else.
func BenchmarkApplyIngest(b *testing.B) {
	evs := ingestCycle()
	b.Run("tree", func(b *testing.B) {
		applyLoop(b, New(), evs)
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("flatmap", func(b *testing.B) {
		m := map[wire.EngineHash]uint32{}
		b.ReportAllocs()
		i := 0
		cpu := cpuNanos()
		for b.Loop() {
			ev := &evs[i%len(evs)]
			if ev.Kind == wire.KindStored {
				for j, bl := range ev.Blocks {
					m[bl.Engine] = uint32(j)
				}
			} else {
				for _, bl := range ev.Blocks {
					delete(m, bl.Engine)
				}
			}
			i++
		}
		reportCPU(b, cpu)
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
}
