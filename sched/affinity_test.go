package sched

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvroute/kvroute/wire"
)

// Cache-aware dispatch (Config.QueueAffinity, pickAffinity) against a naive
// model of its rule built from the public read model: a rank is available
// when its worker is not busy (WorkerLoad.WorkerBusy), a rank's cached
// blocks for a request are the larger of its weighted overlap and the
// request's blocks active there (WorkerLoad.HeldBlocks), the advantage is
// the best available rank's minus the best other rank's, and the pick is
// the first aged request of the window, else the largest advantage (the
// earliest among equals), else the first when nothing is available. Random
// fleets (some workers with two ranks), loads, queues, overlaps and ages;
// ties are frequent (small integer overlaps).
func TestAffinityMatchesModel(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	for iter := 0; iter < 1000; iter++ {
		cfg := testConfig()
		cfg.QueueAffinity = []int{2, 3, 8, 32}[rng.IntN(4)]
		cfg.QueueAffinityMaxWait = time.Second
		cfg.HostHitWeight, cfg.DiskHitWeight = 0.5, 0.25
		cfg.CreditCost = rng.IntN(4) == 0
		cfg.OverlapCredit = 1.5
		cfg.QueueDepth = 256
		// The hold, the tail bound and their extension by the saving.
		cfg.QueueAffinityHold = []time.Duration{0, 300 * time.Millisecond, 800 * time.Millisecond}[rng.IntN(3)]
		cfg.QueueAffinityTail = []float64{0, 0.5, 2}[rng.IntN(3)]
		cfg.QueueAffinityHoldPerBlock = []time.Duration{0, 40 * time.Millisecond, 100 * time.Millisecond}[rng.IntN(3)]
		if rng.IntN(2) == 0 {
			cfg.BusyPrefillTokens = 40 // decaying prefills free ranks as time passes
		}
		s, err := New(cfg, rng.Uint64())
		if err != nil {
			t.Fatal(err)
		}
		var keys []wire.WorkerKey
		for w := 1; w <= 2+rng.IntN(6); w++ {
			for dp := 0; dp < 1+rng.IntN(2); dp++ {
				k := wire.WorkerKey{Worker: uint64(w), Dp: uint32(dp)}
				s.AddWorker(k, Capacity{TotalBlocks: 6})
				keys = append(keys, k)
			}
		}
		// Prompts are prefixes of a few families, so active blocks are shared.
		prompt := func() []wire.SeqHash {
			fam, n := rng.IntN(3), 1+rng.IntN(5)
			hs := make([]wire.SeqHash, n)
			for j := range hs {
				hs[j] = wire.SeqHash(uint64(fam+1)<<32 | uint64(j))
			}
			return hs
		}
		id := uint64(0)
		for _, k := range keys {
			for n := rng.IntN(3); n > 0; n-- {
				id++
				hint := PrefillLoadHint{InitialEffectiveTokens: uint32(rng.IntN(64))}
				if rng.IntN(2) == 0 {
					hint.ExpectedDuration = time.Duration(1+rng.IntN(20)) * time.Second
				}
				if err := s.AddRequest(id, k, prompt(), 16, 0, hint, 0); err != nil {
					t.Fatal(err)
				}
			}
		}
		now := int64(10 * time.Second)
		type entry struct {
			r   Request
			ov  []Overlap
			at  int64
			unr bool
		}
		var q []entry
		for n := 1 + rng.IntN(40); n > 0; n-- {
			id++
			e := entry{r: Request{ID: id, ISL: 80, Blocks: prompt()}, unr: true}
			if rng.IntN(8) == 0 {
				e.r.Override = Override{PinnedSet: true, Pinned: keys[rng.IntN(len(keys))]}
				e.unr = false
			}
			for _, k := range keys {
				if rng.IntN(2) == 0 {
					e.ov = append(e.ov, Overlap{Worker: k, Device: uint32(rng.IntN(4)), Host: uint32(rng.IntN(3)), Disk: uint32(rng.IntN(2))})
				}
			}
			// Arrival times in order (the queue is FCFS), a few aged.
			e.at = now - int64(1200*time.Millisecond) + int64(n)*int64(rng.IntN(60))*int64(time.Millisecond)
			if len(q) > 0 {
				e.at = max(e.at, q[len(q)-1].at)
			}
			s.q.push(&e.r, e.ov, e.at, s.bs)
			q = append(q, e)
		}
		// The available ranks: from the heap and slow list, and by the scan.
		s.markAvailable(now)
		byHeap := make([]bool, len(s.hot))
		for i := range byHeap {
			byHeap[i] = s.q.avail[i] == s.q.agen
		}
		s.q.agen++
		s.markAvailableScan(now)
		for i := range byHeap {
			if byHeap[i] != (s.q.avail[i] == s.q.agen) {
				t.Fatalf("iteration %d: rank %d available %v by the heap, %v by the scan", iter, i, byHeap[i], !byHeap[i])
			}
		}
		s.forceScan = rng.IntN(2) == 0
		s.q.waitAvg = float64(rng.IntN(1000)) * float64(time.Millisecond)
		k0 := -1
		for i, e := range q {
			if e.unr {
				k0 = i
				break
			}
		}
		if k0 < 0 {
			continue
		}
		// The model.
		dw := 1.0
		if cfg.CreditCost {
			dw = cfg.OverlapCredit
		}
		want := k0
		loads := s.AppendLoads(nil, nil, now)
		anyFree := false
		for _, l := range loads {
			anyFree = anyFree || !l.WorkerBusy
		}
		if anyFree {
			// Aged past min(max wait, max(tail × mean wait, hold)), or
			// past max wait, or past that bound by more than the saving
			// times the per-block extension.
			maxWait := int64(cfg.QueueAffinityMaxWait)
			aging := maxWait
			if cfg.QueueAffinityTail > 0 {
				aging = min(aging, max(int64(cfg.QueueAffinityTail*s.q.waitAvg), int64(cfg.QueueAffinityHold)))
			}
			perBlock := float64(cfg.QueueAffinityHoldPerBlock)
			best, n, aged, first := math.Inf(-1), 0, false, 0.0
			for i := k0; i < len(q); i++ {
				e := q[i]
				if !e.unr {
					continue
				}
				waited := now - e.at
				in, out := 0.0, 0.0
				for _, l := range s.AppendLoads(nil, e.r.Blocks, now) {
					c := float64(l.HeldBlocks)
					for _, o := range e.ov {
						if o.Worker == l.Worker {
							c = max(c, dw*float64(o.Device)+cfg.HostHitWeight*float64(o.Host)+cfg.DiskHitWeight*float64(o.Disk))
						}
					}
					if l.WorkerBusy {
						out = max(out, c)
					} else {
						in = max(in, c)
					}
				}
				saving := max(0, out-in)
				if waited >= aging && (waited >= maxWait || float64(waited-aging) >= saving*perBlock) {
					want, aged = i, true
					break
				}
				if i == k0 {
					first = saving
				}
				if in-out > best {
					best, want = in-out, i
				}
				if n++; n == cfg.QueueAffinity {
					break
				}
			}
			// Held: every candidate has more cached on a busy rank, and the
			// first has waited less than the hold (extended by its saving,
			// up to max wait).
			hold := int64(cfg.QueueAffinityHold)
			w0 := now - q[k0].at
			if !aged && hold > 0 && best < 0 && (w0 < hold || w0 < maxWait && float64(w0-hold) < first*perBlock) {
				want = -1
			}
		}
		if got := s.pickAffinity(k0, now); got != want {
			t.Fatalf("iteration %d (K=%d, %d waiting, first unrestricted at %d): picked position %d, the model %d", iter, cfg.QueueAffinity, len(q), k0, got, want)
		}
	}
}

// A request whose cache is on a rank that never frees is passed by the
// requests whose cache is on the rank that does, until it has waited the
// aging bound; from then on nothing later goes before it: it is admitted
// at the first free after its bound.
func TestAffinityAgingBound(t *testing.T) {
	cfg := testConfig()
	cfg.QueueAffinity = 32
	cfg.QueueAffinityMaxWait = time.Second
	s, a, b := twoRanks(t, cfg)
	blocks := fiveBlocks
	// Five blocks make a rank busy: a hog on a that never ends, one on b.
	if err := s.AddRequest(1000, a, blocks(1000), 80, 0, PrefillLoadHint{}, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.AddRequest(1001, b, blocks(1001), 80, 0, PrefillLoadHint{}, 0); err != nil {
		t.Fatal(err)
	}
	onB := uint64(1001)
	const x = 1
	step := int64(100 * time.Millisecond)
	d := s.Decide(nil, []Request{{ID: x, ISL: 80, Blocks: blocks(x)}}, [][]Overlap{{{Worker: a, Device: 5}}}, 0)
	if d[0].Outcome != Queued {
		t.Fatalf("x: %+v", d[0])
	}
	admittedX := int64(-1)
	var effs []Effect
	for i := uint64(1); i <= 30 && admittedX < 0; i++ {
		now := int64(i) * step
		// A request cached on b arrives and waits; b frees.
		id := 100 + i
		d = s.Decide(d[:0], []Request{{ID: id, ISL: 80, Blocks: blocks(id)}}, [][]Overlap{{{Worker: b, Device: 5}}}, now)
		if d[0].Outcome != Queued {
			t.Fatalf("%d: %+v", id, d[0])
		}
		s.Free(onB, now)
		effs = s.Drain(effs[:0])
		if len(effs) != 1 || effs[0].Kind != EffectAdmitted {
			t.Fatalf("at %v: effects %+v", time.Duration(now), effs)
		}
		onB = effs[0].ID
		aged := now >= int64(cfg.QueueAffinityMaxWait)
		switch {
		case onB == x:
			admittedX = now
		case aged:
			t.Fatalf("at %v request %d went before x, which has waited %v (bound %v)", time.Duration(now), onB, time.Duration(now), cfg.QueueAffinityMaxWait)
		}
	}
	if admittedX != int64(cfg.QueueAffinityMaxWait) {
		t.Fatalf("x admitted at %v, want at its bound %v", time.Duration(admittedX), cfg.QueueAffinityMaxWait)
	}
	if st := s.Stats(); st.AdmittedAhead != 9 {
		t.Fatalf("admitted ahead of x: %d, want the 9 frees before its bound", st.AdmittedAhead)
	}
}

// On random histories through the public API (arrivals, frees, prefill
// completions, load reports, pinned requests, ranks removed and added), no
// request is admitted ahead of an earlier waiting unrestricted request
// that has waited the aging bound, nor ahead of QueueAffinity or more of
// them: the FIFO order is kept within both bounds.
func TestAffinityNeverPassesAged(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 9))
	cfg := testConfig()
	cfg.QueueAffinity = 4
	cfg.QueueAffinityMaxWait = 500 * time.Millisecond
	cfg.QueueDepth = 64
	s, err := New(cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	keys := []wire.WorkerKey{{Worker: 1}, {Worker: 2}, {Worker: 3}, {Worker: 3, Dp: 1}}
	for _, k := range keys {
		s.AddWorker(k, Capacity{TotalBlocks: 8})
	}
	type waiting struct {
		at  int64
		unr bool
	}
	queued := map[uint64]waiting{}
	var active []uint64
	var effs []Effect
	var dec []Decision
	var order []uint64
	now, id := int64(0), uint64(0)
	ahead, aged := uint64(0), 0
	check := func(snapshot []uint64) {
		effs = s.Drain(effs[:0])
		for _, e := range effs {
			if e.Kind != EffectAdmitted && e.Kind != EffectRejected {
				continue
			}
			pos, passed := -1, 0
			for i, w := range snapshot {
				if w == e.ID {
					pos = i
					break
				}
				if q := queued[w]; q.unr {
					passed++
					if e.Kind == EffectAdmitted && queued[e.ID].unr && now-q.at >= int64(cfg.QueueAffinityMaxWait) {
						t.Fatalf("at %v: %d admitted ahead of %d, waiting %v (bound %v)", time.Duration(now), e.ID, w, time.Duration(now-q.at), cfg.QueueAffinityMaxWait)
					}
				}
			}
			if pos < 0 {
				t.Fatalf("%v of %d, which was not waiting", e.Kind, e.ID)
			}
			if queued[e.ID].unr && passed >= cfg.QueueAffinity {
				t.Fatalf("at %v: %d admitted ahead of %d earlier requests (window %d)", time.Duration(now), e.ID, passed, cfg.QueueAffinity)
			}
			if passed > 0 && queued[e.ID].unr {
				ahead++
			}
			if e.Kind == EffectAdmitted && now-queued[e.ID].at >= int64(cfg.QueueAffinityMaxWait) && len(snapshot) > pos+1 {
				aged++
			}
			snapshot = append(snapshot[:pos], snapshot[pos+1:]...)
			delete(queued, e.ID)
			if e.Kind == EffectAdmitted {
				active = append(active, e.ID)
			}
		}
	}
	for step := 0; step < 5000; step++ {
		now += int64(rng.IntN(40)) * int64(time.Millisecond)
		order = s.AppendWaiting(order[:0])
		switch op := rng.IntN(10); {
		case op < 5 && len(order) < 12: // a queue of a dozen: waits straddle the bound
			batch := make([]Request, 1+rng.IntN(3))
			ovs := make([][]Overlap, len(batch))
			for i := range batch {
				id++
				fam := uint64(rng.IntN(4))
				hs := make([]wire.SeqHash, 1+rng.IntN(4))
				for j := range hs {
					hs[j] = wire.SeqHash(fam<<32 | uint64(j))
				}
				batch[i] = Request{ID: id, ISL: uint32(16 * len(hs)), Blocks: hs}
				if rng.IntN(10) == 0 {
					batch[i].Override = Override{PinnedSet: true, Pinned: keys[rng.IntN(len(keys))]}
				}
				for _, k := range keys {
					if rng.IntN(2) == 0 {
						ovs[i] = append(ovs[i], Overlap{Worker: k, Device: uint32(rng.IntN(5))})
					}
				}
			}
			dec = s.Decide(dec[:0], batch, ovs, now)
			check(order)
			for i, d := range dec {
				switch d.Outcome {
				case Queued:
					queued[d.ID] = waiting{at: now, unr: !batch[i].Override.PinnedSet}
				case Routed:
					active = append(active, d.ID)
				}
			}
		case op < 8 && len(active) > 0:
			i := rng.IntN(len(active))
			s.Free(active[i], now)
			active = append(active[:i], active[i+1:]...)
			check(order)
		case op < 9 && len(active) > 0:
			s.MarkPrefillCompleted(active[rng.IntN(len(active))], now)
			check(order)
		default:
			k := keys[rng.IntN(len(keys))]
			if rng.IntN(20) == 0 {
				s.RemoveRank(k, now)
				check(order)
				order = s.AppendWaiting(order[:0])
				s.AddWorker(k, Capacity{TotalBlocks: 8})
				check(order)
				continue
			}
			if err := s.ReportLoad(k, Load{UsedBlocks: uint64(rng.IntN(10))}, now); err != nil {
				t.Fatal(err)
			}
			check(order)
		}
	}
	st := s.Stats()
	if st.Admitted < 500 || ahead < 10 || aged < 10 || st.AdmittedAhead != ahead {
		t.Fatalf("the history does not exercise dispatch: %d admitted, %d ahead (stats %d), %d aged with others waiting", st.Admitted, ahead, st.AdmittedAhead, aged)
	}
	t.Logf("%d admitted from the queue, %d of them ahead of an earlier request, %d aged with others waiting", st.Admitted, ahead, aged)
}

// twoRanks is a scheduler of cfg with two workers a and b of 4 blocks each.
func twoRanks(t *testing.T, cfg Config) (s *Scheduler, a, b wire.WorkerKey) {
	t.Helper()
	s, err := New(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	a, b = wire.WorkerKey{Worker: 1}, wire.WorkerKey{Worker: 2}
	s.AddWorker(a, Capacity{TotalBlocks: 4})
	s.AddWorker(b, Capacity{TotalBlocks: 4})
	return s, a, b
}

// fiveBlocks is request id's prompt: five blocks of its own, which make a
// rank of twoRanks busy.
func fiveBlocks(id uint64) []wire.SeqHash {
	return []wire.SeqHash{wire.SeqHash(id<<8 | 1), wire.SeqHash(id<<8 | 2), wire.SeqHash(id<<8 | 3), wire.SeqHash(id<<8 | 4), wire.SeqHash(id<<8 | 5)}
}
