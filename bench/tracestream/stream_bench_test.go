package tracestream

import (
	"testing"
)

// BenchmarkBuild precomputes the small trace's stream (W=4, C=2048, B=16).
func BenchmarkBuild(b *testing.B) {
	tr := loadSmall(b)
	cfg := Config{Workers: 4, Capacity: 2048, BlockSize: 16}
	var ops int
	b.ReportAllocs()
	for b.Loop() {
		s, err := Build(tr, cfg)
		if err != nil {
			b.Fatal(err)
		}
		ops = s.Counts.BlockOps()
	}
	b.ReportMetric(float64(ops)*float64(b.N)/b.Elapsed().Seconds(), "blockops/s")
	b.ReportMetric(float64(len(tr.Requests))*float64(b.N)/b.Elapsed().Seconds(), "requests/s")
}

// BenchmarkIterate walks every op through the accessors, as a replay does
// before handing them to an index: the replay harness's own overhead.
func BenchmarkIterate(b *testing.B) {
	s, err := Build(loadSmall(b), Config{Workers: 4, Capacity: 2048, BlockSize: 16})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	sum := 0
	for b.Loop() {
		sum += iterate(s)
	}
	b.ReportMetric(float64(s.Counts.BlockOps())*float64(b.N)/b.Elapsed().Seconds(), "blockops/s")
	_ = sum
}

func iterate(s *Stream) int {
	n := 0
	for i := range s.Ops {
		op := &s.Ops[i]
		if op.Kind == OpRequest {
			n += len(s.Hashes(op))
		} else {
			ev := s.Event(op)
			n += len(ev.Blocks)
		}
	}
	return n
}
