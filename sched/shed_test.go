package sched

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/wire"
)

func TestShedProb(t *testing.T) {
	for _, c := range []struct {
		queued int
		limit  float64
		want   float64
	}{
		{0, 100, 0}, {48, 100, 0}, {49, 100, 0}, {74, 100, 0.5}, {99, 100, 1}, {500, 100, 1}, {3, 0, 1},
	} {
		if got := shedProb(c.queued, c.limit); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("shedProb(%d, %v) = %v, want %v", c.queued, c.limit, got, c.want)
		}
	}
}

// The drain rate counts only the time the queue held requests, and is
// smoothed across samples.
func TestShedderRate(t *testing.T) {
	var m shedder
	m.init(time.Second, 1)
	ms := int64(time.Millisecond)
	// An empty queue for 10 s: no time counted, no estimate.
	m.advance(10_000*ms, 0)
	if m.have || m.busy != 0 {
		t.Fatalf("empty queue measured: have %v busy %d", m.have, m.busy)
	}
	// 50 admissions per second of busy time: one every 20 ms.
	now := 10_000 * ms
	for range 100 {
		now += 20 * ms
		m.advance(now, 5)
		m.admitted(1)
	}
	if !m.have || math.Abs(m.rate-50) > 5 {
		t.Fatalf("rate %v (have %v), want about 50", m.rate, m.have)
	}
	// The rate halves: the estimate follows within a few time constants.
	for range 200 {
		now += 40 * ms
		m.advance(now, 5)
		m.admitted(1)
	}
	if math.Abs(m.rate-25) > 3 {
		t.Fatalf("rate %v after the drain slowed, want about 25", m.rate)
	}
	// Nothing drains (a stalled fleet): the rate falls towards 0 and the
	// first waiter is still let in, the second shed once the estimate is low.
	for range 100 {
		now += 40 * ms
		m.advance(now, 5)
	}
	if m.rate > 1 {
		t.Fatalf("rate %v after 4 s without admissions", m.rate)
	}
	if m.shed(0, 1024) || !m.shed(1, 1024) {
		t.Fatalf("stalled: shed(0) %v shed(1) %v, want false, true", m.shed(0, 1024), m.shed(1, 1024))
	}
	var off shedder
	off.init(0, 1)
	off.have, off.rate = true, 1
	if off.shed(1000, 1024) {
		t.Fatal("shed with MaxQueueWait 0")
	}
}

// simResult is a virtual-time run of the scheduler under overload, per
// second of arrivals.
type simResult struct {
	offered, ok, shed, full, timeout []int // per second: arrivals, served (routed at once or admitted), ReasonQueueWait, queue full or window, queue timeout
	waits                            []time.Duration
	capacity                         float64 // requests per second the fleet serves when saturated
}

type completion struct {
	at int64
	id uint64
}
type completions []completion

func (c completions) Len() int           { return len(c) }
func (c completions) Less(i, j int) bool { return c[i].at < c[j].at }
func (c completions) Swap(i, j int)      { c[i], c[j] = c[j], c[i] }
func (c *completions) Push(x any)        { *c = append(*c, x.(completion)) }
func (c *completions) Pop() any {
	old := *c
	x := old[len(old)-1]
	*c = old[:len(old)-1]
	return x
}

// simulateOverload runs 4 ranks that each take 9 requests of 4 blocks
// (busy above 32 active blocks), service times uniform in [50, 150] ms, so
// a capacity of 4 × 9 / 0.1 s = 360 requests/s, under Poisson arrivals at
// load × capacity for secs seconds, in virtual time: a Decide per arrival
// (429 while Throttled, as the HTTP layer answers), a Free per completion, a
// Tick every 20 ms, and a 30 s queue timeout (Free of the waiting id), as
// the router does.
//
// With jitter > 0 the fleet's speed changes every 500 ms: service times are
// multiplied by a factor drawn uniformly in [1 − jitter, 1 + jitter].
func simulateOverload(t *testing.T, maxWait time.Duration, load, jitter float64, secs int, seed uint64) simResult {
	t.Helper()
	cfg := DefaultConfig()
	cfg.MaxQueueWait = maxWait
	s, err := New(cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	for w := uint64(1); w <= 4; w++ {
		s.AddWorker(wire.WorkerKey{Worker: w}, Capacity{TotalBlocks: 32})
	}
	res := simResult{capacity: 360, offered: make([]int, secs), ok: make([]int, secs), shed: make([]int, secs),
		full: make([]int, secs), timeout: make([]int, secs)}
	rng := rand.New(rand.NewPCG(seed, 7))
	sec := func(at int64) int { return min(int(at/int64(time.Second)), secs-1) }
	var (
		done    completions
		enq     = map[uint64]int64{} // waiting: enqueue time
		arrival = map[uint64]int64{}
		effects []Effect
		decs    []Decision
		blocks  = make([]wire.SeqHash, 4)
		next    uint64
	)
	slow, slowUntil := 1.0, int64(0)
	service := func() int64 {
		return int64(slow * float64(int64(50*time.Millisecond)+rng.Int64N(int64(100*time.Millisecond))))
	}
	start := func(id uint64, now int64) {
		res.ok[sec(arrival[id])]++
		heap.Push(&done, completion{now + service(), id})
	}
	drainFx := func(now int64) {
		effects = s.Drain(effects[:0])
		for _, e := range effects {
			if e.Kind == EffectAdmitted {
				res.waits = append(res.waits, time.Duration(now-enq[e.ID]))
				delete(enq, e.ID)
				start(e.ID, now)
			}
		}
	}
	end := int64(secs) * int64(time.Second)
	meanGap := float64(time.Second) / (load * res.capacity)
	nextArrival := int64(rng.ExpFloat64() * meanGap)
	nextTick := int64(20 * time.Millisecond)
	for {
		now := min(nextArrival, nextTick)
		if done.Len() > 0 && done[0].at < now {
			now = done[0].at
		}
		if now >= end {
			break
		}
		if jitter > 0 && now >= slowUntil {
			slowUntil = now + int64(500*time.Millisecond)
			slow = 1 + jitter*(2*rng.Float64()-1)
		}
		switch {
		case done.Len() > 0 && done[0].at == now:
			c := heap.Pop(&done).(completion)
			s.Free(c.id, now)
		case now == nextTick:
			nextTick += int64(20 * time.Millisecond)
			s.Tick(now)
			for id, at := range enq {
				if now-at >= int64(30*time.Second) {
					s.Free(id, now)
					delete(enq, id)
					res.timeout[sec(arrival[id])]++
				}
			}
		default:
			nextArrival += max(1, int64(rng.ExpFloat64()*meanGap))
			next++
			id := next
			arrival[id] = now
			res.offered[sec(now)]++
			if s.Throttled(now) {
				res.full[sec(now)]++
				break
			}
			for i := range blocks {
				blocks[i] = wire.SeqHash(id<<8 | uint64(i+1))
			}
			decs = s.Decide(decs[:0], []Request{{ID: id, ISL: 64, Blocks: blocks}}, nil, now)
			switch d := decs[0]; {
			case d.Outcome == Routed:
				start(id, now)
			case d.Outcome == Queued:
				enq[id] = now
			case d.Reason == ReasonQueueWait:
				res.shed[sec(now)]++
			default:
				res.full[sec(now)]++
			}
		}
		drainFx(now)
	}
	return res
}

func (r simResult) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%4s %7s %5s %5s %5s %7s\n", "sec", "offered", "200", "shed", "full", "timeout")
	for i := range r.offered {
		fmt.Fprintf(&b, "%4d %7d %5d %5d %5d %7d\n", i, r.offered[i], r.ok[i], r.shed[i], r.full[i], r.timeout[i])
	}
	return b.String()
}

// onOff counts, from second from on, the seconds in which fewer than 10% of
// the arrivals got past admission (shed, refused while throttled or when
// the queue was full): the "off" half of an on/off pattern; a smooth shedder
// at 3× overload lets about a third through every second.
func (r simResult) onOff(from int) (off int) {
	for i := from; i < len(r.offered); i++ {
		if r.offered[i] > 0 && float64(r.offered[i]-r.shed[i]-r.full[i]) < 0.1*float64(r.offered[i]) {
			off++
		}
	}
	return off
}

// served is the mean of the per-second 200s from second from (by arrival
// second, the last few seconds excluded: their requests may still be
// waiting) and its coefficient of variation.
func (r simResult) served(from int) (mean, cv float64) {
	xs := r.ok[from : len(r.ok)-2]
	for _, x := range xs {
		mean += float64(x)
	}
	mean /= float64(len(xs))
	var v float64
	for _, x := range xs {
		v += (float64(x) - mean) * (float64(x) - mean)
	}
	return mean, math.Sqrt(v/float64(len(xs))) / mean
}

// Under a simulated 3× overload on virtual time, --max-queue-wait keeps the
// admitted requests' wait bounded, the fleet at capacity every second, and
// the admissions smooth; the reference behaviour (off) flaps between the
// all-workers-busy window and a full queue, which the same criteria catch.
func TestOverloadShedsSmoothly(t *testing.T) {
	const secs, warm = 30, 3
	ref := simulateOverload(t, 0, 3, 0, secs, 1)
	on := simulateOverload(t, time.Second, 3, 0, secs, 1)
	t.Logf("reference (max queue wait off):\n%s", ref)
	t.Logf("max queue wait 1s:\n%s", on)

	// The reference flaps: seconds with (almost) nobody admitted, long waits.
	if off := ref.onOff(warm); off < 3 {
		t.Errorf("reference: %d off seconds, want the on/off pattern of the all-workers-busy window", off)
	}
	slices.Sort(ref.waits)
	if p99 := ref.waits[len(ref.waits)*99/100]; p99 < 2*time.Second {
		t.Errorf("reference: p99 wait %v, want the long waits of a full queue", p99)
	}

	if off := on.onOff(warm); off != 0 {
		t.Errorf("shedding: %d seconds with < 10%% admitted (on/off pattern)", off)
	}
	mean, cv := on.served(warm)
	if math.Abs(mean-on.capacity) > 0.1*on.capacity || cv > 0.1 {
		t.Errorf("shedding: %.0f served/s (capacity %.0f), cv %.3f: want within 10%% of capacity and cv ≤ 0.1", mean, on.capacity, cv)
	}
	for i := warm; i < secs-2; i++ { // the last seconds' arrivals may still wait
		if on.ok[i] < int(0.8*on.capacity) {
			t.Errorf("shedding: second %d served %d, under 80%% of capacity", i, on.ok[i])
		}
	}
	slices.Sort(on.waits)
	p99, worst := on.waits[len(on.waits)*99/100], on.waits[len(on.waits)-1]
	if p99 > time.Second || worst > 1500*time.Millisecond {
		t.Errorf("shedding: waits p99 %v max %v, want p99 ≤ --max-queue-wait (1s) and max ≤ 1.5s", p99, worst)
	}
	var shed, full, timeouts int
	for i := range on.offered {
		shed, full, timeouts = shed+on.shed[i], full+on.full[i], timeouts+on.timeout[i]
	}
	if shed == 0 || full != 0 || timeouts != 0 {
		t.Errorf("shedding: %d shed, %d refused by a full queue or the window, %d timeouts: want only shedding", shed, full, timeouts)
	}
	rmean, rcv := ref.served(warm)
	t.Logf("shedding: served %.0f/s (capacity %.0f), cv %.3f, wait p99 %v max %v; reference: %d of %d seconds off, served %.0f/s, cv %.3f, wait p99 %v",
		mean, on.capacity, cv, p99, worst, ref.onOff(warm), secs-warm, rmean, rcv, ref.waits[len(ref.waits)*99/100])
}

// Below capacity nothing is shed, and the same seed gives the same run.
func TestShedUnderCapacityAndDeterministic(t *testing.T) {
	r := simulateOverload(t, time.Second, 0.7, 0, 10, 3)
	for i := range r.offered {
		if r.shed[i] != 0 || r.full[i] != 0 {
			t.Fatalf("at 70%% load second %d: %d shed, %d refused", i, r.shed[i], r.full[i])
		}
	}
	a := simulateOverload(t, time.Second, 3, 0, 8, 5)
	b := simulateOverload(t, time.Second, 3, 0, 8, 5)
	if a.String() != b.String() || !slices.Equal(a.waits, b.waits) {
		t.Fatalf("two runs with one seed differ:\n%s\n%s", a, b)
	}
}

// A fleet whose speed wanders by ±40% every 500 ms (the real-time chaos
// run's fleet on a loaded machine): the drain-rate estimate follows it, the
// queue never empties, no second admits under 10%, and the wait stays
// within 1.5 × the bound (a request admitted to the queue before the fleet
// slows waits longer than predicted).
func TestShedJitteredFleet(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		r := simulateOverload(t, time.Second, 3, 0.4, 30, seed)
		minFrac := 1.0
		for i := 3; i < len(r.offered)-2; i++ {
			minFrac = min(minFrac, float64(r.offered[i]-r.shed[i]-r.full[i])/float64(r.offered[i]))
		}
		mean, cv := r.served(3)
		slices.Sort(r.waits)
		p99 := r.waits[len(r.waits)*99/100]
		t.Logf("seed %d: min admitted fraction %.2f, served %.0f/s (cv %.3f), p99 wait %v", seed, minFrac, mean, cv, p99)
		if minFrac < 0.1 || p99 > 1500*time.Millisecond || mean < 0.9*r.capacity {
			t.Errorf("seed %d: min admitted fraction %.2f, p99 wait %v, served %.0f/s: want ≥ 0.1, ≤ 1.5s, ≥ 90%% of %.0f",
				seed, minFrac, p99, mean, r.capacity)
		}
	}
}
