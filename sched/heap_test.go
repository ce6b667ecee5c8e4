package sched

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/kvroute/kvroute/wire"
)

// TestHeapMatchesScan drives two schedulers with the same seed through the
// same random histories (workers added and removed, some with several ranks;
// load reports; batches with random overlaps, pins, allowed lists, weight
// and temperature overrides; bookings, prefill completions, frees, expiry
// ticks, tree sizes), one deciding through the plain-rank heap where it
// applies and one always by the scan, and requires identical decisions,
// effects and stats at every step. Loads are small integers so equal costs
// (and the tie break by tree size and seeded RNG) are frequent. Every other
// round's block lists are chained and both schedulers set
// Config.ChainedHashes; a third scheduler without it (a cell per private
// block) must then decide the same.
func TestHeapMatchesScan(t *testing.T) {
	rounds, steps := 60, 1500
	if testing.Short() {
		rounds = 15
	}
	var heapUsed, decisions, pruned, chained, promoted, stretched uint64
	for round := range rounds {
		seed := uint64(round)*0x9e3779b97f4a7c15 + 1
		rng := rand.New(rand.NewPCG(seed, 7))
		cfg := testConfig()
		cfg.BlockSize = 4
		switch rng.IntN(8) {
		case 0:
			cfg.Policy = PolicyLeastLoaded
		case 1:
			cfg.Policy = Policy(rng.IntN(4))
		default:
			cfg.Policy = PolicyKV
		}
		cfg.CreditCost = rng.IntN(3) == 0
		cfg.Weight = []float64{1, 0.5, 2, 0, 1.7}[rng.IntN(5)]
		cfg.PrefillLoadScale = []float64{1, 0.25, 3}[rng.IntN(3)]
		cfg.AssumeKVReuse = rng.IntN(2) == 0
		cfg.QueueDepth = rng.IntN(4)
		cfg.QueuePolicy = QueuePolicy(rng.IntN(3))
		cfg.Expiry = time.Duration(5+rng.IntN(30)) * time.Second
		if rng.IntN(3) == 0 {
			cfg.Temperature = 0.5
		}
		if rng.IntN(2) == 0 {
			cfg.BusyPrefillTokens = int64(8 + rng.IntN(40))
		}
		if rng.IntN(2) == 0 {
			cfg.BusyDecodeFrac = 0.8
		}
		chainedOnly := round%2 == 1
		cfg.ChainedHashes = chainedOnly
		hs, err := New(cfg, seed)
		if err != nil {
			t.Fatal(err)
		}
		ss, _ := New(cfg, seed)
		ss.forceScan = true
		var cs *Scheduler // chained rounds: the reference without stretches
		both := func(f func(s *Scheduler)) { f(hs); f(ss) }
		if chainedOnly {
			ccfg := cfg
			ccfg.ChainedHashes = false
			cs, _ = New(ccfg, seed)
			both = func(f func(s *Scheduler)) { f(hs); f(ss); f(cs) }
		}
		var cd []Decision
		var ce []Effect

		nWorkers := 2 + rng.IntN(40)
		multi := rng.IntN(3) == 0
		key := func() wire.WorkerKey {
			k := wire.WorkerKey{Worker: uint64(rng.IntN(nWorkers)) + 1}
			if multi && rng.IntN(3) == 0 {
				k.Dp = uint32(rng.IntN(2))
			}
			return k
		}
		chain := func(n int) []wire.SeqHash {
			fam := uint64(rng.IntN(5))
			hs := make([]wire.SeqHash, n)
			arbitrary := rng.IntN(5) == 0 && !chainedOnly // repeats, disagreeing predecessors
			for i := range hs {
				if arbitrary {
					hs[i] = wire.SeqHash(fam<<32 | uint64(rng.IntN(3)+1))
				} else {
					hs[i] = wire.SeqHash(fam<<32 | uint64(i+1))
				}
			}
			return hs
		}
		for range nWorkers {
			k, c := key(), Capacity{TotalBlocks: uint64(10 + rng.IntN(30)), MaxBatchedTokens: uint64(rng.IntN(64))}
			both(func(s *Scheduler) { s.AddWorker(k, c) })
		}
		var now int64
		nextID := uint64(1)
		id := func() uint64 { return uint64(rng.Int64N(int64(nextID))) + 1 }
		var hd, sd []Decision
		var he, se []Effect
		for step := range steps {
			now += int64(rng.IntN(3)) * int64(time.Second/2)
			switch op := rng.IntN(20); {
			case op < 1:
				k, c := key(), Capacity{TotalBlocks: uint64(10 + rng.IntN(30)), MaxBatchedTokens: uint64(rng.IntN(64))}
				both(func(s *Scheduler) { s.AddWorker(k, c) })
			case op < 2 && rng.IntN(3) == 0:
				if rng.IntN(2) == 0 {
					k := key()
					both(func(s *Scheduler) { s.RemoveRank(k, now) })
				} else {
					w := uint64(rng.IntN(nWorkers)) + 1
					both(func(s *Scheduler) { s.RemoveWorker(w, now) })
				}
			case op < 3:
				k, l := key(), Load{UsedBlocks: uint64(rng.IntN(40)), Waiting: uint64(rng.IntN(3))}
				both(func(s *Scheduler) { _ = s.ReportLoad(k, l, now) })
			case op < 4:
				k, ts := key(), uint32(rng.IntN(3))
				both(func(s *Scheduler) { _ = s.SetTreeSize(k, ts) })
			case op < 12:
				batch := make([]Request, 1+rng.IntN(3))
				ovs := make([][]Overlap, len(batch))
				for j := range batch {
					nb := rng.IntN(4)
					r := Request{ID: nextID, ISL: uint32(4*nb + rng.IntN(2)*rng.IntN(4)), Blocks: chain(nb)}
					nextID++
					if rng.IntN(4) == 0 {
						r.ExpectedPrefill = time.Duration(1+rng.IntN(3)) * time.Second
					}
					switch rng.IntN(12) {
					case 0:
						r.Override.Pinned, r.Override.PinnedSet = key(), true
					case 1:
						r.Override.Allowed = []wire.WorkerKey{key(), key()}
					case 2:
						r.Override.Weight, r.Override.WeightSet = float64(rng.IntN(3)), true
					case 3:
						r.Override.Weight, r.Override.WeightSet = cfg.Weight, true
					case 4:
						r.Override.Temperature, r.Override.TemperatureSet = float64(rng.IntN(2)), true
					}
					batch[j] = r
					for range rng.IntN(4) {
						ovs[j] = append(ovs[j], Overlap{Worker: key(), Device: uint32(rng.IntN(3)), Host: uint32(rng.IntN(2)), Disk: uint32(rng.IntN(2)), TreeSize: uint32(rng.IntN(3))})
					}
				}
				if rng.IntN(10) == 0 {
					var hc, sc []Candidate
					var a, b Decision
					a, hc = hs.DecideExplained(nil, &batch[0], ovs[0], now)
					b, sc = ss.DecideExplained(nil, &batch[0], ovs[0], now)
					if a != b || !reflect.DeepEqual(hc, sc) {
						t.Fatalf("round %d step %d: explained decision %+v, scan %+v", round, step, a, b)
					}
					if cs != nil {
						if c, cc := cs.DecideExplained(nil, &batch[0], ovs[0], now); c != a || !reflect.DeepEqual(hc, cc) {
							t.Fatalf("round %d step %d: explained decision %+v, without stretches %+v", round, step, a, c)
						}
					}
					break
				}
				if rng.IntN(4) == 0 {
					ovs = nil
				}
				hd = hs.Decide(hd[:0], batch, ovs, now)
				sd = ss.Decide(sd[:0], batch, ovs, now)
				if !reflect.DeepEqual(hd, sd) {
					t.Fatalf("round %d step %d (%+v): heap decided\n%+v\nscan decided\n%+v", round, step, cfg, hd, sd)
				}
				if cs != nil {
					if cd = cs.Decide(cd[:0], batch, ovs, now); !reflect.DeepEqual(hd, cd) {
						t.Fatalf("round %d step %d (%+v): decided\n%+v\nwithout stretches\n%+v", round, step, cfg, hd, cd)
					}
				}
				decisions += uint64(len(hd))
			case op < 14:
				i, k := id(), key()
				nb := rng.IntN(4)
				blocks, hint := chain(nb), PrefillLoadHint{InitialEffectiveTokens: uint32(rng.IntN(12)), ExpectedDuration: time.Duration(rng.IntN(2)) * time.Second}
				both(func(s *Scheduler) { _ = s.AddRequest(i+1000000, k, blocks, uint32(4*nb), 0, hint, now) })
			case op < 16:
				i := id()
				both(func(s *Scheduler) { s.MarkPrefillCompleted(i, now) })
			case op < 19:
				i := id()
				both(func(s *Scheduler) { s.Free(i, now) })
			default:
				both(func(s *Scheduler) { s.Tick(now) })
			}
			he, se = hs.Drain(he[:0]), ss.Drain(se[:0])
			if !reflect.DeepEqual(he, se) || hs.Stats() != ss.Stats() {
				t.Fatalf("round %d step %d: effects or stats differ:\n%+v %+v\n%+v %+v", round, step, he, hs.Stats(), se, ss.Stats())
			}
			if cs != nil {
				if ce = cs.Drain(ce[:0]); !reflect.DeepEqual(he, ce) || hs.Stats() != cs.Stats() {
					t.Fatalf("round %d step %d: effects or stats differ without stretches:\n%+v %+v\n%+v %+v", round, step, he, hs.Stats(), ce, cs.Stats())
				}
				if hs.blocks.live+hs.blocks.npriv != cs.blocks.live+cs.blocks.npriv || hs.blocks.npriv != cs.blocks.npriv {
					t.Fatalf("round %d step %d: %d records + %d private, without stretches %d + %d", round, step, hs.blocks.live, hs.blocks.npriv, cs.blocks.live, cs.blocks.npriv)
				}
			}
			if step%50 == 0 {
				if err := hs.CheckInvariants(); err != nil {
					t.Fatalf("round %d step %d: %v", round, step, err)
				}
				if cs != nil {
					if hs.blocks.npriv > 0 {
						stretched++
					}
					if err := cs.CheckInvariants(); err != nil {
						t.Fatalf("round %d step %d, without stretches: %v", round, step, err)
					}
				}
			}
		}
		if ss.heapUsed != 0 {
			t.Fatalf("forced scan took the heap %d times", ss.heapUsed)
		}
		heapUsed += hs.heapUsed
		pruned += hs.heldPruned
		chained += hs.chained
		promoted += hs.promotions
	}
	t.Logf("%d decisions, %d took the heap path, %d touched ranks left uncosted, %d bookings followed record links, %d requests' private blocks promoted", decisions, heapUsed, pruned, chained, promoted)
	if promoted == 0 {
		t.Fatal("no private block was promoted")
	}
	if stretched == 0 {
		t.Fatal("no chained round held a private stretch at a check")
	}
	if chained == 0 {
		t.Fatal("no booking followed the record links")
	}
	if pruned == 0 {
		t.Fatal("the heap path never left a touched rank uncosted")
	}
	if heapUsed < decisions/4 {
		t.Fatalf("only %d of %d decisions took the heap path", heapUsed, decisions)
	}
}

func TestSelectKth(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		a := make([]uint32, 1+rng.IntN(40))
		for i := range a {
			a[i] = uint32(rng.IntN(30))
		}
		sorted := slices.Clone(a)
		slices.Sort(sorted)
		k := rng.IntN(len(a))
		if got := selectKth(a, k); got != sorted[k] {
			t.Fatalf("selectKth(%v, %d) = %d, want %d", a, k, got, sorted[k])
		}
	}
}
