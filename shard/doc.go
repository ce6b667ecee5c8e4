// Package shard provides kvroute's concurrent, sharded KV-cache index: a
// goroutine-safe facade (Index) over shards, each a goroutine (Runner)
// owning one synchronous, deterministic core (Core) that holds a radix.Tree
// for the workers assigned to it and, in approximate mode, the TTL
// bookkeeping of the router's own routing decisions.
//
//	ix, err := shard.NewIndex(shard.Config{Shards: 2, BlockSize: 16})
//	defer ix.Close()
//	err = ix.Apply(batch.Events)                    // returns once queued; batch is free again
//	overlaps, err := ix.Match(buf[:0], localHashes) // every shard, on this goroutine
//	err = ix.Flush()                                // then lookups see every write before it
//
// # Shape
//
// Core is the thread-unsafe state machine: Apply (event batches), Match,
// RecordDecision and Tick (approximate mode; time is an argument), worker
// removal, Dump, Counters and a gap outbox. Runner is a thin loop around a
// Core: one goroutine, optionally pinned to CPUs with sched_setaffinity (then
// locked to its OS thread; where pinning is not permitted it runs unpinned
// and PinError says why). It has two bounded lock-free MPSC queues, one for
// writes (event batches, decisions, ticks, removals) and one for lookups
// other than Match (Stats, Gaps, Workers, TreeSize), and a one-slot doorbell
// it parks on when both are empty. Writes are applied in steps of at most
// RunnerConfig.StepBlocks blocks and the lookup queue is drained between
// steps. Unpinned runners are not locked to OS threads unless
// RunnerConfig.LockOSThread asks (waking a locked idle shard is an OS thread
// hand-off).
//
// Index assigns each worker id, on first sight (an event or a recorded
// decision), to the shard with the fewest assigned worker ids and never
// moves it: all of that worker's events (every dp rank) go to that shard, in
// order. Lookups are broadcast to every shard and the answers concatenated
// (shards hold disjoint workers). Index.Apply copies the events' blocks into
// a pooled per-shard batch and returns once they are queued; a full queue
// makes the producer wait (backpressure): nothing is ever dropped. Batches
// and lookup items are recycled through bounded lock-free free lists, not
// sync.Pools (a GC empties a pool). Keep Config.Shards below GOMAXPROCS.
//
// # Ordering and goroutines
//
// Every Index method is goroutine-safe; Core is not (its Runner's goroutine
// owns it); Runner.Do runs a function on the Core as one work item. Calls
// that return a result (RemoveWorker, Tick, Dump, Flush, CheckInvariants) run
// after every write queued before them. Lookups overtake queued writes; Match
// and MatchBatch may also see an event part-applied (below). Replace, a
// capture step and Do look atomic to lookups.
//
// # Lookups on the caller's goroutine
//
// Match and MatchBatch run on the caller's goroutine: each shard's Core is
// guarded by a mutex that the runner holds for one step at a time, and the
// caller takes it, matches, and lets go. A lookup never waits for the shard's
// goroutine to be scheduled or woken. A caller that finds the lock taken
// counts itself as waiting; the runner ends its step after the current event
// once it has applied lookupStepBlocks (32) blocks since callers last had the
// lock (Runner.credit, full after idling), hands the lock to every caller
// that was waiting (a ticket: later arrivals wait for the next step) and
// takes it back ahead of new callers, so callers matching back to back cannot
// starve the writes. Both sides try the lock spinTries (64) times before
// parking in the mutex. radix takes no lock: the lock is the shard's.
//
// During an event step the runner sets the tree's quiet hook
// (radix.Tree.SetQuiet; Runner.quietHook) and lets the core's lock go in
// each quiet stretch, the event's engine-table and freeing work that no Match
// reads, taking it back after (one Unlock and one TryLock a stretch, else the
// writer-first lockStep). A lookup arriving then takes the core at once, and
// one already waiting gets it in the next stretch instead of after the event.
// It sees the event's worker holding part of the event's blocks
// (TestMatchInQuietStretches, also under -race).
//
// The waits are counted per shard (ShardStats.LookupWaits, LookupParks,
// RunnerParks; kvroute_shard_lookup_{waits,parks}_total,
// kvroute_shard_runner_parks_total), read on the lookup's slow path only.
// Config.QueuedLookups keeps the queued path instead (a lookup queued to each
// shard and answered between steps, every shard in parallel).
//
// # Approximate mode
//
// Without KV events the router records its own decisions: RecordDecision
// stores a request's blocks for the chosen worker (engine hash = sequence
// hash, parent = previous block's sequence hash) with a TTL (default 120 s)
// refreshed whenever a decision routes the block there again. Tick(now)
// expires blocks; a size cap (default 2^20 blocks, split across shards)
// prunes to a target ratio (0.8), earliest expiry first and deepest block
// first among equal expiries, so leaves go before their prefixes. Expiry
// bookkeeping is one expiry-ordered intrusive list over a pointer-free arena:
// a refresh is O(1). A worker should be fed either events or decisions:
// engine Removed events are not reflected in the TTL bookkeeping (Cleared
// and worker removal are).
//
// # Observability
//
// Every shard keeps plain counters (events by kind and outcome, blocks,
// lookups, approximate-mode activity, queue depth), read on its own goroutine
// by Index.Stats and exported at scrape time by Index.WriteMetrics
// (MetricFamilies holds their HELP and TYPE for a promtext.Registry). A Stored
// event whose parent is unknown is dropped, counted, and reported as a Gap in
// an outbox drained by Index.Gaps.
//
// # Snapshots
//
// Index.Capture(streamSeq) freezes every shard at its event-queue position by
// copy-on-write: the shard applies the writes queued before it, begins a
// radix.Capture of its tree and a capture of its approximate-mode entries
// (O(workers)), and goes on at once with the writes queued behind it. Every
// write first copies the 8 KiB pages it is about to change (radix's write
// barrier), and a reader goroutine started with the capture takes the other
// pages straight from the shard's arrays (internal/cow's per-page handshake:
// the shard never waits), then rings the shard, which detaches the barrier at
// its next loop. With Config.CaptureCopySteps there is no reader: the Runner
// copies the other pages itself in steps of at most Config.CaptureStepBytes
// between event steps, back to back when no events are queued, and under
// saturation paced by Config.CaptureBytesPerBlock bytes per block of event
// work applied (the barrier's copies use the budget first). A capture
// requested while the shard still captures the previous one waits for it.
// Capture.Stats reports each shard's stalls. Capture.WriteTo waits for the
// frozen copies and encodes them on the caller's goroutine, streaming, while
// the shards go on; the copies cost as much memory as the index until the
// Capture is dropped. streamSeq is opaque here: the JetStream consumer passes
// the last sequence it applied.
//
// The format (snapshot.go, version 2; version 1 still restores): an 80-byte
// header (magic, version, block size, shards, stream sequence, totals, xxh3),
// then one zstd stream with a checksummed section per shard (the tree's
// radix.Tree.WriteContent and the approximate-mode entries with their TTL
// left). Index.Restore reads a whole snapshot, verifies it and only then
// installs it into a fresh Index with the same shard count; any error, which
// wraps ErrSnapshot and says which check failed, leaves the Index unchanged.
// FuzzReadSnapshot fuzzes the decoder.
//
// # Decisions
//
// docs/decisions/0007-sharded-index.md (shards, assignment, backpressure,
// free lists, thread locking), docs/decisions/0008-lookups-on-the-callers-goroutine.md
// (the lock, its hand-off and what a lookup waits for),
// docs/decisions/0009-quiet-stretches.md, docs/decisions/0011-snapshot-format.md,
// docs/decisions/0012-copy-on-write-captures.md (copy-on-write, pacing, the
// reader) and docs/decisions/0010-trace-replay-method.md (how the index is
// measured end to end).
package shard
