// Package kvcache provides an engine-side KV block manager for simulations:
// one worker's prefix-caching block pool, run as vLLM runs it (reference
// counts, an LRU free queue evicted head-first, tail-first release of
// finished sequences), that emits the KV events (Stored, Removed, Cleared) a
// real engine would publish, with its own chained engine block hashes.
//
// The events a Manager emits, applied in order to an empty index, describe
// exactly the set of blocks it holds: the package's tests check this against
// an event-replay model and against radix.Tree. With Config.HostCapacity a
// host tier (host.go) takes the blocks the device evicts, announced with
// Tier host before the device's Removed; the union of both tiers is what an
// index holds (TestHostTierRebuildsRadix).
package kvcache
