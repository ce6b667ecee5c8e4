// Package verify provides kvroute's check of its index against the engines:
// for every proxied request it compares the blocks a routing decision
// credited to the chosen dp rank with the prompt tokens the engine reports
// it served from its prefix cache (vLLM's and SGLang's
// usage.prompt_tokens_details.cached_tokens), keeps a small rolling window
// per rank, and names the cause when the two disagree persistently.
//
//	t := verify.New(verify.Config{BlockSize: 16})
//	v := t.Observe(key, verify.Sample{Predicted: 12, Reported: 160}, now)
//	if v.Repair { /* ask the worker for a dump (ingest/recovery) */ }
//	if v.Named { /* log v.Cause once */ }
//
// # Agreement
//
// A request agrees when the engine's cached blocks (reported tokens
// divided by the block size, rounded down) are within one block of the
// device blocks predicted, or of device plus host blocks (an engine with a
// host tier counts what it loads back as cached). One block of slack
// absorbs the engines' rule that the last prompt token is always computed
// (a fully cached prompt reports one block less) and a block stored or
// evicted while the request was in flight.
//
// # Causes
//
// Over a full window (Config.MinSamples or more requests of one rank) the
// tracker names, in this order:
//
//   - CauseBlockSize: the greatest common divisor of the non-zero reports
//     (at least MinSamples of them) is not a multiple of the router's block
//     size, or is a larger multiple while most requests disagree, no
//     request of the rank was ever predicted a block and the reports vary.
//     The engine's block size is that divisor (or a divisor of it). While
//     the reports are a larger multiple but do not vary yet, nothing else
//     is named for a rank that never matched (no repair for what a dump
//     cannot fix).
//   - CauseHash: most requests report cached tokens, their divisor is the
//     router's block size, no request of the rank was ever predicted a
//     block, and the rank publishes events
//     (Sample.Publishes): blocks arrive but never match, so an input to
//     hashing differs (block size, hash seed, LoRA name, cache salt,
//     multimodal keys). A rank that has matched before and now reports
//     more than predicted misses events instead.
//   - CauseStale: the prediction exceeds the report by more than a block in
//     at least Config.Persist of the window (the index holds blocks the
//     engine dropped: a cache cleared without events, a lost Removed).
//   - CauseMissing: the report exceeds the prediction by more than a block
//     in at least Persist of the window (events lost or cut off).
//
// Stale and missing set Verdict.Repair at most once per
// Config.RepairInterval per rank; a repair empties the rank's window, so
// the next verdict rests on requests decided against the repaired index.
// A request whose engine reports nothing is counted unverified and is
// not in the window.
//
// # Invariants
//
// A Tracker is deterministic and synchronous: no goroutines, no locks, no
// clock (time is an argument, nanoseconds from any epoch). It is not
// goroutine-safe. Observe allocates only the first time it sees a rank.
package verify
