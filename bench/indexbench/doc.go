// Package indexbench replays a precomputed trace stream (bench/tracestream)
// against the sharded index as fast as it will go, the method of Dynamo's
// mooncake_bench: requests become Match calls (each timed), KV events become
// Apply calls, in the stream's timestamp order. It reports achieved ops/s,
// block ops/s, Match latency percentiles, and the index's size at the end,
// as JSON and as Go benchmark-format lines for benchstat.
//
// Every pass replays the stream from an empty index (the stream assumes
// it starts from nothing), so a pass measures a cold start: every worker's
// engine table grows from empty and the tree's arenas grow from nothing.
// Before each run (Config.Repeat; not timed) the heap is collected and its
// free pages returned to the OS (debug.FreeOSMemory), so a run starts like
// a process holding only the stream (session 10). Before that, the garbage
// of building the stream (≈7 GB of block managers at 7,000 workers) stayed
// in the heap and decided what a run measured: with the collector's goal
// at twice that, most runs never collected (every pass faulted ≈15.5k fresh
// pages, including the first), and others collected once and scavenged the
// 7 GB during the timed passes. Config.NoSettle (`--settle=false`) keeps
// that method, to reproduce issue 17's figures. Result.FirstPass is the
// first pass alone (fresh pages: ≈12k faults at 7,000 workers), so a
// multi-pass run shows what the later passes pay instead: the collector
// (≈1.2 cycles per pass at 7,000 workers, GCCycles) and the pages the
// scavenger returned while the emptied index's heap was small (≈2.3k
// faults per pass). Config.Churn (`--churn N`) replays, after a first
// full pass, one group of workers per pass (removed first, not timed) into
// an index that keeps the others: a router's workers leaving and
// rejoining, whose heap does not swing with the whole index; there the
// faults and collections per op fall to a third or less, and the index's
// own work per op rises. See docs/ARCHITECTURE.md (issue 17, session 10,
// passes) for the measurements.
// Alongside the throughput a Result carries the process's resources over
// the timed passes (getrusage): user and system CPU seconds, block ops per
// CPU second (block ops per core, however many threads ran them), minor
// page faults and context switches. On the 2-vCPU Firecracker VM a minor
// fault costs ≈3–8 µs of system time, and at 7,000 workers the faults
// were ≈40% of the process's CPU (issue 17, session 8; session 10 traced
// most of them to the stream build's garbage, above).
//
// Config.Direct (kvroute bench index --direct) replays into one
// shard.Core on the replaying goroutine: no Runner, queue, lock or
// hand-off. It is the floor under the sharded replay, the index's own work
// per op, and its Match latencies contain no wait for a write in progress.
// See docs/ARCHITECTURE.md (issue 17, session 8, index) for the split of a
// run's CPU between Apply, Match, the shard's hand-offs and the harness.
//
// BenchmarkEventApplyTail replays the same way into a shard.Core one event
// per Apply call and reports the percentiles of one event's Apply time
// (p50, p99, p99.9, max), with CPU time and page faults per pass: what a
// lookup arriving while the runner applies waits for at most, measured
// without the lookup itself (issue 17, session 9; a wall-clock figure, so
// compare interleaved).
package indexbench
