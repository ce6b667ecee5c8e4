// Package sched provides kvroute's deterministic scheduler core: it decides
// which worker (dp rank) each request goes to, weighing the KV cache the
// index reports against the load already booked, and what happens when every
// worker is busy.
//
//	s, err := sched.New(sched.DefaultConfig(), seed)
//	s.AddWorker(key, sched.Capacity{...})
//	decisions = s.Decide(decisions[:0], batch, overlaps, now) // overlaps[i] for batch[i]
//	s.MarkPrefillCompleted(id, now); s.Free(id, now)         // as the engine reports
//	effects = s.Drain(effects[:0])                            // admissions, rejections, expiries
//	pair := s.DecidePD(&req, overlaps, now)                   // with prefill ranks (Capacity.Role)
//	s.PrefillDone(id, now)                                    // the prefill leg answered
//
// A Scheduler is a synchronous, single-owner state machine in the style of
// etcd raft's RawNode: no goroutines, no locks, no clock, no global
// randomness. Time is an argument (now, nanoseconds since an epoch the caller
// chooses), randomness comes from the seed given to New (a second PCG from
// the same seed serves shedding, so it does not move tie breaks), and outputs
// that are not return values (admissions from the waiting queue, rejections,
// expiries, AllWorkersBusy events) go to an outbox the caller empties with
// Drain. Given the same seed and the same calls, it makes the same
// decisions. One goroutine owns it (the router's batcher). Slices passed in
// (Request.Blocks, overlaps, Override.Allowed) are read during the call only;
// slices it returns are the caller's dst, appended to.
//
// # Active sequences
//
// Every routed request is booked on its rank until Free: its blocks (the
// sequence hashes of the prompt's full blocks) become active there, counted
// once per rank however many active requests share them, and its effective
// prefill tokens join the rank's prefill load until MarkPrefillCompleted.
// AddRequest's caller supplies the PrefillLoadHint (effective tokens = ISL −
// cached blocks × block size, and an optional expected duration); Decide
// computes it the same way for the rank it chooses. With AssumeKVReuse off a
// booking's blocks get fresh random hashes, so nothing is shared. The oldest
// request in prefill, if it has an expected duration, decays linearly from
// when it became the oldest. Requests older than Config.Expiry are
// force-freed on Tick and reported as EffectExpired.
//
// # Cost
//
// For each candidate rank, with B the block size:
//
//	cached         = device + HostHitWeight × host + DiskHitWeight × disk
//	prefill_blocks = (active prefill tokens + max(0, ISL − cached × B)) / B
//	                 − (CacheAffinity − 1) × cached
//	decode_blocks  = active blocks + blocks of the request not active there
//	cost           = w × prefill_blocks + decode_blocks
//
// device is the device-tier overlap from the index, host and disk the blocks
// by which host memory and disk (or an external store) extend that prefix,
// w is Config.Weight (or the request's override). With Config.CreditCost:
//
//	raw_prefill_blocks = (active prefill tokens + ISL) / B
//	credit = OverlapCredit × device + HostHitWeight × host + DiskHitWeight × disk
//	cost   = PrefillLoadScale × max(0, raw_prefill_blocks − credit) + decode_blocks
//
// At temperature 0 the lowest cost wins; ties go to the smallest tree
// (Overlap.TreeSize, else SetTreeSize), then to a seeded random pick. At
// temperature T > 0 a rank is sampled with probability proportional to
// exp(−(cost − min) / (max − min) / T). Config.Policy can replace the cost
// with round-robin, random or least-loaded, which still book load and obey
// busy detection and the queue. Per request, Override replaces the weight or
// temperature and restricts the candidates to a pinned rank or an allowed
// set. DecideExplained reports every rank's terms. Decide decides a batch one
// request at a time, booking each before the next, so siblings spread out.
//
// # Busy workers, the queue, shedding and the latch
//
// A dp rank is busy when max(active blocks, the engine's reported used
// blocks) > BusyDecodeFrac × its total KV blocks, or its active prefill
// tokens exceed BusyPrefillTokens or BusyPrefillFrac × its max batched
// tokens (each only when configured and the capacity known). A worker is
// busy when all its ranks are; ranks of busy workers are not candidates (a
// busy rank of a worker with a free rank still is). When every eligible rank
// is busy the request waits in a queue bounded by QueueDepth, ordered by
// QueuePolicy (fcfs, lcfs, wspt); waiting requests are admitted whenever
// load may have freed (MarkPrefillCompleted, Free, Tick, ReportLoad,
// RemoveRank, each Decide), each as an EffectAdmitted (or EffectRejected if
// no usable rank remains). A request finding the queue full is rejected
// (ReasonQueueFull) and an EffectAllWorkersBusy is emitted; Throttled(now)
// is then true until At + RejectionWindow, extended by each new event
// (ObserveAllWorkersBusy for remote ones).
//
// With MaxQueueWait > 0 a request that would wait may be shed first
// (ReasonQueueWait; shed.go). The queue's drain rate is measured: admissions
// per second of time the queue held requests, in samples of ≥ 200 ms and 4
// admissions or 2 s, smoothed with weight 1 − exp(−d/1 s). A request finding
// n waiting has predicted wait (n + 1) / rate; against L = min(rate ×
// MaxQueueWait, QueueDepth) it is shed with probability clamp(2(n + 1)/L − 1,
// 0, 1). The first waiter is never shed, nor anything before the first
// sample. QueueWait(now) reports the rate and the time the queue takes to
// drain. Why: docs/decisions/0027-shedding-ramp.md.
//
// # Defaults
//
// DefaultConfig: Weight 8 (Dynamo: 1, the same units), HostHitWeight 0.75,
// DiskHitWeight 0.25, CacheAffinity 4, BusyDecodeFrac 1.0 (busy detection
// on: it is what makes the router queue, shed and answer 429/503), the
// queue-affinity settings below, MaxQueueWait 0 (the service flag's default
// is 2 s). Unit tests and scripts pin the reference values (testConfig:
// weight 1, cache affinity 1, no hold, tail or per-block patience). Why:
// docs/decisions/0024-cost-defaults-and-busy-detection.md.
//
// # Cache-aware dispatch
//
// Under PolicyKV (queue.go, pickAffinity) each admission lets the first
// QueueAffinity (32) unrestricted waiting requests compete: the first that
// has waited its aging bound goes (queue order among aged requests), else the
// one with the largest advantage (cached blocks on the best available rank
// minus on the best other rank: the arrival overlaps with tier weights, or
// the prompt's blocks active there now if more), earliest among equals; the
// cost then picks the rank. Restricted requests keep queue order. The
// available ranks come from the plain-rank heap and its slow list, so a drain
// on an all-busy fleet costs O(slow ranks). Stats.AdmittedAhead counts
// admissions ahead of an earlier request. Tests: TestAffinityMatchesModel,
// TestAffinityAgingBound, TestAffinityNeverPassesAged.
//
// # Cache affinity
//
// CacheAffinity credits a cached block as that many blocks of prefill (the
// cost above; only ranks with an overlap change cost). QueueAffinityHold (3 s)
// keeps a request with its cache when its most-cached ranks are busy: a new
// request queues for them (holdForCache), and dispatch leaves an available
// rank idle while every candidate of the window has more cached on a busy
// rank, until the oldest has waited the hold. The aging bound is
// QueueAffinityMaxWait (10 s), or sooner QueueAffinityTail (2) × the mean
// wait of the recent admissions (queue.waitAvg), never before the hold
// (agingBound). QueueAffinityHoldPerBlock (4 ms) extends both by the blocks
// at stake, how many more of the request's blocks its busy rank holds than
// the best available one (patience), never past QueueAffinityMaxWait. Why:
// docs/decisions/0025-cache-aware-dispatch.md and
// docs/decisions/0026-cache-affinity-and-hold.md.
//
// # Block index
//
// A decision allocates nothing once the tables have grown (AllocsPerRun
// guards). Ranks are dense slots; a "plain" rank (live, not busy, not
// decaying, alone on its worker, untouched by the request) is mirrored in 12
// bytes and sits in a min-heap keyed by its load (heap.go), so an
// unrestricted argmin decision reads the heap's smallest untouched keys, the
// non-plain ranks and the touched ones, costed with the scan's arithmetic and
// tie-broken at the RNG's drawn position, exactly as the scan
// (TestHeapMatchesScan). The scan remains for temperature, round-robin,
// random, pinned or allowed requests, per-request weights and
// DecideExplained.
//
// Active blocks are found by hash in vecTable (8-byte cells: a 32-bit
// fingerprint folded from the key's halves and a vector id) and each has a
// vector with its holder list. A vector remembers its predecessor in every
// booking (or "mixed"), so countHeld credits a run of blocks with equal
// holders in one visit per holder. A booking keeps per block a holder record
// (16 bytes, linked to the same rank's record of the previous block), so Free
// releases directly and booking a rank that holds a prefix follows the links.
// A touched plain rank is costed only if its key minus its held blocks is
// within the rounding band of the smallest untouched key. A block no rank
// holds is private: its cell names the request (privBit | slot) and it gets
// no vector until a lookup finds it and promotes it. With
// Config.ChainedHashes (the router's lists are wire.SequenceHashes) a
// request's unshared blocks are one private stretch with one cell, its first
// block's. CheckInvariants checks all of it (also under -tags invariants),
// and naive models check it in tests (TestCountHeldMatchesNaive,
// TestBlockIndexModel, TestPrivateBlocks, TestPrivateStretch). Why:
// docs/decisions/0020-serialized-batch-decisions.md,
// docs/decisions/0021-plain-rank-heap.md,
// docs/decisions/0022-scheduler-block-index.md and
// docs/decisions/0023-private-blocks.md.
//
// # Classes, tenants and sessions
//
// Request.Class orders the queue first (critical, standard, sheddable:
// strict priority), then QueuePolicy; a standard request that has waited
// ClassAging goes before critical ones. While requests of several tenants
// (Request.Tenant, weights from SetTenant) wait, drainFair admits, in the
// highest class, the tenant whose turn it is under deficit round robin on
// prompt tokens (TenantQuantum × weight per turn), with cache-aware
// dispatch among that tenant's requests. Queue-wait shedding predicts a
// request's place from the higher classes and its tenant's share of its
// own; a critical request is never shed while a lower class waits or runs;
// a full queue evicts a lower class's last request (ReasonEvicted). With
// SessionTTL, the rank that served a session's last turn is credited that
// turn's blocks as cached (sessions.go; Candidate.Session). TokenBucket is
// the rate limit the router applies before the queue. Tests:
// testdata/classes.txt, TestClassesUnderOverload, TestTenantsShareFairly,
// TestDecideTenantsAllocs. Why:
// docs/decisions/0046-classes-tenants-sessions.md.
//
// # Disaggregated prefill and decode
//
// A rank's Capacity.Role is both (the default), prefill or decode. Prefill
// ranks live in a scheduler of their own (the prefill pool: its own table,
// bookings and RNG, seeded from the outer seed), so no aggregated path
// (Decide, the queue, cache-aware dispatch) can reach them; decode ranks sit
// in the main table with the aggregated ones. With no prefill rank the pool
// is empty and DecidePD is Decide (TestDecidePDWithoutPrefillIsDecide
// compares the two over random histories: decisions, effects, stats,
// loads).
//
// DecidePD is one decision with two bookings:
//
//	decode leg:  cost = TransferWeight × (active prefill tokens + tokens to pull) / B
//	                    + active blocks + blocks of the request not active there
//	prefill leg: the cost above (Weight, cache affinity, tiers) over the
//	             prefill ranks, booked with no blocks
//
// The decode rank is chosen first, load first: its "prefill" is the
// transfer, the prompt's tokens less those its own overlap holds, weighted
// by TransferWeight (1: a block to pull weighs as a block held; Weight 8
// would make the choice cache-first). It is booked until Free, its pull as
// its prefill load until MarkPrefillCompleted (its first token).
// Config.RunningWeight > 0 adds that weight × the requests booked on a
// decode rank to its cost (running requests beside active blocks); decode
// legs then scan every rank, the heap's key having no request count: 1.8×
// an aggregated decision at 256 ranks, 3.0× at 2,048, so it is off by
// default (BenchmarkDecidePD, weights=running). Then the
// DisaggPolicy rules, in order: isl (and isl-or-load) serves on the decode
// rank alone when its uncached tokens are below DisaggMinUncachedTokens
// (512); load (and isl-or-load) does when the prefill pool's prefill tokens
// exceed the decode pool's (both undecayed, the decode pool's before this
// booking); otherwise the prefill rank is chosen by the cost among the
// prefill ranks (its KV leaves with the transfer, so only its prefill load
// is booked) and booked until PrefillDone; every prefill rank busy serves
// locally too. A local request's decode booking is already right: its
// prefill tokens are the tokens it computes. PairDecision.Rule says which
// rule decided (DecidePDExplained adds each leg's candidates). A request
// whose decode ranks are all busy waits like any other and is admitted
// aggregated. Free also ends an open prefill booking, and so does the
// decode booking's expiry.
//
// While the pool has ranks, the plain-rank heap is keyed by TransferWeight
// (decode legs take the heap path; aggregated decisions then scan;
// TestPDHeapMatchesScan). A P/D decision costs 1.25–1.36× an aggregated
// one and allocates nothing (BenchmarkDecidePD, TestDecidePDAllocs;
// docs/decisions/0038-disaggregated-pair-decision.md).
package sched
