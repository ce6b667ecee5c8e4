package engine

import (
	"math"
	"testing"
	"time"
)

// TestInterferenceCalibrated: with DistServePerf, the decode step of a
// request that shares its batch with t prefill tokens lasts what
// DistServe's OPT-13B/A100 profile gives for a mixed pass, decode(c) +
// prefill(t) − the shared intercept, so its inter-token latency rises by
// 0.0926 ms per co-batched prefill token (plus the t² term); a decode-only
// step pays nothing for prefill. The expected values are computed here from
// the published coefficients, not from the package's constants.
func TestInterferenceCalibrated(t *testing.T) {
	const (
		pa, pb, pc = 16.456860431694288, 0.09264750660897617, 6.474785740229194e-06
		da, dc     = 19.934702624895458, 0.0006269356524350583
		kvBlocks   = 3584 // DistServeKVTokens / 16
	)
	perf := DistServePerf(kvBlocks * 16)
	step := func(prefill int) (time.Duration, StepInfo) {
		e := New(Config{Capacity: kvBlocks, BlockSize: 16, Perf: perf})
		if err := e.Submit(Request{ID: 1, Prompt: prompt(1, 1, 64, 0), PromptTokens: 1024, MaxTokens: 100}, 0); err != nil {
			t.Fatal(err)
		}
		now := e.Step(0) // request 1's prefill
		if prefill > 0 {
			if err := e.Submit(Request{ID: 2, Prompt: prompt(2, 2, prefill/16, 0), PromptTokens: prefill, MaxTokens: 1}, now); err != nil {
				t.Fatal(err)
			}
		}
		d := e.Step(now)
		return d, e.LastStep()
	}
	for _, p := range []int{0, 128, 512, 2048, 4096} {
		d, info := step(p)
		if info.DecodeTokens != 1 || info.PrefillTokens != p {
			t.Fatalf("step with %d prefill tokens: %+v", p, info)
		}
		want := da + dc*info.Usage*kvBlocks*16
		if p > 0 {
			x := float64(p)
			want += pb*x + pc*x*x // + pa − pa: the pass's intercept, once
		}
		got := float64(d) / float64(time.Millisecond)
		if math.Abs(got-want) > 0.01 {
			t.Errorf("decode step beside %d prefill tokens: %.3f ms, DistServe's profile gives %.3f ms", p, got, want)
		}
		if p == 2048 {
			alone, _ := step(0)
			// The stall the package doc quotes: about 11× at this usage.
			if r := float64(d) / float64(alone); r < 10 || r > 12 {
				t.Errorf("decode step beside 2048 prefill tokens is %.1f× a decode-only one, want 10–12×", r)
			}
		}
	}
	// A prefill-only pass pays the intercept (it is not a mixed step).
	e := New(Config{Capacity: kvBlocks, BlockSize: 16, Perf: perf})
	if err := e.Submit(Request{ID: 1, Prompt: prompt(1, 1, 32, 0), PromptTokens: 512, MaxTokens: 1}, 0); err != nil {
		t.Fatal(err)
	}
	got := float64(e.Step(0)) / float64(time.Millisecond)
	if want := pa + pb*512 + pc*512*512; math.Abs(got-want) > 0.01 {
		t.Errorf("prefill-only pass of 512 tokens: %.3f ms, want %.3f", got, want)
	}
}
