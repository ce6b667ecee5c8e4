package ingest

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvroute/kvroute/internal/natstest"
	"github.com/kvroute/kvroute/internal/promtext"
	"github.com/kvroute/kvroute/internal/promtext/promtexttest"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire"
)

// TestNATSEventsReachIndex: Dynamo and native events published on NATS end up
// in the index under the right worker key.
func TestNATSEventsReachIndex(t *testing.T) {
	h := newNATSHarness(t, Config{})
	a, b := blocks(1, 6), blocks(2, 3)
	e2 := stored(1, 0, 2, b)
	e2.HasParent, e2.Parent = true, a[len(a)-1].Engine
	h.dynamo(t, stored(1, 0, 1, a), e2)
	c := blocks(3, 5)
	h.native(t, stored(2, 1, 1, c), stored(2, 1, 2, blocks(4, 2)))
	waitMessages(t, h.in, h.ix, SourceNATSDynamo, 2)
	waitMessages(t, h.in, h.ix, SourceNATSNative, 1)

	if !holds(t, h.ix, wire.WorkerKey{Worker: 1}, append(a[:len(a):len(a)], b...)) {
		t.Errorf("worker 1 does not hold its chain: %+v", match(t, h.ix, append(a[:len(a):len(a)], b...)))
	}
	if !holds(t, h.ix, wire.WorkerKey{Worker: 2, Dp: 1}, c) {
		t.Errorf("worker 2 rank 1 does not hold its blocks: %+v", match(t, h.ix, c))
	}
	st := h.in.Stats()
	d, n := st.Sources[SourceNATSDynamo], st.Sources[SourceNATSNative]
	if d.Messages != 2 || d.Events != 2 || d.Blocks != 9 || n.Messages != 1 || n.Events != 2 || n.Blocks != 7 {
		t.Errorf("counters: dynamo %+v native %+v", d, n)
	}
	if d.DispatchCount != 2 || d.DispatchSum <= 0 || d.DispatchMax <= 0 || d.DispatchMax > d.DispatchSum {
		t.Errorf("dispatch time: %+v", d)
	}
	if !st.Running || !h.in.Running() {
		t.Error("not running after SubscribeNATS")
	}
}

// TestGapDuplicateRestart: a jump in the ids is a gap (counted, logged, in
// Gaps), an id at or below the last is a duplicate (counted, not applied), a
// worker that starts over at id 1 resets the tracking, and id 0 is not
// tracked; on both NATS formats.
func TestGapDuplicateRestart(t *testing.T) {
	for _, src := range []Source{SourceNATSDynamo, SourceNATSNative} {
		t.Run(src.String(), func(t *testing.T) {
			h := newNATSHarness(t, Config{})
			send := func(evs ...wire.Event) {
				if src == SourceNATSDynamo {
					h.dynamo(t, evs...)
					return
				}
				for _, ev := range evs { // one message per event, like Dynamo
					h.native(t, ev)
				}
			}
			w := wire.WorkerKey{Worker: 7, Dp: 2}
			a, b, c, d, e := blocks(10, 2), blocks(11, 2), blocks(12, 2), blocks(13, 2), blocks(14, 2)
			send(stored(7, 2, 1, a), stored(7, 2, 2, b), stored(7, 2, 5, c), stored(7, 2, 4, d), stored(7, 2, 3, e))
			waitMessages(t, h.in, h.ix, src, 5)
			for _, bl := range [][]wire.Block{a, b, c} {
				if !holds(t, h.ix, w, bl) {
					t.Errorf("in-order or post-gap event not applied: %+v", match(t, h.ix, bl))
				}
			}
			for _, bl := range [][]wire.Block{d, e} {
				if ov := match(t, h.ix, bl); len(ov) != 0 {
					t.Errorf("duplicate applied: %+v", ov)
				}
			}
			s := h.in.Stats().Sources[src]
			if s.Gaps != 1 || s.MissingEvents != 2 || s.Duplicates != 2 || s.Restarts != 0 || s.Events != 3 || s.Messages != 5 {
				t.Errorf("stats %+v, want 1 gap of 2, 2 duplicates, 3 events", s)
			}
			gaps := h.in.Gaps()
			if len(gaps) != 1 || gaps[0].Worker != w || gaps[0].Expected != 3 || gaps[0].Got != 5 || gaps[0].Source != src {
				t.Errorf("gaps %+v", gaps)
			}
			mustContain(t, h.log.String(), "KV event gap", "worker=7", "dp_rank=2", "expected=3", "got=5",
				"duplicate KV event dropped", "id=4", "last=5")

			// Restart: Cleared as event 1, then event 2. Untracked id 0 passes.
			f, g := blocks(15, 3), blocks(16, 1)
			send(cleared(7, 2, 1), stored(7, 2, 2, f), stored(7, 2, 0, g), stored(7, 2, 2, g))
			waitMessages(t, h.in, h.ix, src, 9)
			if ov := match(t, h.ix, a); len(ov) != 0 {
				t.Errorf("Cleared after restart not applied: %+v", ov)
			}
			if !holds(t, h.ix, w, f) || !holds(t, h.ix, w, g) {
				t.Errorf("events after restart not applied: %+v %+v", match(t, h.ix, f), match(t, h.ix, g))
			}
			s = h.in.Stats().Sources[src]
			if s.Restarts != 1 || s.Gaps != 1 || s.Duplicates != 3 || s.Events != 6 {
				t.Errorf("after restart: %+v, want 1 restart, 3 duplicates, 6 events", s)
			}

			// Forget: the next id is a first sighting, not a gap.
			h.in.Forget(7)
			send(stored(7, 2, 100, blocks(17, 1)))
			waitMessages(t, h.in, h.ix, src, 10)
			if s := h.in.Stats().Sources[src]; s.Gaps != 1 || s.Events != 7 {
				t.Errorf("after Forget: %+v", s)
			}
		})
	}
}

// TestMalformedMessages: garbage on both subjects is counted, logged and
// dropped; ingest goes on.
func TestMalformedMessages(t *testing.T) {
	h := newNATSHarness(t, Config{})
	good := blocks(20, 4)
	valid := wire.AppendDynamo(nil, &wire.DynamoHeader{}, &wire.Event{Worker: wire.WorkerKey{Worker: 1}, ID: 1, Kind: wire.KindStored, Blocks: good})
	for _, m := range [][]byte{nil, []byte("garbage"), valid[:len(valid)-3], append(valid[:len(valid):len(valid)], 0xc0)} {
		h.publish(t, h.sub.KVEvents, m)
	}
	nat := wire.AppendNative(nil, []wire.Event{stored(2, 0, 1, blocks(21, 2))})
	for _, m := range [][]byte{[]byte("kv"), nat[:len(nat)-1], bytes.Repeat([]byte{0xff}, 64)} {
		h.publish(t, h.sub.KVEventsNative, m)
	}
	h.publish(t, h.sub.KVEvents, valid)
	h.publish(t, h.sub.KVEventsNative, nat)
	waitMessages(t, h.in, h.ix, SourceNATSDynamo, 5)
	waitMessages(t, h.in, h.ix, SourceNATSNative, 4)
	st := h.in.Stats()
	if d := st.Sources[SourceNATSDynamo]; d.Malformed != 4 || d.Events != 1 {
		t.Errorf("dynamo %+v, want 4 malformed, 1 event", d)
	}
	if n := st.Sources[SourceNATSNative]; n.Malformed != 3 || n.Events != 1 {
		t.Errorf("native %+v, want 3 malformed, 1 event", n)
	}
	if !holds(t, h.ix, wire.WorkerKey{Worker: 1}, good) || !holds(t, h.ix, wire.WorkerKey{Worker: 2}, blocks(21, 2)) {
		t.Error("valid messages after malformed ones not applied")
	}
	// Rate-limited: one line per source within the interval.
	if n := strings.Count(h.log.String(), "malformed KV event message dropped"); n != 2 {
		t.Errorf("%d malformed log lines, want 2 (one per source):\n%s", n, h.log.String())
	}
}

// blockingSink blocks every Apply until release is closed.
type blockingSink struct {
	entered chan struct{}
	release chan struct{}
	events  atomic.Uint64
}

func (s *blockingSink) Apply(evs []wire.Event) error {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-s.release
	s.events.Add(uint64(len(evs)))
	return nil
}

// TestSlowConsumerDropsCounted: with the pending limit reached, the NATS
// client drops messages; the drops are counted and exported, and the time
// the blocked callback took is measured.
func TestSlowConsumerDropsCounted(t *testing.T) {
	s := natstest.Server(t)
	pub := natstest.Connect(t, s)
	sink := &blockingSink{entered: make(chan struct{}, 1), release: make(chan struct{})}
	subj := subjects(t)
	in := newIngest(t, Config{Subjects: subj, PendingMsgs: 4, PendingBytes: 1 << 20}, sink)
	nc, err := nats.Connect(s.ClientURL(), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := in.SubscribeNATS(nc); err != nil {
		t.Fatal(err)
	}
	const total = 50
	for i := range total {
		ev := stored(1, 0, uint64(i+1), blocks(uint64(30+i), 1))
		if err := pub.Publish(subj.KVEvents, wire.AppendDynamo(nil, &wire.DynamoHeader{}, &ev)); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Flush(); err != nil {
		t.Fatal(err)
	}
	<-sink.entered
	waitFor(t, func() bool { return in.Stats().Sources[SourceNATSDynamo].Dropped > 0 }, func() string { return "drops" })
	time.Sleep(time.Millisecond) // the first callback is measurably blocked
	close(sink.release)
	waitFor(t, func() bool {
		d := in.Stats().Sources[SourceNATSDynamo]
		return d.Messages+d.Dropped == total
	}, func() string {
		return fmt.Sprintf("messages+dropped = %d: %+v", total, in.Stats().Sources[SourceNATSDynamo])
	})
	// One more event reveals the drops at the tail of the burst as a gap.
	ev := stored(1, 0, total+1, blocks(99, 1))
	if err := pub.Publish(subj.KVEvents, wire.AppendDynamo(nil, &wire.DynamoHeader{}, &ev)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		d := in.Stats().Sources[SourceNATSDynamo]
		return d.Messages+d.Dropped == total+1
	}, func() string { return "the last message" })
	d := in.Stats().Sources[SourceNATSDynamo]
	if d.Dropped == 0 || d.Dropped >= total || d.DispatchMax < time.Millisecond || d.PendingHighWater == 0 {
		t.Errorf("stats %+v", d)
	}
	// The dropped events show up as gaps, too.
	if d.MissingEvents != d.Dropped || d.Events != total+1-d.Dropped {
		t.Errorf("missing %d, applied %d, dropped %d of %d", d.MissingEvents, d.Events, d.Dropped, total+1)
	}
	var buf bytes.Buffer
	in.WriteMetrics(&buf)
	mustContain(t, buf.String(), fmt.Sprintf(`kvroute_ingest_dropped_messages_total{source="nats-dynamo"} %d`, d.Dropped))
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	if after := in.Stats().Sources[SourceNATSDynamo].Dropped; after != d.Dropped {
		t.Errorf("dropped %d after Close, %d before", after, d.Dropped)
	}
}

// TestSinkErrorsCounted: Apply failing (the index is closed) is counted and
// logged, and does not stop ingest.
func TestSinkErrorsCounted(t *testing.T) {
	h := newNATSHarness(t, Config{})
	h.ix.Close()
	h.dynamo(t, stored(1, 0, 1, blocks(40, 2)), stored(1, 0, 2, blocks(41, 2)))
	waitMessages(t, h.in, nil, SourceNATSDynamo, 2)
	if d := h.in.Stats().Sources[SourceNATSDynamo]; d.SinkErrors != 2 || d.Events != 0 {
		t.Errorf("stats %+v, want 2 sink errors", d)
	}
	mustContain(t, h.log.String(), "applying KV events failed", shard.ErrClosed.Error())
}

// TestCloseStopsNATS: after Close no callback runs, nothing reaches the sink,
// and the subscriptions' goroutines are gone.
func TestCloseStopsNATS(t *testing.T) {
	s := natstest.Server(t)
	pub := natstest.Connect(t, s)
	nc := natstest.Connect(t, s)
	probe := natstest.Connect(t, s)
	ix := newIndex(t)
	subj := subjects(t)
	got := make(chan struct{}, 16)
	if _, err := probe.Subscribe(subj.KVEvents, func(*nats.Msg) { got <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	if err := probe.Flush(); err != nil {
		t.Fatal(err)
	}
	base := runtime.NumGoroutine()
	in, err := New(Config{BlockSize: 4, Subjects: subj, Logger: quiet}, ix)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.SubscribeNATS(nc); err != nil {
		t.Fatal(err)
	}
	ev := stored(1, 0, 1, blocks(50, 2))
	if err := pub.Publish(subj.KVEvents, wire.AppendDynamo(nil, &wire.DynamoHeader{}, &ev)); err != nil {
		t.Fatal(err)
	}
	<-got
	waitMessages(t, in, ix, SourceNATSDynamo, 1)
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	if in.Running() {
		t.Error("running after Close")
	}
	ev = stored(1, 0, 2, blocks(51, 2))
	if err := pub.Publish(subj.KVEvents, wire.AppendDynamo(nil, &wire.DynamoHeader{}, &ev)); err != nil {
		t.Fatal(err)
	}
	<-got // delivered to the probe: it would have reached ingest by now
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if m := in.Stats().Sources[SourceNATSDynamo].Messages; m != 1 {
		t.Errorf("%d messages after Close, want 1", m)
	}
	checkGoroutines(t, base)
	if err := in.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := in.SubscribeNATS(nc); !errors.Is(err, ErrClosed) {
		t.Errorf("SubscribeNATS after Close: %v", err)
	}
	if err := in.AddZMQ(ZMQWorker{Worker: 1, Endpoint: "tcp://127.0.0.1:1"}); !errors.Is(err, ErrClosed) {
		t.Errorf("AddZMQ after Close: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	ix := newIndex(t)
	if _, err := New(Config{}, ix); err == nil || !strings.Contains(err.Error(), "--block-size") {
		t.Errorf("block size 0: %v", err)
	}
	if _, err := New(Config{BlockSize: 16}, nil); err == nil {
		t.Error("nil sink accepted")
	}
	in := newIngest(t, Config{}, ix)
	if in.Running() {
		t.Error("running before any subscription")
	}
	s := natstest.Server(t)
	nc := natstest.Connect(t, s)
	if err := in.SubscribeNATS(nc); err == nil {
		t.Error("SubscribeNATS without subjects accepted")
	}
	in = newIngest(t, Config{Subjects: subjects(t)}, ix)
	if err := in.SubscribeNATS(nc); err != nil {
		t.Fatal(err)
	}
	if err := in.SubscribeNATS(nc); err == nil {
		t.Error("second SubscribeNATS accepted")
	}
}

// TestWriteMetrics: every line is a valid sample, the names and labels are
// the documented ones, and the values follow the counters.
func TestWriteMetrics(t *testing.T) {
	h := newNATSHarness(t, Config{})
	h.dynamo(t, stored(1, 0, 1, blocks(60, 3)), stored(1, 0, 3, blocks(61, 2)))
	waitMessages(t, h.in, h.ix, SourceNATSDynamo, 2)
	var buf bytes.Buffer
	h.in.WriteMetrics(&buf)
	out := buf.String()
	line := regexp.MustCompile(`^kvroute_ingest_[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? [0-9.e+-]+$`)
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if !line.MatchString(l) {
			t.Errorf("bad sample line %q", l)
		}
	}
	mustContain(t, out,
		"kvroute_ingest_running 1\n",
		`kvroute_ingest_messages_total{source="nats-dynamo"} 2`+"\n",
		`kvroute_ingest_events_total{source="nats-dynamo"} 2`+"\n",
		`kvroute_ingest_blocks_total{source="nats-dynamo"} 5`+"\n",
		`kvroute_ingest_gaps_total{source="nats-dynamo"} 1`+"\n",
		`kvroute_ingest_missing_events_total{source="nats-dynamo"} 1`+"\n",
		`kvroute_ingest_events_total{source="nats-native"} 0`+"\n",
		`kvroute_ingest_events_total{source="zmq"} 0`+"\n",
		`kvroute_ingest_dispatch_seconds_bucket{source="nats-dynamo",le="+Inf"} 2`+"\n",
		`kvroute_ingest_dispatch_seconds_count{source="nats-dynamo"} 2`+"\n",
		`kvroute_ingest_dispatch_seconds_bucket{source="nats-dynamo",le="1e-06"}`,
		`kvroute_ingest_dispatch_max_seconds{source="nats-dynamo"}`,
		`kvroute_ingest_pending_messages{source="nats-dynamo"} 0`,
		`kvroute_ingest_block_size_mismatches_total{source="zmq"} 0`,
	)
	// Through a registry: valid Prometheus text (the sources' samples
	// grouped by family).
	var expo bytes.Buffer
	promtext.NewRegistry(MetricFamilies).Write(&expo, h.in.WriteMetrics)
	promtexttest.Check(t, "the ingest metrics", expo.Bytes())
}
