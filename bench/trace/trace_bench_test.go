package trace

import (
	"bytes"
	"os"
	"testing"

	"github.com/kvroute/kvroute/wire"
)

// BenchmarkHasher replays the small trace's local hashing at B=16: "cached"
// is Hasher.Append with a warm per-id cache (a replay's steady state),
// "tokens" the naive baseline that synthesizes and hashes every prompt.
func BenchmarkHasher(b *testing.B) {
	tr := loadSmall(b)
	blocks := 0
	for i := range tr.Requests {
		blocks += tr.Requests[i].InputLength / 16
	}
	b.Run("cached", func(b *testing.B) {
		h := NewHasher(16, wire.Seed)
		var dst []wire.BlockHash
		for i := range tr.Requests {
			dst = h.Append(dst[:0], &tr.Requests[i])
		}
		b.ReportAllocs()
		for b.Loop() {
			for i := range tr.Requests {
				dst = h.Append(dst[:0], &tr.Requests[i])
			}
		}
		b.ReportMetric(float64(blocks)*float64(b.N)/b.Elapsed().Seconds(), "blocks/s")
	})
	b.Run("tokens", func(b *testing.B) {
		var dst []wire.BlockHash
		var toks []uint32
		b.ReportAllocs()
		for b.Loop() {
			for i := range tr.Requests {
				toks = AppendTokens(toks[:0], &tr.Requests[i])
				dst = wire.LocalHashes(dst[:0], toks, 16, wire.Seed)
			}
		}
		b.ReportMetric(float64(blocks)*float64(b.N)/b.Elapsed().Seconds(), "blocks/s")
	})
}

// BenchmarkParse parses the small trace (1 line = 1 request).
func BenchmarkParse(b *testing.B) {
	data, err := os.ReadFile(smallPath)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}
