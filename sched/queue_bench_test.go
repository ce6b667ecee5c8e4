package sched

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvroute/kvroute/wire"
)

// queueFleet is an overloaded steady state for the waiting queue's dispatch
// path (drain, pickAffinity, the hold and the aging bound), which
// BenchmarkDecide never reaches: its ranks are never busy. Each rank holds
// a few requests before it is busy (Capacity.TotalBlocks), the prompts come
// from families whose prefix is cached on one home rank (and a little of it
// on the next), and as many requests arrive as complete, so the queue stays
// at its working size with requests waiting for their home rank. Every step
// advances 10 ms, completes the oldest qfBatch requests in flight (each
// Free drains the queue) and decides as many new ones.
type queueFleet struct {
	arrivals
	s      *Scheduler
	keys   []wire.WorkerKey
	dec    []Decision
	effs   []Effect
	ring   []uint64 // in flight, oldest at head
	head   int
	count  int
	now    int64
	target int    // working queue length
	admits uint64 // requests routed at arrival or admitted from the queue
}

const (
	qfBlocks = 32 // blocks per prompt (512 tokens)
	qfPrefix = 24 // of which the family's cached prefix
	qfPerRnk = 4  // requests a rank holds before it is busy
	qfBatch  = 8
)

func newQueueFleet(tb testing.TB, workers int, cfg Config) *queueFleet {
	s, err := New(cfg, 1)
	if err != nil {
		tb.Fatal(err)
	}
	f := &queueFleet{s: s, target: min(2*workers, cfg.QueueDepth/4)}
	for w := 0; w < workers; w++ {
		k := wire.WorkerKey{Worker: uint64(w + 1)}
		f.keys = append(f.keys, k)
		// Busy above qfPerRnk requests' worth of distinct blocks.
		s.AddWorker(k, Capacity{TotalBlocks: qfPerRnk * qfBlocks})
	}
	rng := rand.New(rand.NewPCG(5, 6))
	families := 4 * workers
	for i := 0; i < 1024; i++ {
		fam := rng.IntN(families)
		hs := make([]wire.SeqHash, qfBlocks)
		for j := range hs {
			if j < qfPrefix {
				hs[j] = wire.SeqHash(uint64(fam+1)<<40 | uint64(j))
			} else {
				hs[j] = wire.SeqHash(rng.Uint64())
			}
		}
		f.reqs = append(f.reqs, Request{ISL: qfBlocks*uint32(cfg.BlockSize) - 3, Blocks: hs})
		home := fam % workers
		f.ovs = append(f.ovs, []Overlap{
			{Worker: f.keys[home], Device: uint32(qfPrefix/2 + rng.IntN(qfPrefix/2+1)), Host: uint32(rng.IntN(4))},
			{Worker: f.keys[(home+1)%workers], Device: uint32(rng.IntN(qfPrefix / 4))},
		})
	}
	f.ring = make([]uint64, 0, 1)
	f.batch = make([]Request, qfBatch)
	f.bovs = make([][]Overlap, qfBatch)
	f.dec = make([]Decision, 0, qfBatch)
	f.effs = make([]Effect, 0, 64)
	// Fill every rank and a queue of about two requests per rank, then run
	// to steady state so every table has grown.
	for s.q.len() < f.target {
		f.arrive(qfBatch)
	}
	for i := 0; i < 400; i++ {
		f.step()
	}
	return f
}

// track records admitted requests as in flight.
func (f *queueFleet) track(id uint64) {
	if f.count == len(f.ring) {
		// Grow (warm-up only): unroll into a larger ring.
		r := make([]uint64, 2*len(f.ring)+16)
		for i := 0; i < f.count; i++ {
			r[i] = f.ring[(f.head+i)%len(f.ring)]
		}
		f.ring, f.head = r, 0
	}
	f.ring[(f.head+f.count)%len(f.ring)] = id
	f.count++
	f.admits++
}

func (f *queueFleet) drainEffects() {
	f.effs = f.s.Drain(f.effs[:0])
	for _, e := range f.effs {
		if e.Kind == EffectAdmitted {
			f.track(e.ID)
		}
	}
}

func (f *queueFleet) arrive(n int) {
	f.fill(n)
	f.dec = f.s.Decide(f.dec[:0], f.batch[:n], f.bovs[:n], f.now)
	f.drainEffects() // admitted from the queue before the batch
	for _, d := range f.dec {
		if d.Outcome == Routed {
			f.track(d.ID)
		}
	}
}

func (f *queueFleet) step() {
	f.now += int64(10 * time.Millisecond)
	k := 0
	for ; k < qfBatch && f.count > 0; k++ {
		id := f.ring[f.head]
		f.head = (f.head + 1) % len(f.ring)
		f.count--
		f.s.MarkPrefillCompleted(id, f.now)
		f.s.Free(id, f.now)
		f.drainEffects()
	}
	// As many arrivals as completions, fewer while the queue is over its
	// working size (the ranks' share of the requests in flight varies with
	// the families they hold), more while it is under.
	f.arrive(min(max(f.target-f.s.q.len()+k, 0), qfBatch))
	f.s.Tick(f.now) // holds that ran out admit here
	f.drainEffects()
}

// queueDispatchConfig is the defaults (cache affinity, hold, tail, the
// per-block extension) with a hold short enough that holds begin and end
// within the steady state's waits (about 2 steps per rank queued, 10 ms a
// step).
func queueDispatchConfig() Config {
	cfg := DefaultConfig()
	cfg.QueueAffinityHold = 500 * time.Millisecond
	return cfg
}

// BenchmarkQueueDispatch measures the queue's dispatch path under overload
// with affinity holds in play: one op is a step (8 completions, each
// draining the queue, as many arrivals and a Tick). admissions/s and
// cpu-ns/admission count the requests routed (at arrival or from the
// queue); holds/op the drains that left a free rank idle for a busy one.
func BenchmarkQueueDispatch(b *testing.B) {
	for _, n := range []int{8, 256} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			f := newQueueFleet(b, n, queueDispatchConfig())
			b.ReportAllocs()
			admits, holds, ahead := f.admits, f.s.q.holds, f.s.stats.AdmittedAhead
			start, cpu := time.Now(), cpuNanos()
			for b.Loop() {
				f.step()
			}
			n := float64(f.admits - admits)
			b.ReportMetric(n/time.Since(start).Seconds(), "admissions/s")
			if c := cpuNanos() - cpu; c > 0 && n > 0 {
				b.ReportMetric(float64(c)/n, "cpu-ns/admission")
			}
			b.ReportMetric(float64(f.s.q.holds-holds)/float64(b.N), "holds/op")
			b.ReportMetric(float64(f.s.stats.AdmittedAhead-ahead)/float64(b.N), "ahead/op")
			b.ReportMetric(float64(f.s.Stats().QueueDepth), "queue")
		})
	}
}
