package sched

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvroute/kvroute/wire"
)

// fleet is a steady-state workload: n single-rank workers, a pool of
// requests drawn from prompt families that share a prefix, each with the
// index's overlaps on a few workers, and a ring of in-flight requests so
// every decision is matched by a prefill-done and a free.
// arrivals cycles through a request mix: fill stamps the next n requests
// with fresh IDs into batch, their overlaps into bovs.
type arrivals struct {
	reqs   []Request
	ovs    [][]Overlap
	next   int
	nextID uint64
	batch  []Request
	bovs   [][]Overlap
}

func (a *arrivals) fill(n int) {
	for i := range a.batch[:n] {
		r := a.reqs[a.next]
		a.nextID++
		r.ID = a.nextID
		a.batch[i] = r
		a.bovs[i] = a.ovs[a.next]
		a.next = (a.next + 1) % len(a.reqs)
	}
}

type fleet struct {
	arrivals
	s        *Scheduler
	ring     []uint64 // in flight: a circular buffer, oldest at head
	head     int
	count    int
	dec      []Decision
	inFlight int
	decideNs int64 // wall time inside Decide, when timed
	timed    bool
	pd       bool  // DecidePD, one request at a time
	remote   int   // DecidePD: pairs booked
	now      int64 // advances 1 ms per batch
}

type fleetOpts struct {
	workers    int
	blocks     int // blocks per prompt
	prefix     int // of which shared by the family
	families   int
	overlapped int // workers in each request's overlaps (all if ≥ workers)
	inFlight   int
	batch      int
	decay      bool // requests carry an expected prefill duration
	prefill    int  // of the workers, how many are prefill ranks (the first)
	pd         bool // decide one request at a time with DecidePD
	cfg        Config
}

func newFleet(tb testing.TB, o fleetOpts) *fleet {
	s, err := New(o.cfg, 1)
	if err != nil {
		tb.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for w := 0; w < o.workers; w++ {
		c := Capacity{TotalBlocks: 1 << 40}
		if w < o.prefill {
			c.Role = RolePrefill
		} else if o.prefill > 0 {
			c.Role = RoleDecode
		}
		s.AddWorker(wire.WorkerKey{Worker: uint64(w + 1)}, c)
	}
	f := &fleet{s: s, inFlight: o.inFlight, pd: o.pd}
	const pool = 1024
	for i := 0; i < pool; i++ {
		fam := rng.IntN(o.families)
		hs := make([]wire.SeqHash, o.blocks)
		for j := range hs {
			if j < o.prefix {
				hs[j] = wire.SeqHash(uint64(fam+1)<<40 | uint64(j))
			} else {
				hs[j] = wire.SeqHash(rng.Uint64())
			}
		}
		r := Request{ISL: uint32(o.blocks*o.cfg.BlockSize - 3), Blocks: hs}
		if o.decay {
			r.ExpectedPrefill = time.Duration(1+rng.IntN(100)) * time.Millisecond
		}
		f.reqs = append(f.reqs, r)
		var ov []Overlap
		n := min(o.overlapped, o.workers)
		start := rng.IntN(o.workers)
		for k := 0; k < n; k++ {
			w := (start + k*7919) % o.workers
			ov = append(ov, Overlap{Worker: wire.WorkerKey{Worker: uint64(w + 1)}, Device: uint32(rng.IntN(o.prefix + 1)), TreeSize: uint32(rng.IntN(1000))})
		}
		f.ovs = append(f.ovs, ov)
	}
	f.ring = make([]uint64, o.inFlight+o.batch)
	f.batch = make([]Request, o.batch)
	f.bovs = make([][]Overlap, o.batch)
	f.dec = make([]Decision, 0, o.batch)
	// Fill the ring, then run to steady state so every table has grown.
	for f.count < o.inFlight {
		f.step()
	}
	for i := 0; i < 4*o.inFlight/o.batch+16; i++ {
		f.step()
	}
	return f
}

// step decides one batch and retires as many of the oldest requests.
func (f *fleet) step() {
	f.now += int64(time.Millisecond)
	f.fill(len(f.batch))
	if f.pd {
		f.stepPD()
		return
	}
	if f.timed {
		t0 := time.Now()
		f.dec = f.s.Decide(f.dec[:0], f.batch, f.bovs, f.now)
		f.decideNs += int64(time.Since(t0))
	} else {
		f.dec = f.s.Decide(f.dec[:0], f.batch, f.bovs, f.now)
	}
	for i := range f.dec {
		f.ring[(f.head+f.count)%len(f.ring)] = f.dec[i].ID
		f.count++
	}
	for f.count > f.inFlight {
		id := f.ring[f.head]
		f.s.MarkPrefillCompleted(id, f.now)
		f.s.Free(id, f.now)
		f.head = (f.head + 1) % len(f.ring)
		f.count--
	}
}

// stepPD is step with DecidePD, one request at a time; retiring a request
// ends its prefill booking, then its decode rank's prefill, then frees it.
func (f *fleet) stepPD() {
	var t0 time.Time
	if f.timed {
		t0 = time.Now()
	}
	f.dec = f.dec[:0]
	for i := range f.batch {
		d := f.s.DecidePD(&f.batch[i], f.bovs[i], f.now)
		if d.Remote() {
			f.remote++
		}
		f.dec = append(f.dec, d.Decode)
	}
	if f.timed {
		f.decideNs += int64(time.Since(t0))
	}
	for i := range f.dec {
		f.ring[(f.head+f.count)%len(f.ring)] = f.dec[i].ID
		f.count++
	}
	for f.count > f.inFlight {
		id := f.ring[f.head]
		f.s.PrefillDone(id, f.now)
		f.s.MarkPrefillCompleted(id, f.now)
		f.s.Free(id, f.now)
		f.head = (f.head + 1) % len(f.ring)
		f.count--
	}
}

func benchOpts(workers int) fleetOpts {
	cfg := testConfig()
	// The prompts' hashes are chained (a family prefix, then hashes of
	// their own), as the router's are, and the router sets the flag.
	cfg.ChainedHashes = true
	return fleetOpts{
		workers:    workers,
		blocks:     32, // 512-token prompts at block size 16
		prefix:     16,
		families:   64,
		overlapped: 4,
		inFlight:   min(4*workers, 8192),
		batch:      64,
		cfg:        cfg,
	}
}

// BenchmarkDecide measures whole request lifecycles on a steady fleet: one
// op is a batch of 64 decisions (cost over every worker, booking of 32
// blocks and the prefill load) plus the prefill-done and free of 64 older
// requests. decisions/s counts decisions.
func BenchmarkDecide(b *testing.B) {
	for _, n := range []int{8, 256, 7000} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			o := benchOpts(n)
			f := newFleet(b, o)
			runFleet(b, f, o.batch)
		})
	}
}

// runFleet runs the benchmark loop and reports decisions per second of wall
// time and of CPU time (the latter unaffected by waiting for a core on a
// shared machine), CPU ns per decision, and the wall ns per decision spent
// inside Decide alone (choosing and booking, without prefill-done and free).
func runFleet(b *testing.B, f *fleet, batch int) {
	b.ReportAllocs()
	f.timed, f.decideNs = true, 0
	start, cpu := time.Now(), cpuNanos()
	for b.Loop() {
		f.step()
	}
	n := float64(b.N * batch)
	b.ReportMetric(n/time.Since(start).Seconds(), "decisions/s")
	b.ReportMetric(float64(f.decideNs)/n, "decide-ns/decision")
	if c := cpuNanos() - cpu; c > 0 {
		b.ReportMetric(n/(float64(c)/1e9), "cpu-decisions/s")
		b.ReportMetric(float64(c)/n, "cpu-ns/decision")
	}
}

// pdFleets builds the two fleets BenchmarkDecidePD compares on the same
// GPUs: n aggregated ranks, and n/2 prefill with n/2 decode ranks where
// every request is disaggregated (DisaggAlways: the decode leg, then the
// prefill leg, two bookings). Both decide each request alone with DecidePD
// (without prefill ranks it is Decide). weights "default" takes
// DefaultConfig's weight and cache affinity, where the decode leg's
// transfer weight (1) differs from the cost's (8).
func pdFleets(tb testing.TB, n int, weights string) (agg, pd *fleet) {
	o := benchOpts(n)
	o.pd = true
	o.cfg.DisaggPolicy = DisaggAlways
	if weights == "default" || weights == "running" {
		d := DefaultConfig()
		o.cfg.Weight, o.cfg.CacheAffinity = d.Weight, d.CacheAffinity
	}
	if weights == "running" {
		o.cfg.RunningWeight = 1 // decode legs scan (no heap key for requests)
	}
	agg = newFleet(tb, o)
	o.prefill = n / 2
	pd = newFleet(tb, o)
	return agg, pd
}

// BenchmarkDecidePD compares a P/D decision with an aggregated one
// (pdFleets). One op steps both fleets by a batch of 64 decisions each
// (with their retirements: prefill done, first token, free), alternating so
// a shared machine's load falls on both alike; pd/aggregated is the ratio
// of their CPU time, the figure the target bounds (≤ 1.5; doc.go,
// "Disaggregated prefill and decode"), and the ns/decision of each are
// reported too.
func BenchmarkDecidePD(b *testing.B) {
	for _, n := range []int{16, 256, 2048} {
		for _, weights := range []string{"unit", "default", "running"} {
			b.Run(fmt.Sprintf("workers=%d/weights=%s", n, weights), func(b *testing.B) {
				agg, pd := pdFleets(b, n, weights)
				pd.remote = 0
				var aggNs, pdNs int64
				b.ReportAllocs()
				for b.Loop() {
					c0 := cpuNanos()
					agg.step()
					c1 := cpuNanos()
					pd.step()
					c2 := cpuNanos()
					aggNs += c1 - c0
					pdNs += c2 - c1
				}
				if pd.remote != b.N*len(pd.batch) {
					b.Fatalf("%d of %d requests disaggregated", pd.remote, b.N*len(pd.batch))
				}
				d := float64(b.N * len(pd.batch))
				b.ReportMetric(float64(aggNs)/d, "aggregated-cpu-ns/decision")
				b.ReportMetric(float64(pdNs)/d, "pd-cpu-ns/decision")
				if aggNs > 0 {
					b.ReportMetric(float64(pdNs)/float64(aggNs), "pd/aggregated")
				}
			})
		}
	}
}

// BenchmarkDecideVariants sweeps what the per-decision cost depends on:
// every worker in the overlaps (a prefix cached fleet-wide), long prompts,
// temperature sampling and the credit form.
func BenchmarkDecideVariants(b *testing.B) {
	type variant struct {
		name string
		mod  func(*fleetOpts)
	}
	variants := []variant{
		{"all-overlapped", func(o *fleetOpts) { o.overlapped = o.workers }},
		{"blocks=512", func(o *fleetOpts) { o.blocks, o.prefix = 512, 256 }},
		{"temperature=0.5", func(o *fleetOpts) { o.cfg.Temperature = 0.5 }},
		{"credit", func(o *fleetOpts) { o.cfg.CreditCost = true }},
		{"reuse=false", func(o *fleetOpts) { o.cfg.AssumeKVReuse = false }},
	}
	for _, n := range []int{8, 7000} {
		for _, v := range variants {
			b.Run(fmt.Sprintf("workers=%d/%s", n, v.name), func(b *testing.B) {
				o := benchOpts(n)
				v.mod(&o)
				f := newFleet(b, o)
				runFleet(b, f, o.batch)
			})
		}
	}
}

// BenchmarkHeldCount compares the two ways of counting how many of a
// request's blocks each worker already has active: the global index
// (one lookup per block, visiting the holders) against a set per worker
// (one lookup per block per worker), the naive design it replaces.
func BenchmarkHeldCount(b *testing.B) {
	for _, n := range []int{8, 256, 7000} {
		o := benchOpts(n)
		f := newFleet(b, o)
		blocks := f.reqs[0].Blocks
		b.Run(fmt.Sprintf("workers=%d/index", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				f.s.countHeld(blocks, f.s.nextGen())
			}
			b.ReportMetric(float64(len(blocks)), "blocks/op")
		})
		// The naive layout: one Go set of active hashes per worker.
		sets := make([]map[wire.SeqHash]struct{}, n)
		for i := range sets {
			sets[i] = map[wire.SeqHash]struct{}{}
		}
		f.s.blocks.heads.each(func(v uint32) {
			if v&privBit != 0 { // a request's private blocks
				rq := &f.s.reqs[v&^privBit]
				for j, id := range rq.holds {
					if id == 0 {
						sets[rq.slot][wire.SeqHash(rq.hashes[j])] = struct{}{}
					}
				}
				return
			}
			for _, p := range f.s.blocks.appendHolders(nil, v) {
				sets[p.slot][wire.SeqHash(f.s.blocks.vecs[v].hash)] = struct{}{}
			}
		})
		held := make([]uint32, n)
		b.Run(fmt.Sprintf("workers=%d/per-worker-sets", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for w, set := range sets {
					held[w] = 0
					for _, h := range blocks {
						if _, ok := set[h]; !ok {
							break
						}
						held[w]++
					}
				}
			}
			b.ReportMetric(float64(len(blocks)), "blocks/op")
		})
	}
}

// BenchmarkU64Map compares the table with a Go map on the mixed
// lookup/insert/delete pattern of booking and freeing blocks.
func BenchmarkU64Map(b *testing.B) {
	const live = 1 << 16
	keys := make([]uint64, 4*live)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range keys {
		keys[i] = rng.Uint64()
	}
	b.Run("u64map", func(b *testing.B) {
		var m u64map
		for i := 0; i < live; i++ {
			m.set(keys[i], 1)
		}
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			k, old := keys[(i+live)%len(keys)], keys[i%len(keys)]
			if m.get(k) == 0 {
				m.set(k, 1)
			}
			m.del(old)
			i++
		}
	})
	b.Run("map", func(b *testing.B) {
		m := map[uint64]uint32{}
		for i := 0; i < live; i++ {
			m[keys[i]] = 1
		}
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			k, old := keys[(i+live)%len(keys)], keys[i%len(keys)]
			if _, ok := m[k]; !ok {
				m[k] = 1
			}
			delete(m, old)
			i++
		}
	})
}
