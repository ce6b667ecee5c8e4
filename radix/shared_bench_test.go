package radix

import (
	"fmt"
	"testing"

	"github.com/kvroute/kvroute/wire"
)

// sharedTree builds the shape of a shared-prefix fleet: of slots worker keys
// (added in order, so slot = key), every stride-th holds a 2-block system
// prompt, then one of 12 group prefixes of 8 blocks (group j%12 for the j-th
// holder), then a private 14-block conversation. It returns the tree and a
// 24-block request (system, group 0, holder 0's conversation) that about
// slots/stride workers answer: every holder at depth 2 or more.
func sharedTree(tb testing.TB, slots, stride int) (*Tree, []wire.BlockHash) {
	tb.Helper()
	t := New()
	local := func(a, b int) wire.BlockHash { return wire.BlockHash(uint64(a)<<32 | uint64(b) | 1<<63) }
	var req []wire.BlockHash
	for w := 0; w < slots; w++ {
		k := wire.WorkerKey{Worker: uint64(w + 1)}
		if w%stride != 0 {
			// A key outside the answer: one private block.
			ev := wire.Event{Worker: k, Kind: wire.KindStored, Blocks: []wire.Block{{Engine: 1, Local: local(3, w)}}}
			if _, err := t.Apply(&ev); err != nil {
				tb.Fatal(err)
			}
			continue
		}
		j := w / stride
		var blks []wire.Block
		for i := range 2 {
			blks = append(blks, wire.Block{Local: local(0, i)})
		}
		for i := range 8 {
			blks = append(blks, wire.Block{Local: local(1, (j%12)*8+i)})
		}
		for i := range 14 {
			blks = append(blks, wire.Block{Local: local(2, j*14+i)})
		}
		for i := range blks {
			blks[i].Engine = wire.EngineHash(i + 1)
		}
		if j == 0 {
			for _, b := range blks {
				req = append(req, b.Local)
			}
		}
		ev := wire.Event{Worker: k, Kind: wire.KindStored, Blocks: blks}
		if _, err := t.Apply(&ev); err != nil {
			tb.Fatal(err)
		}
	}
	return t, req
}

// BenchmarkMatchShared is Match where the answer names most of the fleet:
// about holders workers share the request's first blocks (the shared-prefix
// workload's shape; `kvroute bench index --shared-prefix`). overlaps/op is
// the answer's size; ns/overlap the cost per written Overlap; cpu-ns/op
// the process's CPU time per call (the machine may be shared).
func BenchmarkMatchShared(b *testing.B) {
	for _, c := range []struct{ slots, stride int }{{256, 1}, {1000, 1}, {7000, 7}} {
		b.Run(fmt.Sprintf("keys=%d/holders=%d", c.slots, c.slots/c.stride), func(b *testing.B) {
			t, req := sharedTree(b, c.slots, c.stride)
			dst := t.Match(nil, req)
			n := len(dst)
			b.ReportAllocs()
			cpu := cpuNanos()
			for b.Loop() {
				dst = t.Match(dst[:0], req)
			}
			reportCPU(b, cpu)
			b.ReportMetric(float64(n), "overlaps/op")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/overlap")
		})
	}
}
