//go:build !race && !invariants

package sched

// The allocation gates are off under -race (instrumentation allocates) and
// under -tags invariants (the checks after every mutation allocate).

import (
	"testing"
	"time"

	"github.com/kvroute/kvroute/wire"
)

// Deciding, booking, prefill-done and free allocate nothing once the tables
// have grown to the working set, at every fleet size and in every mode.
func TestDecideAllocs(t *testing.T) {
	cases := []struct {
		name string
		mod  func(*fleetOpts)
	}{
		{"default", func(*fleetOpts) {}},
		{"temperature", func(o *fleetOpts) { o.cfg.Temperature = 0.5 }},
		{"credit", func(o *fleetOpts) { o.cfg.CreditCost = true }},
		{"reuse=false", func(o *fleetOpts) { o.cfg.AssumeKVReuse = false }},
		{"round-robin", func(o *fleetOpts) { o.cfg.Policy = PolicyRoundRobin }},
		{"random", func(o *fleetOpts) { o.cfg.Policy = PolicyRandom }},
		{"least-loaded", func(o *fleetOpts) { o.cfg.Policy = PolicyLeastLoaded }},
		{"decay", func(o *fleetOpts) { o.decay = true }},
	}
	for _, n := range []int{8, 256, 7000} {
		for _, c := range cases {
			if n == 7000 && c.name != "default" {
				continue // the large fleet is slow to build; one mode suffices
			}
			o := benchOpts(n)
			c.mod(&o)
			f := newFleet(t, o)
			if a := testing.AllocsPerRun(50, f.step); a != 0 {
				t.Errorf("workers=%d %s: %v allocs per batch of %d", n, c.name, a, o.batch)
			}
		}
	}
}

// A P/D decision (both legs and their bookings), prefill done, first token
// and free allocate nothing once the tables have grown, and neither does
// the aggregated fleet decided through DecidePD.
func TestDecidePDAllocs(t *testing.T) {
	for _, n := range []int{16, 256} {
		for _, w := range []string{"unit", "default", "running"} {
			agg, pd := pdFleets(t, n, w)
			for name, f := range map[string]*fleet{"aggregated": agg, "pd": pd} {
				f.remote = 0
				if a := testing.AllocsPerRun(50, f.step); a != 0 {
					t.Errorf("workers=%d weights=%s %s: %v allocs per batch of %d", n, w, name, a, len(f.batch))
				}
				if name == "pd" && f.remote != 51*len(f.batch) {
					t.Errorf("workers=%d weights=%s: %d of %d disaggregated", n, w, f.remote, 51*len(f.batch))
				}
			}
		}
	}
}

// Explaining a decision into a caller's buffer allocates nothing.
func TestExplainAllocs(t *testing.T) {
	f := newFleet(t, benchOpts(8))
	dst := make([]Candidate, 0, 16)
	id := uint64(1 << 50)
	r := f.reqs[0]
	run := func() {
		id++
		r.ID = id
		var d Decision
		d, dst = f.s.DecideExplained(dst[:0], &r, f.ovs[0], 0)
		if d.Outcome != Routed || len(dst) != 8 {
			t.Fatalf("explained %+v with %d candidates", d, len(dst))
		}
		f.s.Free(id, 0)
	}
	run()
	if a := testing.AllocsPerRun(100, run); a != 0 {
		t.Errorf("%v allocs per explained decision", a)
	}
}

// The waiting queue (enqueue, admission on free, the all-busy effect when
// full), expiry on Tick, load reports and the read model allocate nothing in
// steady state.
func TestQueueAndTickAllocs(t *testing.T) {
	cfg := testConfig()
	cfg.QueueDepth = 4
	cfg.Expiry = 10 * time.Second
	s, err := New(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	k := wire.WorkerKey{Worker: 1}
	s.AddWorker(k, Capacity{TotalBlocks: 4})
	blocks := []wire.SeqHash{1, 2, 3, 4, 5}
	// Every request has 5 blocks: one active request makes the worker busy.
	id, now := uint64(0), int64(0)
	batch := make([]Request, 6)
	dec := make([]Decision, 0, 6)
	effs := make([]Effect, 0, 16)
	loads := make([]WorkerLoad, 0, 4)
	var active []uint64
	allowed := []wire.WorkerKey{k}
	step := func() {
		now += int64(time.Second)
		for i := range batch {
			id++
			batch[i] = Request{ID: id, ISL: 80, Blocks: blocks, Override: Override{Allowed: allowed}}
		}
		dec = s.Decide(dec[:0], batch, nil, now)
		// Free the routed one: the queue head is admitted.
		for _, d := range dec {
			if d.Outcome == Routed {
				active = append(active[:0], d.ID)
			}
		}
		for _, a := range active {
			s.Free(a, now)
		}
		effs = s.Drain(effs[:0])
		for _, e := range effs {
			if e.Kind == EffectAdmitted {
				s.MarkPrefillCompleted(e.ID, now)
			}
		}
		_ = s.ReportLoad(k, Load{UsedBlocks: 1}, now)
		loads = s.AppendLoads(loads[:0], blocks, now)
		s.Tick(now)
		effs = s.Drain(effs[:0])
	}
	for i := 0; i < 50; i++ {
		step()
	}
	if s.Stats().Expirations == 0 || s.Stats().RejectedQueueFull == 0 || s.Stats().Admitted == 0 {
		t.Fatalf("the loop does not exercise expiry, overflow and admission: %+v", s.Stats())
	}
	if a := testing.AllocsPerRun(100, step); a != 0 {
		t.Errorf("%v allocs per step", a)
	}
}

// Cache-aware dispatch (Config.QueueAffinity) allocates nothing in steady
// state: unrestricted requests with overlaps queue on a busy fleet of
// workers with one and two ranks, and frees admit them by advantage.
func TestAffinityDispatchAllocs(t *testing.T) {
	for _, c := range []struct {
		hold     time.Duration
		affinity float64
		tail     float64
		perBlock time.Duration
	}{{0, 1, 0, 0}, {50 * time.Millisecond, 4, 0, 0}, {50 * time.Millisecond, 4, 2, 0}, {50 * time.Millisecond, 4, 2, 10 * time.Millisecond}} {
		hold, affinity := c.hold, c.affinity
		cfg := testConfig()
		cfg.QueueDepth = 64
		cfg.QueueAffinity = 8
		cfg.QueueAffinityHold, cfg.CacheAffinity, cfg.QueueAffinityTail = hold, affinity, c.tail
		cfg.QueueAffinityHoldPerBlock = c.perBlock
		s, err := New(cfg, 1)
		if err != nil {
			t.Fatal(err)
		}
		keys := []wire.WorkerKey{{Worker: 1}, {Worker: 2}, {Worker: 3}, {Worker: 3, Dp: 1}}
		for _, k := range keys {
			s.AddWorker(k, Capacity{TotalBlocks: 4})
		}
		fams := make([][]wire.SeqHash, 4)
		for f := range fams {
			for j := 0; j < 5; j++ {
				fams[f] = append(fams[f], wire.SeqHash(uint64(f+1)<<32|uint64(j)))
			}
		}
		id, now := uint64(0), int64(0)
		batch := make([]Request, 4)
		ovs := make([][]Overlap, 4)
		dec := make([]Decision, 0, 4)
		effs := make([]Effect, 0, 16)
		active := make([]uint64, 0, 64)
		step := func() {
			now += int64(10 * time.Millisecond)
			for i := range batch {
				id++
				f := int(id % 4)
				batch[i] = Request{ID: id, ISL: 80, Blocks: fams[f]}
				ovs[i] = append(ovs[i][:0], Overlap{Worker: keys[f], Device: uint32(1 + id%5)}, Overlap{Worker: keys[(f+1)%4], Device: 2, Host: 1})
			}
			dec = s.Decide(dec[:0], batch, ovs, now)
			for _, d := range dec {
				if d.Outcome == Routed {
					active = append(active, d.ID)
				}
			}
			// Free the oldest active requests: ranks free one at a time.
			for k := 0; k < 3 && len(active) > 0; k++ {
				s.Free(active[0], now)
				active = append(active[:0], active[1:]...)
				effs = s.Drain(effs[:0])
				for _, e := range effs {
					if e.Kind == EffectAdmitted {
						active = append(active, e.ID)
					}
				}
			}
			effs = s.Drain(effs[:0])
		}
		for i := 0; i < 200; i++ {
			step()
		}
		if st := s.Stats(); st.Admitted == 0 || st.AdmittedAhead == 0 || st.Queued == 0 {
			t.Fatalf("the loop does not exercise cache-aware dispatch: %+v", st)
		}
		if a := testing.AllocsPerRun(100, step); a != 0 {
			t.Errorf("%v allocs per step", a)
		}
	}
}
