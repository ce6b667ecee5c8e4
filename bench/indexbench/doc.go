// Package indexbench replays a precomputed trace stream (bench/tracestream)
// against the sharded index as fast as it will go, the method of Dynamo's
// mooncake_bench: requests become Match calls (each timed), KV events become
// Apply calls, in the stream's timestamp order. It reports achieved ops/s,
// block ops/s, Match latency percentiles, and the index's size at the end,
// as JSON and as Go benchmark-format lines for benchstat.
package indexbench
