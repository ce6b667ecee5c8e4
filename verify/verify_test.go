package verify

import (
	"testing"
	"time"

	"github.com/kvroute/kvroute/wire"
)

var k0 = wire.WorkerKey{Worker: 1, Dp: 0}

// feed observes n samples made by f(i) a millisecond apart and returns
// the verdicts.
func feed(t *Tracker, n int, start int64, f func(i int) Sample) []Verdict {
	var out []Verdict
	for i := range n {
		out = append(out, t.Observe(k0, f(i), start+int64(i)*int64(time.Millisecond)))
	}
	return out
}

func firstNamed(vs []Verdict) (int, Verdict) {
	for i, v := range vs {
		if v.Named || v.Repair {
			return i, v
		}
	}
	return -1, Verdict{}
}

func TestAgreementWithinOneBlock(t *testing.T) {
	tr := New(Config{BlockSize: 16})
	vs := feed(tr, 64, 0, func(i int) Sample {
		p := uint32(i % 9)
		// The engine computes a fully cached prompt's last block again
		// (one block less), or finds one more stored meanwhile.
		rep := int(p)*16 + []int{0, -16, 16}[i%3]
		return Sample{Predicted: p, Reported: max(rep, 0), Publishes: true}
	})
	if i, v := firstNamed(vs); i >= 0 {
		t.Fatalf("request %d named %v", i, v.Cause)
	}
	st, _ := tr.Stats(k0)
	if st.Agreed != 64 || st.WindowAgreed != 32 || st.Cause != CauseNone {
		t.Fatalf("stats %+v", st)
	}
	// Host blocks count: an engine reports what it loads back as cached.
	if v := tr.Observe(k0, Sample{Predicted: 2, Host: 6, Reported: 8 * 16}, 0); !v.Agree || v.ErrBlocks != 6 {
		t.Fatalf("host tier: %+v", v)
	}
	if v := tr.Observe(k0, Sample{Predicted: 2, Reported: 8 * 16}, 0); v.Agree {
		t.Fatalf("no host credit: %+v", v)
	}
}

func TestBlockSizeMismatch(t *testing.T) {
	for _, c := range []struct {
		name         string
		router, eng  int
		predicted    func(i int) uint32
		wantEngBlock int
	}{
		// Router 32, engine 16: reports are odd multiples of 16 now and then.
		{"smaller engine blocks", 32, 16, func(i int) uint32 { return 0 }, 16},
		// Router 16, engine 64: hashes never match, reports are multiples of 64.
		{"larger engine blocks", 16, 64, func(i int) uint32 { return 0 }, 64},
	} {
		tr := New(Config{BlockSize: c.router})
		vs := feed(tr, 100, 0, func(i int) Sample {
			return Sample{Predicted: c.predicted(i), Reported: (i%7 + 1) * c.eng, Publishes: true}
		})
		i, v := firstNamed(vs)
		if i < 0 || v.Cause != CauseBlockSize || v.EngineBlock != c.wantEngBlock || v.Repair {
			t.Fatalf("%s: first verdict %d %+v, want block_size_mismatch naming %d", c.name, i, v, c.wantEngBlock)
		}
		if i >= 16 {
			t.Errorf("%s: named after %d requests", c.name, i+1)
		}
		named := 0
		for _, v := range vs {
			if v.Named {
				named++
			}
		}
		if named != 1 {
			t.Errorf("%s: named %d times, want once", c.name, named)
		}
	}
}

func TestHashMismatch(t *testing.T) {
	tr := New(Config{BlockSize: 16})
	vs := feed(tr, 40, 0, func(i int) Sample { return Sample{Reported: (i%5 + 2) * 16, Publishes: true} })
	i, v := firstNamed(vs)
	if i < 0 || v.Cause != CauseHash || v.Repair {
		t.Fatalf("verdict %d %+v, want hash_mismatch without repair", i, v)
	}
	// A rank that matched before and now reports blocks the index lacks
	// misses events (cut off), though nothing in the window was predicted.
	tr = New(Config{BlockSize: 16})
	tr.Observe(k0, Sample{Predicted: 4, Reported: 64, Publishes: true}, 0)
	vs = feed(tr, 40, 0, func(i int) Sample { return Sample{Reported: (i%5 + 2) * 16, Publishes: true} })
	if i, v := firstNamed(vs); i < 0 || v.Cause != CauseMissing || !v.Repair {
		t.Fatalf("matched rank: verdict %d %+v, want missing_events with a repair", i, v)
	}
	// A rank whose events never arrive has missing events instead: a dump helps.
	tr = New(Config{BlockSize: 16})
	vs = feed(tr, 40, 0, func(i int) Sample { return Sample{Reported: (i%5 + 2) * 16} })
	if i, v := firstNamed(vs); i < 0 || v.Cause != CauseMissing || !v.Repair {
		t.Fatalf("silent rank: verdict %d %+v, want missing_events with a repair", i, v)
	}
}

func TestStaleAndMissingRepairRateLimited(t *testing.T) {
	for _, c := range []struct {
		name string
		s    Sample
		want Cause
	}{
		{"stale", Sample{Predicted: 10, Reported: 0, Publishes: true}, CauseStale},
		{"missing", Sample{Predicted: 2, Reported: 12 * 16, Publishes: true}, CauseMissing},
	} {
		tr := New(Config{BlockSize: 16, RepairInterval: time.Second})
		// One second of disagreement, a request a millisecond.
		vs := feed(tr, 1000, 0, func(int) Sample { return c.s })
		var repairs []int
		for i, v := range vs {
			if v.Repair {
				if v.Cause != c.want {
					t.Fatalf("%s: repair for %v", c.name, v.Cause)
				}
				repairs = append(repairs, i)
			}
		}
		if len(repairs) != 1 || repairs[0] != 7 {
			t.Fatalf("%s: repairs at %v, want one at the 8th request", c.name, repairs)
		}
		// The window, full of disagreement again, repairs once the
		// interval has passed.
		vs = feed(tr, 8, int64(time.Second)+int64(repairs[0])*int64(time.Millisecond), func(int) Sample { return c.s })
		if !vs[0].Repair || vs[1].Repair {
			t.Fatalf("%s: after the interval: %+v", c.name, vs[:2])
		}
		st, _ := tr.Stats(k0)
		if st.Repairs != 2 {
			t.Fatalf("%s: %d repairs counted", c.name, st.Repairs)
		}
	}
}

// Disagreement in a minority of requests (events in flight) names nothing.
func TestTransientDisagreementNamesNothing(t *testing.T) {
	tr := New(Config{BlockSize: 16})
	vs := feed(tr, 500, 0, func(i int) Sample {
		if i%4 == 0 {
			return Sample{Predicted: 0, Reported: 10 * 16, Publishes: true}
		}
		return Sample{Predicted: 10, Reported: 10 * 16, Publishes: true}
	})
	if i, v := firstNamed(vs); i >= 0 {
		t.Fatalf("request %d: %+v", i, v)
	}
}

func TestStatsAndForget(t *testing.T) {
	tr := New(Config{BlockSize: 16})
	tr.Observe(k0, Sample{Predicted: 3, Reported: 48}, 0)
	tr.Observe(k0, Sample{Predicted: 3, Reported: 0}, 0)
	tr.Unverified(k0, 3)
	st, ok := tr.Stats(k0)
	if !ok || st.Requests != 3 || st.Agreed != 1 || st.Unverified != 1 || st.PredictedTokens != 3*48 || st.ReportedTokens != 48 ||
		st.ErrorSum != -3 || st.LastReported != 0 || st.Errors[1] != 0 || st.Errors[3] != 1 || st.Errors[5] != 1 {
		t.Fatalf("stats %+v", st)
	}
	tr.Forget(1)
	if _, ok := tr.Stats(k0); ok || len(tr.Keys(nil)) != 0 {
		t.Fatal("Forget kept the rank")
	}
}

// Engine blocks larger than the router's, reported before the rank's events
// arrive and at first all alike: the reports' divisor is a larger multiple
// of the block size, so nothing is repaired while the block-size rule waits
// for the reports to vary, and then names the mismatch.
func TestBlockSizeMismatchBeforeEvents(t *testing.T) {
	tr := New(Config{BlockSize: 16})
	vs := feed(tr, 100, 0, func(i int) Sample {
		r := 2 * 64
		if i >= 40 {
			r = (i%7 + 1) * 64
		}
		return Sample{Reported: r, Publishes: i >= 60}
	})
	for i, v := range vs {
		if v.Repair {
			t.Fatalf("request %d: repair asked (%v) for a block-size mismatch", i, v.Cause)
		}
	}
	// The divisor of the reports so far (the engine's block size or a
	// multiple of it).
	if i, v := firstNamed(vs); i < 40 || v.Cause != CauseBlockSize || v.EngineBlock%64 != 0 {
		t.Fatalf("first verdict %d %+v, want block_size_mismatch naming a multiple of 64 once the reports vary", i, v)
	}
}
