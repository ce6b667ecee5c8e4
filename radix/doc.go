// Package radix provides Tree, kvroute's index of every worker's KV cache: a
// radix tree over local block hashes that answers, for a request's blocks,
// how many leading blocks each worker key already holds (Match), and that
// applies engines' Stored/Removed/Cleared events as they arrive (Apply).
//
// A Tree is a deterministic, single-owner core (DESIGN.md §4.2, §4.5): no
// goroutines, locks, clocks or randomness; one shard goroutine owns it.
//
// Quiet stretches (issue 17 §2, session 11). Apply tells a hook set with
// SetQuiet when it enters and leaves the stretches of its work that write
// nothing Match, Workers or TreeSize read: a Stored event's engine-table
// reservation (a resize) and its inserts, which fill a new leaf before it is
// linked or a leaf's run past its published length and the block arena; a
// Removed event's engine-table deletes, and freeing the blocks, runs and
// nodes of a subtree once it is unlinked (anything no Match can reach from
// the tree as it stands is free to write); checking 16 or more blocks an
// event announces again (reads only). They are most of an event's time.
// The shard's runner lets its core lock go in them, so a lookup need not
// wait for the event. What Match reports there is a tree between the one
// before the event and the one after: the event's worker holds a depth
// between its two depths, nobody else changes (TestQuietStretches, on random
// sequences with tiers and one block per node, matching at both ends of every
// stretch; shard's TestMatchInQuietStretches checks the memory side under
// -race, and failed there when a leaf was linked inside a stretch). A slot's
// size as Match reports it (slotRec.size, its table's count) is published
// as each stretch begins and at the event's end, not per insert, so the
// tree a Match sees has sizes no smaller than the blocks it finds.
//
// # Semantics (DESIGN.md §5)
//
//   - Stored with no parent starts at the root; with a parent, the parent
//     engine hash must be held by that worker key, else nothing is applied
//     and Apply returns ErrParentMissing (the caller's gap signal). Blocks
//     extend the path one by one; a block the worker already holds under the
//     same engine hash is idempotent (Result.Stored counts only new entries).
//   - A Stored block that contradicts what the worker holds (its engine hash
//     held at another position, or the position held under another engine
//     hash, e.g. a repeated hash inside one event) stops the event there: the
//     blocks before it stay applied and Apply returns ErrConflict (which
//     wraps ErrBadEvent) with Result.Conflicts = the blocks dropped.
//   - Removed: the worker leaves each named block and everything it holds
//     below it (an engine never holds a child without its parent). Names it
//     does not hold are counted in Result.Unknown and skipped.
//   - Cleared removes every dp rank of the event's worker id (RemoveWorker);
//     RemoveDpRank removes one worker key.
//   - LoRA needs nothing here: adapters change the local hash seed, so their
//     blocks are different paths.
//
// # Storage tiers (issue 13)
//
// Engines keep KV behind the GPU: host memory (vLLM's CPU offload, SGLang
// HiCache, Dynamo KVBM's G2), disk (G3) and external stores (LMCache). Every
// event carries a wire.Tier, and the tree tracks per (block, worker key) the
// tiers that hold it:
//
//   - Stored in tier T adds T to each block (a block already held in
//     another tier keeps it: a host copy of a GPU block is the same entry,
//     the same engine hash). Parents may be held in any tier.
//   - Stored with ByEngine (vLLM's offloading connector names the CPU
//     copies of GPU blocks by hash, without tokens) adds T to each named
//     block the worker holds; hashes it does not hold count as Unknown
//     (applyTierByEngine, tierhash.go). Never the device tier.
//   - Removed in tier T takes T from each named block that holds it; the
//     blocks below keep their tiers (a host may hold a block without its
//     parent). A name not held in T is Unknown, so a removed CPU copy of a
//     block the GPU still holds leaves its device overlap alone (before
//     tiers, that removal dropped the overlap 3 → 0; Dynamo keeps 3). A
//     block left in no tier leaves the tree with everything the worker
//     holds below it, as before. Engines that offload copy first and evict
//     second, so an offloaded block never passes through "no tier".
//   - Match reports per worker key Blocks = the leading blocks on the
//     device, then Host = how many further blocks are on the device or the
//     host, then Disk = how many further still in any tier (disk and
//     external together). A tree that has only seen device events reports
//     Host = Disk = 0, exactly as before.
//
// Layout: a node's set stays the union (held in any tier), so the tree's
// shape, canonical form and Match walk are those of a device-only tree. The
// first event of another tier allocates tier sets: per node four more
// worker sets (device, host, disk, external), compared by the canonical
// form (a run ends where a worker's tiers change too) and copied by splits.
// A tree that never sees a non-device event keeps none, so device-only
// entries cost nothing more: 30.61 B/entry on the benchmark fleet before
// and after tiers. With a host tier (workload.tieredTree: every third build
// event offloaded, half of it then evicted from the device) the union
// entries cost 32.4 B/entry (heap 32.7): the tier sets add 32 bytes per node
// for ≤ 64 worker keys, and runs split where tiers differ. Match then
// follows three active sets (device, device or host, any) down the path
// and records a worker's depth for a level when it leaves it; it allocates
// nothing (TestAllocsMatchTiered). Removals in a tiered tree sort the named
// blocks ancestors first (depth, then run order) and take a tier from each
// run of consecutive named blocks with at most two splits.
//
// Cost, measured on the shared 2-vCPU machine (benchstat, 6 interleaved
// runs of the binaries before and after tiers): Apply on a device-only tree
// unchanged (4.09 vs 4.33 µs per op, p = 1.0); Match of 512 blocks on a
// device-only tree 0.45 → 0.61–0.67 µs (+30–49%, p = 0.04), still within
// issue 2's 2 µs. On the tiered tree Match takes 1.1 µs and Apply 6.9 µs per
// op (the same schedule).
//
// The Match regression and its fix (issue 17): removing the dispatch to the
// tiered path measured no difference; the cause was Overlap growing from 3
// fields (24 bytes) to 5 (32). The compiler keeps a struct of at most 4
// fields in registers; past that, append(dst, Overlap{...}) in emit built
// the literal in a stack temporary with 8- and 4-byte stores and copied it
// into dst with two 16-byte loads, which the store buffer cannot forward
// from narrower stores (a stall on each). The CPU profile of BenchmarkMatch
// put half of Match's time in emit, its hottest instruction the store right
// after that reload. emit now grows dst once per set word and writes each
// field in place (matchTiered uses it too). Thread CPU time per Match of 512
// blocks (BenchmarkMatch/runs timed with getrusage, 6 runs per binary,
// interleaved, load average ≈20): before tiers median 780 ns (fastest 542),
// HEAD with tiers 1136 ns (841), with the fix 737 ns (600): −35% against
// HEAD (p = 0.004), and no significant difference from before tiers
// (p = 1.0). Wall-clock ns/op on that machine varied ±50–360% and showed
// nothing.
//
// # Layout
//
// Everything lives in typed slices of pointer-free structs linked by uint32
// indices (0 = nil) with free lists, so the GC scans none of it (TestNoPointers,
// TestSizes):
//
//   - node (40 bytes): a run of blocks that every worker in the node's set
//     holds in full and inside which the tree does not branch. The tree is
//     kept canonical: a run ends only where the tree branches or the worker
//     set changes (a node whose only child has its set is merged with it).
//     A worker holding a node holds its parent, so sets shrink going down and
//     Match never revisits a worker once it drops out.
//   - runs: each node's local hashes (8 bytes) and block ids (4 bytes) sit
//     contiguously in a chunk of a size class (1, 2, 3, 4, 6, 8, 12, …
//     blocks: powers of two and the half-steps between them), so matching a
//     long shared prefix is a linear compare of consecutive hashes. The
//     chunks sit in pages of one class each (1,024 blocks of small chunks:
//     8 KiB of hashes, 4 KiB of ids, one capture page each; whole chunks
//     only, so a page of 384-block chunks holds 768), and a node's run
//     field is the chunk's address, page<<10 | offset. A class that fills
//     its page opens a fresh one, so the arena never doubles and copies a
//     class inside one event (only a class's first page grows, by
//     doubling, up to full size: a small tree stays small). Match pays one
//     more indexed load per node on its path (the page's slice header), no
//     instructions measurably (issue 17 §2, session 10: see below).
//   - blocks (8 bytes): a stable block id → (node, offset). Splitting,
//     merging or moving a run rewrites only these records, never the engine
//     tables. The records sit in fixed chunks of 1,024 (8 KiB, one capture
//     page; only the first chunk grows, by doubling, up to that size): the
//     arena never doubles and copies itself inside one event, so an event
//     pays only the fresh pages of its own records (issue 17, session 9;
//     Match never reads these records, so it pays no indirection). A
//     capture and the Copier take the chunks one by one.
//   - worker sets: bitsets over dense per-tree slots (one uint64 per node for
//     up to 64 worker keys, widened on demand); a worker key's slot is freed
//     when it holds nothing. Past 512 worker keys (8 words) a tree turns
//     every set, once, into a sparse set (sparse.go): its nonzero words with
//     their word indexes, a 16-byte header in place of the bitset, a single
//     word inline, more in a chunk of a shared pool (12 bytes a word).
//   - engine tables: per worker key, engine hash → block id, for parents and
//     removals. Open addressing with linear probing and backward-shift
//     deletion (no tombstones), capacity grown to 7/4 of the count at 7/8 load, 12-byte
//     entries plus a control byte per slot that a probe checks at the home
//     slot first, then scans eight at a time. Capacities are size classes
//     (the growth chain 8, 14, 22, 35, …; a shrink rounds up to a class),
//     and a resize takes its arrays from the tree's pool of freed arrays of
//     that class and returns the old ones (§ Engine-table pool).
//   - edges: one per-tree open-addressing table (parent, first local hash) →
//     child, consulted only at nodes with two or more children (an only child
//     is checked directly).
//
// A node with no workers is freed at once with its blocks and chunk. When the
// last node goes, every arena is released, the engine-table pool with them:
// an emptied tree is back to New's footprint (TestReclaimAll, TestHeapMatchesStats); under churn freed slots
// are reused and nothing grows (TestChurnBounded).
//
// Costs: Match is O(request blocks + nodes on the path × set words). Apply is
// O(event blocks) plus, for a split or merge, O(run length) copying. Removing
// a block whose subtree holds blocks the event did not name also sweeps that
// worker's engine table once (O(its size)): the tables have no reverse index
// (it would cost 12+ bytes per entry). Within an event, named blocks are
// removed shallowest offset first, so a tail-first eviction of a run costs one
// split, not one per block. RemoveWorker is O(the worker's nodes); Dump and
// CheckInvariants are O(tree) and allocate.
//
// # Snapshots
//
// BeginCapture takes a copy-on-write image of a tree on the tree's own
// goroutine while it goes on being mutated (Capture): the arenas (nodes,
// worker and tier sets, blocks, runs, the child table and every worker's
// engine table) are split into pages of PageBytes (8 KiB); every write to
// an arena element goes through a write barrier (the w* helpers in arena.go,
// wE in table.go) that, while a capture is in progress, copies the element's
// page first if it has not been copied yet; Capture.Step copies the pending
// pages in bounded steps between mutations, or Capture.Tree, on another
// goroutine, takes them while the tree is being mutated, reading each page
// the tree has not copied straight from the arenas (internal/cow's per-page
// handshake: the tree's goroutine never waits for it; Capture.Complete
// detaches the barrier once Tree is through; TestCaptureConcurrentRead).
// Once none is pending the pages are exactly the arenas at BeginCapture. Growth, rehashing, widened worker
// sets and an emptied tree's reset replace an arena's array instead of
// writing it: the capture keeps the old array, which is frozen, and needs no
// copy then. Pages go into page-sized buffers (the tree's goroutine never
// waits for a large allocation to be zeroed); Capture.Tree assembles them
// into an independent Tree on the goroutine that encodes it. With no
// capture in progress a barrier is one nil check. TestCaptureCopyOnWrite
// checks captures taken under random events against a Clone taken at
// BeginCapture, arena for arena, one element per page; under -tags
// invariants every capture is checked so. internal/cow holds the per-slice
// page tracker. Capture.CopiedBytes counts the bytes copied by steps and
// barrier alike, so the owner can pace the steps against all the copying
// (shard gives a capture a budget per block of events applied). CopyTo and
// Clone copy a tree in one go (≈9.5 ms for 1.3M entries).
//
// WriteContent encodes a tree compactly: nodes
// in preorder (child count, run length, worker set as a bitmap over dense
// worker indexes, local hashes), then per worker its engine hashes in block
// order, each (worker, node) run tagged literal, "the blocks' sequence
// hashes" (approximate mode's engine hashes) or "the node's first worker's".
// ReadContent rebuilds the tree through Apply, one Stored event per (worker,
// node) run, so any input decodes to a valid tree or an ErrCorrupt error,
// and checks the declared counts (a non-canonical input is refused).
//
// # Measurements
//
// The benchmark fleet (tree_bench_test.go, workload_test.go): 64 worker keys,
// 16 prompt families of 32–256 blocks, 32 conversations of 64–512 blocks per
// family, each worker holding 10 families × 8 conversations cut at ¼–1 of
// their length plus a private tail of ≤128 blocks: 1,305,197 (block, worker)
// entries over 465,797 distinct blocks, 6,730 nodes. Requests are 512 blocks
// (a family, one of its conversations in full, then new blocks); the Apply
// schedule stores a 64-block turn per step and removes, tail first, the turn
// that worker stored eight rounds before. AMD EPYC (Zen 5), one core,
// medians of go test -bench . -count=10 (benchstat):
//
//	                      runs (shipped)   one block per node   flat map baseline
//	Match, 512 blocks     314 ns           2.9 µs               4.8 µs
//	Apply, steady state   28.8 M blocks/s  7.4 M blocks/s       39.3 M blocks/s
//	Build from empty      12.2 M blocks/s  6.8 M blocks/s       24.2 M blocks/s
//	bytes per entry       29.2 (heap 29.4) 54.4                 12.1 (heap)
//
// The two cores are shared with other work: runs while another process kept
// the L3 and memory busy measured Match 0.5–0.6 µs and Apply 5.6–7.6 M
// blocks/s, once 2.5 M (the flat map slowed alike), so read the ratios
// between columns, which held, before the absolute numbers. The flat map is map[sequence
// hash]worker bitmask given precomputed sequence hashes (hashing them costs a
// caller ≈5 ns a block more); it cannot remove by engine hash, has no parent
// check and caps workers at 64, so it is a floor, not an alternative.
//
// Decisions, each from those numbers:
//
//   - Runs, not one block per node (the brief's "decide by measurement"):
//     the same Tree capped at one block per node (maxRun 1) matches 9× slower
//     (a node and, at branches, a hash probe per block instead of a compare
//     per block), applies 4× slower and needs 54 bytes per entry instead of 29.
//   - Per-worker engine tables, not one table keyed by engine hash mixed with
//     the slot: a mixed 64-bit key is not injective (two workers' hashes can
//     collide), and an exact shared entry needs the slot too (16 bytes, not
//     12). Removing a worker drops its table whole. Against a Go
//     map[EngineHash]uint32 per worker (BenchmarkEngineTable, 64 × 20k
//     entries, 64 inserts and 64 deletes per op): 18.6 vs 29.6 heap bytes
//     per entry, 3.0 vs 3.4 µs per op. The control bytes cost 1.4 bytes per
//     entry over plain linear probing (17.2) and made Apply ≈15% faster
//     (23–27 vs 20–23.6 M blocks/s, same machine, alternating runs).
//   - At 1.3M entries the bytes split as engine tables 18.0 per entry (load
//     0.72), runs 7.5 per entry (466k blocks × 12 bytes, 1.6× in power-of-two
//     chunks and slice growth), block records 3.3, nodes, sets and edges 0.4.
//   - A touch pass loads every key's home slot before an event's probes, so
//     their cache misses overlap instead of queueing: Apply ≈7% faster (28.5
//     vs 26.8 M blocks/s, alternating runs).
//   - Tables shrink at 1/5 load but never below 256 slots, so a worker whose
//     size swings by a few hundred blocks does not reallocate (TestAllocs*).
//
// # Memory at fleet scale (issue 17 §1, session 7)
//
// Bytes per (block, worker) entry by Stats, `kvroute bench index --json`
// on the synthetic trace (one shard; 7,000 = `--workers 1000 --duplicate
// 7`), and the 64-worker benchmark fleet (BenchmarkBuild/runs), each
// change on top of the one before:
//
//	                         before  sparse sets  half-step runs  tables 7/8
//	8 workers (trace)        36.13   36.13        35.08           29.37
//	256 workers (trace)      32.17   32.17        31.37           29.68
//	7,000 workers (trace×7)  48.32   33.34        32.85           30.55
//	fleet, 64 workers        30.61   30.61        29.96           31.11
//
// The three changes:
//
//   - Sparse sets past 512 worker keys (see Layout): at 7,000 keys a dense
//     set was 128 words per node, 15.59 of the 48.32 bytes; sparse sets
//     cost 0.6 (headers 0.27, pool the rest). Up to 512 keys nothing
//     changes: the dense code paths are as before, behind one predictable
//     branch (has and onlyMember call their sparse halves out of line so
//     the dense halves stay small). Match keeps its monotone walk (a child's
//     word indexes are a subsequence of its parent's, so the words that
//     leave are a merge of two sorted lists) and allocates nothing; the
//     tiered walk expands the sets on its path into dense scratch words (as
//     costly as the dense walk at that width). Capture and content encoding
//     are unchanged in format; the pool is one more captured arena.
//   - Run chunks in half-step size classes: runs waste 1.2× instead of
//     1.4× their blocks (7,000 workers: chunk blocks 400k → 336k for 281k
//     blocks). A node's run field is now the chunk's offset, so runOf has
//     no shift.
//   - Engine tables fill to 7/8 and grow to 7/4 of their count (before:
//     4/5 and 2×). Averaged over table sizes (BenchmarkEngineTableGrowth,
//     1k–100k entries on a log scale) 20.65 → 18.59 bytes per entry. A
//     single snapshot lands wherever its tables are in their growth cycle:
//     the trace's tables sit well (load 0.70 at 7,000 workers, 0.80 at 8),
//     the benchmark fleet's 64 equal tables of ≈20k entries sit just after a
//     resize (its 30.61 → 31.11).
//
// Speed (make-bench-compare style, the base f489bf1 and each change
// interleaved in one run on the shared 2-vCPU machine, load average 8–15;
// cpu-ns/op is process CPU time per op, which the waits for a core do not
// inflate; n = 8): Match/runs 605 → 659 ns (p = 0.65), Match/tiered 1.57 →
// 1.38 µs (p = 0.20), Apply/runs 7.65 → 5.56 µs (−27%, p = 0.007),
// Apply/block and Apply/tiered no change (p ≥ 0.44); the 7/8 tables alone
// against the commit before them: no significant change (p ≥ 0.20). The
// gate (perf/bench-gate.sh f489bf1 0.05 over Match, Apply, IndexMatch,
// IndexApply, wall clock, spreads ±40–300%) flagged nothing. Match again,
// 10 runs per binary alternating in both orders: runs 780 → 702 ns CPU
// (p = 0.44), tiered 1.66 → 1.68 µs (p = 0.97). At 4,096 worker keys
// (BenchmarkWide, dense against sparse sets, one process per run
// alternating in both orders): 38.30 → 29.46 bytes per entry, Match 2.53
// → 1.92 µs CPU (−24%, p = 0.006, n = 12), Apply 2.76 → 2.65 µs CPU
// (p = 0.38, n = 8). The 7,000-worker trace replay, 6 runs each,
// interleaved: 82k → 100k ops/s (median; 36–210k run to run), Match p50 320
// → 257 ns, p99 23.0 → 21.2 µs (medians).
//
// Not taken, from the member-array branch (wsets-member-arrays), whose two
// parts were measured apart (its commits 1876c9f, member arrays, and
// ec0fbae, + idTable, against their base c8b5999, CPU time per op, 6
// interleaved runs): member arrays for every set cost Match (Match/tiered
// 1.51 → 2.31 µs, p = 0.065; Apply no significant change), since a walk
// reads a node's whole array where a bitset takes a word operation; the
// idTable (engine entries keyed by the block's creator hash, 5 bytes a
// slot) cost Apply (Apply/runs 6.29 → 10.52 µs, +67%, p = 0.026: a 16-byte
// block record and a second probe on every lookup) for 1.3 bytes per entry
// at 7,000 workers and 0.1 on the fleet with per-worker hash seeds; it pays
// only where engines hash alike (22.41 on the fleet).
//
// Targets (issue 2), met on the quiet-machine medians: Match of 512 blocks ≤ 2 µs median (314 ns;
// 0.6 µs at worst under contention); Apply ≥ 10 M blocks/s (28.8 M; under
// contention 2.5–7.6 M was seen, below target, with the engine tables — 23 MB
// here — missing in a shared L3); ≤ 32 bytes per entry (29.2 by Stats, 29.4
// by heap growth); no allocations in steady-state Apply and Match
// (TestAllocsApply, TestAllocsApplyInner, TestAllocsMatch).
//
// # Engine-table pool (issue 17, session 8)
//
// A table that grows frees an array of the class below, which the next
// table to reach that class takes instead of fresh memory (fresh pages
// fault, and a resize's first stores into them were most of its time). The
// pool (engPool, one per tree) is counted in Stats().Bytes and holds at most
// 1/32 of the bytes of the tree's live tables, trimmed largest class first
// when tables shrink or go. It never takes the arrays of a table a capture
// covers (engineTable.cw set): the capture reads them until it completes,
// so they go to the garbage collector as before (TestCapturePooledArrays).
// Measured (ARCHITECTURE.md, the session-8 tables decision): at 7,000
// workers 72% of a pass's table arrays are recycled (39 → 23 MB fresh) for
// 0.7 bytes per entry (30.55 → 31.26; a 1/8 bound cost 2.3 and crossed
// 32); building BenchmarkWide's 4,096-worker tree costs 16.5% less CPU
// (BenchmarkEngineTablePool, p = 0.002) with 82% fewer allocations; the
// `kvroute bench index` replays showed no significant change at 256 or
// 7,000 workers (p ≥ 0.18) on a machine where their passes rarely faulted.
//
// # One resize per event (issue 17, session 9)
//
// A table used to grow one class at a time inside an event: a new worker's
// first 41-block Stored event rehashed it 8 → 14 → 22 → 35 → 54 slots.
// storeNew and join now call engineTable.reserve with the number of blocks
// they may insert (join counts the blocks matching the child's run first),
// which resizes once, to the class stepping would reach; the table ends in
// the same class, so memory is unchanged (TestEngineTableReserve).
// Measured (ARCHITECTURE.md, the session-9 tables decision): the 7,000-worker
// `kvroute bench index` replay +25% ops/s and block ops per CPU second (p =
// 0.002) at 31.26 B/entry; 256 workers +14.5% block ops per CPU second (p =
// 0.026). The incremental resize was not done: the per-event tail
// (BenchmarkEventApplyTail in bench/indexbench) is set by the arenas'
// growth and its page faults, not by the tables, which stay under 710
// slots at 256 workers.
//
// # Apply on NATS ingest's events (issue 17, session 8)
//
// BenchmarkApplyIngest replays ingest's BenchmarkNATSIngest events on
// a tree alone: 16 workers storing prefixes of 16–64 fresh blocks from the
// root and removing each, head first, four prefixes later. Measured by
// instruction counts (cachegrind, the difference of two run lengths; wall
// time on the shared machine spreads ±40%), it cost 17.4k instructions per
// event, 60% of them in the engine tables (find 18%, backward-shift
// deletion 16%, control-byte writes 7%) and 12% in sorting a removal's ids.
// Now 13.2k (−24%), from:
//
//   - Engine-table probes check the home slot first (its control byte, then
//     its key) and fall back to the eight-at-a-time scan only past it: at
//     the tables' load (≤ 7/8) most probes end there. setCtrl's common case
//     (no capture, a slot past the mirrored first group) is one store and
//     inlines; a deletion without a capture runs its backward shift with no
//     barrier calls in the loop.
//   - A Removed event's ids are sorted by (node, offset) only when they are
//     not already in run order or its reverse: engines name a run head first
//     or tail first, so one pass of packed-position compares replaces the
//     sort's comparator calls (sortByPosition; TestRemovedOrder takes all
//     three paths).
//
// Session 10 (issue 17 §2): the runs arena in pages. Session 9 put the
// block records in fixed chunks; the runs arena was still one slice per
// size class, which append doubled and copied inside whichever event
// filled it (≈40% of the page faults left in radix frames in the slowest
// events at 256 workers). Now a class fills fixed pages (arena.go,
// runStore). Measured against main interleaved (shared 2-vCPU machine,
// load average 3–6): BenchmarkEventApplyTail, n = 10, at 256 workers the
// event p99 27.9 → 19.4 µs (−30%, p < 0.001), p99.9 682 → 166 µs (p =
// 0.023), faults per pass 373 → 159 (p = 0.001), bytes allocated per pass
// −35%; at 7,000 workers p99 18.3 → 13.2 µs (−28%, p < 0.001), p99.9 213
// → 103 µs (p = 0.007), CPU per pass −11% (p = 0.004). Match's own
// instructions (cachegrind, BenchmarkMatch/runs, Match and its callees
// over 42,000 requests) 266.7M → 266.4M: locOf, Match's half of runOf,
// loads the page's slice header instead of the class's. Bytes per entry
// (bench index): 256 workers 30.11 → 29.57, 7,000 workers 30.65 → 29.86
// (a full page carries no doubling slack). TestRunArenaPages and
// TestCaptureAcrossRunPages (fails if wRun's barrier is skipped).
//
// Tried and not kept: a displacement field in the control byte (4
// fingerprint bits and 3 bits of distance from the home slot, so that a
// deletion decides which entries move from control bytes alone, without
// loading and rehashing keys). The rehash it saves is ~8 of a shift step's
// ~20 instructions, and 4-bit fingerprints match 8× as often in find:
// 13.64k → 14.01k instructions per event, so the 7-bit fingerprint stays.
// TestEngineTableRandom (a table against a map at full load, the control
// bytes checked after every operation) came out of it.
//
// The floor (BenchmarkApplyIngest/flatmap): one Go map insert or delete
// per block and nothing else costs 8.9k instructions per event, so the
// tree, which also keeps runs, sets and the block records, costs 1.5× a
// bare map. In BenchmarkNATSIngest the no-op subscriber's whole process
// costs 23.3k instructions per event and the ingest path without the tree
// 29.0k: issue 17's ingest/no-op ≥ 0.8 leaves the index ~0.1k instructions
// per event, less than any hash-table operation per block (ARCHITECTURE.md,
// the session-8 ingest decision).
package radix
