package replay

import (
	"fmt"
	"testing"
)

// BenchmarkReplay replays the 200-line testdata trace (Mooncake head) on the
// default 8-worker fleet, per policy and speedup: ns/op is the simulation's
// cost, the extra metrics are the replay's results (deterministic, so
// benchstat shows them with no spread) and the simulation speed.
func BenchmarkReplay(b *testing.B) {
	w := head(b, 200)
	for _, speedup := range []float64{1, 8} {
		for _, name := range []string{"kv", "kv-approx", "round-robin", "random", "least-loaded"} {
			b.Run(fmt.Sprintf("policy=%s/speedup=%g", name, speedup), func(b *testing.B) {
				cfg := DefaultConfig()
				cfg.Speedup = speedup
				p := mustPolicy(b, name)
				var r Result
				b.ReportAllocs()
				for b.Loop() {
					var err error
					if r, err = Simulate(w, cfg, p); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(r.TTFTMeanMs, "ttft_mean_ms")
				b.ReportMetric(r.TTFTP99Ms, "ttft_p99_ms")
				b.ReportMetric(r.HitRatio, "hit_ratio")
				b.ReportMetric(r.MaxWorkerShare, "max_worker_share")
				b.ReportMetric(float64(w.Len())*float64(b.N)/b.Elapsed().Seconds(), "requests/s")
			})
		}
	}
}

// BenchmarkPrepare hashes the 200-line trace at block size 16.
func BenchmarkPrepare(b *testing.B) {
	tr := head(b, 200).Trace
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Prepare(tr, 16, "head"); err != nil {
			b.Fatal(err)
		}
	}
}
