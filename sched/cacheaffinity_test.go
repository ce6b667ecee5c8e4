package sched

import (
	"testing"
	"time"

	"github.com/kvroute/kvroute/wire"
)

// Config.CacheAffinity: a request cached on a rank whose prefill load
// exceeds an empty rank's by more than its cached blocks, but by less than
// CacheAffinity times them, leaves its cache at 1 and stays at 4.
func TestCacheAffinityKeepsRequestOnItsCache(t *testing.T) {
	for _, tc := range []struct {
		affinity float64
		want     uint64
	}{{1, 2}, {4, 1}} {
		cfg := testConfig()
		cfg.Weight = 1000 // the decode term out of the way
		cfg.CacheAffinity = tc.affinity
		s, err := New(cfg, 1)
		if err != nil {
			t.Fatal(err)
		}
		a, b := wire.WorkerKey{Worker: 1}, wire.WorkerKey{Worker: 2}
		s.AddWorker(a, Capacity{TotalBlocks: 1 << 20})
		s.AddWorker(b, Capacity{TotalBlocks: 1 << 20})
		// a has 20 blocks of prefill booked (320 tokens); the request has 10
		// of its 30 blocks cached on a, with host blocks weighed 0.75 (8 + 0.75 × 2 = 9.5).
		if err := s.AddRequest(100, a, []wire.SeqHash{1}, 320, 0, PrefillLoadHint{InitialEffectiveTokens: 320}, 0); err != nil {
			t.Fatal(err)
		}
		blocks := make([]wire.SeqHash, 30)
		for i := range blocks {
			blocks[i] = wire.SeqHash(1000 + i)
		}
		d := s.Decide(nil, []Request{{ID: 1, ISL: 480, Blocks: blocks}}, [][]Overlap{{{Worker: a, Device: 8, Host: 2}}}, 0)
		if d[0].Outcome != Routed || d[0].Worker.Worker != tc.want {
			t.Errorf("cache affinity %v: %+v, want worker %d", tc.affinity, d[0], tc.want)
		}
	}
}

// Config.QueueAffinityHold: a request whose cache is on a busy rank waits
// for it rather than take a free rank, at arrival and in the queue; it goes
// to its rank when that frees, or anywhere once it has waited
// QueueAffinityMaxWait. A request cached nowhere takes the free rank.
func TestQueueAffinityHold(t *testing.T) {
	for _, hold := range []bool{false, true} {
		cfg := testConfig()
		if hold {
			cfg.QueueAffinityHold = time.Second
		}
		cfg.QueueAffinityMaxWait = 10 * time.Second
		s, a, b := twoRanks(t, cfg)
		blocks := fiveBlocks
		// Five blocks make a rank busy: a is.
		if err := s.AddRequest(1000, a, blocks(1000), 80, 0, PrefillLoadHint{}, 0); err != nil {
			t.Fatal(err)
		}
		d := s.Decide(nil, []Request{{ID: 1, ISL: 80, Blocks: blocks(1)}}, [][]Overlap{{{Worker: a, Device: 3}}}, 0)
		if !hold {
			if d[0].Outcome != Routed || d[0].Worker != b {
				t.Fatalf("without hold: %+v, want routed to b", d[0])
			}
			continue
		}
		if d[0].Outcome != Queued {
			t.Fatalf("hold: %+v, want queued for a", d[0])
		}
		// One cached nowhere takes b; one cached on a waits behind request 1.
		d = s.Decide(d[:0], []Request{{ID: 2, ISL: 80, Blocks: blocks(2)}, {ID: 3, ISL: 80, Blocks: blocks(3)}},
			[][]Overlap{nil, {{Worker: a, Device: 2}, {Worker: b, Device: 1}}}, int64(100*time.Millisecond))
		if d[0].Outcome != Routed || d[0].Worker != b || d[1].Outcome != Queued {
			t.Fatalf("hold: %+v", d)
		}
		// b frees: nothing waiting is cached there more than on a, so b idles.
		s.Free(2, int64(200*time.Millisecond))
		if effs := s.Drain(nil); len(effs) != 0 {
			t.Fatalf("hold: b freed, effects %+v, want none", effs)
		}
		// a frees: request 1 goes there (request 3 would be next).
		s.Free(1000, int64(300*time.Millisecond))
		effs := s.Drain(nil)
		if len(effs) != 1 || effs[0].ID != 1 || effs[0].Decision.Worker != a {
			t.Fatalf("hold: a freed, effects %+v, want request 1 on a", effs)
		}
		// a is busy again; request 3 waits its bound, then takes b.
		s.Tick(int64(900 * time.Millisecond))
		if effs := s.Drain(effs[:0]); len(effs) != 0 {
			t.Fatalf("hold: before the bound, effects %+v", effs)
		}
		s.Tick(int64(1100 * time.Millisecond))
		effs = s.Drain(effs[:0])
		if len(effs) != 1 || effs[0].ID != 3 || effs[0].Decision.Worker != b {
			t.Fatalf("hold: after the bound, effects %+v, want request 3 on b", effs)
		}
	}
}

// Config.QueueAffinityTail: the aging bound of cache-aware dispatch is
// QueueAffinityTail × the recent mean queue wait when that is shorter than
// QueueAffinityMaxWait (and not below QueueAffinityHold). Request 1, cached
// on busy a, is passed by request 2, cached on free b, while it has waited
// less than the bound; past it, it goes first and takes b. The mean wait
// follows the admissions from the queue.
func TestQueueAffinityTail(t *testing.T) {
	for _, tc := range []struct {
		tail      float64
		waited    time.Duration
		wantFirst uint64
	}{
		{0, 2500 * time.Millisecond, 2},  // off: the bound is 10 s
		{2, 1500 * time.Millisecond, 2},  // under 2 × 1 s
		{2, 2500 * time.Millisecond, 1},  // past it
		{0.1, 200 * time.Millisecond, 2}, // 0.1 × 1 s is under the hold's 300 ms floor, not reached
		{0.1, 400 * time.Millisecond, 1}, // past the floor
	} {
		cfg := testConfig()
		cfg.QueueAffinityMaxWait = 10 * time.Second
		cfg.QueueAffinityHold = 300 * time.Millisecond
		cfg.QueueAffinityTail = tc.tail
		s, b := bothQueued(t, cfg)
		s.q.waitAvg = float64(time.Second)
		s.Free(1001, int64(tc.waited))
		effs := s.Drain(nil)
		if len(effs) != 1 || effs[0].ID != tc.wantFirst || effs[0].Decision.Worker != b {
			t.Fatalf("tail %v, waited %v: effects %+v, want request %d on b", tc.tail, tc.waited, effs, tc.wantFirst)
		}
		// The admission moved the mean wait 1/64 of the way to its wait.
		if want := float64(time.Second) + (float64(tc.waited)-float64(time.Second))/waitAvgN; s.q.waitAvg != want {
			t.Fatalf("tail %v: mean wait %v, want %v", tc.tail, s.q.waitAvg, want)
		}
	}
}

// Config.QueueAffinityHoldPerBlock: a request whose cache is on a busy rank
// is held, and is not aged, for longer by this much per block of its saving
// (the blocks the busy rank holds beyond the free one). Request 1 has 5
// blocks cached on busy a, none on free b: with a 300 ms hold and 100 ms a
// block it waits 800 ms before it takes b; without the extension, 300 ms.
func TestQueueAffinityHoldPerBlock(t *testing.T) {
	for _, tc := range []struct {
		perBlock   time.Duration
		still, due time.Duration // held at still, admitted to b by due
	}{
		{0, 250 * time.Millisecond, 350 * time.Millisecond},
		{100 * time.Millisecond, 750 * time.Millisecond, 850 * time.Millisecond},
		{time.Second, 1900 * time.Millisecond, 2100 * time.Millisecond}, // capped at the 2 s max wait
	} {
		cfg := testConfig()
		cfg.QueueAffinityMaxWait = 2 * time.Second
		cfg.QueueAffinityHold = 300 * time.Millisecond
		cfg.QueueAffinityHoldPerBlock = tc.perBlock
		s, a, b := twoRanks(t, cfg)
		if err := s.AddRequest(1000, a, fiveBlocks(1000), 80, 0, PrefillLoadHint{}, 0); err != nil {
			t.Fatal(err)
		}
		d := s.Decide(nil, []Request{{ID: 1, ISL: 80, Blocks: fiveBlocks(1)}}, [][]Overlap{{{Worker: a, Device: 5}}}, 0)
		if d[0].Outcome != Queued {
			t.Fatalf("per block %v: %+v, want queued for a", tc.perBlock, d[0])
		}
		s.Tick(int64(tc.still))
		if effs := s.Drain(nil); len(effs) != 0 {
			t.Fatalf("per block %v: at %v effects %+v, want still held", tc.perBlock, tc.still, effs)
		}
		s.Tick(int64(tc.due))
		if effs := s.Drain(nil); len(effs) != 1 || effs[0].ID != 1 || effs[0].Decision.Worker != b {
			t.Fatalf("per block %v: at %v effects %+v, want request 1 on b", tc.perBlock, tc.due, effs)
		}
	}
}

// The aging bound extends the same way: with the tail bound at 2 × 1 s,
// request 1 (3 blocks cached on busy a) goes before request 2 (cached on
// free b) once it has waited 2 s plus 3 × the per-block extension.
func TestQueueAffinityAgingPerBlock(t *testing.T) {
	for _, tc := range []struct {
		perBlock  time.Duration
		waited    time.Duration
		wantFirst uint64
	}{
		{0, 2100 * time.Millisecond, 1},
		{100 * time.Millisecond, 2100 * time.Millisecond, 2},
		{100 * time.Millisecond, 2400 * time.Millisecond, 1},
		{time.Second, 4900 * time.Millisecond, 2},
		{time.Second, 5000 * time.Millisecond, 1}, // 2 s + 3 s, under the 10 s max wait
	} {
		cfg := testConfig()
		cfg.QueueAffinityMaxWait = 10 * time.Second
		cfg.QueueAffinityHold = 300 * time.Millisecond
		cfg.QueueAffinityTail = 2
		cfg.QueueAffinityHoldPerBlock = tc.perBlock
		s, b := bothQueued(t, cfg)
		s.q.waitAvg = float64(time.Second)
		s.Free(1001, int64(tc.waited))
		effs := s.Drain(nil)
		if len(effs) != 1 || effs[0].ID != tc.wantFirst || effs[0].Decision.Worker != b {
			t.Fatalf("per block %v, waited %v: effects %+v, want request %d on b", tc.perBlock, tc.waited, effs, tc.wantFirst)
		}
	}
}

// bothQueued makes both of twoRanks' ranks busy (request 1000 on a, 1001 on
// b) and queues request 1 (3 blocks cached on a) and request 2 (3 on b).
func bothQueued(t *testing.T, cfg Config) (*Scheduler, wire.WorkerKey) {
	t.Helper()
	s, a, b := twoRanks(t, cfg)
	if err := s.AddRequest(1000, a, fiveBlocks(1000), 80, 0, PrefillLoadHint{}, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.AddRequest(1001, b, fiveBlocks(1001), 80, 0, PrefillLoadHint{}, 0); err != nil {
		t.Fatal(err)
	}
	d := s.Decide(nil, []Request{{ID: 1, ISL: 80, Blocks: fiveBlocks(1)}, {ID: 2, ISL: 80, Blocks: fiveBlocks(2)}},
		[][]Overlap{{{Worker: a, Device: 3}}, {{Worker: b, Device: 3}}}, 0)
	if d[0].Outcome != Queued || d[1].Outcome != Queued {
		t.Fatalf("%+v, want both queued", d)
	}
	return s, b
}
