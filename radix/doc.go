// Package radix provides Tree, kvroute's index of every worker's KV cache: a
// radix tree over local block hashes that answers, for a request's blocks,
// how many leading blocks each worker key already holds (Match), and that
// applies engines' Stored/Removed/Cleared events as they arrive (Apply).
//
//	t := radix.New()
//	local := wire.LocalHashes(nil, tokens, 16, wire.Seed)
//	ev := wire.Event{Worker: k, Kind: wire.KindStored, Blocks: blocks} // blocks[i].Local = local[i]
//	if _, err := t.Apply(&ev); err != nil { ... } // ErrParentMissing: ask the worker to resend
//	overlaps := t.Match(buf[:0], local)           // one Overlap per worker key holding local[0]
//
// # Goroutines
//
// A Tree is a deterministic, single-owner core: no goroutines, locks, clocks
// or randomness, and one goroutine (a shard's runner) calls it. The one
// exception is SetQuiet's: between the hook's fn(true) and fn(false) the
// owner may let other goroutines call Match, Workers and TreeSize (below).
// Capture.Tree may run on one other goroutine while the owner goes on. Slices
// returned by Match, Workers and Dump are the caller's dst, appended to.
//
// # Semantics
//
//   - Stored with no parent starts at the root; with a parent, the parent
//     engine hash must be held by that worker key, else nothing is applied
//     and Apply returns ErrParentMissing (the caller's gap signal). A block
//     the worker already holds under the same engine hash is idempotent.
//   - A Stored block that contradicts what the worker holds (its engine hash
//     held at another position, or the position under another engine hash)
//     stops the event there: the blocks before it stay applied and Apply
//     returns ErrConflict (wrapping ErrBadEvent), Result.Conflicts = the
//     blocks dropped.
//   - Removed: the worker leaves each named block and everything it holds
//     below it. Names it does not hold are counted in Result.Unknown.
//   - Cleared removes every dp rank of the event's worker id (RemoveWorker);
//     RemoveDpRank removes one worker key. LoRA adapters change the local
//     hash seed, so their blocks are different paths.
//   - Tiers: Stored in tier T adds T to each block (a host copy of a GPU
//     block is the same entry); Stored with ByEngine adds T to the named
//     blocks the worker holds, by engine hash (never the device tier).
//     Removed in tier T takes only T; a block left in no tier leaves the
//     tree with everything the worker holds below it. Match reports per
//     worker key Blocks (device prefix), then Host and Disk, how far the
//     host and then any tier extend it.
//
// # Layout
//
// Everything lives in typed slices of pointer-free structs linked by uint32
// indices (0 = nil) with free lists, so the GC scans none of it
// (TestNoPointers, TestSizes):
//
//   - node (40 bytes): a run of blocks that every worker in the node's set
//     holds in full and inside which the tree does not branch. The tree is
//     canonical: a run ends only where the tree branches or the worker set
//     (or a worker's tiers) changes. A worker holding a node holds its
//     parent, so sets shrink going down and Match never revisits a worker.
//   - runs (runStore): each node's local hashes and block ids in a chunk of
//     a size class (1, 2, 3, 4, 6, 8, 12, … blocks), chunks in fixed pages
//     of one class (1,024 blocks of small chunks: 8 KiB of hashes, 4 KiB of
//     ids); a node's run field is page<<10 | offset. A full page is followed
//     by a fresh one, so no class copies itself inside an event; only a
//     class's first page grows, by doubling.
//   - blocks (8 bytes): a stable block id → (node, offset), in fixed chunks
//     of 1,024 (8 KiB). Splits, merges and moves rewrite only these records,
//     never the engine tables. Match never reads them.
//   - worker sets: bitsets over dense per-tree slots, widened on demand; past
//     512 worker keys every set turns, once, into a sparse set (sparse.go:
//     the nonzero words with their indexes). With tiers, four more sets per
//     node (device, host, disk, external), allocated at the first
//     non-device event; the node's set stays their union.
//   - edges: one per-tree table (parent, first local hash) → child,
//     consulted only at nodes with two or more children.
//
// A node with no workers is freed at once with its blocks and run; an
// emptied tree is back to New's footprint (TestReclaimAll), and churn reuses
// what it frees (TestChurnBounded).
//
// # Engine tables
//
// Per worker key, engine hash → block id, for parents and removals:
// open addressing with linear probing and backward-shift deletion (no
// tombstones), 12-byte entries plus a control byte per slot that a probe
// checks at the home slot first, then scans eight at a time. Tables fill to
// 7/8 and grow to 7/4 of their count; capacities are size classes (8, 14,
// 22, 35, …; shrinks at 1/5 load round up to a class, floor 302). A resize
// takes its arrays from the tree's pool of freed arrays of that class
// (engPool, at most 1/32 of the live tables' bytes, counted in Stats) and
// returns the old ones, except those of a table a capture covers. An event
// reserves its worker's table once for the blocks it may insert
// (engineTable.reserve), so it resizes at most once per run it stores.
//
// # Quiet stretches
//
// Apply calls the hook set with SetQuiet as it enters and leaves the
// stretches of its work that write nothing Match, Workers or TreeSize read:
// a Stored event's table reservation and inserts (a new leaf is filled
// before it is linked, a growing leaf's blocks go past its published
// length); a Removed event's table deletes, the freeing of a subtree once
// it is unlinked, and the table sweep; checks of 16 or more blocks an event
// announces again. A Match inside a stretch sees a tree between the one
// before the event and the one after: the event's worker holds a depth
// between its two depths, nobody else changes. A slot's size as Match
// reports it (slotRec.size) is published as each stretch begins and at the
// event's end, never below the blocks Match finds (TestQuietStretches).
//
// # Snapshots
//
// BeginCapture takes a copy-on-write image while the tree goes on being
// mutated. Arenas are split into pages of PageBytes; every arena write goes
// through a write barrier (the w* functions in arena.go, wE in table.go)
// that copies the element's page first while a capture is in progress.
// Capture.Step copies pending pages in bounded steps on the owner's
// goroutine, or Capture.Tree, on one other goroutine, takes the pages the
// owner has not copied straight from the arenas (internal/cow's per-page
// handshake: the owner never waits), then Capture.Complete detaches the
// barrier. Arrays replaced rather than written need no copy. With no capture
// a barrier is one nil check. TestCaptureCopyOnWrite checks captures against
// a Clone taken at BeginCapture; -tags invariants checks every capture.
// CopyTo and Clone copy a tree in one go.
//
// WriteContent encodes a tree compactly (preorder runs with worker sets,
// then each worker's engine hashes in block order, each run literal, "the
// blocks' sequence hashes" or "the node's first worker's", with its tier
// mask); ReadContent rebuilds it through Apply, so any input decodes to a
// valid tree or ErrCorrupt.
//
// # Costs
//
// Match is O(request blocks + nodes on the path × set words) and allocates
// nothing when dst has room. Apply is O(event blocks) plus O(run length) for
// a split or merge; removing a block whose subtree holds blocks the event
// did not name sweeps that worker's engine table once (no reverse index).
// Named blocks are removed shallowest first, so a tail-first eviction costs
// one split. RemoveWorker is O(the worker's nodes); Dump and
// CheckInvariants are O(tree) and allocate. Steady-state Apply and Match
// allocate nothing (TestAllocsApply, TestAllocsMatch, TestAllocsMatchTiered).
// CheckInvariants checks links, canonical form, block records, sizes, every
// engine-table entry and the free lists; under -tags invariants every
// mutation calls it. The maxRun 1 layout (one block per node) and the
// -radix.sparse test flag run the same tests on the alternatives.
//
// # Decisions
//
// The reasons and measurements behind this design:
// docs/decisions/0001-arena-tree-of-runs.md (runs in pointer-free arenas),
// docs/decisions/0002-per-worker-engine-tables.md,
// docs/decisions/0003-storage-tiers.md (tiers; Overlap written in place),
// docs/decisions/0004-sparse-worker-sets.md (sparse sets, half-step runs,
// 7/8 tables), docs/decisions/0005-engine-table-growth.md (the pool,
// reserve), docs/decisions/0006-paged-arenas.md,
// docs/decisions/0009-quiet-stretches.md,
// docs/decisions/0011-snapshot-format.md,
// docs/decisions/0012-copy-on-write-captures.md and
// docs/decisions/0017-nats-ingest-throughput.md (probes and removals
// trimmed; the cost floor).
package radix
