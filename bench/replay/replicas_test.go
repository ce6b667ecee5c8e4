package replay

import (
	"testing"
	"time"

	"github.com/kvroute/kvroute/bench/trace"
)

const (
	burstRequests = 8  // one per worker
	burstCount    = 10 // bursts, 2 s apart (each ends before the next)
	burstGap      = time.Millisecond
)

// bursts is a bursty workload of unique prompts (no cache to share): every
// 2 s, 8 requests 1 ms apart. With nothing cached, load is all that tells
// the workers apart, so a router that does not see the others' bookings
// sends its burst's first request where the others send theirs.
func bursts(t testing.TB) *Workload {
	t.Helper()
	tr := &trace.Trace{}
	next := uint64(1)
	for b := range burstCount {
		for i := range burstRequests {
			tr.Requests = append(tr.Requests, trace.Request{
				Time:    time.Duration(b)*2*time.Second + time.Duration(i)*burstGap,
				HasTime: true, InputLength: 2 * trace.IDBlockSize, OutputLength: 32, HashIDs: []uint64{next, next + 1},
			})
			next += 2
		}
	}
	w, err := Prepare(tr, 16, "bursts")
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// burstMaxMean is the mean over bursts of the busiest worker's requests
// over the mean (1: every burst spread evenly).
func burstMaxMean(s *sim, workers int) float64 {
	var sum float64
	for b := range burstCount {
		counts := map[int32]int{}
		mx := 0
		for i := range burstRequests {
			r := s.rank[b*burstRequests+i]
			counts[r]++
			mx = max(mx, counts[r])
		}
		sum += float64(mx) / (float64(burstRequests) / float64(workers))
	}
	return sum / burstCount
}

// Router replicas without sync pile a burst onto the same workers; with
// sync faster than the arrivals they route as one router does, and the
// benefit fades as the sync delay grows past the burst's spacing
// (kvroute replay --routers N --sync-delay D).
func TestReplicasSyncDelay(t *testing.T) {
	w := bursts(t)
	run := func(routers int, delay time.Duration) (float64, Result) {
		cfg := DefaultConfig()
		cfg.Routers, cfg.SyncDelay = routers, delay
		s := runSim(t, w, cfg, mustPolicy(t, "kv"))
		r := s.result()
		if r.Completed != len(w.Trace.Requests) {
			t.Fatalf("routers %d delay %v: %d of %d completed", routers, delay, r.Completed, len(w.Trace.Requests))
		}
		return burstMaxMean(s, cfg.Fleet.Workers), r
	}
	one, oneRes := run(1, -1)
	if one != 1 {
		t.Fatalf("one router: max/mean %v, want 1 (a burst of 8 over 8 idle workers)", one)
	}
	none, _ := run(3, -1)
	if none < 2 {
		t.Fatalf("3 replicas without sync: max/mean %v, want >= 2 (each sends its first request to the same worker)", none)
	}
	fast, fastRes := run(3, burstGap/2)
	if fast != one || fastRes.HitRatio != oneRes.HitRatio {
		t.Fatalf("3 replicas, sync in %v: max/mean %v hit %v, want one router's %v and %v", burstGap/2, fast, fastRes.HitRatio, one, oneRes.HitRatio)
	}
	slow, _ := run(3, 20*burstGap)
	if slow <= fast {
		t.Fatalf("3 replicas, sync in %v: max/mean %v, want worse than with sync in %v (%v)", 20*burstGap, slow, burstGap/2, fast)
	}
	t.Logf("8 workers, %d bursts of %d unique prompts %v apart, kv policy: max/mean per burst", burstCount, burstRequests, burstGap)
	t.Logf("  1 router: %.3f   3 replicas without sync: %.3f", one, none)
	for _, d := range []time.Duration{0, burstGap / 2, burstGap, 2 * burstGap, 4 * burstGap, 20 * burstGap} {
		mm, _ := run(3, d)
		t.Logf("  3 replicas, sync delay %-6v %.3f", d, mm)
	}
}
