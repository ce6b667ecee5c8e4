package ingest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvroute/kvroute/internal/natstest"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/plane"
)

func ensureStream(t testing.TB, nc *nats.Conn, cfg StreamConfig) jetstream.Stream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := EnsureStream(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// consume starts an Ingest into ix consuming stream from startSeq.
func consume(t testing.TB, nc *nats.Conn, st jetstream.Stream, sub plane.Subjects, ix *shard.Index, startSeq uint64, hb time.Duration) *Ingest {
	t.Helper()
	in := newIngest(t, Config{Subjects: sub, StartSeq: startSeq, Heartbeat: hb}, ix)
	if err := in.ConsumeJetStream(nc, st); err != nil {
		t.Fatal(err)
	}
	return in
}

func TestStreamName(t *testing.T) {
	s, _ := plane.SubjectsFor("kvroute", "backend")
	if got := StreamName(s); got != "KVROUTE_EVENTS_kvroute_backend" {
		t.Errorf("StreamName = %q", got)
	}
	if got := StreamName(plane.Subjects{KVEvents: "a.b/c"}); got != "KVROUTE_EVENTS_a_b_c" {
		t.Errorf("StreamName of a custom subject = %q", got)
	}
}

func TestReplyStreamSeq(t *testing.T) {
	for reply, want := range map[string]uint64{
		"$JS.ACK.S.C.1.42.7.1700000000.0":                 42,
		"$JS.ACK.dom.acchash.S.C.1.9001.7.1700000000.0.r": 9001,
		"$JS.ACK.S.C.1.x.7.1.0":                           0,
		"_INBOX.abc":                                      0,
		"":                                                0,
	} {
		if got := replyStreamSeq(reply); got != want {
			t.Errorf("replyStreamSeq(%q) = %d, want %d", reply, got, want)
		}
	}
	if a := testing.AllocsPerRun(100, func() { replyStreamSeq("$JS.ACK.S.C.1.42.7.1700000000.0") }); a != 0 {
		t.Errorf("replyStreamSeq allocates %.1f", a)
	}
}

// TestEnsureStream: the stream is created with the configured limits, bound
// to (and its limits updated) when it exists, and an existing stream that
// does not capture the subjects is an error naming the flags.
func TestEnsureStream(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Connect(t, s)
	sub := subjects(t)
	st := ensureStream(t, nc, StreamConfig{Subjects: sub, MaxAge: time.Minute, MaxBytes: 1 << 20})
	c := st.CachedInfo().Config
	if c.Name != "KVROUTE_EVENTS_test_backend" || c.MaxAge != time.Minute || c.MaxBytes != 1<<20 || c.Replicas != 1 ||
		len(c.Subjects) != 3 || c.Subjects[0] != sub.KVEvents || c.Subjects[1] != sub.KVEventsNative || c.Subjects[2] != MarkSubject(sub) {
		t.Fatalf("created stream config %+v", c)
	}
	st = ensureStream(t, nc, StreamConfig{Subjects: sub}) // defaults
	if c := st.CachedInfo().Config; c.MaxAge != DefaultStreamMaxAge || c.MaxBytes != DefaultStreamMaxBytes {
		t.Fatalf("bound stream not updated to the defaults: %+v", c)
	}
	js, _ := jetstream.New(nc)
	other, _ := plane.SubjectsFor("other", "backend")
	_, err := EnsureStream(context.Background(), js, StreamConfig{Name: c.Name, Subjects: other})
	if err == nil || !strings.Contains(err.Error(), "--namespace") {
		t.Fatalf("binding to a stream over other subjects: %v", err)
	}
	if _, err := EnsureStream(context.Background(), js, StreamConfig{Subjects: sub, Replicas: 7}); err == nil || !strings.Contains(err.Error(), "--events-replicas") {
		t.Fatalf("7 replicas: %v", err)
	}
}

// TestJetStreamResume: a router's ingest consumes the stream, stops; events
// published while it is stopped (plain NATS publishes) are applied by a new
// ingest started at the saved LastSeq()+1, and none of the earlier ones again;
// StartSeq 0 applies only what is published after the start.
func TestJetStreamResume(t *testing.T) {
	s := natstest.Server(t)
	pub := natstest.Connect(t, s)
	sub := subjects(t)
	st := ensureStream(t, pub, StreamConfig{Subjects: sub})
	ix := newIndex(t)
	h := &natsHarness{ix: ix, pub: pub, sub: sub}

	// Published before any ingest: StartSeq 0 must not apply it.
	old := blocks(100, 3)
	h.dynamo(t, stored(9, 0, 1, old))
	// Stored before the consumer starts: else it may be taken for new (the
	// publish is asynchronous; this raced 3 times in 40 runs).
	waitFor(t, func() bool {
		info, err := st.Info(context.Background())
		return err == nil && info.State.Msgs == 1
	}, func() string { return "the old event stored" })

	in1 := consume(t, natstest.Connect(t, s), st, sub, ix, 0, 0)
	var bl [][]wire.Block
	for i := range 6 { // events 1..6 of worker 1: Dynamo and native alternate
		bl = append(bl, blocks(uint64(i+1), 2))
		ev := stored(1, 0, uint64(i+1), bl[i])
		if i%2 == 0 {
			h.dynamo(t, ev)
		} else {
			h.native(t, ev)
		}
	}
	waitFor(t, func() bool { return in1.LastSeq() == 7 }, func() string { return fmt.Sprintf("LastSeq %d, want 7", in1.LastSeq()) })
	saved := in1.LastSeq()
	if err := in1.Close(); err != nil {
		t.Fatal(err)
	}
	s1 := in1.Stats()
	if e := s1.Sources[SourceNATSDynamo].Events + s1.Sources[SourceNATSNative].Events; e != 6 || s1.StreamSeq != 7 {
		t.Fatalf("first ingest applied %d events, stream seq %d; want 6 and 7", e, s1.StreamSeq)
	}

	// Stopped: events 7..10, then a removal of event 1's blocks (11).
	for i := 6; i < 10; i++ {
		bl = append(bl, blocks(uint64(i+1), 2))
		h.native(t, stored(1, 0, uint64(i+1), bl[i]))
	}
	rm := wire.Event{Worker: wire.WorkerKey{Worker: 1}, ID: 11, Kind: wire.KindRemoved, Blocks: bl[0]}
	h.dynamo(t, rm)

	in2 := consume(t, natstest.Connect(t, s), st, sub, ix, saved+1, 0)
	waitFor(t, func() bool { return in2.LastSeq() == 12 }, func() string { return fmt.Sprintf("LastSeq %d, want 12", in2.LastSeq()) })
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	s2 := in2.Stats()
	d, n := s2.Sources[SourceNATSDynamo], s2.Sources[SourceNATSNative]
	if d.Events != 1 || n.Events != 4 || d.Duplicates+n.Duplicates != 0 || d.Gaps+n.Gaps != 0 || s2.StreamDuplicates != 0 {
		t.Errorf("second ingest: dynamo %+v native %+v stream dups %d; want exactly the 5 events published while stopped",
			d, n, s2.StreamDuplicates)
	}
	for i := 1; i < 10; i++ {
		if !holds(t, ix, wire.WorkerKey{Worker: 1}, bl[i]) {
			t.Errorf("event %d not in the index: %+v", i+1, match(t, ix, bl[i]))
		}
	}
	if ov := match(t, ix, bl[0]); len(ov) != 0 {
		t.Errorf("event 1's blocks were removed while stopped but are in the index: %+v", ov)
	}
	if ov := match(t, ix, old); len(ov) != 0 {
		t.Errorf("StartSeq 0 applied an event published before the start: %+v", ov)
	}
}

// TestJetStreamClusterNodeLoss: an R3 stream on a 3-node cluster; the stream
// leader is shut down while events are being published; the ingest, connected
// with all three URLs, applies every event exactly once.
func TestJetStreamClusterNodeLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	ss := natstest.Cluster(t, 3)
	var urls []string
	for _, s := range ss {
		urls = append(urls, s.ClientURL())
	}
	connect := func() *nats.Conn {
		nc, err := nats.Connect(strings.Join(urls, ","), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.Timeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	sub := subjects(t)
	var st jetstream.Stream
	var lastErr error
	waitFor(t, func() bool { // the cluster may still be electing
		js, _ := jetstream.New(connect())
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var err error
		st, err = EnsureStream(ctx, js, StreamConfig{Subjects: sub, Replicas: 3})
		lastErr = err
		return err == nil
	}, func() string { return fmt.Sprintf("the R3 stream: %v", lastErr) })
	ix := newIndex(t)
	in := consume(t, connect(), st, sub, ix, 0, 500*time.Millisecond)

	pub, err := jetstream.New(connect())
	if err != nil {
		t.Fatal(err)
	}
	const workers, perWorker = 8, 150
	const total = workers * perWorker
	bl := make([][]wire.Block, total)
	for i := range total {
		w, id := uint64(i%workers+1), uint64(i/workers+1)
		bl[i] = blocks(uint64(i+1), 2)
		ev := stored(w, 0, id, bl[i])
		msg := wire.AppendNative(nil, []wire.Event{ev})
		if i%2 == 0 {
			hd := wire.DynamoHeader{PublisherID: w, Sequence: id, Topic: []byte("kv-events")}
			msg = wire.AppendDynamo(nil, &hd, &ev)
		}
		subject := map[bool]string{true: sub.KVEvents, false: sub.KVEventsNative}[i%2 == 0]
		if i == total/3 {
			killed := ""
			for _, s := range ss {
				if s.JetStreamIsStreamLeader("$G", st.CachedInfo().Config.Name) {
					killed = s.Name()
					s.Shutdown()
					break
				}
			}
			if killed == "" {
				t.Fatal("no node leads the stream")
			}
			t.Logf("shut down %s, the stream leader, after %d events", killed, i)
		}
		// An acknowledged publish, retried across the leader election, with a
		// message id so that a retry of a stored message is not stored twice.
		deadline := time.Now().Add(10 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := pub.Publish(ctx, subject, msg, jetstream.WithMsgID(strconv.Itoa(i)))
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("publish %d: %v", i, err)
			}
		}
	}
	// The ordered consumer lived on the killed leader: nats.go recreates it
	// after two missed heartbeats, retrying while the stream elects a new
	// leader with a backoff of 1, 2, 4, 8 s..., so the catch-up can take
	// over 10 s (1 run in ~40 here); 40 s is a safety limit.
	waitWithin(t, 40*time.Second, func() bool {
		s := in.Stats()
		return s.Sources[SourceNATSDynamo].Events+s.Sources[SourceNATSNative].Events >= total
	}, func() string { return fmt.Sprintf("all %d events (stats %+v)", total, in.Stats().Sources) })
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	s := in.Stats()
	d, n := s.Sources[SourceNATSDynamo], s.Sources[SourceNATSNative]
	if d.Events+n.Events != total || d.Duplicates+n.Duplicates != 0 || d.Gaps+n.Gaps != 0 || d.Malformed+n.Malformed != 0 {
		t.Errorf("dynamo %+v\nnative %+v\nwant %d events, no duplicates or gaps", d, n, total)
	}
	t.Logf("stream seq %d, stream duplicates dropped %d", s.StreamSeq, s.StreamDuplicates)
	for i := range total {
		if !holds(t, ix, wire.WorkerKey{Worker: uint64(i%workers + 1)}, bl[i]) {
			t.Fatalf("event %d not in the index", i)
		}
	}
}

// TestJetStreamRedeliveryDropped: a message whose stream sequence is not
// above the last applied one (redelivered after a consumer reset) is
// counted and not applied again; a message without a sequence is applied.
func TestJetStreamRedeliveryDropped(t *testing.T) {
	ix := newIndex(t)
	sub := subjects(t)
	in := newIngest(t, Config{Subjects: sub}, ix)
	jp := &jsPipe{in: in, dyn: newPipe(in, SourceNATSDynamo), nat: newPipe(in, SourceNATSNative), dynSubject: sub.KVEvents}
	a, b := blocks(1, 2), blocks(2, 2)
	msgA := wire.AppendNative(nil, []wire.Event{stored(1, 0, 0, a)}) // id 0: untracked, so only the sequence guards
	jp.onNATS(sub.KVEventsNative, "$JS.ACK.S.C.1.5.1.1.0", msgA)
	rm := wire.Event{Worker: wire.WorkerKey{Worker: 1}, Kind: wire.KindRemoved, Blocks: a}
	jp.onNATS(sub.KVEventsNative, "$JS.ACK.S.C.1.6.2.1.0", wire.AppendNative(nil, []wire.Event{rm}))
	jp.onNATS(sub.KVEventsNative, "$JS.ACK.S.C.1.5.3.1.0", msgA) // redelivered
	jp.onNATS(sub.KVEventsNative, "", wire.AppendNative(nil, []wire.Event{stored(1, 0, 0, b)}))
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	if ov := match(t, ix, a); len(ov) != 0 {
		t.Errorf("redelivered Stored applied again after its removal: %+v", ov)
	}
	if !holds(t, ix, wire.WorkerKey{Worker: 1}, b) {
		t.Error("message without a sequence not applied")
	}
	if st := in.Stats(); st.StreamDuplicates != 1 || st.StreamSeq != 6 || st.Sources[SourceNATSNative].Events != 3 {
		t.Errorf("stream dups %d, seq %d, events %d; want 1, 6, 3", st.StreamDuplicates, st.StreamSeq, st.Sources[SourceNATSNative].Events)
	}
}

// TestEnsureStreamNoJetStream: a server without JetStream is reported with
// the flag that avoids it.
func TestEnsureStreamNoJetStream(t *testing.T) {
	o := natsserver.DefaultTestOptions
	o.Port = -1
	s := natsserver.RunServer(&o)
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc := natstest.Connect(t, s)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = EnsureStream(ctx, js, StreamConfig{Subjects: subjects(t)})
	if err == nil || !strings.Contains(err.Error(), "--events-jetstream=false") {
		t.Fatalf("err %v, want one naming --events-jetstream=false", err)
	}
	t.Log(err)
}

func TestCovered(t *testing.T) {
	for _, c := range []struct {
		filters []string
		subject string
		want    bool
	}{
		{[]string{"a.b.kv"}, "a.b.kv", true},
		{[]string{"a.b.>"}, "a.b.kv", true},
		{[]string{"a.>"}, "a", false},
		{[]string{"a.*.kv"}, "a.b.kv", true},
		{[]string{"a.*"}, "a.b.kv", false},
		{[]string{"a.b.kv.native"}, "a.b.kv", false},
		{[]string{"x", "a.b.*"}, "a.b.kv", true},
		{nil, "a", false},
	} {
		if got := covered(c.filters, c.subject); got != c.want {
			t.Errorf("covered(%v, %q) = %v", c.filters, c.subject, got)
		}
	}
}

// TestJetStreamAfterApply: Config.AfterApply runs on the handler goroutine
// after each message, with its stream sequence, once LastSeq is that
// sequence and the sink has the message's events (a Capture taken there is
// exact); a dropped redelivery does not call it.
func TestJetStreamAfterApply(t *testing.T) {
	ix := newIndex(t)
	sub := subjects(t)
	var seqs []uint64
	var in *Ingest
	in = newIngest(t, Config{Subjects: sub, AfterApply: func(seq uint64) {
		if in.LastSeq() != seq {
			t.Errorf("AfterApply(%d) with LastSeq %d", seq, in.LastSeq())
		}
		seqs = append(seqs, seq)
	}}, ix)
	jp := &jsPipe{in: in, dyn: newPipe(in, SourceNATSDynamo), nat: newPipe(in, SourceNATSNative), dynSubject: sub.KVEvents, after: in.cfg.AfterApply}
	a := blocks(1, 2)
	msgA := wire.AppendNative(nil, []wire.Event{stored(1, 0, 0, a)})
	jp.onNATS(sub.KVEventsNative, "$JS.ACK.S.C.1.5.1.1.0", msgA)
	jp.onNATS(sub.KVEventsNative, "$JS.ACK.S.C.1.5.2.1.0", msgA) // redelivered: dropped
	jp.onNATS(sub.KVEventsNative, "$JS.ACK.S.C.1.7.3.1.0", msgA)
	if fmt.Sprint(seqs) != "[5 7]" {
		t.Errorf("AfterApply saw %v, want [5 7]", seqs)
	}
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	if !holds(t, ix, wire.WorkerKey{Worker: 1}, a) {
		t.Error("events not applied")
	}
}
