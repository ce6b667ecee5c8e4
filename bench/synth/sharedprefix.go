package synth

import (
	"github.com/kvroute/kvroute/bench/trace"
)

// SharedPrefix returns the shared-prefix workload of `kvroute bench index
// --shared-prefix`: 12,000 requests of conversations under one application,
// every request beginning with the same 1,024-token system prompt (two
// 512-token blocks), then one of 12 tool-and-instruction prefixes (Zipf 1.0,
// 1–6k tokens), then its conversation (a median 2.5 turns, log-normal),
// whose turns extend each other.
// Statistics (Stats, TestSharedPrefixStats): the first block shared by every
// request, about 1,800 requests sharing each block a request touches, about
// 24 blocks per request and up to about 250. Every turn carries a timestamp
// (TimeAllTurns), so a replay ordered by time alone keeps turns in order.
func SharedPrefix() Config {
	return Config{
		Requests: 12000, Rate: 4, Groups: 12, GroupSkew: 1.0,
		SystemTokens: Dist{Kind: Fixed, A: 1024},
		PrefixTokens: Dist{Kind: Uniform, A: 1024, B: 6144},
		PromptTokens: Dist{Kind: LogNormal, A: 1000, B: 1.0},
		OutputTokens: Dist{Kind: LogNormal, A: 200, B: 0.8},
		Turns:        Dist{Kind: LogNormal, A: 2.5, B: 1.0},
		TurnTokens:   Dist{Kind: LogNormal, A: 300, B: 1.0},
		ThinkTime:    Dist{Kind: Exp, A: 20000},
		TimeAllTurns: true,
		Seed:         1,
	}
}

// Statistics describes how a trace's requests share blocks.
type Statistics struct {
	Requests int
	// Blocks per request (512-token hash ids): mean and maximum.
	MeanBlocks float64
	MaxBlocks  int
	// FirstShared is the fraction of requests whose first block is the
	// most common first block.
	FirstShared float64
	// MeanSharers is, over every (request, block) pair, the number of
	// requests holding that block, averaged: how many requests share a
	// block a request touches.
	MeanSharers float64
	// DistinctBlocks counts the trace's distinct hash ids.
	DistinctBlocks int
}

// Stats computes t's sharing statistics.
func Stats(t *trace.Trace) Statistics {
	st := Statistics{Requests: len(t.Requests)}
	if len(t.Requests) == 0 {
		return st
	}
	holders := map[uint64]int{}
	firsts := map[uint64]int{}
	pairs := 0
	for i := range t.Requests {
		ids := t.Requests[i].HashIDs
		pairs += len(ids)
		st.MaxBlocks = max(st.MaxBlocks, len(ids))
		for _, id := range ids {
			holders[id]++
		}
		if len(ids) > 0 {
			firsts[ids[0]]++
		}
	}
	top := 0
	for _, n := range firsts {
		top = max(top, n)
	}
	sq := 0.0
	for _, n := range holders {
		sq += float64(n) * float64(n)
	}
	st.MeanBlocks = float64(pairs) / float64(len(t.Requests))
	st.FirstShared = float64(top) / float64(len(t.Requests))
	if pairs > 0 {
		st.MeanSharers = sq / float64(pairs)
	}
	st.DistinctBlocks = len(holders)
	return st
}
