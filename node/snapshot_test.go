package node

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvroute/kvroute/ingest"
	"github.com/kvroute/kvroute/internal/natstest"
	"github.com/kvroute/kvroute/internal/promtext"
	"github.com/kvroute/kvroute/internal/promtext/promtexttest"
	"github.com/kvroute/kvroute/internal/syncbuf"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire"
)

// dumpStrings is the index's content as sorted strings.
func dumpStrings(t *testing.T, ix *shard.Index) []string {
	t.Helper()
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	evs, err := ix.Dump(nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs {
		s := fmt.Sprintf("%d/%d", e.Worker.Worker, e.Worker.Dp)
		for _, b := range e.Blocks {
			s += fmt.Sprintf(" %x:%x", b.Engine, b.Local)
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

func waitCond(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func nativeEvents(n *Node) uint64 {
	return n.Ingest.Stats().Sources[ingest.SourceNATSNative].Events
}

// snapshotEvent is event i of the snapshot tests: stores of three workers
// with a removal every fifth event, so the index is not just a union.
func snapshotEvent(i uint64) wire.Event {
	w := i%3 + 1
	if i%5 == 0 {
		return wire.Event{Worker: wire.WorkerKey{Worker: (i-1)%3 + 1}, Kind: wire.KindRemoved, Blocks: testBlocks(i - 1)}
	}
	return wire.Event{Worker: wire.WorkerKey{Worker: w}, Kind: wire.KindStored, Blocks: testBlocks(i)}
}

// TestSnapshotRestore: a node with snapshots on takes one (triggered) after
// event k, more events arrive, the node closes; a new node restores the
// snapshot, consumes from k+1, applies only the later events, is not ready
// before it replayed to the stream's last sequence at start, and ends with
// the same index as one that applied every event. Older snapshots beyond
// the newest two are deleted. The event-id tracking is restored with the
// snapshot: the replay asks no worker for recovery (no key is a first
// sighting), and a worker's re-sent old id, the first event of that worker
// after the snapshot, is dropped as a duplicate.
func TestSnapshotRestore(t *testing.T) {
	s := natstest.Server(t)
	pub := natstest.Connect(t, s)
	sub := subjects(t)
	cfg := Config{Index: shard.Config{Shards: 2}, BlockSize: 16, Subjects: sub, NATSURL: s.ClientURL(), JetStream: true,
		Stream: ingest.StreamConfig{MaxAge: time.Minute}, Snapshot: SnapshotConfig{Bucket: "KVSNAP", Interval: time.Hour},
		Logger: slog.New(slog.DiscardHandler)}
	ref, err := shard.NewIndex(shard.Config{Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	ids := map[uint64]uint64{} // worker → its last event id
	publish := func(i uint64) {
		ev := snapshotEvent(i)
		ids[ev.Worker.Worker]++
		ev.ID = ids[ev.Worker.Worker]
		if err := pub.Publish(sub.KVEventsNative, wire.AppendNative(nil, []wire.Event{ev})); err != nil {
			t.Fatal(err)
		}
		if err := ref.Apply([]wire.Event{ev}); err != nil {
			t.Fatal(err)
		}
	}

	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !n.CaughtUp() || n.EventPlane() != nil {
		t.Fatalf("empty stream: caught up %v, event plane %v", n.CaughtUp(), n.EventPlane())
	}
	var seq uint64
	for round := range 4 { // four snapshots: only the newest two are kept
		for range 4 {
			seq++
			publish(seq)
		}
		waitSeq(t, n, seq)
		n.TriggerSnapshot()
		seq++
		publish(seq) // the snapshot is taken right after it
		waitSeq(t, n, seq)
		waitCond(t, "snapshot stored", func() bool { st, _ := n.Snapshots(); return st == uint64(round+1) })
		if _, last := n.Snapshots(); last != seq {
			t.Fatalf("snapshot at %d, want %d", last, seq)
		}
	}
	snapSeq := seq
	// Worker 1 re-sends its last event id with other blocks: a duplicate.
	dup := wire.Event{Worker: wire.WorkerKey{Worker: 1}, ID: ids[1], Kind: wire.KindStored, Blocks: testBlocks(999)}
	if err := pub.Publish(sub.KVEventsNative, wire.AppendNative(nil, []wire.Event{dup})); err != nil {
		t.Fatal(err)
	}
	seq++
	for range 7 {
		seq++
		publish(seq)
	}
	waitSeq(t, n, seq)
	var b bytes.Buffer
	promtext.NewRegistry(MetricFamilies, SnapshotFamilies).Write(&b, n.WriteMetrics)
	promtexttest.Check(t, "node metrics", b.Bytes())
	promtexttest.Promtool(t, "node metrics", b.Bytes())
	for _, want := range []string{"kvroute_snapshots_total 4\n", fmt.Sprintf("kvroute_snapshot_last_seq %d\n", snapSeq), "kvroute_snapshot_age_seconds "} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("metrics lack %q:\n%s", want, b.String())
		}
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	// Published while no node runs.
	for range 3 {
		seq++
		publish(seq)
	}
	obs := bucket(t, pub, "KVSNAP")
	names := objectNames(t, obs)
	if want := []string{"current", SnapshotObjectName(snapSeq - 5), SnapshotObjectName(snapSeq),
		TrackingObjectName(snapSeq - 5), TrackingObjectName(snapSeq)}; !slices.Equal(names, want) {
		t.Errorf("bucket holds %v, want %v", names, want)
	}

	n2, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n2.Close()
	if n2.startSeq != snapSeq+1 || n2.replayTo != seq {
		t.Errorf("second node starts at %d replaying to %d; want %d and %d", n2.startSeq, n2.replayTo, snapSeq+1, seq)
	}
	waitCond(t, "caught up", n2.CaughtUp)
	if n2.Ingest.LastSeq() != seq || n2.EventPlane() != nil {
		t.Errorf("caught up at LastSeq %d (want %d), event plane %v", n2.Ingest.LastSeq(), seq, n2.EventPlane())
	}
	if got := nativeEvents(n2); got != seq-snapSeq-1 {
		t.Errorf("second node applied %d events, want only the %d after the snapshot, less the duplicate", got, seq-snapSeq-1)
	}
	if got := n2.Ingest.Stats().Sources[ingest.SourceNATSNative].Duplicates; got != 1 {
		t.Errorf("second node dropped %d duplicates, want 1 (the re-sent id)", got)
	}
	if got := n2.Recovery.Stats().Requests; got != 0 {
		t.Errorf("second node made %d recovery requests, want 0 (the tracking is restored)", got)
	}
	if got, want := dumpStrings(t, n2.Index), dumpStrings(t, ref); !slices.Equal(got, want) {
		t.Errorf("restored index differs from one that applied every event:\n got %v\nwant %v", got, want)
	}
	b.Reset()
	n2.WriteMetrics(&b)
	if want := fmt.Sprintf("kvroute_snapshot_replay_messages %d\n", seq-snapSeq); !strings.Contains(b.String(), want) {
		t.Errorf("metrics lack %q:\n%s", want, b.String())
	}
}

// TestSnapshotCorrupt: a corrupt current snapshot is logged and counted;
// the node starts empty, replays the stream from its first message and ends
// with the full index.
func TestSnapshotCorrupt(t *testing.T) {
	s := natstest.Server(t)
	pub := natstest.Connect(t, s)
	sub := subjects(t)
	logs := &syncbuf.Buffer{}
	cfg := Config{Index: shard.Config{Shards: 2}, BlockSize: 16, Subjects: sub, NATSURL: s.ClientURL(), JetStream: true,
		Stream: ingest.StreamConfig{MaxAge: time.Minute}, Snapshot: SnapshotConfig{Bucket: "KVSNAP", Interval: time.Hour},
		Logger: slog.New(slog.NewTextHandler(logs, nil))}
	ref, err := shard.NewIndex(shard.Config{Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const total = 12
	for i := uint64(1); i <= total; i++ {
		ev := snapshotEvent(i)
		if err := pub.Publish(sub.KVEventsNative, wire.AppendNative(nil, []wire.Event{ev})); err != nil {
			t.Fatal(err)
		}
		if err := ref.Apply([]wire.Event{ev}); err != nil {
			t.Fatal(err)
		}
		if i == 5 {
			waitSeq(t, n, 5)
			n.TriggerSnapshot() // taken after event 6
		}
	}
	waitSeq(t, n, total)
	waitCond(t, "snapshot stored", func() bool { st, _ := n.Snapshots(); return st == 1 })
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	// Flip bytes in the middle of the snapshot object.
	obs := bucket(t, pub, "KVSNAP")
	ctx := context.Background()
	name := SnapshotObjectName(6)
	data, err := obs.GetBytes(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if h, err := shard.ReadSnapshotHeader(bytes.NewReader(data)); err != nil || h.BlockSize != 16 || h.StreamSeq != 6 {
		t.Fatalf("snapshot header %+v, %v: want block size 16 (Config.BlockSize) at sequence 6", h, err)
	}
	for i := len(data) / 2; i < len(data)/2+8 && i < len(data); i++ {
		data[i] ^= 0xff
	}
	if _, err := obs.PutBytes(ctx, name, data); err != nil {
		t.Fatal(err)
	}

	n2, err := Start(cfg)
	if err != nil {
		t.Fatalf("a corrupt snapshot must not stop the start: %v", err)
	}
	defer n2.Close()
	if n2.startSeq != 1 || n2.snap.restoreFailures.Load() != 1 {
		t.Errorf("start seq %d, restore failures %d; want 1 and 1", n2.startSeq, n2.snap.restoreFailures.Load())
	}
	waitCond(t, "caught up", n2.CaughtUp)
	if got := nativeEvents(n2); got != total {
		t.Errorf("applied %d events, want all %d", got, total)
	}
	if got, want := dumpStrings(t, n2.Index), dumpStrings(t, ref); !slices.Equal(got, want) {
		t.Errorf("index differs from one that applied every event:\n got %v\nwant %v", got, want)
	}
	if !strings.Contains(logs.String(), "index snapshot unusable") {
		t.Errorf("no log of the unusable snapshot:\n%s", logs.String())
	}
	var b bytes.Buffer
	n2.WriteMetrics(&b)
	if !strings.Contains(b.String(), "kvroute_snapshot_restore_failures_total 1\n") {
		t.Errorf("metrics lack the restore failure:\n%s", b.String())
	}
}

func bucket(t *testing.T, nc *nats.Conn, name string) jetstream.ObjectStore {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	obs, err := js.ObjectStore(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return obs
}

func objectNames(t *testing.T, obs jetstream.ObjectStore) []string {
	t.Helper()
	infos, err := obs.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, oi := range infos {
		names = append(names, oi.Name)
	}
	slices.Sort(names)
	return names
}

// TestSnapshotSkipAndFailure: a snapshot due while one is uploading is
// skipped and counted; an upload that fails (the bucket was deleted) is
// counted and does not stop ingest; the next due snapshot is taken again.
func TestSnapshotSkipAndFailure(t *testing.T) {
	s := natstest.Server(t)
	pub := natstest.Connect(t, s)
	sub := subjects(t)
	cfg := Config{Index: shard.Config{Shards: 1}, BlockSize: 16, Subjects: sub, NATSURL: s.ClientURL(), JetStream: true,
		Stream: ingest.StreamConfig{MaxAge: time.Minute}, Snapshot: SnapshotConfig{Bucket: "KVSNAP", Interval: time.Hour},
		Logger: slog.New(slog.DiscardHandler)}
	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	var seq uint64
	next := func() {
		seq++
		if err := pub.Publish(sub.KVEventsNative, wire.AppendNative(nil, []wire.Event{snapshotEvent(seq)})); err != nil {
			t.Fatal(err)
		}
		waitSeq(t, n, seq)
	}
	next()
	n.snap.busy.Store(true) // as if an upload were in progress
	n.TriggerSnapshot()
	next()
	if sk, st := n.snap.skipped.Load(), n.snap.total.Load(); sk != 1 || st != 0 {
		t.Fatalf("skipped %d, stored %d; want 1 and 0", sk, st)
	}
	n.snap.busy.Store(false)

	js, err := jetstream.New(pub)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteObjectStore(context.Background(), "KVSNAP"); err != nil {
		t.Fatal(err)
	}
	n.TriggerSnapshot()
	next()
	waitCond(t, "upload failure counted", func() bool { return n.snap.failures.Load() == 1 })
	next() // ingest goes on
	if _, err := OpenSnapshotBucket(context.Background(), js, "KVSNAP", 1, true); err != nil {
		t.Fatal(err)
	}
	n.TriggerSnapshot()
	next()
	waitCond(t, "snapshot stored after the failure", func() bool { st, _ := n.Snapshots(); return st == 1 })
	if _, last := n.Snapshots(); last != seq {
		t.Errorf("snapshot at %d, want %d", last, seq)
	}
}

// TestCatchUpReadiness: until the message with the stream's last sequence
// at start is applied, EventPlane (the router's /ready) reports the replay;
// after it, nothing.
func TestCatchUpReadiness(t *testing.T) {
	ix, err := shard.NewIndex(shard.Config{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	in, err := ingest.New(ingest.Config{BlockSize: 16, Subjects: subjects(t), StartSeq: 3}, ix)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	n := &Node{Ingest: in, cfg: Config{Logger: slog.New(slog.DiscardHandler)}, startSeq: 3, replayTo: 9, replayStart: time.Now()}
	for _, seq := range []uint64{3, 8} {
		n.afterApply(seq)
		if err := n.EventPlane(); err == nil || !strings.Contains(err.Error(), "replaying KV events") || n.CaughtUp() {
			t.Fatalf("after seq %d of 9: event plane %v, caught up %v", seq, err, n.CaughtUp())
		}
	}
	n.afterApply(9)
	if err := n.EventPlane(); err != nil || !n.CaughtUp() || n.replayMsgs.Load() != 7 {
		t.Fatalf("after seq 9: event plane %v, caught up %v, replayed %d (want 7)", err, n.CaughtUp(), n.replayMsgs.Load())
	}
}
