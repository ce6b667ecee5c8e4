package ingest

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvroute/kvroute/internal/natstest"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/plane"
)

// workload is a closed cycle of KV events for benchmarks: per worker, stored
// prefixes of 16..64 blocks (no shared blocks between prefixes), each
// removed four prefixes later, and the last four removed at the end, so the
// tree is empty again after every cycle and the cycle can repeat forever.
// Workers are interleaved round robin.
type workload struct {
	events []wire.Event // ids are 0: the publisher numbers them
}

const (
	benchWorkers  = 16
	benchPrefixes = 32 // per worker per cycle
	benchWindow   = 4  // prefixes a worker holds at once
)

func newWorkload() *workload {
	wl := &workload{}
	per := make([][]wire.Event, benchWorkers)
	for w := range benchWorkers {
		pre := make([][]wire.Block, benchPrefixes)
		for j := range benchPrefixes {
			n := 16 + j*17%49 // 16..64 blocks
			bl := make([]wire.Block, n)
			for i := range bl {
				x := uint64(w+1)<<40 | uint64(j+1)<<20 | uint64(i+1)
				bl[i] = wire.Block{Engine: wire.EngineHash(x * 0x9e3779b97f4a7c15), Local: wire.BlockHash(x * 0xbf58476d1ce4e5b9)}
			}
			pre[j] = bl
			ev := wire.Event{Worker: wire.WorkerKey{Worker: uint64(w + 1)}, Kind: wire.KindStored, Blocks: bl}
			per[w] = append(per[w], ev)
			if j >= benchWindow {
				per[w] = append(per[w], removed(w, pre[j-benchWindow]))
			}
		}
		for j := benchPrefixes - benchWindow; j < benchPrefixes; j++ {
			per[w] = append(per[w], removed(w, pre[j]))
		}
	}
	for i := range per[0] {
		for w := range benchWorkers {
			wl.events = append(wl.events, per[w][i])
		}
	}
	return wl
}

func removed(w int, bl []wire.Block) wire.Event {
	rm := make([]wire.Block, len(bl))
	for i := range bl {
		rm[i].Engine = bl[i].Engine
	}
	return wire.Event{Worker: wire.WorkerKey{Worker: uint64(w + 1)}, Kind: wire.KindRemoved, Blocks: rm}
}

// publisher encodes the workload as Dynamo messages with contiguous ids per
// worker, cycling forever.
type publisher struct {
	wl  *workload
	i   int
	ids [benchWorkers + 1]uint64
	buf []byte
}

func (p *publisher) next() []byte {
	ev := p.wl.events[p.i]
	if p.i++; p.i == len(p.wl.events) {
		p.i = 0
	}
	w := ev.Worker.Worker
	p.ids[w]++
	ev.ID = p.ids[w]
	h := wire.DynamoHeader{PublisherID: w, Sequence: ev.ID, PublishedAt: 1, Topic: []byte("kv-events")}
	p.buf = wire.AppendDynamo(p.buf[:0], &h, &ev)
	return p.buf
}

// counter counts delivered events and rings a doorbell every 256, so that
// the publisher can keep a bounded window in flight. (Events, not Apply
// calls: ingest hands the events of several messages to one Apply when they
// queue up.)
type counter struct {
	n    atomic.Uint64
	bell chan struct{}
}

func newCounter() *counter { return &counter{bell: make(chan struct{}, 1)} }

func (c *counter) add() { c.addN(1) }

func (c *counter) addN(n int) {
	if v := c.n.Add(uint64(n)); v/256 != (v-uint64(n))/256 {
		select {
		case c.bell <- struct{}{}:
		default:
		}
	}
}

// countingSink is the ingest side's delivery counter in front of the index
// (nil: events are dropped).
type countingSink struct {
	ix      *shard.Index
	c       *counter
	applies atomic.Uint64
}

func (s *countingSink) Apply(evs []wire.Event) error {
	var err error
	if s.ix != nil {
		err = s.ix.Apply(evs)
	}
	s.c.addN(len(evs))
	s.applies.Add(1)
	return err
}

// benchWindowMsgs bounds the messages in flight between the publisher and the
// subscriber (far below the pending limit, so nothing is dropped).
const benchWindowMsgs = 4096

// publishAll publishes b.N messages (one event each) with at most
// benchWindowMsgs in flight, and waits until all are delivered.
func publishAll(b *testing.B, nc *nats.Conn, subject string, c *counter) {
	pub := &publisher{wl: newWorkload()}
	publishEach(b, nc, subject, c, 1, pub.next)
}

// nativeBatch is the number of events per message of the native variants.
const nativeBatch = 16

// nextNative encodes the workload's next nativeBatch events as one native
// message (ids contiguous per worker, as publisher.next).
func (p *publisher) nextNative() []byte {
	evs := make([]wire.Event, 0, nativeBatch)
	for range nativeBatch {
		ev := p.wl.events[p.i]
		if p.i++; p.i == len(p.wl.events) {
			p.i = 0
		}
		p.ids[ev.Worker.Worker]++
		ev.ID = p.ids[ev.Worker.Worker]
		evs = append(evs, ev)
	}
	p.buf = wire.AppendNative(p.buf[:0], evs)
	return p.buf
}

// publishEach publishes b.N messages of perMsg events made by next, with at
// most benchWindowMsgs in flight, and waits until all are delivered.
func publishEach(b *testing.B, nc *nats.Conn, subject string, c *counter, perMsg int, next func() []byte) {
	sent := uint64(0)
	for b.Loop() {
		if err := nc.Publish(subject, next()); err != nil {
			b.Fatal(err)
		}
		sent += uint64(perMsg)
		for sent-c.n.Load() > benchWindowMsgs*uint64(perMsg) {
			<-c.bell
		}
	}
	for c.n.Load() < sent {
		select {
		case <-c.bell:
		case <-time.After(time.Millisecond):
		}
	}
}

// BenchmarkNATSIngest measures events/s from a publisher through a real
// in-process nats-server into Ingest and a one-shard shard.Index (ingest),
// against a subscriber that only counts the same messages (noop). Messages
// are Dynamo event-plane messages of one Stored (16..64 blocks) or Removed
// event each, from 16 workers. The ingest time includes applying every event
// to the tree (Flush at the end). ingest-discard is the same path into a sink
// that only counts.
func BenchmarkNATSIngest(b *testing.B) {
	s := natstest.Server(b)
	subj, err := plane.SubjectsFor("bench", "backend")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("ingest", func(b *testing.B) {
		pub, nc := natstest.Connect(b, s), natstest.Connect(b, s)
		ix, in, sink := newIndexIngest(b, subj)
		c := sink.c
		if err := in.SubscribeNATS(nc); err != nil {
			b.Fatal(err)
		}
		cpu := startCPU()
		b.ReportAllocs()
		publishAll(b, pub, subj.KVEvents, c)
		if err := ix.Flush(); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		cpu.report(b, b.N)
		st := in.Stats().Sources[SourceNATSDynamo]
		if st.Gaps != 0 || st.Duplicates != 0 || st.Dropped != 0 || st.Malformed != 0 || st.SinkErrors != 0 || st.Events != uint64(b.N) {
			b.Fatalf("ingest lost or rejected events: %+v (N=%d)", st, b.N)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		b.ReportMetric(float64(b.N)/float64(sink.applies.Load()), "events/apply")
		b.ReportMetric(float64(st.DispatchMax.Microseconds()), "max-dispatch-µs")
		b.ReportMetric(float64(quantileBound(&st, 0.99).Microseconds()), "p99-dispatch-bound-µs")
	})
	// The same path into a sink that only counts: what ingest costs without
	// the tree (the difference to "ingest" is the index's apply rate).
	b.Run("ingest-discard", func(b *testing.B) {
		pub, nc := natstest.Connect(b, s), natstest.Connect(b, s)
		c := newCounter()
		in, err := New(Config{BlockSize: 16, Subjects: subj, Logger: quiet}, &countingSink{c: c})
		if err != nil {
			b.Fatal(err)
		}
		defer in.Close()
		if err := in.SubscribeNATS(nc); err != nil {
			b.Fatal(err)
		}
		cpu := startCPU()
		b.ReportAllocs()
		publishAll(b, pub, subj.KVEvents, c)
		b.StopTimer()
		cpu.report(b, b.N)
		if st := in.Stats().Sources[SourceNATSDynamo]; st.Gaps != 0 || st.Dropped != 0 || st.Events != uint64(b.N) {
			b.Fatalf("ingest lost or rejected events: %+v (N=%d)", st, b.N)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
	// The same as "ingest" through JetStream: the publisher's plain publishes
	// are stored by a stream, and Ingest consumes them through its ordered
	// consumer (ConsumeJetStream). The variants measure what limits it (see
	// doc.go): -noop counts the ordered consumer's messages without
	// decoding (the server's and the client library's ceiling), -mem keeps
	// the stream in memory instead of files, -fetch4096 pulls 4096 ahead.
	// live-stream is SubscribeLive: the stream stores every message while
	// ingest takes them from core NATS (the JetStream mode's live path; its
	// CPU per event includes the stream storing all of them, store-lag-ms
	// is how long the stream took after the last was applied).
	for _, v := range []jsVariant{
		{name: "jetstream", index: true},
		{name: "jetstream-discard"},
		{name: "jetstream-noop", noop: true},
		{name: "jetstream-mem", index: true, mem: true},
		{name: "jetstream-mem-noop", noop: true, mem: true},
		{name: "jetstream-fetch4096", index: true, fetch: 4096},
		{name: "live-stream", index: true, live: true},
		{name: "live-stream-mem", index: true, live: true, mem: true},
	} {
		b.Run(v.name, func(b *testing.B) { benchJetStream(b, s, subj, v) })
	}
	// Native messages of nativeBatch events each, through a core
	// subscription and through the stream: the stream's cost is per message.
	b.Run("ingest-native16", func(b *testing.B) {
		pub, nc := natstest.Connect(b, s), natstest.Connect(b, s)
		ix, in, sink := newIndexIngest(b, subj)
		c := sink.c
		if err := in.SubscribeNATS(nc); err != nil {
			b.Fatal(err)
		}
		p := &publisher{wl: newWorkload()}
		publishEach(b, pub, subj.KVEventsNative, c, nativeBatch, p.nextNative)
		if err := ix.Flush(); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if st := in.Stats().Sources[SourceNATSNative]; st.Gaps != 0 || st.Dropped != 0 || st.Events != nativeBatch*uint64(b.N) {
			b.Fatalf("ingest lost or rejected events: %+v (N=%d)", st, b.N)
		}
		b.ReportMetric(float64(nativeBatch*b.N)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("jetstream-native16", func(b *testing.B) {
		pub, nc := natstest.Connect(b, s), natstest.Connect(b, s)
		js, err := jetstream.New(nc)
		if err != nil {
			b.Fatal(err)
		}
		st, err := EnsureStream(context.Background(), js, StreamConfig{Subjects: subj, MaxBytes: 256 << 20})
		if err != nil {
			b.Fatal(err)
		}
		ix, in, sink := newIndexIngest(b, subj)
		c := sink.c
		if err := in.ConsumeJetStream(nc, st); err != nil {
			b.Fatal(err)
		}
		p := &publisher{wl: newWorkload()}
		publishEach(b, pub, subj.KVEventsNative, c, nativeBatch, p.nextNative)
		if err := ix.Flush(); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if st := in.Stats().Sources[SourceNATSNative]; st.Gaps != 0 || st.Duplicates != 0 || st.Events != nativeBatch*uint64(b.N) {
			b.Fatalf("ingest lost or rejected events: %+v (N=%d)", st, b.N)
		}
		b.ReportMetric(float64(nativeBatch*b.N)/b.Elapsed().Seconds(), "events/s")
	})
	// The consumer side alone: b.N messages are stored first, then a new
	// Ingest replays them from their first stream sequence into the index.
	// The stream holds 256 MiB: run it with at most ~300000x.
	b.Run("jetstream-replay", func(b *testing.B) {
		benchJetStreamReplay(b, s, subj)
	})
	b.Run("noop", func(b *testing.B) {
		pub, nc := natstest.Connect(b, s), natstest.Connect(b, s)
		c := newCounter()
		sub, err := nc.Subscribe(subj.KVEvents, func(*nats.Msg) { c.add() })
		if err != nil {
			b.Fatal(err)
		}
		defer sub.Unsubscribe()
		if err := sub.SetPendingLimits(DefaultPendingMsgs, DefaultPendingBytes); err != nil {
			b.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			b.Fatal(err)
		}
		cpu := startCPU()
		b.ReportAllocs()
		publishAll(b, pub, subj.KVEvents, c)
		b.StopTimer()
		cpu.report(b, b.N)
		if d, _ := sub.Dropped(); d != 0 {
			b.Fatalf("%d dropped", d)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
}

// jsVariant is one configuration of BenchmarkNATSIngest's JetStream path.
type jsVariant struct {
	name  string
	index bool // into a one-shard index (else a sink that only counts)
	noop  bool // an ordered consumer that only counts (no Ingest)
	mem   bool // memory storage
	fetch int  // Config.FetchBatch (0: the default)
	live  bool // SubscribeLive: the stream captures, ingest takes the events from core NATS
}

// benchJetStream is BenchmarkNATSIngest's JetStream variant v. Each variant
// has its own stream (deleted at the end), so that none replays another's
// messages.
func benchJetStream(b *testing.B, s *server.Server, subj plane.Subjects, v jsVariant) {
	pub, nc := natstest.Connect(b, s), natstest.Connect(b, s)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	sc := StreamConfig{Subjects: subj, MaxBytes: 256 << 20, Name: "BENCH_" + strings.ReplaceAll(v.name, "-", "_")}
	if v.mem {
		sc.Storage = jetstream.MemoryStorage
	}
	st, err := EnsureStream(ctx, js, sc)
	if err != nil {
		b.Fatal(err)
	}
	defer js.DeleteStream(ctx, sc.Name)
	c := newCounter()
	if v.noop {
		cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy})
		if err != nil {
			b.Fatal(err)
		}
		cc, err := cons.Consume(func(jetstream.Msg) { c.add() }, jetstream.PullMaxMessages(DefaultFetchBatch))
		if err != nil {
			b.Fatal(err)
		}
		defer cc.Stop()
		cpu := startCPU()
		b.ReportAllocs()
		publishAll(b, pub, subj.KVEvents, c)
		b.StopTimer()
		cpu.report(b, b.N)
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		return
	}
	sink := &countingSink{c: c}
	if v.index {
		if sink.ix, err = shard.NewIndex(shard.Config{TickInterval: -1, Logger: quiet}); err != nil {
			b.Fatal(err)
		}
		defer sink.ix.Close()
	}
	in, err := New(Config{BlockSize: 16, Subjects: subj, Logger: quiet, FetchBatch: v.fetch}, sink)
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	if v.live {
		err = in.SubscribeLive(nc, st, 0)
	} else {
		err = in.ConsumeJetStream(nc, st)
	}
	if err != nil {
		b.Fatal(err)
	}
	cpu := startCPU()
	b.ReportAllocs()
	publishAll(b, pub, subj.KVEvents, c)
	if v.index {
		if err := sink.ix.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if v.live { // the stream must have stored every message too; its CPU counts
		t := time.Now()
		if err := waitStored(st, b.N); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(time.Since(t).Milliseconds()), "store-lag-ms")
	}
	cpu.report(b, b.N)
	sst := in.Stats()
	if st := sst.Sources[SourceNATSDynamo]; st.Gaps != 0 || st.Duplicates != 0 || st.Malformed != 0 || st.SinkErrors != 0 || st.Events != uint64(b.N) || sst.StreamDuplicates != 0 {
		b.Fatalf("ingest lost or rejected events: %+v (N=%d)", st, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(b.N)/float64(sink.applies.Load()), "events/apply")
	if v.index {
		st := sst.Sources[SourceNATSDynamo]
		b.ReportMetric(float64(st.DispatchMax.Microseconds()), "max-dispatch-µs")
		b.ReportMetric(float64(quantileBound(&st, 0.99).Microseconds()), "p99-dispatch-bound-µs")
	}
}

func benchJetStreamReplay(b *testing.B, s *server.Server, subj plane.Subjects) {
	pub, nc := natstest.Connect(b, s), natstest.Connect(b, s)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	st, err := EnsureStream(context.Background(), js, StreamConfig{Subjects: subj, MaxBytes: 256 << 20})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	info, err := st.Info(ctx)
	if err != nil {
		b.Fatal(err)
	}
	first := info.State.LastSeq + 1
	p := &publisher{wl: newWorkload()}
	for range b.N {
		if err := pub.Publish(subj.KVEvents, p.next()); err != nil {
			b.Fatal(err)
		}
	}
	for {
		if info, err = st.Info(ctx); err != nil {
			b.Fatal(err)
		}
		if info.State.LastSeq >= first+uint64(b.N)-1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if info.State.FirstSeq > first {
		b.Fatalf("the stream's 256 MiB dropped the oldest of the %d messages: use a smaller -benchtime (e.g. 200000x)", b.N)
	}
	ix, err := shard.NewIndex(shard.Config{TickInterval: -1, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer ix.Close()
	c := newCounter()
	in, err := New(Config{BlockSize: 16, Subjects: subj, Logger: quiet, StartSeq: first}, &countingSink{ix: ix, c: c})
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	b.ReportAllocs()
	b.ResetTimer()
	if err := in.ConsumeJetStream(nc, st); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for c.n.Load() < uint64(b.N) { // one event per message
		select {
		case <-c.bell:
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.Fatalf("replayed %d of %d messages in a minute", c.n.Load(), b.N)
		}
	}
	if err := ix.Flush(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	if st := in.Stats().Sources[SourceNATSDynamo]; st.Gaps != 0 || st.Duplicates != 0 || st.Events != uint64(b.N) {
		b.Fatalf("replay lost or rejected events: %+v (N=%d)", st, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// waitStored waits (at most a minute) until stream holds at least n messages.
func waitStored(st jetstream.Stream, n int) error {
	deadline := time.Now().Add(time.Minute)
	for {
		info, err := st.Info(context.Background())
		if err != nil {
			return err
		}
		if info.State.Msgs >= uint64(n) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the stream stored %d of %d messages in a minute", info.State.Msgs, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// quantileBound returns the histogram bucket bound below which at least
// fraction q of the dispatch times fall (-1 µs: beyond the last bound).
func quantileBound(st *SourceStats, q float64) time.Duration {
	var cum uint64
	for i, n := range st.Buckets {
		cum += n
		if float64(cum) >= q*float64(st.DispatchCount) {
			if i == len(DispatchBuckets) {
				return -time.Microsecond
			}
			return DispatchBuckets[i]
		}
	}
	return -time.Microsecond
}

// discardSink counts and drops.
type discardSink struct{ events int }

func (s *discardSink) Apply(evs []wire.Event) error {
	s.events += len(evs)
	return nil
}

// handlerBench holds one cycle of encoded messages and a Dynamo pipe.
type handlerBench struct {
	msgs []*nats.Msg
	p    *pipe
	i    int
}

func newHandlerBench(tb testing.TB, sink Sink) *handlerBench {
	in, err := New(Config{BlockSize: 16, Logger: quiet}, sink)
	if err != nil {
		tb.Fatal(err)
	}
	h := &handlerBench{p: newPipe(in, SourceNATSDynamo)}
	pub := &publisher{wl: newWorkload()}
	for range pub.wl.events {
		h.msgs = append(h.msgs, &nats.Msg{Data: append([]byte(nil), pub.next()...)})
	}
	return h
}

// step handles the next message; at the end of a cycle the ids start over,
// so the id tracking is reset (the tree is empty again by construction).
func (h *handlerBench) step() {
	h.p.onDynamo(h.msgs[h.i])
	if h.i++; h.i == len(h.msgs) {
		h.i = 0
		h.p.tr.reset()
	}
}

// BenchmarkHandler measures the per-message path of a NATS callback (Dynamo
// decode, id tracking, counters, dispatch timing, sink.Apply) without NATS:
// into a real one-shard index (whose goroutine applies the events
// concurrently) and into a sink that drops them.
func BenchmarkHandler(b *testing.B) {
	for _, c := range []struct {
		name string
		sink func(b *testing.B) Sink
	}{
		{"index", func(b *testing.B) Sink {
			ix, err := shard.NewIndex(shard.Config{TickInterval: -1, Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { ix.Close() })
			return ix
		}},
		{"discard", func(*testing.B) Sink { return &discardSink{} }},
	} {
		b.Run(c.name, func(b *testing.B) {
			h := newHandlerBench(b, c.sink(b))
			blocks := 0
			for _, m := range h.msgs {
				var bt wire.Batch
				if _, err := wire.DecodeDynamo(&bt, m.Data); err != nil {
					b.Fatal(err)
				}
				blocks += bt.Blocks()
			}
			b.ReportAllocs()
			for b.Loop() {
				h.step()
			}
			if ix, ok := h.p.in.sink.(*shard.Index); ok {
				if err := ix.Flush(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(blocks)/float64(len(h.msgs)), "blocks/event")
			if st := h.p.c; st.gaps.Load() != 0 || st.duplicates.Load() != 0 || st.malformed.Load() != 0 {
				b.Fatal("the workload produced gaps, duplicates or malformed messages")
			}
		})
	}
}

// newIndexIngest is an Ingest into a real one-shard index through a sink
// that counts the events it applies; both close when the benchmark ends.
func newIndexIngest(b *testing.B, subj plane.Subjects) (*shard.Index, *Ingest, *countingSink) {
	b.Helper()
	ix, err := shard.NewIndex(shard.Config{TickInterval: -1, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ix.Close() })
	sink := &countingSink{ix: ix, c: newCounter()}
	in, err := New(Config{BlockSize: 16, Subjects: subj, Logger: quiet}, sink)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { in.Close() })
	return ix, in, sink
}
