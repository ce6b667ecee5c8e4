package openai

import (
	"strconv"
	"testing"
)

func tokenBody(n int) []byte {
	b := []byte(`{"model":"m","max_tokens":16,"prompt":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(i*7919%128000), 10)
	}
	return append(b, "]}"...)
}

func BenchmarkParseTokenIDs(b *testing.B) {
	for _, n := range []int{2048, 8192} {
		body := tokenBody(n)
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			var r Request
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if err := Parse(body, false, BytesTokenizer{}, &r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
