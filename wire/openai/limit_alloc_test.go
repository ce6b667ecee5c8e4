//go:build !race

package openai

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// With the bytes tokenizer a completion's text prompt over the limit is
// found before the body is parsed: neither the parser's copy of the body
// nor any token is allocated.
func TestTokenLimitBytesDecidesBeforeParsing(t *testing.T) {
	long := strings.Repeat("a", 4<<20)
	body := []byte(fmt.Sprintf(`{"model":"m", "max_tokens":4, "prompt":%q}`, long))
	var r Request
	r.TokenLimit = 1000
	_ = Parse(body, false, BytesTokenizer{}, &r) // warm the pools
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	err := Parse(body, false, BytesTokenizer{}, &r)
	runtime.ReadMemStats(&after)
	if err != nil || !r.TooLong || r.AtLeast != len(long) {
		t.Fatalf("4 MiB prompt: err %v TooLong %v AtLeast %d", err, r.TooLong, r.AtLeast)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 64<<10 {
		t.Errorf("refusing a 4 MiB prompt allocated %d bytes; want under 64 KiB", got)
	}
}
