package radix

import (
	"slices"
	"testing"

	"github.com/kvroute/kvroute/wire"
)

// TestCaptureCopyOnWrite: a capture taken while random events keep being
// applied between its steps is exactly the tree at BeginCapture (arena for
// arena against a Clone taken then, and by content), over random histories
// with tiers, many workers, worker removal and a tree emptied mid-capture.
// Pages are one element, so every write site's barrier is exercised.
func TestCaptureCopyOnWrite(t *testing.T) {
	defer func(p int) { pageBytes = p }(pageBytes)
	seed := testSeed(t)
	rounds := 12
	if testing.Short() {
		rounds = 4
	}
	barrier := 0
	for round := range uint64(rounds) {
		pageBytes = []int{1, 64, 512, PageBytes}[round%4]
		tr, m := New(), newModel()
		g := newGen(seed+round, m)
		switch round % 3 {
		case 1:
			g.tierPct = 40
		case 2:
			g.alpha, g.maxLen, g.remove, g.leafPct = 8, 12, 30, 90
			for w := uint64(4); w <= 70; w++ { // more than 64 slots: two-word sets
				g.keys = append(g.keys, wire.WorkerKey{Worker: w})
			}
		}
		apply := func(n int) { feed(tr, m, g, n) }
		apply(400)
		for capt := range 6 {
			ref := tr.Clone()
			want := sortedDump(ref)
			c := tr.BeginCapture()
			if !tr.Capturing() || c.Complete() != (c.Stats().Pages == 0) {
				t.Fatal("capture not in progress")
			}
			steps := 0
			for !c.Step(1 + g.r.IntN(256)) {
				steps++
				apply(g.r.IntN(4))
				switch g.r.IntN(200) {
				case 0:
					k := g.keys[g.r.IntN(len(g.keys))]
					m.removeKey(k)
					tr.RemoveDpRank(k)
				case 1:
					if capt == 3 { // empty the tree: its arenas are replaced
						for _, k := range g.keys {
							m.removeKey(k)
							tr.RemoveDpRank(k)
						}
					}
				}
			}
			if tr.Capturing() {
				t.Fatal("tree still capturing after the last step")
			}
			img := c.Tree()
			if err := sameArenas(img, ref); err != nil {
				t.Fatalf("round %d capture %d: %v", round, capt, err)
			}
			if err := img.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(sortedDump(img), want) {
				t.Fatalf("round %d capture %d: content differs", round, capt)
			}
			st := c.Stats()
			barrier += st.BarrierPages
			t.Logf("round %d capture %d: %d steps, %+v", round, capt, steps, st)
			// The image is independent of the tree from now on.
			apply(50)
			if !slices.Equal(sortedDump(img), want) {
				t.Fatal("image changed with the tree")
			}
			if err := tr.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
			compareTree(t, tr, m, g.probes())
		}
	}
	if barrier == 0 {
		t.Fatal("the write barrier never copied a page")
	}
}

// TestCaptureConcurrentRead: Tree on another goroutine, reading the pages
// the tree has not copied straight from its arenas while events go on being
// applied (cow's per-page handshake), returns exactly the tree at
// BeginCapture; the tree's goroutine copies only what it writes first, and
// Complete detaches the barrier once Tree is through. Under -race this also
// checks that the tree never writes a page while Tree reads it.
func TestCaptureConcurrentRead(t *testing.T) {
	defer func(p int) { pageBytes = p }(pageBytes)
	seed := testSeed(t)
	barrier, read := 0, 0
	for round := range uint64(8) {
		pageBytes = []int{1, 64, 512, PageBytes}[round%4]
		tr, m := New(), newModel()
		g := newGen(seed+round, m)
		if round%2 == 1 {
			g.tierPct = 40
		}
		apply := func(n int) { feed(tr, m, g, n) }
		apply(2000)
		for capt := range 4 {
			ref := tr.Clone()
			want := sortedDump(ref)
			c := tr.BeginCapture()
			images := make(chan *Tree)
			go func() { images <- c.Tree() }()
			var img *Tree
			for steps := 0; img == nil || !c.Complete(); steps++ {
				apply(1 + g.r.IntN(4))
				if capt == 3 && steps%8 == 0 {
					c.Step(1 + g.r.IntN(4096)) // the tree's goroutine helps
				}
				if img == nil {
					select {
					case img = <-images:
					default:
					}
				}
			}
			if tr.Capturing() {
				t.Fatal("tree still capturing after Complete")
			}
			if err := sameArenas(img, ref); err != nil {
				t.Fatalf("round %d capture %d: %v", round, capt, err)
			}
			if !slices.Equal(sortedDump(img), want) {
				t.Fatalf("round %d capture %d: content differs", round, capt)
			}
			st := c.Stats()
			barrier += st.BarrierPages
			read += st.Pages - st.BarrierPages
			apply(50)
			if !slices.Equal(sortedDump(img), want) {
				t.Fatal("image changed with the tree")
			}
			compareTree(t, tr, m, g.probes())
		}
	}
	t.Logf("pages copied by the barrier %d, by Tree or Step %d", barrier, read)
	if barrier == 0 || read == 0 {
		t.Fatalf("barrier copied %d pages, Tree or Step %d: the handshake was not exercised both ways", barrier, read)
	}
}

// TestCaptureTwice: a second BeginCapture while one is in progress panics.
func TestCaptureTwice(t *testing.T) {
	tr := newWorkload(smallParams, 1).tree(t, 0)
	c := tr.BeginCapture()
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("no panic")
			}
		}()
		tr.BeginCapture()
	}()
	for !c.Step(1 << 20) {
	}
	c2 := tr.BeginCapture()
	for !c2.Step(1 << 30) {
	}
	assertSameTree(t, tr, c2.Tree())
}

// TestCapturePooledArrays: with hundreds of small engine tables the tree's
// pool recycles arrays while captures are in progress (tables growing,
// worker keys removed and added), and every capture is still exactly the
// tree at BeginCapture: an array a capture reads is never recycled.
func TestCapturePooledArrays(t *testing.T) {
	defer func(p int) { pageBytes = p }(pageBytes)
	seed := testSeed(t)
	reusedDuring := 0
	rounds := 3
	if testing.Short() || invariants { // invariants: CheckInvariants after every event
		rounds = 1
	}
	for round := range uint64(rounds) {
		pageBytes = []int{64, 512, PageBytes}[round]
		tr, m := New(), newModel()
		g := newGen(seed+round, m)
		g.alpha, g.maxLen, g.leafPct = 8, 24, 90
		for w := uint64(4); w <= 300; w++ {
			g.keys = append(g.keys, wire.WorkerKey{Worker: w})
		}
		apply := func(n int) { feed(tr, m, g, n) }
		apply(2000)
		for capt := range 4 {
			ref := tr.Clone()
			c := tr.BeginCapture()
			before := tr.pool.reused
			for !c.Step(1 + g.r.IntN(4096)) {
				apply(1 + g.r.IntN(4))
				if g.r.IntN(20) == 0 {
					k := g.keys[g.r.IntN(len(g.keys))]
					m.removeKey(k)
					tr.RemoveDpRank(k)
				}
			}
			reusedDuring += tr.pool.reused - before
			if err := sameArenas(c.Tree(), ref); err != nil {
				t.Fatalf("round %d capture %d: %v", round, capt, err)
			}
			if err := tr.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
			apply(500)
		}
		compareTree(t, tr, m, g.probes())
	}
	t.Logf("%d arrays recycled during captures", reusedDuring)
	if reusedDuring == 0 {
		t.Error("no engine-table array was recycled during a capture: the test exercises nothing")
	}
}

// feed applies g's next n events to the tree and to its model.
func feed(tr *Tree, m *model, g *gen, n int) {
	for range n {
		ev := g.next()
		m.apply(&ev)
		tr.Apply(&ev)
	}
}

// TestCaptureAcrossRunPages captures a tree whose runs span many pages
// while the rest of the build opens new pages, splits and merges runs and a
// removal frees (and the next stores reuse) chunks in pages the capture
// began on: the image is the tree at BeginCapture. It fails if wRun's
// barrier is skipped.
func TestCaptureAcrossRunPages(t *testing.T) {
	wl := newWorkload(smallParams, 4)
	half := len(wl.build) / 2
	tr := New()
	for i := range wl.build[:half] {
		mustApply(t, tr, &wl.build[i])
	}
	if len(tr.runs.loc) < 8 {
		t.Fatalf("only %d runs pages: the test needs several", len(tr.runs.loc))
	}
	ref := tr.Clone()
	want := sortedDump(ref)
	pages := len(tr.runs.loc)
	c := tr.BeginCapture()
	buildDuringCapture(tr, c, wl, half)
	if len(tr.runs.loc) <= pages {
		t.Fatalf("the runs arena did not grow during the capture (%d pages)", len(tr.runs.loc))
	}
	img := c.Tree()
	checkImage(t, img, ref, want, tr)
	// The image grows on its own.
	mustApply(t, img, &wl.build[half])
	if err := img.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}
