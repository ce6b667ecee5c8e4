// Package indexbench provides `kvroute bench index`: it replays a
// precomputed trace stream (bench/tracestream) against the sharded index as
// fast as it will go, the method of Dynamo's mooncake_bench: requests become
// Match calls (each timed), KV events become Apply calls, in the stream's
// timestamp order. It reports achieved ops/s, block ops/s, Match latency
// percentiles and the index's size at the end, as JSON and as Go
// benchmark-format lines for benchstat.
//
// Every pass replays the stream from an empty index (the stream assumes it
// starts from nothing), so a pass measures a cold start: every worker's
// engine table and the tree's arenas grow from nothing. Before each run
// (Config.Repeat; not timed) the heap is collected and its free pages
// returned to the OS (debug.FreeOSMemory), so a run starts like a process
// holding only the stream: otherwise the garbage of building the stream
// (gigabytes of block managers at 7,000 workers) stays in the heap and
// decides whether the timed passes collect and scavenge it.
// Config.NoSettle (--settle=false) skips that step, to compare with figures
// taken without it. Result.FirstPass is the first pass alone (fresh pages),
// so a multi-pass run shows what the later passes pay instead: collections
// (GCCycles) and the pages the scavenger returned while the emptied index's
// heap was small. Config.Churn (--churn N) replays, after a first full pass,
// one group of workers per pass (removed first, not timed) into an index
// that keeps the others: a router's workers leaving and rejoining, whose
// heap does not swing with the whole index.
//
// Alongside the throughput a Result carries the process's resources over the
// timed passes (getrusage): user and system CPU seconds, block ops per CPU
// second (block ops per core, however many threads ran them), minor page
// faults and context switches. On a small VM minor faults cost microseconds
// of system time each and can be a large share of the CPU at 7,000 workers,
// which is why they are reported.
//
// Config.Direct (--direct) replays into one shard.Core on the replaying
// goroutine: no Runner, queue, lock or hand-off. It is the floor under the
// sharded replay, the index's own work per op, and its Match latencies
// contain no wait for a write in progress.
//
// Config.Replayers (--replayers N) replays with N goroutines, each the
// requests and events of the workers w with w mod N its number, into the
// one index: several ingest receivers and request handlers, for the
// scaling table (perf/scaling.sh).
//
// BenchmarkSharedPrefixReplay replays the shared-prefix workload
// (bench/synth.SharedPrefix: every lookup's answer names most of the
// fleet) through one shard and --direct in the same op, for the ratio of
// their Match p99s; BenchmarkSharedDecision times the whole decision on
// it, Match and sched.Decide over 7,000 ranks with bookings.
//
// BenchmarkEventApplyTail replays the same way into a shard.Core one event
// per Apply call and reports the percentiles of one event's Apply time (p50,
// p99, p99.9, max), with CPU time and page faults per pass: what a lookup
// arriving while the runner applies waits for at most, measured without the
// lookup itself (a wall-clock figure, so compare interleaved runs).
//
// The measurements these modes were built for (where a replay's CPU goes,
// the settled heap, engine-table growth) are in docs/decisions/; the current
// figures in docs/benchmarks.md.
package indexbench
