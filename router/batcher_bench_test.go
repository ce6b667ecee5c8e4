package router

import (
	"fmt"
	"testing"

	"github.com/kvroute/kvroute/wire/openai"
)

// decideRound decides a batch of pending requests on the calling goroutine
// (the batcher is not started: the caller owns it), then frees them.
func decideRound(r *Router, batch []*pending) {
	r.decide(batch)
	for _, p := range batch {
		<-p.done
		r.applyOp(op{opFree, p.id})
	}
	r.drainEffects()
}

func benchBatch(b testing.TB, r *Router, n, size int) []*pending {
	batch := make([]*pending, size)
	for i := range batch {
		p := r.acquire()
		r.hash(p, &openai.Request{Tokens: benchTokens(i%64, n)})
		batch[i] = p
	}
	return batch
}

// BenchmarkBatcher is the batcher's work per batch without HTTP: one
// batched lookup over the index (16 workers holding 48 families of n
// tokens), the scheduler's decisions, and the frees. Requests/s is what one
// batcher goroutine can decide.
func BenchmarkBatcher(b *testing.B) {
	for _, n := range []int{2048, 8192} {
		for _, size := range []int{1, 32} {
			b.Run(fmt.Sprintf("tokens=%d/batch=%d", n, size), func(b *testing.B) {
				r, ix := benchRouter(b, n)
				defer ix.Close()
				r.closed.Store(true) // never started: nothing to stop
				batch := benchBatch(b, r, n, size)
				decideRound(r, batch)
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					decideRound(r, batch)
				}
				b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "req/s")
			})
		}
	}
}
