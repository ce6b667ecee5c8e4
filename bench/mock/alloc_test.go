//go:build !race

package mock

import (
	"testing"

	"github.com/kvroute/kvroute/wire/plane"
)

// TestEncodeStepAllocs: encoding a step's events reuses the outbox's
// buffers: no allocation in steady state for the NATS formats. (The vLLM
// format is left out: wire.AppendVLLMBatch allocates per event field.)
func TestEncodeStepAllocs(t *testing.T) {
	for _, tr := range []string{plane.TransportDynamo, plane.TransportNative} {
		w, evs := stepEvents(t, 16)
		w.cfg.Transport = tr
		var o outbox
		o.encode(w, evs)
		if n := testing.AllocsPerRun(100, func() { o.encode(w, evs) }); n != 0 {
			t.Errorf("%s: %v allocations per step", tr, n)
		}
		if len(o.msgs) == 0 {
			t.Errorf("%s: nothing encoded", tr)
		}
	}
}
