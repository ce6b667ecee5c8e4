package shard

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/kvroute/kvroute/wire"
)

// approxModel is the naive specification of approximate mode: a map of
// (worker, sequence hash) entries, pruned by sorting everything.
type approxModel struct {
	ttl         time.Duration
	max, target int
	now         time.Duration
	touch       int
	m           map[approxKey]*modelEntry
}

type approxKey struct {
	w   wire.WorkerKey
	seq wire.SeqHash
}

type modelEntry struct {
	exp   time.Duration
	depth int
	touch int // when it was last recorded: the list order among equal expiries
}

func (m *approxModel) record(k wire.WorkerKey, seq []wire.SeqHash, now time.Duration) {
	m.now = max(m.now, now)
	for i, s := range seq {
		m.touch++
		key := approxKey{k, s}
		if e := m.m[key]; e != nil {
			e.exp, e.touch = m.now+m.ttl, m.touch
		} else {
			m.m[key] = &modelEntry{exp: m.now + m.ttl, depth: i + 1, touch: m.touch}
		}
	}
	if len(m.m) > m.max {
		keys := m.sorted()
		for _, k := range keys[:len(keys)-m.target] {
			delete(m.m, k)
		}
	}
}

// sorted returns the keys in removal order: earliest expiry, deepest, oldest.
func (m *approxModel) sorted() []approxKey {
	keys := make([]approxKey, 0, len(m.m))
	for k := range m.m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b approxKey) int {
		x, y := m.m[a], m.m[b]
		return cmp.Or(cmp.Compare(x.exp, y.exp), cmp.Compare(y.depth, x.depth), cmp.Compare(x.touch, y.touch))
	})
	return keys
}

func (m *approxModel) tick(now time.Duration) int {
	m.now = max(m.now, now)
	n := 0
	for k, e := range m.m {
		if e.exp <= m.now {
			delete(m.m, k)
			n++
		}
	}
	return n
}

func (m *approxModel) drop(worker uint64, dp *uint32) int {
	n := 0
	for k := range m.m {
		if k.w.Worker == worker && (dp == nil || k.w.Dp == *dp) {
			delete(m.m, k)
			n++
		}
	}
	return n
}

// TestApproxDifferential drives a Core and the model with random decisions
// (paths in a small tree, so decisions share prefixes), clock steps (some
// backwards), ticks and removals, and compares after every step: recorded
// blocks, per-worker tree sizes, and every recorded path's match depth.
func TestApproxDifferential(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	cfg := ApproxConfig{TTL: 10 * time.Second, MaxBlocks: 40, PruneTarget: 0.5}
	c := NewCore(CoreConfig{Approx: cfg})
	m := &approxModel{ttl: cfg.TTL, max: 40, target: 20, m: map[approxKey]*modelEntry{}}
	workers := []wire.WorkerKey{{Worker: 1}, {Worker: 1, Dp: 1}, {Worker: 2}, {Worker: 3}}
	paths := map[wire.SeqHash][]wire.BlockHash{} // sequence hash → local path
	now := time.Duration(0)
	for step := range 3000 {
		now += time.Duration(rng.IntN(2000)) * time.Millisecond
		at := now
		if rng.IntN(20) == 0 {
			at -= 5 * time.Second // a late timestamp: clamped
		}
		switch r := rng.IntN(100); {
		case r < 75:
			k := workers[rng.IntN(len(workers))]
			local := make([]wire.BlockHash, 1+rng.IntN(6))
			parent := wire.BlockHash(0)
			for i := range local {
				local[i] = childHash(parent, rng.Uint64N(2))
				parent = local[i]
			}
			seq := wire.SequenceHashes(nil, local)
			for i, s := range seq {
				paths[s] = local[:i+1]
			}
			if err := c.RecordDecision(k, local, seq, at); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			m.record(k, seq, at)
		case r < 95:
			if got, want := c.Tick(at), m.tick(at); got != want {
				t.Fatalf("step %d: Tick expired %d, model %d", step, got, want)
			}
		case r < 98:
			k := workers[rng.IntN(len(workers))]
			c.RemoveDpRank(k)
			m.drop(k.Worker, &k.Dp)
		default:
			k := workers[rng.IntN(len(workers))]
			c.RemoveWorker(k.Worker)
			m.drop(k.Worker, nil)
		}
		if err := c.CheckInvariants(); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if c.ApproxBlocks() != len(m.m) {
			t.Fatalf("step %d: %d recorded blocks, model %d", step, c.ApproxBlocks(), len(m.m))
		}
		size := map[wire.WorkerKey]uint32{}
		for k := range m.m {
			size[k.w]++
			e := &c.ax.entries[c.ax.workers[c.ax.byKey[k.w]].m[k.seq]]
			if me := m.m[k]; e.seq != k.seq || e.expiry != me.exp || int(e.depth) != me.depth {
				t.Fatalf("step %d: entry %v is %+v, model %+v", step, k, *e, *me)
			}
		}
		for _, k := range workers {
			if got := c.TreeSize(k); got != size[k] {
				t.Fatalf("step %d: worker %v tree size %d, model %d", step, k, got, size[k])
			}
		}
		if step%10 != 0 {
			continue
		}
		// Every path recorded at some point matches, per worker, as deep as
		// the model's longest recorded prefix of it.
		for _, path := range paths {
			ov := c.Match(nil, path)
			seq := wire.SequenceHashes(nil, path)
			for _, k := range workers {
				want := 0
				for want < len(seq) && m.m[approxKey{k, seq[want]}] != nil {
					want++
				}
				got := 0
				for _, o := range ov {
					if o.Worker == k {
						got = int(o.Blocks)
					}
				}
				if got != want {
					t.Fatalf("step %d: worker %v matches %d blocks of %x, model %d", step, k, got, path, want)
				}
			}
		}
	}
	cnt := c.Counters()
	if cnt.BlocksPruned == 0 || cnt.BlocksExpired == 0 || cnt.BlocksRefreshed == 0 {
		t.Fatalf("run did not exercise pruning, expiry and refresh: %+v", cnt)
	}
}
