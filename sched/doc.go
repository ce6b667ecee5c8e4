// Package sched provides kvroute's deterministic scheduler core: it decides
// which worker (dp rank) each request goes to, weighing the KV cache the
// index reports against the load already booked, and what happens when every
// worker is busy (DESIGN.md §4.4-4.5).
//
// A Scheduler is a synchronous, single-owner state machine in the style of
// etcd raft's RawNode: no goroutines, no locks, no clock, no global
// randomness. Time is an argument (now, nanoseconds since an epoch the caller
// chooses), randomness comes from the seed given to New, and outputs that are
// not return values (admissions from the waiting queue, rejections, expiries,
// AllWorkersBusy events) are appended to an outbox the caller empties with
// Drain. Given the same seed and the same calls, it makes the same decisions.
//
// # Active sequences
//
// Every routed request is booked on its rank until Free: its blocks (the
// sequence hashes of the prompt's full blocks) become active there, counted
// once per rank however many active requests share them (reference counting
// by hash), and its effective prefill tokens join the rank's prefill load
// until MarkPrefillCompleted. The caller of AddRequest supplies the
// PrefillLoadHint (effective tokens = ISL − cached blocks × block size, and an
// optional expected duration); Decide computes it the same way for the rank
// it chooses. With Config.AssumeKVReuse off, a booking's blocks get fresh
// random hashes (from the seeded RNG), so nothing is shared. The prefill load
// of a rank is the sum of its requests' effective tokens, except that the
// oldest request in prefill, if it has an expected duration, decays linearly
// from when it became the oldest; when it completes the next oldest takes
// over. Requests older than Config.Expiry are force-freed on Tick and
// reported as EffectExpired.
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
// where device is the device-tier overlap from the index, host and disk the
// blocks by which host memory and disk (or an external store) extend that
// prefix (radix.Overlap; an onload is cheaper than recomputing and dearer
// than a device hit, hence the weights, default 0.75 and 0.25), and w is
// Config.Weight (or the request's override). A fleet without tiers has
// host = disk = 0: cached = device. The booked prefill tokens
// (PrefillLoadHint) are ISL − cached × B in both forms. With
// Config.CreditCost:
//
//	raw_prefill_blocks = (active prefill tokens + ISL) / B
//	credit = OverlapCredit × device + HostHitWeight × host + DiskHitWeight × disk
//	cost   = PrefillLoadScale × max(0, raw_prefill_blocks − credit) + decode_blocks
//
// At temperature 0 the lowest cost wins; ties go to the rank with the
// smallest tree (Overlap.TreeSize, else SetTreeSize), then to a seeded random
// pick among them. At temperature T > 0 a rank is sampled with probability
// proportional to exp(−(cost − min) / (max − min) / T) (uniform when all
// costs are equal). Config.Policy can replace the cost with round-robin,
// uniform random or least-loaded (active blocks + active prefill blocks),
// which still book load and obey busy detection and the queue. Per request,
// Override replaces the weight or temperature and restricts the candidates
// to one pinned rank or an allowed set. DecideExplained reports every rank's
// terms.
//
// Decide takes a batch and decides it one request at a time, booking each
// before deciding the next, so siblings arriving together spread out.
//
// # Busy workers, the waiting queue and the rejection latch
//
// A dp rank is busy when max(active blocks, the engine's reported used
// blocks) > BusyDecodeFrac × its total KV blocks, or its active prefill
// tokens exceed BusyPrefillTokens or BusyPrefillFrac × its max batched
// tokens (each check only when configured and the capacity is known). A
// worker is busy when all its ranks are; ranks of busy workers are not
// candidates (a busy rank of a worker with a free rank still is).
//
// When every eligible rank is busy, the request waits in a queue bounded by
// Config.QueueDepth and ordered by Config.QueuePolicy: fcfs, lcfs, or wspt
// (fewest uncached prompt tokens first). Waiting requests are admitted, in
// that order, whenever load may have freed: on MarkPrefillCompleted, Free,
// Tick, ReportLoad, RemoveRank and at the start of each Decide; each comes
// out as an EffectAdmitted carrying its Decision (or EffectRejected if no
// rank it may use exists any more). A request that finds the queue full is
// rejected with ReasonQueueFull and an EffectAllWorkersBusy{QueueDepth, At}
// is emitted (consecutive ones merge, with a Count) for the service to
// publish; it also opens the rejection window: Throttled(now) is true until
// At + Config.RejectionWindow, each new event (local, or remote through
// ObserveAllWorkersBusy) extending it. The HTTP layer answers 429 with
// Retry-After while Throttled. Every rejection is counted in Stats.
//
// # Early shedding
//
// With Config.MaxQueueWait > 0 (--max-queue-wait) a request that would wait
// may be rejected first, with ReasonQueueWait and no AllWorkersBusy (the
// window is not opened). The queue's drain rate is measured (shed.go): the
// admissions from the queue per second of time during which it held
// requests (an empty queue drains at the arrival rate, not the fleet's),
// in samples of at least 200 ms and 4 admissions, or 2 s with any count (a
// stalled fleet measures 0), smoothed with weight 1 − exp(−d/1 s) per
// sample of duration d. A request finding n others waiting has predicted
// wait (n + 1) / rate; against the limit L = min(rate × MaxQueueWait,
// QueueDepth) it is rejected with probability clamp(2(n + 1)/L − 1, 0, 1):
// none up to half the bound, all at the bound (RED's ramp). Under a steady
// overload of k × capacity the queue settles where (1 − p) k = 1, e.g. at
// 5/6 of the bound for k = 3, admitting the capacity every second instead
// of alternating a full queue with a closed window. The first waiter
// (n = 0) is never shed, and nothing is shed before the first sample. The
// draws come from a second PCG seeded from New's seed, so shedding does not
// move the main RNG's tie breaks. QueueWait(now) reports the rate and the
// time the current queue takes to drain. TestOverloadShedsSmoothly
// simulates 3× overload on virtual time (4 ranks, Poisson arrivals): the
// reference flaps (under 10% admitted in 18 of 27 seconds, 246/s served,
// p99 wait 2.8 s),
// shedding serves 359/s of 360 with a coefficient of variation of 0.03
// across seconds and a p99 wait of 0.90 s for a 1 s bound;
// TestShedJitteredFleet varies the fleet's speed by ±40% every 500 ms: every
// second admits ≥ 20%, p99 wait ≤ 1.28 s.
//
// # Defaults (issue 13)
//
// Weight 8 (Dynamo: 1, the same cost in the same units) was chosen with
// bench/replay on the Mooncake trace (8 workers, default timing model, a
// host tier of 4× the GPU blocks; README § Replay with a host tier).
// BusyDecodeFrac stays 1.0 (Dynamo's thresholds are off until set), for the
// reason and at the cost measured below.
//
// Weight: kv's hit ratio and mean TTFT improve with w at every load below
// saturation, with diminishing returns past 8 (busy detection on as
// before; hit / one LRU of the fleet's GPU + host size, mean TTFT):
//
//	w      1x                 4x
//	1      0.494, 0.83, 193   0.322, 0.54, 340 ms
//	2      0.534, 0.90, 182   0.387, 0.65, 296 ms
//	4      0.537, 0.91, 182   0.424, 0.71, 274 ms
//	8      0.550, 0.93, 179   0.455, 0.77, 254 ms
//	1000   0.552, 0.93, 179   0.480, 0.81, 247 ms
//
// Mean ITL fell too (4x: 39 → 29 ms): in the engine model a step's time is
// mostly its uncached prefill tokens, so the decode term (the KV blocks in
// use), weighed 1:1 with prefill blocks, spread requests away from their
// caches for no gain. The engine model does skip cached prefill, and a host
// onload (16 × 128 KiB at 32 GB/s = 66 µs a block) costs 27% of
// recomputing the block (16 tokens × 15.2 µs), so HostHitWeight 0.75 stays.
//
// Busy detection: with a rank busy above its total KV blocks (router's
// booked blocks, the queued ones included), at 5x 1,700–1,950 of 3,993
// requests waited in the router's queue and were admitted to whichever
// rank freed first, whatever its cache: kv's hit ratio fell from 0.455 (4x)
// to 0.168, its prefill work rose and it saturated with round-robin (5115
// vs 6679 ms). With busy detection off a request waits in the engine it was
// routed to, next to its cache: kv at 5x is not saturated (469 ms mean
// TTFT, hit 0.395) while round-robin is (8278 ms, 17.7×); kv saturates at
// 6x. Busy detection stays on by default all the same: it is what makes
// the router queue, shed early (MaxQueueWait) and answer 429/503 when the
// whole fleet is full, so an admitted request's time to first token stays
// bounded under any overload instead of growing in the engines' queues
// (issue 15 §3). Its cost was the affinity of queued requests at
// saturation (above, with the queue in strict order); cache-aware dispatch
// (below) removes it: with the defaults kv now sustains 6x.
//
// # Cache-aware dispatch (issue 13)
//
// Under PolicyKV the queue does not hand a freed rank to its first waiting
// request whatever that request's cache (queue.go). Each time a request is
// admitted, the first Config.QueueAffinity (32) unrestricted waiting
// requests in queue order compete: the first of them that has waited
// Config.QueueAffinityMaxWait (10 s) goes (aging: among aged requests the
// queue order is kept), else the one with the largest advantage, the
// cached blocks on the best available rank minus those on the best other
// rank (cached = device + HostHitWeight × host + DiskHitWeight × disk from
// the overlaps reported at arrival, or the prompt's blocks active there
// now if more: requests admitted meanwhile are computing them), the
// earliest among equals. A request whose cache is on a busy rank thus lets
// the others pass until its rank frees, or until it has waited the bound;
// a rank that frees always takes a request if one waits
// (work-conserving), and the request is then routed by the cost as any
// other. Restricted requests are tried in queue order as before. Bounds:
// a request is passed only by requests among the QueueAffinity after it,
// and by none once it has waited QueueAffinityMaxWait
// (TestAffinityNeverPassesAged, TestAffinityAgingBound); the rule is checked
// against a naive model built from the read model (TestAffinityMatchesModel)
// and allocates nothing (TestAffinityDispatchAllocs). Stats.AdmittedAhead
// counts the requests admitted before an earlier one. The available ranks
// are read from the plain-rank heap and its slow list (below), so a drain
// that finds the whole fleet busy, the common case under overload, costs
// O(slow ranks) as route does, not O(ranks); each admission adds
// QueueAffinity advantages (the request's overlaps and a held-block walk).
//
// Measured (bench/replay, the setup above, defaults; README § Replay with a
// host tier has the table): at 5x kv went from saturated (5115 ms mean
// TTFT, hit 0.168) to 720 ms / p99 3568 ms, hit 0.345, not saturated, 9.3×
// below round-robin (6679 ms, saturated); at 6x 2499 / 7453 ms, hit 0.447,
// not saturated (round-robin 19869 ms; with --busy-decode-frac 0 kv
// saturates at 6x, 10722 ms): router-side queueing with affinity now beats
// queueing in the engines. kv saturates at 7x. Below 5x nothing waits, so
// nothing changed. The window and the bound (5x unless said, mean TTFT):
// strict order 5115 ms; window 8 876, 32 719, 128 719 ms (the queue seldom
// holds more than 32 at 5x) at a 5 s bound; bound 1 s 4123 ms (saturated:
// waits pass the bound, dispatch is FIFO again and the hits collapse),
// 2 s 908, 3 s 741, 5 s 719, 10 s 720 ms; at 6x 3 s saturates (12303 ms,
// hit 0.194) where 10 s does not (2499 ms, 0.447). Counting active blocks
// as cached as well as the arrival overlaps: 908 vs 1003 ms at 2 s, 719 vs
// 768 at 5 s. Under serve's shedding (--max-queue-wait 2 s) waits stay
// near 2 s, so the 10 s bound is a guard against starvation, not a regime.
// Letting requests wait for their rank is most of the gain: passing the
// first request only for a positive advantage (never for 0 over a negative
// one) gave 1107 ms at 5x and saturated at 6x (9924 ms). Its price shows
// without the host tier at 4x: 554 ms against 493 with strict order (hit
// 0.101 vs 0.117, 61 requests queued instead of 16; a GPU-only cache
// waited for may be evicted meanwhile), still far below least-loaded
// (1415) and round-robin (1617); at 5x GPU-only everything saturates, kv at
// 3157 ms against 8218 with strict order.
//
// # Cache affinity (issue 13, session 7)
//
// Config.CacheAffinity (4) credits a cached block as that many blocks of
// prefill (the cost's last line above): a request leaves the rank holding
// c of its blocks only for one whose prefill load is lower by
// CacheAffinity × c. Only ranks with an overlap change cost, so the
// plain-rank heap is as before. Config.QueueAffinityHold (2 s, now 3 s) keeps a
// request with its cache when that cache's ranks are busy: a new request
// whose most-cached ranks are all busy queues (holdForCache; O(1) while the
// heap holds every rank, i.e. none is busy), and cache-aware dispatch
// leaves an available rank idle while every candidate of its window has
// more cached on a busy rank, until the oldest of them has waited the hold;
// then it is work-conserving as before. Measured with bench/replay (docs/
// ARCHITECTURE.md, "Issue 13 (targets a and c, session 7)"): on the
// Mooncake trace with a host tier, hit / fleet-size LRU went from 0.93,
// 0.88, 0.83, 0.77, 0.58, 0.75 at 1x–6x to 0.95, 0.94, 0.93, 0.93, 0.89,
// 0.89, and mean TTFT at 5x from 720 to 311 ms, at 6x from 2499 to 1669 ms;
// GPU-only at 4x 554 → 390 ms. Eight partitioned LRUs with an offline
// placement that keeps every prefix on one rank reach 1.00 of the pooled
// LRU, so the gap was placement (leaving a cache for less queued
// prefill), not the partition. A 10 s hold helped 6x more (1429 ms) but
// raised the conversation trace's p99 (4x: 4829 against 2620 ms); 1 s kept
// little (6x 2103 ms). testConfig pins 1 and 0 (off), as before.
//
// Config.QueueAffinityTail (2) bounds what the hold and the window cost the
// tail under overload: a request that has waited twice the mean wait of the
// recent admissions from the queue (an average over about the last 64,
// queue.waitAvg, updated by admit) goes first, as at QueueAffinityMaxWait,
// but never before it has waited QueueAffinityHold, now 3 s (agingBound).
// On the conversation trace, where every policy queues, kv's p99 at 5x and
// 6x went from 7060 and 8461 ms (above least-loaded's 5754 and 7190) to
// 5317 and 7110; the longer hold took Mooncake's hit / LRU at 5x from 0.89
// to 0.91 (docs/ARCHITECTURE.md, the session-7 tail note). A fixed shorter
// QueueAffinityMaxWait (3–5 s) did the same for the conversations but
// saturated Mooncake at 6x: the bound must follow the queue's own waits.
//
// Config.QueueAffinityHoldPerBlock (4 ms, session 8) scales both by what is
// at stake: a candidate whose busy rank holds s more blocks of it than the
// best available rank (−advantage, tiers weighed) is aged only after the
// aging bound plus s × 4 ms, and the hold (counted on the window's first
// candidate) lasts 3 s plus its s × 4 ms, neither past QueueAffinityMaxWait
// (patience). With it fixed, Mooncake's 6x lost its hits to 71 aged
// requests that left ~700 blocks each behind (conversations: 310 aged,
// ~190 each); with the extension those wait for their ranks. Measured
// (docs/ARCHITECTURE.md, the issue-13 session-8 note): Mooncake with a host
// tier at 6x, hit / fleet-size LRU 0.87 → 0.91 and mean TTFT 2181 → 1354
// ms; the conversation trace's p99 stays below every other policy's (4x–6x
// 3828, 5312, 7130 ms). 2–7 ms all reach 0.90 at 6x; 10 ms raises the
// conversation p99 at 6x above least-loaded's. A hold bounded by the busy
// rank's expected free time (from its admission intervals) was tried
// instead and lost on both traces. The dispatch path's cost is
// BenchmarkQueueDispatch (each drain that holds recomputes the window's
// advantages).
//
// # Cost of a decision
//
// A decision allocates nothing once the tables have grown to the working set
// (guarded by AllocsPerRun tests). Ranks are dense slots; the common rank
// (live, not busy, not decaying, the only rank of its worker, untouched by the
// request) is "plain", mirrored in 12 bytes. Active blocks are indexed by
// hash, each with the list of ranks holding it, so a request's blocks are
// looked up once each (BenchmarkHeldCount compares this with a set per rank),
// until the first block no rank holds; the ranks holding any of them are
// "touched" by the request. A run of consecutive blocks held by the same
// ranks costs one visit per holding rank, not one per (block, rank) (see
// "Held blocks" below).
//
// Decision (issue 17 §3): plain ranks sit in a binary min-heap keyed by their
// load, w × prefill tokens / B + active blocks (heap.go), kept in step
// wherever a rank's mirror changes (booking, prefill done, free, expiry, load
// report, limits, ranks added or removed: one O(log W) update each). Their
// cost for any request is that key plus a term common to all of them, so an
// unrestricted argmin decision (PolicyKV at temperature ≤ 0 with the
// configured weight, PolicyLeastLoaded) reads the heap's smallest untouched
// keys, the non-plain live ranks and the touched ranks: O(touched + non-plain
// + ties + log W) instead of O(W). It is exact, not approximate: every plain
// rank whose key is within 1e-6 (relative) of the smallest is costed with the
// scan's own arithmetic, and the tie break picks, by selection, the rank the
// scan's rank-ordered tie list holds at the RNG's drawn position.
// TestHeapMatchesScan runs heap and scan side by side over random histories
// (ties frequent) and requires identical decisions, effects and stats. The
// scan remains for temperature sampling, round-robin and random (they need
// every candidate), pinned or allowed-worker requests, a per-request weight
// other than the configured one, and DecideExplained's listing.
//
// Measured (BenchmarkDecide, full lifecycle, interleaved base/new runs, -count
// 6, CPU time per decision on a shared 2-vCPU VM, median): 7,000 ranks
// 21.0 → 12.0 µs (47.5k → 83.6k decisions/s, +76%), 256 ranks 2.33 → 1.82 µs
// (+28%), 8 ranks 1.27 → 1.34 µs (no significant change, p = 0.15). At 7,000
// ranks the rest is the held-block count of the touched ranks (about 120 per
// request in the benchmark's 28,000 in-flight requests over 64 prompt
// families) and booking; at 8 ranks it is booking and freeing the blocks.
// Issue 17's targets (≥ 300k at 7,000, ≥ 1.5M at 8) are not met by this
// change alone.
//
// # Held blocks (issue 17 §3, second step)
//
// After the heap, a decision at 7,000 ranks went to counting the touched
// ranks' held blocks (a visit per block per holding rank: 16 shared blocks
// on about 120 ranks per request in BenchmarkDecide), to searching a
// block's holder list for the rank when booking and freeing (linear in the
// holders), and to costing every touched rank. Three changes, each exact
// (decisions identical: TestHeapMatchesScan, the model, script and fuzz
// tests, plus TestCountHeldMatchesNaive and CheckInvariants' new checks):
//
//   - Runs. Each block vector remembers the vector that preceded it in every
//     booking since it became active (blockVec.pred, or "mixed" once two
//     bookings disagree). While that holds, every rank holding the block
//     holds its predecessor, so when the counts of holders are equal the
//     holder sets are equal: countHeld adds a whole run of such blocks to
//     each holder of the run's last block in one visit. Chained sequence
//     hashes always qualify, except at branch points; arbitrary hash lists
//     fall back to a visit per block. The walk also tries the previous
//     block's most recent child vector before probing the hash table.
//   - Holder records. A booking keeps, per block, the id of its (block,
//     rank) record (reference count, vector, place in the holder list), so
//     freeing releases each block directly. A record links to the same
//     rank's record of the previous block; booking a rank that holds a
//     prefix of a chained request follows those links back from its deepest
//     held block (noted during the count) and appends the rank to the other
//     blocks without searching; a rank holding none of the walked blocks
//     (held count 0) is appended directly. Only arbitrary hash lists and
//     AddRequest search the holder list. A (vector, slot) hash index for the
//     search was tried first and dropped: its insert and delete per booking
//     of a widely held block cost more than the walks it saved.
//   - Pruning. The heap path costs a touched plain rank only when its key
//     minus its held blocks is within the rounding band of the smallest
//     untouched key; the others cost more than that untouched rank. Overlap
//     ranks (marked fOverlap in the mirror) are always costed.
//
// Cost: a holder record is 16 bytes per (block, rank) pair held (the arena
// up to twice that), on top of the 8-byte list entry; a block vector grows
// from 32 to 40 bytes.
//
// Measured (BenchmarkDecide, full lifecycle, base and final binaries
// interleaved, -count 6, 300 ms each, on the shared 2-vCPU VM at load
// average 10-16 from other jobs; CPU time per decision, medians):
//
//	7,000 ranks  14.30 → 5.22 µs  (70.1k → 192k decisions/s, 2.74×, p = 0.002)
//	  256 ranks   2.48 → 1.56 µs  (411k → 641k, +56%, p = 0.002)
//	    8 ranks   1.57 → 1.57 µs  (638k → 636k, no change, p = 1.0)
//	7,000 ranks, every rank in the overlaps: 221 → 234 µs (p = 0.82)
//
// An earlier run of the same comparison (before the child hint and the arena
// doubling) gave 12.68 → 4.59 µs at 7,000 and 2.46 → 1.39 µs at 256. Three
// more interleaved pairs at load average 2 (wall decisions/s): 7,000 ranks
// 79-88k → 195-268k, 256 ranks 417-457k → 580-754k, 8 ranks 631-695k →
// 520-729k.
//
// 0 allocations per op at every size. The holder-record arena doubles when
// full: with append's smaller steps for large slices, the drifting holder
// count of a steady workload reallocated it at each new high-water mark
// (a few hundred B/op at 256 ranks, which make bench-gate would flag). At
// 7,000 ranks what remains is the run visits of the ~120 touched ranks, the
// heap's top band and its ties (selection for the tie break), and booking 32
// blocks; at 8 ranks it is the hash table's insert and delete of each new
// block, as before. Issue 17's
// targets (≥ 300k at 7,000, ≥ 1.5M at 8) are still not met. With every rank
// in the overlaps the decision is O(W) by definition (every rank is touched).
//
// # Session 7 (issue 17 §3, third step)
//
// Measured with cachegrind as well as CPU time (the VM's CPU time moved by
// ±10-80% between runs): instructions and simulated L1 misses per decision
// are the difference of two BenchmarkDecide runs at different iteration
// counts, GOMAXPROCS=1, divided by the decisions. At 8 ranks 72% of the
// 16.6k instructions went to the blocks' lifecycle (about 22 vectors created
// and destroyed per decision, each a table insert and delete); at 7,000
// ranks to the ~136 holder visits, the heap path and booking 16 widely held
// blocks. Exact changes:
//
//   - vecTable (vectable.go): the hash → vector table has 8-byte cells, a
//     32-bit fingerprint and the vector id; the key is checked in the
//     vector, the home cell is the fingerprint's top bits, so deleting finds
//     the cell by vector id and shifts without rehashing (TestVecTable, with
//     keys sharing fingerprints).
//   - acquireHash creates a new block's vector with its first holder
//     directly; vectors and records are set field by field, dead ones are
//     not zeroed, free vectors are linked through child; booking runs three
//     loops instead of a switch per block.
//   - The heap path costs touched plain ranks from the mirror (heldCost, the
//     arithmetic of cost), tie breaks tell overlap ranks by the mirror's
//     flag instead of slotHot, held count and deepest record share a
//     heldEnt, and the holder visits run on local slices. Mirroring the tree
//     size in slotScan (12 → 16 bytes) was tried and dropped: the
//     temperature scan at 7,000 ranks measured +17% and +40% (p = 0.38,
//     0.09).
//
// A counting selection for the tie list was tried and dropped (a wash:
// +1.7k instructions, -26 mispredicts per decision at 7,000).
//
// Measured per decision, base → now (cachegrind): 8 ranks 16,634 → 15,207
// instructions (-8.6%), L1 misses 147 → 133; 256 ranks 16,241 → 16,427
// (+1%); 7,000 ranks 35.3-36.2k → 36.1k instructions (no change within the
// runs' spread), L1 misses 690 → 521 (-24%). CPU time: see docs/ARCHITECTURE.md (issue 17
// §3, session 7). Issue 17's targets are still not met: at 8 ranks the
// blocks' lifecycle alone costs more instructions than the target allows,
// and an insert and a delete per new block remain while every active block
// must be findable by its hash alone; at 7,000 ranks the next step is an
// index whose unit is a run of blocks with the same holders.
//
// # Session 8 (issue 17 §3, fourth step)
//
// Measured with cachegrind as in session 7. At 256 and 7,000 ranks
// BenchmarkDecide's steady state creates and destroys no block vector
// (17,408 stay live), so the hash table costs nothing there; a decision at
// 7,000 goes to the ~136 touched ranks (countHeld's holder visits, the heap
// path's pass over them, untouch: ~12k instructions) and to booking and
// freeing 32 (block, holder) records (~10k). The heap's tie band is small
// (39 nodes, 19 ties per decision). At 8 ranks ~22 vectors die per decision
// and only 2.6 return while still recent.
//
// Change (exact), to the pass over the touched ranks: the heap path takes a
// touched rank without an overlap as plain-but-held with one flag test and
// reads its held count without the generation test (countHeld touched it
// in this decision), and untouch runs on locals. With -tags invariants, a
// touched rank lacking this decision's count, or listed twice, panics.
// Instructions per decision, base → now: 8 ranks 15,281 → 15,237 (-0.3%),
// 256 ranks 16,649 → 16,316 (-2.0%), 7,000 ranks 34,016-34,032 → 31,612
// (-7.1%); L1 misses unchanged. CPU time on the shared VM did not resolve
// it (docs/ARCHITECTURE.md, issue 17 §3, session 8).
//
// Tried and dropped: keeping dead block vectors indexed (a FIFO of at most
// as many as the live ones) so a block active again revives its vector
// instead of a table delete and insert: 2.56 revivals per decision at 8
// ranks, and the list's upkeep cost more (15,280 → 17,322 instructions).
// Giving route's overlap ranks a held count of 0 before the walk, so
// holdOne skips its mark test: -1.6% instructions at 7,000, but a store per
// overlap rank (every rank in DecideVariants/all-overlapped), not measured
// there: left out.
//
// Issue 17's targets are not met, and by these counts a per-run index
// (a rank booked once per run of blocks with the same holders) would not
// meet them alone: at 7,000 ranks it would take booking and freeing from
// ~10k to ~2-3k instructions, leaving ~24k against the ~17-23k that 300k/s
// allows at this machine's 5-7 instructions per ns, because every holder of
// the request's prefix is still visited; at 8 ranks every unshared tail
// block still needs its own table insert and delete (a block must be found
// by its hash alone while hash lists may be arbitrary), an estimated ~7.5k
// instructions against the ~3.5-4.7k that 1.5M/s allows.
//
// # Session 9 (issue 17 §3, fifth step): private blocks
//
// Profile first (cachegrind, 8 ranks, main 0ca5c55, 15,240 instructions per
// decision): ~10.8k went to the blocks' lifecycle (release 2.1k, creating a
// vector by hash 2.1k, book 1.6k, the table's delete 1.6k and find 0.9k,
// freeReq 0.9k, records 1.2k), ~4.4k to the rest (route, heap, costs,
// admission). ~22 vectors are born and die per decision: the prompt's 16
// unshared tail blocks and ~6 family-prefix blocks no other request
// shared while they lived.
//
// Change (exact): a block a booking finds nowhere becomes private. Its
// table cell names the request (privBit | request slot, vecTable), the
// request keeps 0 in its holds and the hash in request.hashes, and it gets
// no vector and no holder record. A lookup that meets a private cell checks
// the hash against the request (privPos) and promotes (promote): it builds
// the request's private blocks up to the one found exactly as booking them
// would have (one holder, one reference, the predecessor the request's
// previous block, the record linked to the previous record, child hints) and
// repoints their cells. A block booked after a private one gets a mixed
// predecessor, as it would have (the vector before it was new). countHeld
// promotes along its walk (a shared prefix in one call; the tail stays
// private); its loop probes the table inline (vecTable.probe) and hands a
// walk that meets a private cell to countHeldFrom, so the hot loop keeps one
// slice of vectors. Freeing a private block is a table delete. Decisions are
// unchanged: TestHeapMatchesScan (now also requiring promotions),
// TestCountHeldMatchesNaive, TestBlockIndexModel, model/script/fuzz tests,
// CheckInvariants (private cells belong to live requests, match their
// counts and are found by their hashes; a vector after a private block is
// mixed) also with -tags invariants, and TestPrivateBlocks (promotion by a
// walk entering mid-request, by a booking on another rank, by a request
// repeating its hash). Memory: a request keeps 8 bytes per block for the
// hashes (reused with its slot); a private block costs its table cell
// instead of a 40-byte vector and a 16-byte record.
//
// Measured per decision (cachegrind, main → now): 8 ranks 15,240 → 13,747
// (−9.8%), L1 data read misses 114 → 84; 256 ranks 16,365 → 16,404
// (+0.2%); 7,000 ranks 31,571 → 31,311 (−0.8%). CPU time did not resolve
// it (docs/ARCHITECTURE.md, issue 17 §3, session 9). Promoting all of a
// request's private blocks at the first lookup measured 14,426, one call per
// found block 14,422, along the walk 13,711. A table at load ≤ 1/4 instead of
// 1/2 took 8 ranks to 13,293 but doubles the table (1 MiB at 7,000 ranks):
// not taken.
//
// The 8-rank target (≤ ~9.0k instructions here) is not met: the private
// tail still costs a table insert and delete per block (~100 instructions,
// ~2.1k per decision) and its bookkeeping (~1k), the shared prefix its
// vectors (~2.5k), the rest ~4.4k. With arbitrary hash lists every private
// block needs its own cell; with chained hashes a lookup reaches a private
// stretch through its first block, so one cell per stretch (the rest
// verified against request.hashes) would remove ~1.5-2k: the next step,
// needing the caller to assert chained hashes (a Config flag).
//
// # Session 10 (issue 17 §3, sixth step): private stretches
//
// Config.ChainedHashes (set by the router, whose lists are
// wire.SequenceHashes) asserts that a hash determines its position and its
// whole prefix, so whoever holds a block holds every block before it.
// Changes (exact):
//
//   - Booking looks blocks up only to the first found nowhere; it and all
//     after it are one private stretch (request.stretch, privLo to the end)
//     with one table cell, its first block's, and the hashes copied once. A
//     lookup can reach the stretch only through that block (a walk goes
//     from block 0; a booking found the same prefix): privPos's loop finds
//     it at its first step (a separate stretch case kept cellIs from
//     inlining into find). Promotion indexes each promoted block
//     (vecTable.insert) and the stretch's new first block; freeing deletes
//     one cell.
//   - A fresh booking under chained hashes adds each cached block's holder
//     without acquireNew's search (no block repeats); add and release set
//     chunk and record fields one by one and no longer clear a 64-byte
//     chunk; freeReq drops a still-held record's reference inline.
//   - vecTable's fingerprint folds the key's high half in (k ^ k>>32) before
//     the Fibonacci multiply: BenchmarkDecide's family-prefix keys
//     (fam<<40 | j) clustered (mean displacement 0.55 at load 0.14, runs of
//     9); with random keys the fold costs ~30 instructions per decision.
//
// Decisions are unchanged: TestHeapMatchesScan runs every other round with
// chained lists and the flag against a third scheduler without it;
// TestModel and FuzzOps set it on half their inputs; TestPrivateStretch;
// CheckInvariants checks a stretch (a suffix, one cell, no other block of
// its hashes) also with -tags invariants; and a digest of 72 random
// histories (chained lists over alphabets of 2, 12, 60 and 2^64 block
// hashes) is the same on main, with the flag and without.
//
// Measured per decision (cachegrind, BenchmarkDecide, 300/900 ops), main →
// now: 8 ranks 13,800 → 8,734 (−36.7%); 256 ranks 16,217 → 14,669 (−9.5%);
// 7,000 ranks 31,548 → 29,454 (−6.6%); DecideVariants at 8 ranks
// blocks=512 153,802 → 70,425, reuse=false (no private blocks) 18,843 →
// 19,082 (+1.3%, the fold). Steps at 8 ranks (200/400 ops): the stretch
// 13,828 → 9,846, the fresh loop and field stores 9,480, the hash copy and
// inline release 9,326, the fold 8,760 (with hashed family prefixes the
// fold is 8,787 → 8,817: the stretch work alone reaches ~8.8k on random
// keys). CPU time: docs/ARCHITECTURE.md (issue 17 §3, session 10). What
// remains at 8 ranks: ~5.0k in the blocks (the walk 0.9k, release 0.8k,
// book 0.75k, freeReq 0.6k, add 0.5k, promotion 0.8k: the shared prefix's
// per-block vectors and records), ~3.1k routing (heap, costs, overlap
// lookups, the rank mirror).
//
// # API
//
//	New(cfg, seed) (*Scheduler, error); DefaultConfig(); Config.Validate()
//	Workers:   AddWorker, RemoveWorker, RemoveRank, ReportLoad, SetTreeSize
//	Routing:   Decide, DecideExplained
//	Sequences: AddRequest, MarkPrefillCompleted, Free, Tick
//	Outputs:   Drain, Pending, Throttled, RejectUntil, ObserveAllWorkersBusy, QueueWait
//	Reading:   AppendLoads, AppendWaiting, Stats, Workers, CheckInvariants
//
// Slices passed in (Request.Blocks, overlaps, Override.Allowed) are read
// during the call only; the scheduler copies what it keeps. Slices it
// returns are the caller's dst, appended to.
package sched
