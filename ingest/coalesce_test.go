package ingest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire"
)

// gateSink holds its first Apply until open is closed and records the
// number of events of every Apply.
type gateSink struct {
	ix      *shard.Index
	entered chan struct{}
	open    chan struct{}
	once    sync.Once
	mu      sync.Mutex
	sizes   []int
}

func (s *gateSink) Apply(evs []wire.Event) error {
	s.once.Do(func() {
		close(s.entered)
		<-s.open
	})
	s.mu.Lock()
	s.sizes = append(s.sizes, len(evs))
	s.mu.Unlock()
	return s.ix.Apply(evs)
}

// TestCoalescing: messages that queue up in the NATS client behind a slow
// Apply are handed to the sink in batches of coalesceMsgs, in order and
// complete; a message with nothing queued behind it is applied at once.
func TestCoalescing(t *testing.T) {
	h := newNATSHarness(t, Config{})
	gate := &gateSink{ix: h.ix, entered: make(chan struct{}), open: make(chan struct{})}
	h.in.sink = gate
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(gate.open) }) }) // a failure must not leave Close waiting
	const n = 200
	bl := make([][]wire.Block, n+1)
	for i := range n {
		bl[i] = blocks(uint64(1000+i), 2)
		h.dynamo(t, stored(1, 0, uint64(i+1), bl[i]))
		if i == 0 {
			<-gate.entered // the first message is in Apply; the others queue behind it
		}
	}
	// (Pending counts the message in the callback too)
	waitFor(t, func() bool { return h.in.Stats().Sources[SourceNATSDynamo].Pending == n },
		func() string { return fmt.Sprint(h.in.Stats().Sources[SourceNATSDynamo].Pending, " pending") })
	release.Do(func() { close(gate.open) })
	waitMessages(t, h.in, h.ix, SourceNATSDynamo, n)
	want := fmt.Sprint([]int{1, coalesceMsgs, coalesceMsgs, coalesceMsgs, n - 1 - 3*coalesceMsgs})
	gate.mu.Lock()
	got := fmt.Sprint(gate.sizes)
	gate.mu.Unlock()
	if got != want {
		t.Errorf("Apply sizes %s, want %s", got, want)
	}
	// A lone message is applied without waiting for another.
	bl[n] = blocks(5000, 2)
	h.dynamo(t, stored(1, 0, n+1, bl[n]))
	waitFor(t, func() bool { return h.in.Stats().Sources[SourceNATSDynamo].Events == n+1 },
		func() string { return fmt.Sprint(h.in.Stats().Sources[SourceNATSDynamo].Events, " events applied") })
	if err := h.ix.Flush(); err != nil {
		t.Fatal(err)
	}
	d := h.in.Stats().Sources[SourceNATSDynamo]
	if d.Messages != n+1 || d.Gaps != 0 || d.Duplicates != 0 || d.Dropped != 0 {
		t.Errorf("stats %+v", d)
	}
	for i := range bl {
		if !holds(t, h.ix, wire.WorkerKey{Worker: 1}, bl[i]) {
			t.Fatalf("event %d not in the index", i)
		}
	}
}

// TestHeldEventsFlushed: events a pipe holds (more messages were queued)
// reach the sink before any other user of the pipe proceeds: Forget,
// Checkpoint, Tracked, MarkReconnected, Close.
func TestHeldEventsFlushed(t *testing.T) {
	for _, c := range []struct {
		name string
		call func(in *Ingest)
	}{
		{"Forget", func(in *Ingest) { in.Forget(99) }},
		{"Checkpoint", func(in *Ingest) { in.Checkpoint(func([]SourceKey) {}) }},
		{"Tracked", func(in *Ingest) { in.Tracked(nil) }},
		{"MarkReconnected", func(in *Ingest) { in.MarkReconnected() }},
		{"Close", func(in *Ingest) { in.Close() }},
	} {
		t.Run(c.name, func(t *testing.T) {
			sink := &discardSink{}
			in := newIngest(t, Config{}, sink)
			p := newPipe(in, SourceNATSDynamo)
			in.mu.dynPipe = p
			ev := stored(1, 0, 1, blocks(1, 3))
			hd := wire.DynamoHeader{PublisherID: 1, Sequence: 1}
			msg := wire.AppendDynamo(nil, &hd, &ev)
			p.mu.Lock()
			if p.decoded(wire.DecodeDynamoAny(&p.batch, msg), 2, 0) {
				t.Fatal("flushed with a message queued behind")
			}
			p.mu.Unlock()
			if sink.events != 0 {
				t.Fatalf("%d events applied while held", sink.events)
			}
			c.call(in)
			if sink.events != 1 || p.c.messages.Load() != 1 || p.c.events.Load() != 1 {
				t.Errorf("after %s: %d events applied, %d messages counted, want 1, 1", c.name, sink.events, p.c.messages.Load())
			}
		})
	}
}

// TestJetStreamNoCoalescing: the JetStream path applies every message
// before the next (LastSeq and AfterApply advance per message), whatever
// the stream's pending count says.
func TestJetStreamNoCoalescing(t *testing.T) {
	ix := newIndex(t)
	sub := subjects(t)
	var seqs []uint64
	in := newIngest(t, Config{Subjects: sub, AfterApply: func(seq uint64) { seqs = append(seqs, seq) }}, ix)
	jp := &jsPipe{in: in, dyn: newPipe(in, SourceNATSDynamo), nat: newPipe(in, SourceNATSNative), dynSubject: sub.KVEvents, after: in.cfg.AfterApply}
	native := func(seed uint64) []byte {
		return wire.AppendNative(nil, []wire.Event{stored(1, 0, 0, blocks(seed, 2))})
	}
	jp.onNATS(sub.KVEventsNative, "$JS.ACK.S.C.1.5.1.1.3", native(1)) // 3 more pending in the stream
	if in.LastSeq() != 5 || in.Stats().Sources[SourceNATSNative].Events != 1 {
		t.Fatalf("LastSeq %d, events %d after one message; want 5, 1", in.LastSeq(), in.Stats().Sources[SourceNATSNative].Events)
	}
	jp.onNATS(sub.KVEventsNative, "$JS.ACK.S.C.1.6.2.1.2", native(2))
	if fmt.Sprint(seqs) != "[5 6]" {
		t.Errorf("AfterApply %v, want [5 6]", seqs)
	}
}
