package replay

import (
	"fmt"
	"runtime"
	"slices"
	"sync"

	"github.com/kvroute/kvroute/bench/kvcache"
)

// MaxAutoSpeedup bounds the automatic sweep's doubling.
const MaxAutoSpeedup = 1024

// Sweep says which runs Run makes: every policy at every speedup. A plain
// value; Run only reads it.
type Sweep struct {
	Policies []Policy
	// Speedups to run. With Auto they are ignored.
	Speedups []float64
	// Auto finds kv's saturation speedup: kv runs at 1, 2, 4, ... until it
	// saturates (at most MaxAutoSpeedup), then bisects between the last
	// speedup it kept up with and the first it did not until they are within
	// 15%; every other policy then runs at every speedup kv ran at. The
	// policy list must contain kv.
	Auto bool
	// Parallel runs this many simulations at once (default GOMAXPROCS).
	// Results do not depend on it.
	Parallel int
}

// Run replays w for every (speedup, policy) of sw and returns the report,
// its Results ordered by speedup, then in sw.Policies order.
func Run(w *Workload, cfg Config, sw Sweep) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(sw.Policies) == 0 {
		return nil, fmt.Errorf("%w: no policy to run", ErrConfig)
	}
	if sw.Parallel <= 0 {
		sw.Parallel = runtime.GOMAXPROCS(0)
	}
	cfg = cfg.withDefaults()
	done := map[runKey]Result{}
	var speedups []float64
	if sw.Auto {
		kv := slices.IndexFunc(sw.Policies, func(p Policy) bool { return p.Name == "kv" })
		if kv < 0 {
			return nil, fmt.Errorf("%w: the automatic sweep needs the kv policy", ErrConfig)
		}
		var err error
		if speedups, err = autoSweep(w, cfg, sw.Policies[kv], done); err != nil {
			return nil, err
		}
	} else {
		for _, s := range sw.Speedups {
			if s <= 0 {
				return nil, fmt.Errorf("%w: speedup must be > 0 (got %g)", ErrConfig, s)
			}
			if !slices.Contains(speedups, s) {
				speedups = append(speedups, s)
			}
		}
		if len(speedups) == 0 {
			speedups = []float64{1}
		}
	}
	slices.Sort(speedups)
	var jobs []runKey
	for _, s := range speedups {
		for pi := range sw.Policies {
			if _, ok := done[runKey{s, sw.Policies[pi].Name}]; !ok {
				jobs = append(jobs, runKey{s, sw.Policies[pi].Name})
			}
		}
	}
	byName := map[string]Policy{}
	for _, p := range sw.Policies {
		byName[p.Name] = p
	}
	if err := runAll(w, cfg, byName, jobs, sw.Parallel, done); err != nil {
		return nil, err
	}
	rep := newReport(w, cfg, "offline")
	rep.Speedups = speedups
	for _, s := range speedups {
		for _, p := range sw.Policies {
			rep.Policies = append(rep.Policies, done[runKey{s, p.Name}])
		}
	}
	// The reference cache holds what the whole fleet holds: every rank's
	// device and host blocks.
	f := cfg.Fleet.withDefaults()
	rep.HostKVBlocks = f.HostKVBlocks
	rep.FleetCacheHitRatio, rep.FleetCacheOverTime = w.PooledLRU(f.Ranks() * (f.KVBlocks + f.HostKVBlocks))
	for i := range rep.Policies {
		if rep.FleetCacheHitRatio > 0 {
			rep.Policies[i].HitOfFleetCache = rep.Policies[i].HitRatio / rep.FleetCacheHitRatio
		}
	}
	rep.saturation()
	return rep, nil
}

type runKey struct {
	speedup float64
	policy  string
}

// runAll runs jobs on parallel goroutines into done.
func runAll(w *Workload, cfg Config, pols map[string]Policy, jobs []runKey, parallel int, done map[runKey]Result) error {
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
		next  = make(chan runKey)
	)
	for range min(parallel, len(jobs)) {
		wg.Go(func() {
			for k := range next {
				c := cfg
				c.Speedup = k.speedup
				r, err := Simulate(w, c, pols[k.policy])
				mu.Lock()
				if err != nil && first == nil {
					first = fmt.Errorf("policy %s at speedup %g: %w", k.policy, k.speedup, err)
				}
				done[k] = r
				mu.Unlock()
			}
		})
	}
	for _, k := range jobs {
		next <- k
	}
	close(next)
	wg.Wait()
	return first
}

// autoSweep runs kv at doubling speedups until it saturates, then bisects,
// and returns the speedups it ran (results in done).
func autoSweep(w *Workload, cfg Config, kv Policy, done map[runKey]Result) ([]float64, error) {
	run := func(s float64) (bool, error) {
		c := cfg
		c.Speedup = s
		r, err := Simulate(w, c, kv)
		if err != nil {
			return false, fmt.Errorf("policy kv at speedup %g: %w", s, err)
		}
		done[runKey{s, kv.Name}] = r
		return r.Saturated, nil
	}
	var ran []float64
	ok, bad := 0.0, 0.0
	for s := 1.0; s <= MaxAutoSpeedup; s *= 2 {
		ran = append(ran, s)
		sat, err := run(s)
		if err != nil {
			return nil, err
		}
		if sat {
			bad = s
			break
		}
		ok = s
	}
	if ok == 0 || bad == 0 {
		return ran, nil
	}
	for bad/ok > 1.15 {
		mid := (ok + bad) / 2
		ran = append(ran, mid)
		sat, err := run(mid)
		if err != nil {
			return nil, err
		}
		if sat {
			bad = mid
		} else {
			ok = mid
		}
	}
	return ran, nil
}

// PooledLRU returns the hit ratio of one LRU prefix cache of capacity
// blocks (the engine's block manager), the requests in arrival order, each
// computed and released at once, overall and per time slot (as
// AchievableOverTime): what a cache as large as the whole fleet's allows
// when no routing decision ever loses a hit. Not a strict bound (LRU is not
// optimal, and concurrent requests pin blocks a pooled cache would evict),
// but the reference that shows when capacity, not routing, limits the hit
// ratio. A request larger than the cache counts as a miss.
func (w *Workload) PooledLRU(capacity int) (float64, []float64) {
	buckets := make([]bucket, Buckets)
	if capacity <= 0 {
		return 0, ratios(buckets)
	}
	m := kvcache.New(kvcache.Config{Capacity: capacity, BlockSize: w.BlockSize})
	var hit int64
	for _, i := range arrivalOrder(w.arrival) {
		r := &w.Trace.Requests[i]
		local := w.Local(int(i))
		limit := (r.InputLength - 1) / w.BlockSize
		n := m.Match(local[:min(limit, len(local))])
		b := &buckets[w.bucketOf(w.arrival[i])]
		b.prompt += int64(r.InputLength)
		if _, err := m.Allocate(uint64(i)+1, local, r.InputLength); err == nil {
			hit += int64(n * w.BlockSize)
			b.cached += int64(n * w.BlockSize)
			m.Free(uint64(i) + 1)
		}
		m.Reset()
	}
	return float64(hit) / float64(w.promptTokens), ratios(buckets)
}

// PartitionedLRU is PooledLRU split into ranks caches of capacity blocks
// each, with an offline placement that knows every cache's content: in
// arrival order, a request goes to the cache holding the longest prefix of
// its prompt among those whose share of the recomputed (uncached) prompt
// tokens of the last window requests is at most (1 + slack) × the mean,
// the least loaded of them when none holds any (and among equals). No
// timing, no concurrency: it is what cache affinity under a balance bound
// gets from partitioned caches, for comparison with the pooled reference
// (slack +Inf: load ignored, only new prefixes balanced). It returns the
// hit ratio and the largest cache's share of the uncached tokens over the
// mean.
func (w *Workload) PartitionedLRU(ranks, capacity int, slack float64, window int) (hit, maxShare float64) {
	if ranks <= 0 || capacity <= 0 {
		return 0, 0
	}
	caches := make([]*kvcache.Manager, ranks)
	for i := range caches {
		caches[i] = kvcache.New(kvcache.Config{Capacity: capacity, BlockSize: w.BlockSize})
	}
	type placed struct {
		rank int
		work int64
	}
	recent := make([]placed, 0, window)
	load := make([]int64, ranks)
	total := make([]int64, ranks)
	var recentSum, hitTok int64
	for _, i := range arrivalOrder(w.arrival) {
		r := &w.Trace.Requests[i]
		local := w.Local(int(i))
		limit := min((r.InputLength-1)/w.BlockSize, len(local))
		bound := (1 + slack) * float64(recentSum) / float64(ranks)
		best, bestN := -1, -1
		for k, c := range caches {
			if len(recent) > 0 && float64(load[k]) > bound {
				continue
			}
			n := c.Match(local[:limit])
			if n > bestN || (n == bestN && load[k] < load[best]) {
				best, bestN = k, n
			}
		}
		if best < 0 { // every cache above the bound: the least loaded
			best = 0
			for k := range load {
				if load[k] < load[best] {
					best = k
				}
			}
			bestN = caches[best].Match(local[:limit])
		}
		c := caches[best]
		work := int64(r.InputLength - bestN*w.BlockSize)
		if _, err := c.Allocate(uint64(i)+1, local, r.InputLength); err == nil {
			hitTok += int64(bestN * w.BlockSize)
			c.Free(uint64(i) + 1)
		}
		c.Reset()
		if window > 0 {
			if len(recent) == window {
				old := recent[0]
				recent = append(recent[:0], recent[1:]...)
				load[old.rank] -= old.work
				recentSum -= old.work
			}
			recent = append(recent, placed{best, work})
			load[best] += work
			recentSum += work
		}
		total[best] += work
	}
	var sum, top int64
	for _, t := range total {
		sum += t
		top = max(top, t)
	}
	if sum > 0 {
		maxShare = float64(top) * float64(ranks) / float64(sum)
	}
	return float64(hitTok) / float64(w.promptTokens), maxShare
}
