// Package tracestream provides the precomputed operation stream of a trace
// replay in the style of Dynamo's mooncake_bench: a trace's requests are
// partitioned over W simulated workers, each worker runs a kvcache.Manager
// over its requests in time order, and the result is one time-ordered slice
// of operations, requests (the local hashes of the prompt's full blocks, for
// an index lookup) and KV events (for an index update), with every hash and
// event block in flat arenas, so a replay can push them into an index as
// fast as the index goes.
//
// Duration model: a request allocates its whole prompt when it arrives and
// holds it for Hold + OutputLength*HoldPerOutputToken (both 0 by default:
// freed at once, which leaves its blocks cached in the worker's LRU). Freeing
// emits no event, so every event's time is the arrival time of the request
// whose allocation caused it (evictions, then stores); a request's op comes
// just before its own events. Dynamo's benchmark instead runs its mocker
// engine, whose decode phase also stores generated blocks; use bench/engine
// for that level of fidelity.
package tracestream
