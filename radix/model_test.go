package radix

import (
	"encoding/binary"
	"errors"
	"flag"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/wire"
)

var seedFlag = flag.Uint64("radix.seed", 0, "seed for randomized radix tests (also RADIX_SEED); 0 = time-based")

func testSeed(t *testing.T) uint64 {
	seed := *seedFlag
	if s := os.Getenv("RADIX_SEED"); s != "" && seed == 0 {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("RADIX_SEED: %v", err)
		}
		seed = v
	}
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -radix.seed=%d or RADIX_SEED=%d)", seed, seed, seed)
	return seed
}

// model is the naive reference: per worker key, the set of local-hash paths
// it holds (path → engine hash) and the reverse map.
// tier holds each held path's tier mask (bit k = wire.Tier k).
type model struct {
	held map[wire.WorkerKey]map[string]wire.EngineHash
	eng  map[wire.WorkerKey]map[wire.EngineHash]string
	tier map[wire.WorkerKey]map[string]uint8
}

func newModel() *model {
	return &model{held: map[wire.WorkerKey]map[string]wire.EngineHash{}, eng: map[wire.WorkerKey]map[wire.EngineHash]string{},
		tier: map[wire.WorkerKey]map[string]uint8{}}
}

func pathAppend(p string, h wire.BlockHash) string {
	return string(binary.LittleEndian.AppendUint64([]byte(p), uint64(h)))
}

func (m *model) apply(ev *wire.Event) (Result, error) {
	var res Result
	k := ev.Worker
	switch ev.Kind {
	case wire.KindStored:
		path := ""
		if ev.HasParent {
			p, ok := m.eng[k][ev.Parent]
			if !ok {
				return res, ErrParentMissing
			}
			path = p
		}
		if m.held[k] == nil {
			m.held[k], m.eng[k], m.tier[k] = map[string]wire.EngineHash{}, map[wire.EngineHash]string{}, map[string]uint8{}
		}
		tb := uint8(1) << ev.Tier
		for i, b := range ev.Blocks {
			path = pathAppend(path, b.Local)
			e, holds := m.held[k][path]
			_, engHeld := m.eng[k][b.Engine]
			if holds && e == b.Engine {
				if m.tier[k][path]&tb == 0 {
					m.tier[k][path] |= tb
					res.Stored++
				}
				continue
			}
			if holds || engHeld {
				res.Conflicts = len(ev.Blocks) - i
				m.gc(k)
				return res, ErrConflict
			}
			m.held[k][path], m.eng[k][b.Engine], m.tier[k][path] = b.Engine, path, tb
			res.Stored++
		}
		m.gc(k)
	case wire.KindRemoved:
		// The named blocks held in the tier lose it; one left in no tier
		// leaves with everything below it.
		tb := uint8(1) << ev.Tier
		var named []string
		seen := map[wire.EngineHash]bool{} // a hash named twice is unknown the second time
		for _, b := range ev.Blocks {
			if p, ok := m.eng[k][b.Engine]; ok && m.tier[k][p]&tb != 0 && !seen[b.Engine] {
				seen[b.Engine] = true
				named = append(named, p)
			} else {
				res.Unknown++
			}
		}
		var roots []string
		for _, p := range named {
			if m.tier[k][p] == tb {
				roots = append(roots, p)
			}
		}
		gone := func(p string) bool {
			for _, r := range roots {
				if strings.HasPrefix(p, r) {
					return true
				}
			}
			return false
		}
		for p, e := range m.held[k] {
			if gone(p) {
				delete(m.held[k], p)
				delete(m.eng[k], e)
				delete(m.tier[k], p)
				res.Removed++
			}
		}
		for _, p := range named {
			if _, ok := m.held[k][p]; ok {
				m.tier[k][p] &^= tb
				res.Removed++
			}
		}
		m.gc(k)
	case wire.KindCleared:
		res.Removed = m.removeWorker(k.Worker)
	default:
		return res, ErrBadEvent
	}
	return res, nil
}

func (m *model) gc(k wire.WorkerKey) {
	if len(m.held[k]) == 0 {
		delete(m.held, k)
		delete(m.eng, k)
		delete(m.tier, k)
	}
}

func (m *model) removeKey(k wire.WorkerKey) int {
	n := len(m.held[k])
	delete(m.held, k)
	delete(m.eng, k)
	delete(m.tier, k)
	return n
}

func (m *model) removeWorker(w uint64) int {
	n := 0
	for k := range m.held {
		if k.Worker == w {
			n += m.removeKey(k)
		}
	}
	return n
}

func (m *model) match(hs []wire.BlockHash) []Overlap {
	var out []Overlap
	const dev, host = 1 << wire.TierDevice, 1 << wire.TierHost
	for k, held := range m.held {
		// Depths of the prefix held on the device, on the device or host,
		// and in any tier.
		var lv [3]uint32
		open := [3]bool{true, true, true}
		path := ""
		for _, h := range hs {
			if !open[2] {
				break
			}
			path = pathAppend(path, h)
			_, ok := held[path]
			tm := m.tier[k][path]
			for i, in := range [3]bool{ok && tm&dev != 0, ok && tm&(dev|host) != 0, ok} {
				if open[i] = open[i] && in; open[i] {
					lv[i]++
				}
			}
		}
		if lv[2] > 0 {
			out = append(out, Overlap{Worker: k, Blocks: lv[0], Host: lv[1] - lv[0], Disk: lv[2] - lv[1], TreeSize: uint32(len(held))})
		}
	}
	return sortOverlaps(out)
}

func (m *model) entries() int {
	n := 0
	for _, h := range m.held {
		n += len(h)
	}
	return n
}

// heldPaths returns k's paths, sorted (deterministic choice under a seed).
func (m *model) heldPaths(k wire.WorkerKey) []string {
	var ps []string
	for p := range m.held[k] {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

func pathHashes(p string) []wire.BlockHash {
	hs := make([]wire.BlockHash, len(p)/8)
	for i := range hs {
		hs[i] = wire.BlockHash(binary.LittleEndian.Uint64([]byte(p[i*8:])))
	}
	return hs
}

// gen produces random events against a model's state: few workers, a tiny
// local-hash alphabet (so paths share and branch), engine hashes derived from
// (key, path) with occasional deliberate conflicts and unknown parents.
type gen struct {
	r       *rand.Rand
	m       *model
	keys    []wire.WorkerKey
	alpha   int
	bogus   uint64
	maxLen  int
	remove  int // percent of events that are Removed
	leafPct int // percent of removals that name a leaf
	tierPct int // percent of Stored and Removed events outside the device tier
}

// leafPaths returns the paths of sorted that no other path extends.
func leafPaths(sorted []string) []string {
	var out []string
	for i, p := range sorted {
		if i+1 == len(sorted) || !strings.HasPrefix(sorted[i+1], p) {
			out = append(out, p)
		}
	}
	return out
}

func newGen(seed uint64, m *model) *gen {
	g := &gen{r: rand.New(rand.NewPCG(seed, seed^0x5eed)), m: m, alpha: 3, maxLen: 6, remove: 34, leafPct: 50}
	for w := uint64(1); w <= 3; w++ {
		for dp := uint32(0); dp < 2; dp++ {
			g.keys = append(g.keys, wire.WorkerKey{Worker: w, Dp: dp})
		}
	}
	return g
}

func engineFor(k wire.WorkerKey, path string) wire.EngineHash {
	h := uint64(14695981039346656037)
	for _, b := range binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint32([]byte(path), k.Dp), k.Worker) {
		h = (h ^ uint64(b)) * 1099511628211
	}
	return wire.EngineHash(h | 1)
}

func (g *gen) next() wire.Event {
	ev := g.event()
	if (ev.Kind == wire.KindStored || ev.Kind == wire.KindRemoved) && g.r.IntN(100) < g.tierPct {
		ev.Tier = wire.Tier(1 + g.r.IntN(3))
		if g.r.IntN(2) == 0 {
			ev.Tier = wire.TierHost // the common case: host memory behind the GPU
		}
	}
	return ev
}

func (g *gen) event() wire.Event {
	k := g.keys[g.r.IntN(len(g.keys))]
	paths := g.m.heldPaths(k)
	store := 94 - g.remove
	switch p := g.r.IntN(100); {
	case p < store:
		ev := wire.Event{Worker: k, Kind: wire.KindStored}
		path := ""
		switch q := g.r.IntN(100); {
		case q < 25 || len(paths) == 0:
		case q < 95:
			path = paths[g.r.IntN(len(paths))]
			ev.HasParent, ev.Parent = true, g.m.held[k][path]
		default:
			g.bogus++
			ev.HasParent, ev.Parent = true, wire.EngineHash(g.bogus<<1) // even: never a real engine hash
		}
		for range 1 + g.r.IntN(g.maxLen) {
			h := wire.BlockHash(1 + g.r.IntN(g.alpha))
			path = pathAppend(path, h)
			e := engineFor(k, path)
			if g.r.IntN(100) < 2 && len(paths) > 0 { // conflict: an engine hash held elsewhere, or a new one
				if g.r.IntN(2) == 0 {
					e = g.m.held[k][paths[g.r.IntN(len(paths))]]
				} else {
					e ^= 1 << 40
				}
			}
			ev.Blocks = append(ev.Blocks, wire.Block{Engine: e, Local: h})
		}
		return ev
	case p < store+g.remove: // remove
		ev := wire.Event{Worker: k, Kind: wire.KindRemoved}
		for range 1 + g.r.IntN(3) {
			if len(paths) == 0 || g.r.IntN(10) == 0 {
				g.bogus++
				ev.Blocks = append(ev.Blocks, wire.Block{Engine: wire.EngineHash(g.bogus << 1)})
				continue
			}
			// Mostly leaves, like engines evicting tails first.
			p := paths[g.r.IntN(len(paths))]
			if g.r.IntN(100) < g.leafPct {
				leaves := leafPaths(paths)
				p = leaves[g.r.IntN(len(leaves))]
			}
			ev.Blocks = append(ev.Blocks, wire.Block{Engine: g.m.held[k][p]})
		}
		return ev
	case p < store+g.remove+2:
		return wire.Event{Worker: k, Kind: wire.KindCleared}
	case p < store+g.remove+4:
		return wire.Event{Worker: k, Kind: 100} // the caller turns this into RemoveDpRank
	}
	return wire.Event{Worker: k, Kind: 101} // RemoveWorker
}

// probes returns match requests: every held path of a few keys extended by a
// random block, plus random sequences.
func (g *gen) probes() [][]wire.BlockHash {
	var out [][]wire.BlockHash
	for _, k := range g.keys {
		for _, p := range g.m.heldPaths(k) {
			if g.r.IntN(3) != 0 {
				continue
			}
			hs := append(pathHashes(p), wire.BlockHash(1+g.r.IntN(g.alpha)))
			out = append(out, hs)
		}
	}
	for range 8 {
		hs := make([]wire.BlockHash, 1+g.r.IntN(10))
		for i := range hs {
			hs[i] = wire.BlockHash(1 + g.r.IntN(g.alpha))
		}
		out = append(out, hs)
	}
	return out
}

// tally counts outcomes, so a test can show it exercised each path.
type tally struct{ stored, removed, unknown, conflicts, missing, deep int }

var lastTally tally

func applyBoth(t *testing.T, tr *Tree, m *model, ev *wire.Event) {
	t.Helper()
	if invariants { // the mutation panics on a violation: show what led to it
		before := treeString(tr)
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("%s (kind %d): %v\nbefore:\n%s\nafter:\n%s", fmtEvent(*ev), ev.Kind, r, before, treeString(tr))
			}
		}()
	}
	var got, want Result
	var gerr, werr error
	dbgBefore := ""
	if os.Getenv("RADIX_DEBUG") != "" {
		dbgBefore = treeString(tr)
	}
	switch ev.Kind {
	case 100:
		got.Removed, want.Removed = tr.RemoveDpRank(ev.Worker), m.removeKey(ev.Worker)
	case 101:
		got.Removed, want.Removed = tr.RemoveWorker(ev.Worker.Worker), m.removeWorker(ev.Worker.Worker)
	default:
		got, gerr = tr.Apply(ev)
		want, werr = m.apply(ev)
	}
	if got != want || !errors.Is(gerr, werr) || (gerr == nil) != (werr == nil) {
		t.Fatalf("%s tier %v: tree %+v %v, model %+v %v\n%s\nbefore:\n%s", fmtEvent(*ev), ev.Tier, got, gerr, want, werr, treeString(tr), dbgBefore)
	}
	lastTally.stored += got.Stored
	lastTally.removed += got.Removed
	lastTally.unknown += got.Unknown
	lastTally.conflicts += got.Conflicts
	if errors.Is(gerr, ErrParentMissing) {
		lastTally.missing++
	}
	if ev.Kind == wire.KindRemoved && got.Removed > len(ev.Blocks)-got.Unknown {
		lastTally.deep++ // removed descendants that were not named
	}
}

func compareTree(t *testing.T, tr *Tree, m *model, probes [][]wire.BlockHash) {
	t.Helper()
	if err := tr.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	st := tr.Stats()
	if st.Entries != m.entries() || st.Workers != len(m.held) {
		t.Fatalf("stats %+v, model entries %d workers %d", st, m.entries(), len(m.held))
	}
	for k, h := range m.held {
		if got := tr.TreeSize(k); got != uint32(len(h)) {
			t.Fatalf("TreeSize(%v) = %d, model %d", k, got, len(h))
		}
	}
	if got := tr.Workers(nil); len(got) != len(m.held) {
		t.Fatalf("Workers: %d, model %d", len(got), len(m.held))
	}
	var dst []Overlap
	for _, hs := range probes {
		dst = sortOverlaps(tr.Match(dst[:0], hs))
		want := m.match(hs)
		if !slices.Equal(dst, want) {
			t.Fatalf("Match(%v):\ntree  %v\nmodel %v\n%s", hs, dst, want, treeString(tr))
		}
	}
}

// TestModel checks the tree against the naive model after every step of a
// random event sequence.
func TestModel(t *testing.T) {
	seed := testSeed(t)
	steps := 3000
	if testing.Short() {
		steps = 1000
	}
	for round := range uint64(4) {
		tr, m := New(), newModel()
		if round == 3 { // the one-block-per-node layout of docs/decisions/0001-arena-tree-of-runs.md
			tr.maxRun = 1
		}
		g := newGen(seed+round, m)
		lastTally = tally{}
		if round == 2 { // longer paths, fewer shared, a bigger tree
			g.alpha, g.maxLen, g.remove, g.leafPct = 8, 12, 30, 90
		}
		for step := range steps {
			ev := g.next()
			applyBoth(t, tr, m, &ev)
			if step%3 == 0 || step == steps-1 {
				compareTree(t, tr, m, g.probes())
			}
		}
		t.Logf("round %d (maxRun %d): final %+v, outcomes %+v", round, tr.maxRun, tr.Stats(), lastTally)
		if lastTally.conflicts == 0 || lastTally.missing == 0 || lastTally.unknown == 0 || lastTally.deep == 0 {
			t.Errorf("round %d did not exercise every outcome: %+v", round, lastTally)
		}
	}
}

// TestModelTiers is TestModel with 40% of the Stored and Removed events in
// the host, disk or external tier: per-tier stores and removals, blocks held
// in several tiers, and Match's per-tier overlaps against the model.
func TestModelTiers(t *testing.T) {
	seed := testSeed(t)
	steps := 3000
	if testing.Short() {
		steps = 1000
	}
	for round := range uint64(3) {
		tr, m := New(), newModel()
		g := newGen(seed+round, m)
		g.tierPct = 40
		if round == 1 {
			g.alpha, g.maxLen, g.remove, g.leafPct = 8, 12, 30, 90
		}
		if round == 2 {
			g.keys = g.keys[:0]
			for w := uint64(1); w <= 40; w++ {
				g.keys = append(g.keys, wire.WorkerKey{Worker: w}, wire.WorkerKey{Worker: w, Dp: 1})
			}
		}
		lastTally = tally{}
		host, split := 0, 0
		for step := range steps {
			ev := g.next()
			applyBoth(t, tr, m, &ev)
			every := 3
			if round == 2 {
				every = 50
			}
			if step%every == 0 || step == steps-1 {
				probes := g.probes()
				compareTree(t, tr, m, probes)
				for _, hs := range probes {
					for _, o := range tr.Match(nil, hs) {
						if o.Host > 0 {
							host++
						}
						if o.Host > 0 && o.Blocks > 0 {
							split++
						}
					}
				}
			}
		}
		t.Logf("round %d: final %+v, outcomes %+v, host overlaps %d (%d after a device prefix)", round, tr.Stats(), lastTally, host, split)
		if host == 0 || split == 0 || lastTally.deep == 0 || lastTally.unknown == 0 {
			t.Errorf("round %d did not exercise tiered matches: host %d split %d %+v", round, host, split, lastTally)
		}
	}
}

// TestDumpRebuild dumps random trees, applies the dump to an empty tree and
// compares structure, sizes and matches.
func TestDumpRebuild(t *testing.T) {
	seed := testSeed(t)
	for round := range uint64(20) {
		tr, m := New(), newModel()
		g := newGen(seed+round, m)
		g.alpha = 2 + int(round%4)
		if round%2 == 1 {
			g.tierPct = 40 // Dump and rebuild tiers too
		}
		for range 300 {
			ev := g.next()
			applyBoth(t, tr, m, &ev)
		}
		events := tr.Dump(nil)
		re := New()
		for i := range events {
			if res, err := re.Apply(&events[i]); err != nil || res.Stored != len(events[i].Blocks) {
				t.Fatalf("rebuild %s: %+v %v", fmtEvent(events[i]), res, err)
			}
		}
		// Dump's Blocks do not alias each other or the tree.
		for i := range events {
			for j := range events[i].Blocks {
				events[i].Blocks[j] = wire.Block{}
			}
		}
		if err := re.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
		a, b := tr.Stats(), re.Stats()
		if a.Nodes != b.Nodes || a.Entries != b.Entries || a.Workers != b.Workers || a.Blocks != b.Blocks {
			t.Fatalf("stats: original %+v, rebuilt %+v", a, b)
		}
		if x, y := treeString(tr), treeString(re); x != y {
			t.Fatalf("structure differs:\n%s\nvs\n%s", x, y)
		}
		compareTree(t, re, m, g.probes())
		// And the rebuilt tree keeps working like the original.
		for range 100 {
			ev := g.next()
			applyBoth(t, re, m, &ev)
		}
		compareTree(t, re, m, g.probes())
	}
}

// TestManyWorkers runs the differential test with 150 worker keys, so worker
// sets widen from one 64-bit word to four while the tree is live.
func TestManyWorkers(t *testing.T) {
	tr, m, _ := manyWorkers(t, false)
	if tr.w < 2 {
		t.Fatalf("worker sets never widened (%d words, %d workers)", tr.w, len(m.held))
	}
	t.Logf("final %+v, %d words per set", tr.Stats(), tr.w)
}

// manyWorkers applies a random history of 150 worker keys to a tree and the
// model, comparing them every 50 events (and, with invariants set, checking
// the tree's invariants), and returns both with the generator.
func manyWorkers(t *testing.T, invariants bool) (*Tree, *model, *gen) {
	seed := testSeed(t)
	tr, m := New(), newModel()
	g := newGen(seed, m)
	g.keys = g.keys[:0]
	for w := uint64(1); w <= 75; w++ {
		g.keys = append(g.keys, wire.WorkerKey{Worker: w}, wire.WorkerKey{Worker: w, Dp: 1})
	}
	g.remove, g.leafPct = 20, 80
	steps := 1500
	if testing.Short() {
		steps = 500
	}
	for step := range steps {
		ev := g.next()
		applyBoth(t, tr, m, &ev)
		if step%50 == 0 || step == steps-1 {
			compareTree(t, tr, m, g.probes())
			if !invariants {
				continue
			}
			if err := tr.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
		}
	}
	return tr, m, g
}
