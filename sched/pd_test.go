package sched

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/kvroute/kvroute/wire"
)

func pdConfig(p DisaggPolicy) Config {
	c := testConfig()
	c.BlockSize = 4
	c.DisaggPolicy = p
	c.DisaggMinUncachedTokens = 16
	return c
}

func key(w uint64) wire.WorkerKey { return wire.WorkerKey{Worker: w} }

// pdFleet has prefill ranks 1 and 2 and decode ranks 11 and 12.
func pdFleet(t *testing.T, cfg Config) *Scheduler {
	t.Helper()
	s, err := New(cfg, 7)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []uint64{1, 2} {
		s.AddWorker(key(w), Capacity{TotalBlocks: 1000, Role: RolePrefill})
	}
	for _, w := range []uint64{11, 12} {
		s.AddWorker(key(w), Capacity{TotalBlocks: 1000, Role: RoleDecode})
	}
	return s
}

func pdHashes(base uint64, n int) []wire.SeqHash {
	hs := make([]wire.SeqHash, n)
	for i := range hs {
		hs[i] = wire.SeqHash(base<<32 | uint64(i+1))
	}
	return hs
}

// loads returns each rank's read model by worker id.
func loads(s *Scheduler) map[uint64]WorkerLoad {
	m := map[uint64]WorkerLoad{}
	for _, l := range s.AppendLoads(nil, nil, s.now) {
		m[l.Worker.Worker] = l
	}
	return m
}

func checkInv(t *testing.T, s *Scheduler) {
	t.Helper()
	if err := s.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// The prefill leg goes where the prompt is cached among the prefill ranks;
// the decode leg to the less loaded decode rank, its "prefill" the blocks it
// must pull; each booking ends at its own signal.
func TestPairChoiceAndBookings(t *testing.T) {
	s := pdFleet(t, pdConfig(DisaggAlways))
	// Load decode rank 11 with a request of its own.
	if err := s.AddRequest(99, key(11), pdHashes(9, 10), 40, 0, PrefillLoadHint{}, 0); err != nil {
		t.Fatal(err)
	}
	r := Request{ID: 1, ISL: 64, Blocks: pdHashes(1, 16)}
	ov := []Overlap{{Worker: key(2), Device: 10}, {Worker: key(12), Device: 4}}
	d := s.DecidePD(&r, ov, 1)
	if d.Rule != RuleRemote || !d.Remote() {
		t.Fatalf("rule %v, remote %v", d.Rule, d.Remote())
	}
	if d.Prefill.Worker != key(2) || d.Prefill.Overlap != 10 || d.Prefill.PrefillTokens != 64-10*4 {
		t.Fatalf("prefill leg %+v, want rank 2 with overlap 10 and 24 tokens", d.Prefill)
	}
	if d.Decode.Outcome != Routed || d.Decode.Worker != key(12) || d.Decode.PrefillTokens != 64-4*4 {
		t.Fatalf("decode leg %+v, want rank 12 pulling 48 tokens", d.Decode)
	}
	l := loads(s)
	if l[2].PrefillTokens != 24 || l[2].ActiveBlocks != 0 || l[2].Role != RolePrefill {
		t.Fatalf("prefill rank booking %+v", l[2])
	}
	if l[12].PrefillTokens != 48 || l[12].ActiveBlocks != 16 || l[12].Requests != 1 {
		t.Fatalf("decode rank booking %+v", l[12])
	}
	if st := s.Stats(); st.Disaggregated != 1 || st.Decisions != 1 || st.Active != 2 {
		t.Fatalf("stats %+v", st)
	}
	checkInv(t, s)

	if !s.PrefillDone(1, 2) || s.PrefillDone(1, 2) {
		t.Fatal("PrefillDone: want true once, then false")
	}
	l = loads(s)
	if l[2].PrefillTokens != 0 || l[2].Requests != 0 || l[12].PrefillTokens != 48 {
		t.Fatalf("after prefill done: prefill %+v, decode %+v", l[2], l[12])
	}
	s.MarkPrefillCompleted(1, 3)
	if l = loads(s); l[12].PrefillTokens != 0 || l[12].ActiveBlocks != 16 {
		t.Fatalf("after the decode rank's first token: %+v", l[12])
	}
	s.Free(1, 4)
	if l = loads(s); l[12].ActiveBlocks != 0 || l[12].Requests != 0 {
		t.Fatalf("after free: %+v", l[12])
	}
	checkInv(t, s)

	// Free ends a prefill booking still open; so does expiry.
	r.ID = 2
	if d := s.DecidePD(&r, ov, 5); !d.Remote() {
		t.Fatalf("second pair %+v", d)
	}
	s.Free(2, 6)
	if l = loads(s); l[2].Requests != 0 || l[2].PrefillTokens != 0 {
		t.Fatalf("free left the prefill booking: %+v", l[2])
	}
	r.ID = 3
	if d := s.DecidePD(&r, ov, 7); !d.Remote() {
		t.Fatalf("third pair %+v", d)
	}
	s.Tick(7 + int64(s.cfg.Expiry) + 1)
	if l = loads(s); l[2].Requests != 0 || l[12].Requests != 0 || l[11].Requests != 0 {
		t.Fatalf("expiry left bookings: %+v %+v", l[2], l[12])
	}
	checkInv(t, s)
}

// The decode leg is load first: a decode rank holding more of the prompt
// but more loaded loses to an idle one unless the pull saved outweighs it.
func TestDecodeLoadFirst(t *testing.T) {
	s := pdFleet(t, pdConfig(DisaggAlways))
	// Rank 11: 40 active blocks. Its overlap saves 8 blocks of pull.
	if err := s.AddRequest(99, key(11), pdHashes(9, 40), 160, 0, PrefillLoadHint{}, 0); err != nil {
		t.Fatal(err)
	}
	r := Request{ID: 1, ISL: 64, Blocks: pdHashes(1, 16)}
	d := s.DecidePD(&r, []Overlap{{Worker: key(11), Device: 8}}, 1)
	if d.Decode.Worker != key(12) {
		t.Fatalf("decode leg on %v, want the idle rank 12", d.Decode.Worker)
	}
	// With the transfer weighed as a prefill (Weight 8 and cache
	// affinity 4), the cached rank would win: the weight is what decides.
	cfg := pdConfig(DisaggAlways)
	cfg.TransferWeight, cfg.CacheAffinity = 8, 4
	s = pdFleet(t, cfg)
	if err := s.AddRequest(99, key(11), pdHashes(9, 40), 160, 0, PrefillLoadHint{}, 0); err != nil {
		t.Fatal(err)
	}
	d = s.DecidePD(&r, []Overlap{{Worker: key(11), Device: 8}}, 1)
	if d.Decode.Worker != key(11) {
		t.Fatalf("transfer weight 8: decode leg on %v, want the cached rank 11", d.Decode.Worker)
	}
}

// Aggregated decisions never land on a prefill rank, however cached there.
func TestAggregatedAvoidsPrefillRanks(t *testing.T) {
	s := pdFleet(t, pdConfig(DisaggAlways))
	dec := s.Decide(nil, []Request{{ID: 1, ISL: 64, Blocks: pdHashes(1, 16)}}, [][]Overlap{{{Worker: key(1), Device: 16}}}, 1)
	if dec[0].Outcome != Routed || (dec[0].Worker != key(11) && dec[0].Worker != key(12)) {
		t.Fatalf("aggregated decision %+v", dec[0])
	}
}

func TestDisaggRules(t *testing.T) {
	long := Request{ISL: 64, Blocks: pdHashes(1, 16)}
	cases := []struct {
		name   string
		policy DisaggPolicy
		ov     []Overlap // the decode rank 11 holds 14 of 16 blocks
		pfLoad uint32    // prefill tokens already on prefill rank 1
		dcLoad uint32    // prefill tokens already on decode rank 12
		busy   int64     // BusyPrefillTokens
		want   PairRule
	}{
		{"always/short", DisaggAlways, []Overlap{{Worker: key(11), Device: 14}}, 0, 0, 0, RuleRemote},
		{"isl/short", DisaggISL, []Overlap{{Worker: key(11), Device: 14}}, 0, 0, 0, RuleShortPrompt},
		{"isl/long", DisaggISL, nil, 0, 0, 0, RuleRemote},
		{"isl/long-loaded", DisaggISL, nil, 500, 0, 0, RuleRemote},
		{"load/loaded", DisaggLoad, nil, 500, 0, 0, RuleLoad},
		{"load/balanced", DisaggLoad, nil, 500, 500, 0, RuleRemote},
		{"load/loaded-before-booking", DisaggLoad, nil, 500, 480, 0, RuleLoad},
		{"load/short", DisaggLoad, []Overlap{{Worker: key(11), Device: 14}}, 0, 0, 0, RuleRemote},
		{"isl-or-load/short", DisaggISLOrLoad, []Overlap{{Worker: key(11), Device: 14}}, 0, 0, 0, RuleShortPrompt},
		{"isl-or-load/loaded", DisaggISLOrLoad, nil, 500, 0, 0, RuleLoad},
		{"isl-or-load/neither", DisaggISLOrLoad, nil, 0, 0, 0, RuleRemote},
		{"always/prefill-busy", DisaggAlways, nil, 500, 0, 100, RulePrefillBusy},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := pdConfig(c.policy)
			cfg.BusyPrefillTokens = c.busy
			s, err := New(cfg, 3)
			if err != nil {
				t.Fatal(err)
			}
			s.AddWorker(key(1), Capacity{TotalBlocks: 1000, Role: RolePrefill})
			s.AddWorker(key(11), Capacity{TotalBlocks: 1000, Role: RoleDecode})
			if c.dcLoad > 0 {
				s.AddWorker(key(12), Capacity{TotalBlocks: 1000, Role: RoleDecode})
			}
			if c.pfLoad > 0 {
				if err := s.AddRequest(90, key(1), nil, c.pfLoad, 0, PrefillLoadHint{InitialEffectiveTokens: c.pfLoad}, 0); err != nil {
					t.Fatal(err)
				}
			}
			if c.dcLoad > 0 {
				if err := s.AddRequest(91, key(12), nil, c.dcLoad, 0, PrefillLoadHint{InitialEffectiveTokens: c.dcLoad}, 0); err != nil {
					t.Fatal(err)
				}
			}
			r := long
			r.ID = 1
			// The decode rank is 11 in every case: 12, when there,
			// is loaded.
			d, dec, pre := s.DecidePDExplained(nil, nil, &r, c.ov, 1)
			if d.Rule != c.want {
				t.Fatalf("rule %v, want %v (decision %+v)", d.Rule, c.want, d)
			}
			if d.Decode.Outcome != Routed || d.Decode.Worker != key(11) {
				t.Fatalf("decode leg %+v", d.Decode)
			}
			if d.Remote() != (c.want == RuleRemote) {
				t.Fatalf("remote %v with rule %v", d.Remote(), d.Rule)
			}
			wantTok := uint32(64)
			if len(c.ov) > 0 {
				wantTok = 64 - 14*4
			}
			if d.Decode.PrefillTokens != wantTok {
				t.Fatalf("decode leg books %d prefill tokens, want %d", d.Decode.PrefillTokens, wantTok)
			}
			chosen := 0
			for _, cd := range dec {
				if cd.Worker == key(1) {
					t.Fatalf("a prefill rank in the decode explanation: %+v", dec)
				}
				if cd.Chosen {
					chosen++
					if cd.Worker != key(11) {
						t.Fatalf("decode explanation chose %v", cd.Worker)
					}
				}
			}
			if chosen != 1 || len(dec) != 1+int(min(c.dcLoad, 1)) {
				t.Fatalf("decode explanation %+v", dec)
			}
			switch c.want {
			case RuleRemote:
				if len(pre) != 1 || !pre[0].Chosen || pre[0].Worker != key(1) || d.Prefill.Worker != key(1) {
					t.Fatalf("prefill explanation %+v, leg %+v", pre, d.Prefill)
				}
			case RulePrefillBusy:
				if len(pre) != 1 || pre[0].Chosen || pre[0].Excluded != ExcludedBusy {
					t.Fatalf("prefill explanation %+v", pre)
				}
			default:
				if len(pre) != 0 {
					t.Fatalf("prefill leg explained under rule %v: %+v", d.Rule, pre)
				}
			}
			st := s.Stats()
			if (st.Disaggregated == 1) != (c.want == RuleRemote) || (st.ServedLocal == 1) == (c.want == RuleRemote) {
				t.Fatalf("stats %+v under rule %v", st, d.Rule)
			}
			checkInv(t, s)
		})
	}
}

func TestRoles(t *testing.T) {
	s := pdFleet(t, pdConfig(DisaggAlways))
	if s.Workers() != 4 || s.PrefillRanks() != 2 {
		t.Fatalf("workers %d, prefill ranks %d", s.Workers(), s.PrefillRanks())
	}
	// Rank 11 becomes a prefill rank, rank 1 an aggregated one.
	s.AddWorker(key(11), Capacity{Role: RolePrefill})
	s.AddWorker(key(1), Capacity{})
	if s.Workers() != 4 || s.PrefillRanks() != 2 {
		t.Fatalf("after moves: workers %d, prefill ranks %d", s.Workers(), s.PrefillRanks())
	}
	l := loads(s)
	if l[11].Role != RolePrefill || l[1].Role != RoleBoth {
		t.Fatalf("roles after moves: 11 %v, 1 %v", l[11].Role, l[1].Role)
	}
	if err := s.ReportLoad(key(2), Load{UsedBlocks: 5}, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.SetTreeSize(key(2), 5); err != nil {
		t.Fatal(err)
	}
	if !s.RemoveWorker(2, 0) || !s.RemoveRank(key(11), 0) || s.PrefillRanks() != 0 {
		t.Fatalf("removing the prefill ranks: %d left", s.PrefillRanks())
	}
	// No prefill rank left: decided as Decide does.
	r := Request{ID: 5, ISL: 64, Blocks: pdHashes(1, 16)}
	if d := s.DecidePD(&r, nil, 1); d.Rule != RuleNoPrefillPool || d.Decode.Outcome != Routed || d.Remote() {
		t.Fatalf("without prefill ranks: %+v", d)
	}
	if d := s.DecidePD(&r, nil, 1); d.Decode.Reason != ReasonDuplicate {
		t.Fatalf("duplicate: %+v", d)
	}
	checkInv(t, s)

	for _, c := range []struct {
		in   string
		want Role
	}{{"", RoleBoth}, {"both", RoleBoth}, {"prefill", RolePrefill}, {"decode", RoleDecode}} {
		if r, err := ParseRole(c.in); err != nil || r != c.want || (c.in != "" && r.String() != c.in) {
			t.Errorf("ParseRole(%q) = %v, %v", c.in, r, err)
		}
	}
	if _, err := ParseRole("prefil"); err == nil {
		t.Error("ParseRole accepted a misspelling")
	}
	for _, n := range disaggPolicyNames {
		if p, err := ParseDisaggPolicy(n); err != nil || p.String() != n {
			t.Errorf("ParseDisaggPolicy(%q) = %v, %v", n, p, err)
		}
	}
	for r, want := range pairRuleNames {
		if got := PairRule(r).String(); got != want {
			t.Errorf("PairRule(%d) = %q, want %q", r, got, want)
		}
	}
	if RuleShortPrompt.String() != "short-prompt" || RuleLoad.String() != "load" || RulePrefillBusy.String() != "prefill-busy" {
		t.Error("rule names")
	}
	if _, err := ParseDisaggPolicy("sometimes"); err == nil {
		t.Error("ParseDisaggPolicy accepted an unknown policy")
	}
	for _, bad := range []func(*Config){
		func(c *Config) { c.DisaggPolicy = 9 },
		func(c *Config) { c.TransferWeight = -1 },
	} {
		c := DefaultConfig()
		bad(&c)
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("Validate: %v", err)
		}
	}
	if c := DefaultConfig(); c.DisaggPolicy != DisaggISL || c.DisaggMinUncachedTokens != 512 || c.TransferWeight != 1 {
		t.Errorf("defaults: policy %v, min uncached %d, transfer weight %v", c.DisaggPolicy, c.DisaggMinUncachedTokens, c.TransferWeight)
	}
}

// A fleet without prefill ranks decides with DecidePD exactly as with
// Decide, whatever the other ranks declare (both or decode): the same
// decisions, effects, stats and loads over random histories.
func TestDecidePDWithoutPrefillIsDecide(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		cfg := testConfig()
		cfg.BlockSize = 4
		cfg.QueueDepth = 3
		cfg.Expiry = 50 * time.Second
		cfg.BusyPrefillTokens = 60
		cfg.ChainedHashes = seed%2 == 0
		cfg.TransferWeight = 3 // unused without prefill ranks
		if seed%3 == 0 {
			cfg.Temperature = 0.5
		}
		a, _ := New(cfg, seed)
		b, _ := New(cfg, seed)
		rng := rand.New(rand.NewPCG(seed, 5))
		var now int64
		var ids []uint64
		var effA, effB []Effect
		for step := 0; step < 400; step++ {
			now += int64(rng.IntN(3)) * int64(time.Second)
			k := wire.WorkerKey{Worker: uint64(1 + rng.IntN(4)), Dp: uint32(rng.IntN(2))}
			switch op := rng.IntN(10); {
			case op == 0:
				c := Capacity{TotalBlocks: uint64(4 + rng.IntN(20))}
				a.AddWorker(k, c)
				c.Role = Role(rng.IntN(2) * 2) // both or decode
				b.AddWorker(k, c)
			case op == 1 && rng.IntN(4) == 0:
				if a.RemoveRank(k, now) != b.RemoveRank(k, now) {
					t.Fatalf("seed %d: RemoveRank disagrees", seed)
				}
			case op <= 5:
				id := uint64(step + 1)
				n := 1 + rng.IntN(6)
				r := Request{ID: id, ISL: uint32(4*n - rng.IntN(3)), Blocks: pdHashes(uint64(rng.IntN(3)), n)}
				if rng.IntN(5) == 0 {
					r.Override.Pinned, r.Override.PinnedSet = k, true
				}
				var ov []Overlap
				if rng.IntN(2) == 0 {
					ov = []Overlap{{Worker: k, Device: uint32(rng.IntN(n + 1))}}
				}
				da := a.Decide(nil, []Request{r}, [][]Overlap{ov}, now)[0]
				db := b.DecidePD(&r, ov, now)
				if db.Rule != RuleNoPrefillPool || db.Decode != da {
					t.Fatalf("seed %d step %d: Decide %+v, DecidePD %+v", seed, step, da, db)
				}
				ids = append(ids, id)
			case op <= 7 && len(ids) > 0:
				id := ids[rng.IntN(len(ids))]
				if a.MarkPrefillCompleted(id, now) != b.MarkPrefillCompleted(id, now) {
					t.Fatalf("seed %d: MarkPrefillCompleted disagrees", seed)
				}
			case op == 8 && len(ids) > 0:
				id := ids[rng.IntN(len(ids))]
				if a.Free(id, now) != b.Free(id, now) {
					t.Fatalf("seed %d: Free disagrees", seed)
				}
			default:
				a.Tick(now)
				b.Tick(now)
			}
			effA, effB = a.Drain(effA[:0]), b.Drain(effB[:0])
			if !reflect.DeepEqual(effA, effB) {
				t.Fatalf("seed %d step %d: effects %+v vs %+v", seed, step, effA, effB)
			}
			if a.Stats() != b.Stats() {
				t.Fatalf("seed %d step %d: stats %+v vs %+v", seed, step, a.Stats(), b.Stats())
			}
			la, lb := a.AppendLoads(nil, nil, now), b.AppendLoads(nil, nil, now)
			for i := range lb {
				lb[i].Role = RoleBoth
			}
			if !reflect.DeepEqual(la, lb) {
				t.Fatalf("seed %d step %d: loads differ", seed, step)
			}
		}
		checkInv(t, b)
	}
}

// With prefill ranks the plain-rank heap is keyed by the transfer weight,
// so decode legs take the heap path; its pairs are the scan's, while ranks
// join and leave the prefill pool (re-keying the heap).
func TestPDHeapMatchesScan(t *testing.T) {
	for seed := uint64(1); seed <= 10; seed++ {
		cfg := DefaultConfig()
		cfg.BlockSize = 4
		cfg.DisaggPolicy = DisaggPolicy(seed % 4)
		cfg.DisaggMinUncachedTokens = 8
		cfg.QueueAffinityHold = 0
		heap, _ := New(cfg, seed)
		scan, _ := New(cfg, seed)
		scan.forceScan = true
		rng := rand.New(rand.NewPCG(seed, 9))
		var now int64
		var ids []uint64
		pairHeap := uint64(0) // heap-path decisions of DecidePD with prefill ranks
		for step := 0; step < 500; step++ {
			now += int64(rng.IntN(3)) * int64(time.Millisecond)
			k := key(uint64(1 + rng.IntN(12)))
			switch op := rng.IntN(10); {
			case op == 0:
				c := Capacity{TotalBlocks: 1000, Role: Role(rng.IntN(3))}
				heap.AddWorker(k, c)
				scan.AddWorker(k, c)
			case op == 1 && rng.IntN(3) == 0:
				heap.RemoveRank(k, now)
				scan.RemoveRank(k, now)
			case op <= 6:
				id := uint64(step + 1)
				n := 1 + rng.IntN(8)
				r := Request{ID: id, ISL: uint32(4 * n), Blocks: pdHashes(uint64(rng.IntN(3)), n)}
				ov := []Overlap{{Worker: k, Device: uint32(rng.IntN(n + 1))}}
				before := heap.heapUsed
				dh, ds := heap.DecidePD(&r, ov, now), scan.DecidePD(&r, ov, now)
				if dh.Rule != RuleNoPrefillPool {
					pairHeap += heap.heapUsed - before
				}
				if dh != ds {
					t.Fatalf("seed %d step %d: heap %+v, scan %+v", seed, step, dh, ds)
				}
				ids = append(ids, id)
			case len(ids) > 0:
				id := ids[rng.IntN(len(ids))]
				switch op {
				case 7:
					heap.PrefillDone(id, now)
					scan.PrefillDone(id, now)
				case 8:
					heap.MarkPrefillCompleted(id, now)
					scan.MarkPrefillCompleted(id, now)
				default:
					heap.Free(id, now)
					scan.Free(id, now)
				}
			}
			checkInv(t, heap)
		}
		if pairHeap == 0 || scan.heapUsed != 0 {
			t.Fatalf("seed %d: heap path taken %d times by pairs, by the scan twin %d", seed, pairHeap, scan.heapUsed)
		}
	}
}
