//go:build !race

package openai

import "testing"

func TestUsageAllocs(t *testing.T) {
	data := []byte(`{"id":"x","choices":[],"usage":{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":3}}}`)
	if a := testing.AllocsPerRun(100, func() {
		CachedTokens(data)
		IsUsageChunk(data)
	}); a != 0 {
		t.Errorf("%v allocs, want 0", a)
	}
}
