//go:build !race

package ingest

import (
	"testing"

	"github.com/kvroute/kvroute/shard"
)

// TestHandlerAllocs: in steady state the NATS message handler (decode, id
// tracking, counters, dispatch timing, Apply) allocates nothing of its own;
// with a real index, what remains is shard.Index.Apply's (pooled, amortized).
func TestHandlerAllocs(t *testing.T) {
	h := newHandlerBench(t, &discardSink{})
	for range 2 * len(h.msgs) { // warm up: tracker keys, batch storage
		h.step()
	}
	if a := testing.AllocsPerRun(len(h.msgs), h.step); a != 0 {
		t.Errorf("handler allocates %.2f per message, want 0", a)
	}

	ix, err := shard.NewIndex(shard.Config{TickInterval: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	h = newHandlerBench(t, ix)
	for range 2 * len(h.msgs) {
		h.step()
	}
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	if a := testing.AllocsPerRun(len(h.msgs), h.step); a > 0.05 {
		t.Errorf("handler into shard.Index allocates %.2f per message, want ~0 (pooled batches)", a)
	}
}
