package sched

import (
	"math"
	"testing"
	"time"

	"github.com/kvroute/kvroute/wire"
)

// overloadSim drives a Scheduler with a steady arrival stream on a fleet of
// 4 workers, each holding 6 requests at once (8 blocks each, busy above 40),
// every request served for 100 ms after its admission: capacity 240 req/s.
// Time advances in 1 ms steps. It returns, per class rank and per tenant,
// what became of the requests.
type overloadSim struct {
	s        *Scheduler
	routed   [numClasses]int
	rejected [numClasses]int
	reasons  map[Reason]int
	wait     [numClasses][]int64 // ns from arrival to routing
	served   map[uint32][]int64  // tenant → prompt tokens routed per 1 s window
}

func runOverload(t *testing.T, cfg Config, perSec int, secs int, setup func(*Scheduler), mk func(i int) Request) *overloadSim {
	t.Helper()
	s, err := New(cfg, 7)
	if err != nil {
		t.Fatal(err)
	}
	for w := 1; w <= 4; w++ {
		s.AddWorker(wire.WorkerKey{Worker: uint64(w)}, Capacity{TotalBlocks: 40})
	}
	if setup != nil {
		setup(s)
	}
	sim := &overloadSim{s: s, reasons: map[Reason]int{}, served: map[uint32][]int64{}}
	arrived := map[uint64]int64{}
	class := map[uint64]Class{}
	tenant := map[uint64]Request{}
	frees := map[int64][]uint64{} // ms → ids to free
	const step = int64(time.Millisecond)
	var effects []Effect
	routed := func(id uint64, now int64) {
		rk := class[id].Rank()
		sim.routed[rk]++
		sim.wait[rk] = append(sim.wait[rk], now-arrived[id])
		r := tenant[id]
		win := int(now / int64(time.Second))
		for len(sim.served[r.Tenant]) <= win {
			sim.served[r.Tenant] = append(sim.served[r.Tenant], 0)
		}
		sim.served[r.Tenant][win] += int64(r.ISL)
		due := now/step + 100
		frees[due] = append(frees[due], id)
	}
	next := 0
	for ms := int64(0); ms < int64(secs)*1000; ms++ {
		now := ms * step
		for _, id := range frees[ms] {
			s.Free(id, now)
		}
		delete(frees, ms)
		for next*1000 < int(ms+1)*perSec {
			r := mk(next)
			r.ID = uint64(next + 1)
			r.Blocks = make([]wire.SeqHash, 8)
			for j := range r.Blocks {
				r.Blocks[j] = wire.SeqHash(uint64(next+1)<<8 | uint64(j))
			}
			next++
			arrived[r.ID], class[r.ID], tenant[r.ID] = now, r.Class, r
			d := s.Decide(nil, []Request{r}, nil, now)[0]
			switch d.Outcome {
			case Routed:
				routed(d.ID, now)
			case Rejected:
				sim.rejected[r.Class.Rank()]++
				sim.reasons[d.Reason]++
			}
		}
		s.Tick(now)
		effects = s.Drain(effects[:0])
		for _, e := range effects {
			switch e.Kind {
			case EffectAdmitted:
				routed(e.ID, now)
			case EffectRejected:
				sim.rejected[class[e.ID].Rank()]++
				sim.reasons[e.Reason]++
			}
		}
		if err := s.CheckInvariants(); err != nil && ms%500 == 0 {
			t.Fatalf("at %v: %v", time.Duration(now), err)
		}
	}
	return sim
}

func meanOf(xs []int64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var sum float64
	for _, x := range xs {
		sum += float64(x)
	}
	return sum / float64(len(xs))
}

// At 1.5× capacity with 20% critical, 50% standard and 30% sheddable
// requests, shedding by the queue-wait bound falls on the lower classes:
// no critical request is shed, sheddable ones are shed before standard
// ones, and critical requests wait far less than the others.
func TestClassesUnderOverload(t *testing.T) {
	cfg := testConfig()
	cfg.BlockSize = 16
	cfg.MaxQueueWait = 500 * time.Millisecond
	cfg.QueueDepth = 256
	sim := runOverload(t, cfg, 360, 20, nil, func(i int) Request {
		c := ClassStandard
		switch i % 10 {
		case 0, 5:
			c = ClassCritical
		case 2, 6, 9:
			c = ClassSheddable
		}
		return Request{ISL: 128, Class: c}
	})
	t.Logf("routed %v rejected %v reasons %v", sim.routed, sim.rejected, sim.reasons)
	if sim.rejected[0] != 0 {
		t.Errorf("%d critical requests rejected", sim.rejected[0])
	}
	total := sim.routed[2] + sim.rejected[2]
	if sim.rejected[2] < total/2 {
		t.Errorf("sheddable: %d of %d rejected, want most (the overload is 1.5×, sheddable 30%%)", sim.rejected[2], total)
	}
	if sim.rejected[1] > sim.rejected[2]/4 {
		t.Errorf("standard: %d rejected, sheddable %d: the standard class should lose far less", sim.rejected[1], sim.rejected[2])
	}
	crit, std := meanOf(sim.wait[0]), meanOf(sim.wait[1])
	t.Logf("mean wait: critical %v standard %v sheddable %v", time.Duration(crit), time.Duration(std), time.Duration(meanOf(sim.wait[2])))
	if crit > std/4 || crit > float64(50*time.Millisecond) {
		t.Errorf("critical mean wait %v, standard %v", time.Duration(crit), time.Duration(std))
	}
}

// Two tenants of equal weight, one offering three times the other's load,
// both backlogged (together 2.7× capacity): each gets half the prompt
// tokens served in every 1 s window after the first, within 5 points.
func TestTenantsShareFairly(t *testing.T) {
	for _, wait := range []time.Duration{0, 500 * time.Millisecond} {
		cfg := testConfig()
		cfg.MaxQueueWait = wait
		cfg.QueueDepth = 128
		sim := runOverload(t, cfg, 640, 12, nil, func(i int) Request {
			r := Request{ISL: 128, Tenant: 1}
			if i%4 == 3 {
				r.Tenant = 2
			}
			return r
		})
		a, b := sim.served[1], sim.served[2]
		for w := 2; w < min(len(a), len(b))-1; w++ {
			share := float64(a[w]) / float64(a[w]+b[w])
			if math.Abs(share-0.5) > 0.05 {
				t.Errorf("max-wait %v window %d: tenant 1 served %d tokens, tenant 2 %d (share %.3f)", wait, w, a[w], b[w], share)
			}
		}
		t.Logf("max-wait %v: reasons %v, tenant 1 %v, tenant 2 %v", wait, sim.reasons, a, b)
	}
}

// Weights share the served tokens in proportion: 3:1 between two tenants
// offering equal loads.
func TestTenantWeights(t *testing.T) {
	cfg := testConfig()
	cfg.QueueDepth = 128
	setup := func(s *Scheduler) {
		if err := s.SetTenant(1, 3); err != nil {
			t.Fatal(err)
		}
	}
	sim := runOverload(t, cfg, 640, 12, setup, func(i int) Request {
		return Request{ISL: 128, Tenant: 1 + uint32(i%2)}
	})
	a, b := sim.served[1], sim.served[2]
	var ta, tb int64
	for w := 2; w < min(len(a), len(b))-1; w++ {
		ta += a[w]
		tb += b[w]
	}
	if share := float64(ta) / float64(ta+tb); math.Abs(share-0.75) > 0.05 {
		t.Errorf("weight 3 tenant's share %.3f, want 0.75", share)
	}
}

// A token bucket allows its burst at once, then its rate; a refused
// request's retry is the time the bucket takes to hold it.
func TestTokenBucket(t *testing.T) {
	b := TokenBucket{Rate: 1000, Burst: 2000}
	sec := int64(time.Second)
	if ok, _ := b.Take(1500, 0); !ok {
		t.Fatal("burst refused")
	}
	ok, retry := b.Take(1000, 0)
	if ok || retry != 500*time.Millisecond {
		t.Fatalf("over the burst: ok %v retry %v, want a refusal for 500ms", ok, retry)
	}
	if ok, _ := b.Take(1000, sec/2); !ok {
		t.Fatal("refused after the retry")
	}
	// A prompt larger than the burst passes when the bucket is full and
	// leaves it in debt.
	if ok, _ := b.Take(5000, 10*sec); !ok {
		t.Fatal("a prompt over the burst refused from a full bucket")
	}
	if l := b.Level(10 * sec); l != -3000 {
		t.Fatalf("level %v, want -3000", l)
	}
	ok, retry = b.Take(1, 10*sec)
	if ok || retry != 3001*time.Millisecond {
		t.Fatalf("in debt: ok %v retry %v", ok, retry)
	}
	var free TokenBucket
	if ok, _ := free.Take(1<<31, 0); !ok {
		t.Fatal("the zero bucket limits")
	}
}
