package kvcache

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kvroute/kvroute/wire"
)

// workload is a pool of prompts (local hashes) sharing prefixes: prompt i
// shares its first shared blocks with every prompt in its group.
func workload(prompts, blocks, groups, shared int) [][]wire.BlockHash {
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([][]wire.BlockHash, prompts)
	for i := range out {
		p := make([]wire.BlockHash, blocks)
		for j := range p {
			if j < shared {
				p[j] = wire.BlockHash(uint64(i%groups)<<32 | uint64(j))
			} else {
				p[j] = wire.BlockHash(rng.Uint64())
			}
		}
		out[i] = p
	}
	return out
}

// BenchmarkAllocateFree measures a replay's steady state: allocate a prompt,
// drain the events, free it. "hits" prompts are all cached (shared prefix and
// a small pool); "misses" prompts never repeat their tails, so every
// allocation evicts. Throughput is prompt blocks per second.
func BenchmarkAllocateFree(b *testing.B) {
	const bs, blocks = 16, 64
	for _, c := range []struct {
		name            string
		prompts, shared int
		capacity        int
		fresh           bool
	}{
		{"hits", 32, 32, 4096, false},
		{"misses", 256, 16, 1024, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			pool := workload(c.prompts, blocks, 8, c.shared)
			m := New(Config{Capacity: c.capacity, BlockSize: bs, Worker: wire.WorkerKey{Worker: 1}})
			rng := rand.New(rand.NewPCG(3, 4))
			id := uint64(0)
			b.ReportAllocs()
			for b.Loop() {
				p := pool[rng.IntN(len(pool))]
				if c.fresh { // new tails: every allocation misses after the prefix
					for j := c.shared; j < blocks; j++ {
						p[j] = wire.BlockHash(rng.Uint64())
					}
				}
				id++
				if _, err := m.Allocate(id, p, blocks*bs+3); err != nil {
					b.Fatal(err)
				}
				m.Events()
				m.Reset()
				m.Free(id)
			}
			b.ReportMetric(float64(blocks)*float64(b.N)/b.Elapsed().Seconds(), "blocks/s")
			st := m.Stats()
			b.ReportMetric(float64(st.ReusedBlocks)/float64(uint64(b.N)*blocks), "reuse")
		})
	}
}

// BenchmarkDecode measures decode growth: 64 running sequences each grow by
// one token per op; a filled block is hashed, stored and announced.
func BenchmarkDecode(b *testing.B) {
	const bs, seqs = 16, 64
	m := New(Config{Capacity: 1 << 14, BlockSize: bs})
	local := make([][]wire.BlockHash, seqs)
	tokens := make([]int, seqs)
	for i := range seqs {
		local[i] = make([]wire.BlockHash, 0, 1<<12)
		if _, err := m.Allocate(uint64(i), nil, 1); err != nil {
			b.Fatal(err)
		}
		tokens[i] = 1
	}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		i := n % seqs
		n++
		tokens[i]++
		if tokens[i]/bs > len(local[i]) {
			local[i] = append(local[i], wire.BlockHash(n))
		}
		if tokens[i] > 1<<11 { // restart: 64 sequences of <= 129 blocks fit in the cache
			m.Free(uint64(i))
			local[i], tokens[i] = local[i][:0], 1
			if _, err := m.Allocate(uint64(i), nil, 1); err != nil {
				b.Fatal(err)
			}
		} else if _, err := m.Grow(uint64(i), local[i], tokens[i]); err != nil {
			b.Fatal(fmt.Sprint(i, tokens[i], err))
		}
		m.Reset()
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}
