package radix

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvroute/kvroute/wire"
)

// A synthetic fleet with realistic sharing, used by the benchmarks and the
// memory and allocation tests. Every worker serves a few prompt families
// (system prompts, skewed popularity). Under each family are conversations
// shared across workers; a worker holds some of them, each cut at a quarter,
// half, three quarters or all of its length, plus a private tail. Turns are
// 64-block continuations of a held conversation; workers holding the same
// conversation cut the same way share the same turns.
type workloadParams struct {
	workers       int
	families      int
	famLen        [2]int // family prefix length range
	convs         int    // conversations per family
	convLen       [2]int
	famPerWorker  int
	convPerFamily int // conversations a worker holds per family
	tailLen       [2]int
	turnLen       int
	turns         int // distinct turns per conversation (the Apply schedule's period in rounds)
	live          int // turns each worker keeps live in the Apply schedule
	reqLen        int
}

// benchParams builds a tree of ≈1.5M (block, worker) entries over 64 workers.
var benchParams = workloadParams{
	workers: 64, families: 16, famLen: [2]int{32, 256}, convs: 32, convLen: [2]int{64, 512},
	famPerWorker: 10, convPerFamily: 8, tailLen: [2]int{0, 128}, turnLen: 64, turns: 16, live: 8, reqLen: 512,
}

// smallParams is a quick version for tests (≈40k entries).
var smallParams = workloadParams{
	workers: 16, families: 8, famLen: [2]int{16, 64}, convs: 8, convLen: [2]int{16, 128},
	famPerWorker: 4, convPerFamily: 3, tailLen: [2]int{0, 32}, turnLen: 16, turns: 8, live: 4, reqLen: 256,
}

type convEnd struct {
	fam, conv int
	engine    wire.EngineHash // the worker's engine hash of the last held block
	seq       wire.SeqHash
}

type workload struct {
	p      workloadParams
	keys   []wire.WorkerKey
	build  []wire.Event     // Stored events that build the base tree
	seqs   [][]wire.SeqHash // per build event, each block's sequence hash (for the naive baseline)
	ends   [][]convEnd      // per worker, the held conversations
	reqs   [][]wire.BlockHash
	reqSeq [][]wire.SeqHash
	blocks int // blocks in build events
}

func splitmix(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}

// localHash names block i of a piece of content: kind 1 family prefix, 2
// conversation, 3 private tail, 4 turn, 5 request filler.
func localHash(kind, a, b, c, i int) wire.BlockHash {
	return wire.BlockHash(splitmix(uint64(kind)<<60 ^ uint64(a)<<44 ^ uint64(b)<<32 ^ uint64(c)<<20 ^ uint64(i)))
}

// engineOf is a worker's engine hash for a path, unique per (worker, path).
func engineOf(k wire.WorkerKey, seq wire.SeqHash) wire.EngineHash {
	return wire.EngineHash(splitmix(uint64(seq) ^ splitmix(k.Worker<<8|uint64(k.Dp))))
}

func between(r *rand.Rand, lh [2]int) int { return lh[0] + r.IntN(lh[1]-lh[0]+1) }

func newWorkload(p workloadParams, seed uint64) *workload {
	r := rand.New(rand.NewPCG(seed, 7))
	wl := &workload{p: p}
	famLen := make([]int, p.families)
	for f := range famLen {
		famLen[f] = between(r, p.famLen)
	}
	convLen := make([][]int, p.families)
	for f := range convLen {
		convLen[f] = make([]int, p.convs)
		for c := range convLen[f] {
			convLen[f][c] = between(r, p.convLen)
		}
	}
	skewed := func(n int) int { u := r.Float64(); return int(float64(n) * u * u) } // popular low indexes
	// stored appends one Stored event continuing from (parentEngine, seq).
	stored := func(k wire.WorkerKey, hasParent bool, parent wire.EngineHash, seq wire.SeqHash, locals []wire.BlockHash) (wire.EngineHash, wire.SeqHash) {
		ev := wire.Event{Worker: k, Kind: wire.KindStored, HasParent: hasParent, Parent: parent, Blocks: make([]wire.Block, len(locals))}
		seqs := make([]wire.SeqHash, len(locals))
		for i, h := range locals {
			if !hasParent && i == 0 {
				seq = wire.SeqHash(h)
			} else {
				seq = wire.ChainHash(seq, h)
			}
			seqs[i] = seq
			ev.Blocks[i] = wire.Block{Engine: engineOf(k, seq), Local: h}
		}
		wl.build = append(wl.build, ev)
		wl.seqs = append(wl.seqs, seqs)
		wl.blocks += len(locals)
		return ev.Blocks[len(locals)-1].Engine, seq
	}
	content := func(kind, a, b, c, n int) []wire.BlockHash {
		hs := make([]wire.BlockHash, n)
		for i := range hs {
			hs[i] = localHash(kind, a, b, c, i)
		}
		return hs
	}
	for w := range p.workers {
		k := wire.WorkerKey{Worker: uint64(1000 + w/2), Dp: uint32(w % 2)}
		wl.keys = append(wl.keys, k)
		var ends []convEnd
		fams := map[int]bool{}
		for len(fams) < p.famPerWorker {
			fams[skewed(p.families)] = true
		}
		for _, f := range sortedKeys(fams) {
			fe, fseq := stored(k, false, 0, 0, content(1, f, 0, 0, famLen[f]))
			convs := map[int]bool{}
			for len(convs) < p.convPerFamily {
				convs[skewed(p.convs)] = true
			}
			for _, c := range sortedKeys(convs) {
				held := max(1, convLen[f][c]*(1+r.IntN(4))/4)
				ce, cseq := stored(k, true, fe, fseq, content(2, f, c, 0, held))
				ends = append(ends, convEnd{fam: f, conv: c<<16 | held, engine: ce, seq: cseq})
				if n := between(r, p.tailLen); n > 0 {
					stored(k, true, ce, cseq, content(3, w, f, c, n))
				}
			}
		}
		wl.ends = append(wl.ends, ends)
	}
	// Requests: a family, one of its conversations in full, a turn, filler.
	for i := range 256 {
		f := skewed(p.families)
		c := r.IntN(p.convs)
		req := content(1, f, 0, 0, famLen[f])
		req = append(req, content(2, f, c, 0, convLen[f][c])...)
		req = append(req, content(5, i, 0, 0, p.reqLen)...)
		req = req[:p.reqLen]
		wl.reqs = append(wl.reqs, req)
		wl.reqSeq = append(wl.reqSeq, wire.SequenceHashes(nil, req))
	}
	return wl
}

func sortedKeys(m map[int]bool) []int {
	var ks []int
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func (wl *workload) tree(tb testing.TB, maxRun int) *Tree {
	tr := New()
	tr.maxRun = maxRun
	for i := range wl.build {
		if _, err := tr.Apply(&wl.build[i]); err != nil {
			tb.Fatalf("build event %d: %v", i, err)
		}
	}
	return tr
}

// tieredTree builds the tree with a host tier behind the device: every third
// build event is offloaded (the same blocks stored with tier host), then the
// device evicts the last half of them, as an engine that offloads before it
// evicts does. About a sixth of the entries end up on the host only and a
// sixth on both.
func (wl *workload) tieredTree(tb testing.TB) *Tree {
	tr := wl.tree(tb, 0)
	for i := range wl.build {
		if i%3 != 0 {
			continue
		}
		ev := wl.build[i]
		ev.Tier = wire.TierHost
		res, err := tr.Apply(&ev)
		if errors.Is(err, ErrParentMissing) {
			continue // its parent was evicted (an earlier offload's tail) and not offloaded
		}
		if err != nil || res.Stored != len(ev.Blocks) {
			tb.Fatalf("offload of build event %d: %+v %v", i, res, err)
		}
		rm := wire.Event{Worker: ev.Worker, Kind: wire.KindRemoved}
		for j := len(ev.Blocks) - 1; j >= len(ev.Blocks)/2; j-- {
			rm.Blocks = append(rm.Blocks, wire.Block{Engine: ev.Blocks[j].Engine})
		}
		if _, err := tr.Apply(&rm); err != nil {
			tb.Fatalf("eviction of build event %d: %v", i, err)
		}
	}
	return tr
}

// schedule is the periodic Apply workload: step i stores a 64-block turn for
// worker i % workers and removes (tail first) the turn stored live steps ago
// by the same worker, so the tree's size stays constant. warm holds the
// Stored events that make the state at step 0 equal to the state at step n.
type schedule struct {
	warm     []wire.Event
	warmSeqs [][]wire.SeqHash
	events   []wire.Event // alternating Stored, Removed
	seqs     [][]wire.SeqHash
	blocks   int // blocks per period
}

func (wl *workload) schedule() *schedule {
	p := wl.p
	n := p.workers * p.turns
	q := p.workers * p.live
	stores := make([]wire.Event, n)
	seqs := make([][]wire.SeqHash, n)
	for i := range n {
		w, round := i%p.workers, i/p.workers
		k := wl.keys[w]
		ends := wl.ends[w]
		ce := ends[round%len(ends)]
		ev := wire.Event{Worker: k, Kind: wire.KindStored, HasParent: true, Parent: ce.engine, Blocks: make([]wire.Block, p.turnLen)}
		seq := ce.seq
		seqs[i] = make([]wire.SeqHash, p.turnLen)
		for j := range ev.Blocks {
			h := localHash(4, ce.fam, ce.conv, round, j)
			seq = wire.ChainHash(seq, h)
			seqs[i][j] = seq
			ev.Blocks[j] = wire.Block{Engine: engineOf(k, seq), Local: h}
		}
		stores[i] = ev
	}
	sc := &schedule{}
	for i := n - q; i < n; i++ {
		sc.warm = append(sc.warm, stores[i])
		sc.warmSeqs = append(sc.warmSeqs, seqs[i])
	}
	for i := range n {
		old := stores[(i-q+n)%n]
		rm := wire.Event{Worker: old.Worker, Kind: wire.KindRemoved, Blocks: make([]wire.Block, len(old.Blocks))}
		rmSeq := make([]wire.SeqHash, len(old.Blocks))
		for j := range old.Blocks { // tail first, as engines evict
			rm.Blocks[j] = wire.Block{Engine: old.Blocks[len(old.Blocks)-1-j].Engine}
			rmSeq[j] = seqs[(i-q+n)%n][len(old.Blocks)-1-j]
		}
		sc.events = append(sc.events, stores[i], rm)
		sc.seqs = append(sc.seqs, seqs[i], rmSeq)
		sc.blocks += len(stores[i].Blocks) + len(rm.Blocks)
	}
	return sc
}
