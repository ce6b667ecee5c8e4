//go:build !race

package openai

import "testing"

// ReplacePrompt (--forward-token-ids) allocates nothing once its pools and
// dst are warm.
func TestReplacePromptAllocs(t *testing.T) {
	body := []byte(`{"model":"m","prompt":"a text prompt","max_tokens":8,"stream":true}`)
	toks := make([]uint32, 2048)
	for i := range toks {
		toks[i] = uint32(i * 37)
	}
	dst, err := ReplacePrompt(nil, body, toks)
	if err != nil {
		t.Fatal(err)
	}
	if a := testing.AllocsPerRun(50, func() { dst, _ = ReplacePrompt(dst[:0], body, toks) }); a != 0 {
		t.Errorf("ReplacePrompt: %v allocs, want 0", a)
	}
}
