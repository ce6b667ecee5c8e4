package engine

import (
	"testing"
	"time"
)

// loaded returns an engine running n requests of 1000-token prompts sharing
// 32 blocks, past their prefill, each decoding maxTokens tokens.
func loaded(tb testing.TB, n, maxTokens int) *Engine {
	const bs = 16
	e := New(Config{Capacity: 1 << 16, BlockSize: bs})
	for i := range n {
		id := uint64(i)
		if err := e.Submit(Request{ID: id, Prompt: prompt(1, id, 62, 32), PromptTokens: 1000, MaxTokens: maxTokens}, 0); err != nil {
			tb.Fatal(err)
		}
	}
	now := time.Duration(0)
	for range 40 { // prefill everything (8192-token budget) and start decoding
		now += e.Step(now)
		e.Reset()
	}
	if e.LastStep().DecodeTokens != n {
		tb.Fatalf("last step %+v, want %d decodes", e.LastStep(), n)
	}
	return e
}

// BenchmarkStep measures steps of 256 running requests (max_num_seqs), each
// decoding 2000 tokens and replaced by a new one when it finishes, and
// reports tokens computed per second of wall time spent in the model: the
// simulator's own cost, not the simulated time.
func BenchmarkStep(b *testing.B) {
	e := loaded(b, 256, 2000)
	next := uint64(256)
	now := time.Duration(0)
	start := e.Stats()
	b.ReportAllocs()
	for b.Loop() {
		now += e.Step(now)
		for _, ef := range e.Effects() {
			if ef.Kind == Finished {
				if err := e.Submit(Request{ID: next, Prompt: prompt(1, next, 62, 32), PromptTokens: 1000, MaxTokens: 2000}, now); err != nil {
					b.Fatal(err)
				}
				next++
			}
		}
		e.Reset()
	}
	st := e.Stats()
	tokens := st.DecodeTokens + st.PrefillTokens - start.DecodeTokens - start.PrefillTokens
	b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkRequestCycle runs short requests to completion continuously:
// submit, prefill (with a shared prefix), 8 decodes, finish, resubmit.
func BenchmarkRequestCycle(b *testing.B) {
	const bs, n = 16, 64
	e := New(Config{Capacity: 1 << 14, BlockSize: bs})
	p := prompt(1, 0, 30, 30)
	next := uint64(0)
	for range n {
		if err := e.Submit(Request{ID: next, Prompt: p, PromptTokens: 490, MaxTokens: 8}, 0); err != nil {
			b.Fatal(err)
		}
		next++
	}
	now := time.Duration(0)
	done := 0
	b.ReportAllocs()
	for b.Loop() {
		now += e.Step(now)
		for _, ef := range e.Effects() {
			if ef.Kind == Finished {
				done++
				if err := e.Submit(Request{ID: next, Prompt: p, PromptTokens: 490, MaxTokens: 8}, now); err != nil {
					b.Fatal(err)
				}
				next++
			}
		}
		e.Reset()
	}
	b.ReportMetric(float64(done)/b.Elapsed().Seconds(), "requests/s")
}
