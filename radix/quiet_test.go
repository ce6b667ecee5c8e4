package radix

import (
	"slices"
	"testing"

	"github.com/kvroute/kvroute/wire"
)

// TestQuietStretches checks SetQuiet's contract on random event sequences
// (device-only, tiered, one block per node): the hook is called in pairs;
// within a quiet stretch Match sees one tree (the same overlaps at both
// ends, here matched from the hook itself); that tree is between the tree
// before the event and after it (the event's worker holds a depth between
// the two, every other worker exactly what it held); and the size it
// reports is at least the blocks it finds. A shard.Runner lets Matches run
// on other goroutines in these stretches; shard's -race tests check the
// memory side (TestMatchInQuietStretches).
func TestQuietStretches(t *testing.T) {
	seed := testSeed(t)
	steps := 2000
	if testing.Short() {
		steps = 700
	}
	for round := range uint64(4) {
		tr, m := New(), newModel()
		g := newGen(seed+round, m)
		if round == 2 {
			tr.maxRun = 1
		}
		if round == 1 {
			g.tierPct = 40
		}
		if round == 3 { // long paths, announced again (the check of held blocks)
			g.alpha, g.maxLen = 2, 40
		}
		again := 0
		var (
			probes        [][]wire.BlockHash
			atStart       [][]Overlap
			inside        [][][]Overlap // per stretch, per probe
			quiet         bool
			stretches     int
			partial       int // stretches that showed part of an event
			quietEnds     int
			scratch       []Overlap
			matchAll      func() [][]Overlap
			before, after [][]Overlap
		)
		matchAll = func() [][]Overlap {
			out := make([][]Overlap, len(probes))
			for i, hs := range probes {
				scratch = sortOverlaps(tr.Match(scratch[:0], hs))
				out[i] = slices.Clone(scratch)
			}
			return out
		}
		tr.SetQuiet(func(q bool) {
			if q == quiet {
				t.Fatalf("quiet(%v) twice in a row", q)
			}
			quiet = q
			if q {
				stretches++
				atStart = matchAll()
				return
			}
			quietEnds++
			if end := matchAll(); !slices.EqualFunc(end, atStart, slices.Equal) {
				t.Fatalf("a quiet stretch changed what Match sees:\nstart %v\nend   %v", atStart, end)
			}
			inside = append(inside, atStart)
		})
		for range steps {
			ev := g.next()
			if round == 3 && g.r.IntN(4) == 0 {
				if re, ok := announceAgain(g, m); ok {
					ev = re
					again++
				}
			}
			probes = g.probes()
			if ev.Kind == wire.KindStored {
				path := ""
				if ev.HasParent {
					path = m.eng[ev.Worker][ev.Parent]
				}
				hs := pathHashes(path)
				for _, b := range ev.Blocks {
					hs = append(hs, b.Local)
					probes = append(probes, slices.Clone(hs))
				}
			}
			before, inside = matchAll(), inside[:0]
			applyBoth(t, tr, m, &ev)
			if quiet {
				t.Fatal("an event ended inside a quiet stretch")
			}
			after = matchAll()
			for _, mid := range inside {
				changed := false
				for i := range probes {
					if !inBetween(before[i], mid[i], after[i], &ev) {
						t.Fatalf("%s: probe %v inside a quiet stretch\nbefore %v\ninside %v\nafter  %v", fmtEvent(ev), probes[i], before[i], mid[i], after[i])
					}
					changed = changed || (!slices.Equal(mid[i], before[i]) && !slices.Equal(mid[i], after[i]))
				}
				if changed {
					partial++
				}
			}
		}
		t.Logf("round %d: %d quiet stretches, %d showed part of an event, %d events announced held paths again", round, stretches, partial, again)
		if stretches == 0 || stretches != quietEnds || partial == 0 || (round == 3 && again == 0) {
			t.Fatalf("round %d: %d stretches, %d ended, %d partial: the test did not exercise them", round, stretches, quietEnds, partial)
		}
	}
}

// inBetween reports whether mid (sorted overlaps) lies between a and b, the
// overlaps before and after ev: every worker ev does not change as in both,
// the ones it changes with depths and size each between their values in a
// and b (absent counts as zero), and no size below the blocks found.
func inBetween(a, mid, b []Overlap, ev *wire.Event) bool {
	changes := func(k wire.WorkerKey) bool {
		if ev.Kind == wire.KindCleared || ev.Kind == 101 { // every dp rank of the worker
			return k.Worker == ev.Worker.Worker
		}
		return k == ev.Worker
	}
	find := func(o []Overlap, k wire.WorkerKey) Overlap {
		for _, v := range o {
			if v.Worker == k {
				return v
			}
		}
		return Overlap{Worker: k}
	}
	for _, o := range mid {
		if o.TreeSize < o.Blocks+o.Host+o.Disk {
			return false
		}
		if changes(o.Worker) {
			if !betweenOne(o, find(a, o.Worker), find(b, o.Worker)) {
				return false
			}
			continue
		}
		if find(a, o.Worker) != o || find(b, o.Worker) != o {
			return false
		}
	}
	for _, o := range a { // nobody else leaves, and a leaving worker is between too
		if x := find(mid, o.Worker); changes(o.Worker) {
			if !betweenOne(x, o, find(b, o.Worker)) {
				return false
			}
		} else if x != o {
			return false
		}
	}
	return true
}

// betweenOne reports whether x's depths (per tier level) and size are each
// between p's and q's.
func betweenOne(x, p, q Overlap) bool {
	in := func(x, p, q uint32) bool { return min(p, q) <= x && x <= max(p, q) }
	return in(x.Blocks, p.Blocks, q.Blocks) && in(x.Blocks+x.Host, p.Blocks+p.Host, q.Blocks+q.Host) &&
		in(x.Blocks+x.Host+x.Disk, p.Blocks+p.Host+p.Disk, q.Blocks+q.Host+q.Disk) && in(x.TreeSize, p.TreeSize, q.TreeSize)
}

// announceAgain returns a Stored event from the root that names again a
// path a random worker holds, at least quietMinCheck blocks long, with its
// engine hashes (all held already: Apply only checks them).
func announceAgain(g *gen, m *model) (wire.Event, bool) {
	k := g.keys[g.r.IntN(len(g.keys))]
	var long []string
	for _, p := range m.heldPaths(k) {
		if len(p)/8 >= quietMinCheck {
			long = append(long, p)
		}
	}
	if len(long) == 0 {
		return wire.Event{}, false
	}
	p := long[g.r.IntN(len(long))]
	ev := wire.Event{Worker: k, Kind: wire.KindStored}
	for i, h := range pathHashes(p) {
		ev.Blocks = append(ev.Blocks, wire.Block{Engine: m.held[k][p[:8*(i+1)]], Local: h})
	}
	return ev, true
}
