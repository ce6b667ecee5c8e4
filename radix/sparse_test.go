package radix

import (
	"flag"
	"os"
	"testing"

	"github.com/kvroute/kvroute/wire"
)

// -radix.sparse runs every test of the package on trees whose worker sets
// are sparse from the start (denseMax 0): go test ./radix -args -radix.sparse.
var sparseFlag = flag.Bool("radix.sparse", false, "sparse worker sets from New on")

func TestMain(m *testing.M) {
	flag.Parse()
	if *sparseFlag {
		denseMax = 0
	}
	os.Exit(m.Run())
}

// TestManyWorkersSparse is TestManyWorkers with the dense limit at one word:
// the tree converts its sets (and tier sets) to the sparse form when the
// 65th worker key arrives, and keeps matching the model after it.
func TestManyWorkersSparse(t *testing.T) {
	defer func(d int) { denseMax = d }(denseMax)
	denseMax = 1
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
			if err := tr.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !tr.sparse || tr.w < 2 {
		t.Fatalf("sets never went sparse (%d words, sparse %v)", tr.w, tr.sparse)
	}
	// A capture taken under events is the tree at BeginCapture.
	want := tr.Clone()
	c := tr.BeginCapture()
	for !c.Step(1 << 12) {
		ev := g.next()
		applyBoth(t, tr, m, &ev)
	}
	if err := sameArenas(c.Tree(), want); err != nil {
		t.Fatal(err)
	}
	compareTree(t, tr, m, g.probes())
	t.Logf("final %+v, %d words per set, %d sparse pool words", tr.Stats(), tr.w, len(tr.sp))
}
