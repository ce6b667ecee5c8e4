package wire

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/zeebo/xxh3"
)

// naiveLocalHashes is the obvious implementation: serialize each block into a
// fresh []byte with encoding/binary, then hash it.
func naiveLocalHashes(tokens []uint32, blockSize int, seed uint64) []BlockHash {
	var out []BlockHash
	for len(tokens) >= blockSize {
		buf := make([]byte, 4*blockSize)
		for i, t := range tokens[:blockSize] {
			binary.LittleEndian.PutUint32(buf[4*i:], t)
		}
		out = append(out, BlockHash(xxh3.HashSeed(buf, seed)))
		tokens = tokens[blockSize:]
	}
	return out
}

// naiveSequenceHashes chains with a fresh buffer per block.
func naiveSequenceHashes(local []BlockHash) []SeqHash {
	var out []SeqHash
	for i, l := range local {
		if i == 0 {
			out = append(out, SeqHash(l))
			continue
		}
		buf := make([]byte, 16)
		binary.LittleEndian.PutUint64(buf, uint64(out[i-1]))
		binary.LittleEndian.PutUint64(buf[8:], uint64(l))
		out = append(out, SeqHash(xxh3.HashSeed(buf, Seed)))
	}
	return out
}

func randomTokens(n int) []uint32 {
	rng := rand.New(rand.NewPCG(1, 2))
	t := make([]uint32, n)
	for i := range t {
		t[i] = uint32(rng.IntN(152064))
	}
	return t
}

func TestNaiveHashesAgree(t *testing.T) {
	tokens := randomTokens(16 * 33)
	fast := LocalHashes(nil, tokens, 16, Seed)
	naive := naiveLocalHashes(tokens, 16, Seed)
	if fmt.Sprint(fast) != fmt.Sprint(naive) {
		t.Fatal("local hashes differ from the naive baseline")
	}
	if fmt.Sprint(SequenceHashes(nil, fast)) != fmt.Sprint(naiveSequenceHashes(naive)) {
		t.Fatal("sequence hashes differ from the naive baseline")
	}
}

// BenchmarkLocalHashes hashes 8192 tokens (32 KiB) per op; MB/s is token bytes.
func BenchmarkLocalHashes(b *testing.B) {
	const total = 8192
	tokens := randomTokens(total)
	for _, bs := range []int{16, 512} {
		blocks := total / bs
		dst := make([]BlockHash, 0, blocks)
		b.Run(fmt.Sprintf("bs=%d", bs), func(b *testing.B) {
			b.SetBytes(4 * total)
			b.ReportAllocs()
			for b.Loop() {
				dst = LocalHashes(dst[:0], tokens, bs, Seed)
			}
			b.ReportMetric(float64(blocks*b.N)/b.Elapsed().Seconds(), "blocks/s")
		})
		b.Run(fmt.Sprintf("bs=%d/naive", bs), func(b *testing.B) {
			b.SetBytes(4 * total)
			b.ReportAllocs()
			for b.Loop() {
				_ = naiveLocalHashes(tokens, bs, Seed)
			}
			b.ReportMetric(float64(blocks*b.N)/b.Elapsed().Seconds(), "blocks/s")
		})
	}
}

// BenchmarkSequenceHashes chains 512 local hashes per op.
func BenchmarkSequenceHashes(b *testing.B) {
	local := LocalHashes(nil, randomTokens(512*16), 16, Seed)
	dst := make([]SeqHash, 0, len(local))
	b.Run("fast", func(b *testing.B) {
		b.SetBytes(int64(8 * len(local)))
		b.ReportAllocs()
		for b.Loop() {
			dst = SequenceHashes(dst[:0], local)
		}
		b.ReportMetric(float64(len(local)*b.N)/b.Elapsed().Seconds(), "blocks/s")
	})
	b.Run("naive", func(b *testing.B) {
		b.SetBytes(int64(8 * len(local)))
		b.ReportAllocs()
		for b.Loop() {
			_ = naiveSequenceHashes(local)
		}
		b.ReportMetric(float64(len(local)*b.N)/b.Elapsed().Seconds(), "blocks/s")
	})
}
