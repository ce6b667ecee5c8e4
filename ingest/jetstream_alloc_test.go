//go:build !race

package ingest

import (
	"strconv"
	"testing"
)

// TestJetStreamHandlerAllocs: the JetStream handler (stream sequence from
// the reply subject, routing by subject, then the same pipe as the core
// path) allocates nothing of its own per message. (The jetstream package's
// Msg wrapper and nats.go's Msg are allocated before it is called.)
func TestJetStreamHandlerAllocs(t *testing.T) {
	h := newHandlerBench(t, &discardSink{})
	in := h.p.in
	jp := &jsPipe{in: in, dyn: h.p, nat: newPipe(in, SourceNATSNative), dynSubject: "dyn"}
	replies := make([]string, len(h.msgs))
	seq := uint64(0)
	for i := range replies {
		replies[i] = "$JS.ACK.S.C.1." + strconv.Itoa(i+1) + ".1.1700000000000000000.0"
	}
	i := 0
	step := func() {
		if i == len(h.msgs) { // a new cycle: ids and sequences start over
			i = 0
			h.p.tr.reset()
			in.seq.Store(0)
		}
		jp.onNATS("dyn", replies[i], h.msgs[i].Data)
		i++
	}
	for range 2 * len(h.msgs) {
		step()
	}
	if a := testing.AllocsPerRun(len(h.msgs), step); a != 0 {
		t.Errorf("JetStream handler allocates %.2f per message, want 0", a)
	}
	seq = in.LastSeq()
	if seq == 0 || h.p.c.events.Load() == 0 || in.streamDups.Load() != 0 {
		t.Errorf("handler did not apply: seq %d, events %d, stream dups %d", seq, h.p.c.events.Load(), in.streamDups.Load())
	}
}
