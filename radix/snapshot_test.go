package radix

import (
	"bufio"
	"bytes"
	"errors"
	"runtime"
	"slices"
	"testing"

	"github.com/kvroute/kvroute/wire"
)

// sortedDump is the tree's content as sorted event strings: equal trees give
// equal dumps whatever their slot and child order.
func sortedDump(tr *Tree) []string {
	var out []string
	for _, ev := range tr.Dump(nil) {
		out = append(out, fmtEvent(ev))
	}
	slices.Sort(out)
	return out
}

func roundTrip(t testing.TB, tr *Tree) (*Tree, ContentStats, int) {
	t.Helper()
	var buf bytes.Buffer
	bw := bufio.NewWriter(&buf)
	wst, err := tr.WriteContent(bw)
	if err != nil {
		t.Fatal(err)
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	size := buf.Len()
	re, rst, err := ReadContent(bufio.NewReader(&buf))
	if err != nil {
		t.Fatalf("ReadContent: %v", err)
	}
	if wst != rst {
		t.Fatalf("written %+v, read %+v", wst, rst)
	}
	if buf.Len() != 0 {
		t.Fatalf("%d bytes left unread", buf.Len())
	}
	return re, rst, size
}

func assertSameTree(t testing.TB, a, b *Tree) {
	t.Helper()
	if err := b.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	sa, sb := a.Stats(), b.Stats()
	if sa.Nodes != sb.Nodes || sa.Entries != sb.Entries || sa.Workers != sb.Workers || sa.Blocks != sb.Blocks {
		t.Fatalf("stats: original %+v, copy %+v", sa, sb)
	}
	if x, y := treeString(a), treeString(b); x != y {
		t.Fatalf("structure differs:\n%s\nvs\n%s", x, y)
	}
	if !slices.Equal(sortedDump(a), sortedDump(b)) {
		t.Fatal("dumps differ")
	}
}

// TestContentRoundTrip encodes random trees (the differential generator's)
// and checks the decoded tree equals the original, satisfies the invariants
// and keeps working like the model.
func TestContentRoundTrip(t *testing.T) {
	seed := testSeed(t)
	for round := range uint64(20) {
		tr, m := New(), newModel()
		g := newGen(seed+round, m)
		g.alpha = 2 + int(round%4)
		if round%2 == 1 {
			g.tierPct = 40 // tier masks in the mode bytes
		}
		if round%5 == 4 { // > 64 worker keys: multi-word sets
			g.keys = g.keys[:0]
			for w := uint64(1); w <= 40; w++ {
				g.keys = append(g.keys, wire.WorkerKey{Worker: w}, wire.WorkerKey{Worker: w, Dp: 1})
			}
		}
		for range 400 {
			ev := g.next()
			applyBoth(t, tr, m, &ev)
		}
		re, _, _ := roundTrip(t, tr)
		assertSameTree(t, tr, re)
		compareTree(t, re, m, g.probes())
		for range 100 {
			ev := g.next()
			applyBoth(t, re, m, &ev)
		}
		compareTree(t, re, m, g.probes())
	}
}

func TestContentEmpty(t *testing.T) {
	for _, tr := range []*Tree{New(), {}} {
		re, st, _ := roundTrip(t, tr)
		if st != (ContentStats{}) || re.Stats().Entries != 0 {
			t.Fatalf("empty tree round trip: %+v %+v", st, re.Stats())
		}
	}
}

// TestContentEngineModes: engine hashes equal to sequence hashes (approximate
// mode) and engine hashes shared across workers are not written out.
func TestContentEngineModes(t *testing.T) {
	tr := New()
	locals := []wire.BlockHash{11, 12, 13, 14}
	seqs := wire.SequenceHashes(nil, locals)
	for w := range uint64(3) {
		ev := wire.Event{Worker: wire.WorkerKey{Worker: w}, Kind: wire.KindStored}
		for i, h := range locals[:2+w%2] {
			eh := wire.EngineHash(seqs[i]) // approximate mode's convention
			if w == 2 {
				eh = wire.EngineHash(1000 + i)
			}
			ev.Blocks = append(ev.Blocks, wire.Block{Engine: eh, Local: h})
		}
		mustApply(t, tr, &ev)
	}
	// Worker 3 uses worker 2's engine hashes (content-derived engine hashes).
	mustApply(t, tr, &wire.Event{Worker: wire.WorkerKey{Worker: 3}, Kind: wire.KindStored,
		Blocks: []wire.Block{{Engine: 1000, Local: 11}, {Engine: 1001, Local: 12}}})
	re, st, _ := roundTrip(t, tr)
	assertSameTree(t, tr, re)
	// Runs: w0 [11 12], w1 [11 12] and [13] as sequence hashes; w2 and w3
	// [11 12] literal (the node's first worker, w0, has other hashes).
	if st.EngineModes[engSeq] != 3 || st.EngineModes[engLiteral] != 2 {
		t.Fatalf("engine modes %v, want 3 sequence, 2 literal", st.EngineModes)
	}
	// All four hold node [11 12]; make the literal worker the first member.
	tr2 := New()
	for w := range uint64(3) {
		mustApply(t, tr2, &wire.Event{Worker: wire.WorkerKey{Worker: 10 + w}, Kind: wire.KindStored,
			Blocks: []wire.Block{{Engine: 1000, Local: 11}, {Engine: 1001, Local: 12}}})
	}
	re2, st2, _ := roundTrip(t, tr2)
	assertSameTree(t, tr2, re2)
	if st2.EngineModes != [3]int{1, 0, 2} {
		t.Fatalf("engine modes %v, want 1 literal, 2 same as first", st2.EngineModes)
	}
}

// TestContentWorkload round-trips the small benchmark fleet.
func TestContentWorkload(t *testing.T) {
	wl := newWorkload(smallParams, 1)
	tr := wl.tree(t, 0)
	re, st, size := roundTrip(t, tr)
	assertSameTree(t, tr, re)
	t.Logf("%+v: %d bytes raw, %.2f bytes per entry", st, size, float64(size)/float64(st.Entries))
}

// TestContentTiered round-trips the small fleet with a host tier, through
// the content encoding and through the Copier.
func TestContentTiered(t *testing.T) {
	wl := newWorkload(smallParams, 1)
	tr := wl.tieredTree(t)
	re, st, size := roundTrip(t, tr)
	assertSameTree(t, tr, re)
	host := 0
	for _, r := range wl.reqs {
		for _, o := range re.Match(nil, r) {
			host += int(o.Host)
		}
	}
	if host == 0 {
		t.Fatal("the decoded tree matches no host block")
	}
	assertSameTree(t, tr, tr.Clone())
	t.Logf("%+v: %d bytes raw, %.2f bytes per entry", st, size, float64(size)/float64(st.Entries))
}

func TestReadContentCorrupt(t *testing.T) {
	wl := newWorkload(smallParams, 1)
	tr := wl.tree(t, 0)
	var buf bytes.Buffer
	bw := bufio.NewWriter(&buf)
	if _, err := tr.WriteContent(bw); err != nil {
		t.Fatal(err)
	}
	bw.Flush()
	data := buf.Bytes()
	for _, n := range []int{0, 1, 10, len(data) / 2, len(data) - 1} {
		if _, _, err := ReadContent(bytes.NewReader(data[:n])); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated at %d: err %v, want ErrCorrupt", n, err)
		}
	}
}

// TestCopier copies in small steps and checks the copy equals the original
// and is independent of it, reusing the destination's arenas the second time.
func TestCopier(t *testing.T) {
	wl := newWorkload(smallParams, 1)
	tr := wl.tree(t, 0)
	dst := &Tree{}
	for round := range 2 {
		cp := tr.CopyTo(dst)
		steps := 1
		for !cp.Step(4096) {
			steps++
		}
		if steps < 10 {
			t.Fatalf("copy took %d steps of 4 KiB", steps)
		}
		assertSameTree(t, tr, dst)
		want := sortedDump(dst)
		sc := wl.schedule()
		for i := range sc.events[:20] {
			mustApply(t, tr, &sc.events[i])
		}
		if !slices.Equal(want, sortedDump(dst)) {
			t.Fatalf("round %d: copy changed with its source", round)
		}
		mustApply(t, dst, &sc.events[40])
		if err := tr.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
	}
	if c := New().Clone(); c.CheckInvariants() != nil || c.Stats().Entries != 0 {
		t.Fatal("clone of an empty tree")
	}
}

// FuzzReadContent: arbitrary input never panics, and whatever decodes is a
// valid tree that re-encodes to a tree with the same content.
func FuzzReadContent(f *testing.F) {
	for _, p := range []workloadParams{smallParams} {
		tr := newWorkload(p, 1).tieredTree(f)
		var buf bytes.Buffer
		bw := bufio.NewWriter(&buf)
		tr.WriteContent(bw)
		bw.Flush()
		f.Add(buf.Bytes()[:min(buf.Len(), 4096)])
	}
	tr := New()
	mustApply(f, tr, &wire.Event{Worker: wire.WorkerKey{Worker: 1}, Kind: wire.KindStored, Blocks: []wire.Block{{Engine: 1, Local: 2}, {Engine: 3, Local: 4}}})
	mustApply(f, tr, &wire.Event{Worker: wire.WorkerKey{Worker: 2}, Kind: wire.KindStored, Blocks: []wire.Block{{Engine: 1, Local: 2}, {Engine: 5, Local: 6}}})
	var buf bytes.Buffer
	tr.WriteContent(&buf)
	f.Add(buf.Bytes())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		re, _, err := ReadContent(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		re2, _, _ := roundTrip(t, re)
		assertSameTree(t, re, re2)
	})
}

// A truncated input that declares a long run must fail at once: found by
// make fuzz-long (FuzzReadContent, input 607e0bea0daea3bd), 30 bytes
// declaring a run of about 2^31 blocks made ReadContent append that many
// hashes read past the end (52 s and gigabytes of memmove).
func TestTruncatedRunAllocatesLittle(t *testing.T) {
	data := []byte("\x02$0001\xd1\xd1\xd10001\xd1\xd1\xd100")
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, err := ReadContent(bytes.NewReader(data))
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("err %v, want ErrCorrupt", err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Fatalf("a 30-byte input allocated %d bytes", n)
	}
}
