package node

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/kvroute/kvroute/ingest"
	"github.com/kvroute/kvroute/internal/natstest"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire"
)

// liveRef publishes snapshotEvent i as a native message with per-worker ids
// and applies it to a reference index.
type liveRef struct {
	t   *testing.T
	ref *shard.Index
	ids map[uint64]uint64
	i   uint64
}

func newLiveRef(t *testing.T) *liveRef {
	ref, err := shard.NewIndex(shard.Config{Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ref.Close() })
	return &liveRef{t: t, ref: ref, ids: map[uint64]uint64{}}
}

func (r *liveRef) publish(pub interface {
	Publish(string, []byte) error
}, subject string, n int) {
	for range n {
		r.i++
		ev := snapshotEvent(r.i)
		r.ids[ev.Worker.Worker]++
		ev.ID = r.ids[ev.Worker.Worker]
		if err := pub.Publish(subject, wire.AppendNative(nil, []wire.Event{ev})); err != nil {
			r.t.Fatal(err)
		}
		if err := r.ref.Apply([]wire.Event{ev}); err != nil {
			r.t.Fatal(err)
		}
	}
}

// agrees reports whether ix holds exactly what the reference holds.
func (r *liveRef) agrees(ix *shard.Index) bool {
	return slices.Equal(dumpStrings(r.t, ix), dumpStrings(r.t, r.ref))
}

// TestLiveSnapshotRestore: with the live path (LiveEvents), a node takes a
// snapshot at its safe sequence while events flow on core NATS, more
// arrive, it closes, more are published while no node runs; a new node
// restores the snapshot, catches up from the stream (the events after the
// safe point that the snapshot already holds are dropped by their ids),
// then takes live events again, and its index agrees with the fleet's:
// exactly the index of one that applied every event once. No worker is
// asked for recovery.
func TestLiveSnapshotRestore(t *testing.T) {
	s := natstest.Server(t)
	pub := natstest.Connect(t, s)
	sub := subjects(t)
	cfg := Config{Index: shard.Config{Shards: 2}, BlockSize: 16, Subjects: sub, NATSURL: s.ClientURL(), JetStream: true,
		LiveEvents: true, SafeInterval: 10 * time.Millisecond,
		Stream: ingest.StreamConfig{MaxAge: time.Minute}, Snapshot: SnapshotConfig{Bucket: "KVSNAP", Interval: time.Hour},
		Logger: slog.New(slog.DiscardHandler)}
	r := newLiveRef(t)
	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.publish(pub, sub.KVEventsNative, 20)
	waitCond(t, "the first node agrees", func() bool { return r.agrees(n.Index) })
	waitCond(t, "safe sequence at 20", func() bool { return n.Ingest.SafeSeq() >= 20 })
	r.publish(pub, sub.KVEventsNative, 5) // after the safe point: held by the snapshot and replayed again
	waitCond(t, "the first node agrees", func() bool { return r.agrees(n.Index) })
	n.TriggerSnapshot()
	waitCond(t, "snapshot stored", func() bool { st, _ := n.Snapshots(); return st == 1 })
	_, snapSeq := n.Snapshots()
	// The stream holds the start's catch-up marker and the 25 events: the
	// safe sequence sampled at the snapshot is anywhere from the 20th
	// event's sequence to the last one's.
	if snapSeq < 20 || snapSeq > 26 {
		t.Fatalf("snapshot at sequence %d, want the safe sequence (20..26)", snapSeq)
	}
	r.publish(pub, sub.KVEventsNative, 5) // live, after the snapshot
	waitCond(t, "the first node agrees", func() bool { return r.agrees(n.Index) })
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	r.publish(pub, sub.KVEventsNative, 7) // while no node runs

	n2, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n2.Close()
	if n2.startSeq != snapSeq+1 {
		t.Errorf("second node starts at %d, want %d", n2.startSeq, snapSeq+1)
	}
	waitCond(t, "caught up", n2.CaughtUp)
	r.publish(pub, sub.KVEventsNative, 6) // live on the second node
	waitCond(t, "the second node agrees with every event applied once", func() bool { return r.agrees(n2.Index) })
	st := n2.Ingest.Stats().Sources[ingest.SourceNATSNative]
	if st.Gaps != 0 || st.FirstSightings != 0 || st.Restarts != 0 {
		t.Errorf("second node: %+v; want no gaps, first sightings or restarts", st)
	}
	// The replayed messages the snapshot already held (sequences snapSeq+1
	// to 26: the start's marker is sequence 1, the 25 events 2..26), and
	// any live message that reached both paths during the catch-up.
	if want := 26 - snapSeq; st.Duplicates < want {
		t.Errorf("second node dropped %d duplicates, want at least %d", st.Duplicates, want)
	}
	if got := n2.Recovery.Stats().Requests; got != 0 {
		t.Errorf("second node made %d recovery requests, want 0", got)
	}
	if ls := n2.Ingest.LiveStats(); ls.CatchUps != 1 || ls.CatchUpFailures != 0 {
		t.Errorf("live stats %+v: want one catch-up", ls)
	}
}

// TestLiveReconnect: the node's NATS server restarts with its store; the
// node holds its core messages from the disconnection, catches up from the
// stream after it reconnects, and its index agrees with every event
// published before, during and after the outage.
func TestLiveReconnect(t *testing.T) {
	dir := t.TempDir()
	s := natstest.ServerStore(t, -1, dir)
	port := natstest.Port(s)
	sub := subjects(t)
	cfg := Config{Index: shard.Config{Shards: 2}, BlockSize: 16, Subjects: sub, NATSURL: s.ClientURL(), JetStream: true,
		LiveEvents: true, SafeInterval: 10 * time.Millisecond, NATSReconnectWait: 50 * time.Millisecond,
		Stream: ingest.StreamConfig{MaxAge: time.Minute}, Logger: slog.New(slog.DiscardHandler)}
	r := newLiveRef(t)
	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	pub := natstest.Connect(t, s)
	r.publish(pub, sub.KVEventsNative, 10)
	waitCond(t, "the node agrees", func() bool { return r.agrees(n.Index) })
	waitCond(t, "safe sequence at 10", func() bool { return n.Ingest.SafeSeq() >= 10 })
	pub.Close()
	s.Shutdown()
	s.WaitForShutdown()
	s = natstest.ServerStore(t, port, dir)
	pub = natstest.Connect(t, s)
	r.publish(pub, sub.KVEventsNative, 10) // before or after the node is back: applied once either way
	waitCond(t, "a catch-up after the reconnection", func() bool {
		ls := n.Ingest.LiveStats()
		return ls.CatchUps == 1 && !ls.CatchingUp
	})
	r.publish(pub, sub.KVEventsNative, 10)
	waitCond(t, "the node agrees after the outage", func() bool { return r.agrees(n.Index) })
	st := n.Ingest.Stats().Sources[ingest.SourceNATSNative]
	if st.Gaps != 0 || st.Restarts != 0 || n.Ingest.LiveStats().CatchUpFailures != 0 {
		t.Errorf("%+v %+v: want no gaps, restarts or failed catch-ups", st, n.Ingest.LiveStats())
	}
}
