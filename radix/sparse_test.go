package radix

import (
	"flag"
	"os"
	"sync"
	"testing"
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
	tr, m, g := manyWorkers(t, true)
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

// wideParams is a fleet of 4,096 worker keys (64 words per dense set) with
// ≈280 blocks each: ≈1.1M entries.
var wideParams = workloadParams{
	workers: 4096, families: 64, famLen: [2]int{16, 64}, convs: 64, convLen: [2]int{16, 128},
	famPerWorker: 2, convPerFamily: 2, tailLen: [2]int{0, 16}, turnLen: 16, turns: 8, live: 4, reqLen: 256,
}

var wide struct {
	once   sync.Once
	wl     *workload
	sched  *schedule
	trees  map[string]*Tree
	limits map[string]int
}

// wideSetup builds the wide fleet twice: with dense sets (no limit) and with
// sparse sets (the default limit).
func wideSetup(b *testing.B) {
	wide.once.Do(func() {
		wide.wl = newWorkload(wideParams, 3)
		wide.sched = wide.wl.schedule()
		wide.trees = map[string]*Tree{}
		wide.limits = map[string]int{"dense": 1 << 30, "sparse": denseMaxWords}
		for name, lim := range wide.limits {
			withDenseMax(lim, func() { wide.trees[name] = wide.wl.tree(b, 0) })
		}
	})
}

func withDenseMax(lim int, f func()) {
	defer func(d int) { denseMax = d }(denseMax)
	denseMax = lim
	f()
}

// BenchmarkWide measures Match, Apply and memory at 4,096 worker keys with
// dense and with sparse worker sets, in one binary (so the ratio survives a
// noisy machine). Apply runs the periodic schedule on a fresh tree.
func BenchmarkWide(b *testing.B) {
	wideSetup(b)
	reqs := wide.wl.reqs
	for _, name := range []string{"dense", "sparse"} {
		b.Run("match/"+name, func(b *testing.B) {
			tr := wide.trees[name]
			dst := make([]Overlap, 0, 4096)
			i := 0
			b.ReportAllocs()
			cpu := cpuNanos()
			for b.Loop() {
				dst = tr.Match(dst[:0], reqs[i%len(reqs)])
				i++
			}
			reportCPU(b, cpu)
			b.ReportMetric(float64(tr.Stats().Bytes)/float64(tr.Stats().Entries), "B/entry")
		})
	}
	for _, name := range []string{"dense", "sparse"} {
		b.Run("apply/"+name, func(b *testing.B) {
			withDenseMax(wide.limits[name], func() {
				tr := wide.wl.tree(b, 0)
				for i := range wide.sched.warm {
					if _, err := tr.Apply(&wide.sched.warm[i]); err != nil {
						b.Fatal(err)
					}
				}
				applyLoop(b, tr, wide.sched.events)
			})
		})
	}
}

// BenchmarkEngineTablePool builds BenchmarkWide's 4,096-worker tree (≈1.1M
// entries, sparse sets) from empty with the engine-table pool and without
// (engPooling off), in one binary: cpu-ns/op is the whole build's process
// CPU time.
func BenchmarkEngineTablePool(b *testing.B) {
	wideSetup(b)
	for _, name := range []string{"pool", "none"} {
		b.Run(name, func(b *testing.B) {
			defer func(on bool) { engPooling = on }(engPooling)
			engPooling = name == "pool"
			withDenseMax(wide.limits["sparse"], func() {
				b.ReportAllocs()
				cpu := cpuNanos()
				var st Stats
				for b.Loop() {
					st = wide.wl.tree(b, 0).Stats()
				}
				reportCPU(b, cpu)
				b.ReportMetric(float64(st.Bytes)/float64(st.Entries), "B/entry")
			})
		})
	}
}
