// Package synth provides a synthetic workload generator for replays without
// a trace file: sessions arriving as a Poisson process, shared-prefix groups
// (system prompts) picked with Zipf popularity, multi-turn sessions whose
// turns extend the previous turn's prompt and answer, and prompt, output,
// turn-count and think-time distributions (fixed, uniform, exponential,
// log-normal). The result is a bench/trace.Trace in Mooncake form (512-token
// hash ids, timestamps on first turns, session ids and delays on follow-up
// turns), deterministic for a seed, so it replays and serializes like a real
// trace.
//
// SharedPrefix is the shared-prefix workload of `kvroute bench index
// --shared-prefix` and the index benchmarks: one system prompt in every
// request (Config.SystemTokens), conversations under a dozen tool prefixes,
// every turn timestamped (Config.TimeAllTurns) for replays that order by
// time alone; Stats measures how a trace's requests share blocks.
//
// Generate is a pure function of its Config (its RNG is a PCG seeded from
// Config.Seed); Config, Dist and the returned Trace are plain values owned by
// the caller.
package synth
