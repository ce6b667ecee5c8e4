package ingest

import (
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvroute/kvroute/internal/natstest"
	"github.com/kvroute/kvroute/internal/syncbuf"
	"github.com/kvroute/kvroute/radix"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/plane"
)

const testBlockSize = 4

var quiet = slog.New(slog.DiscardHandler)

// logBuf collects log lines for assertions.
type logBuf struct{ syncbuf.Buffer }

func (l *logBuf) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func newIndex(t testing.TB) *shard.Index {
	t.Helper()
	ix, err := shard.NewIndex(shard.Config{TickInterval: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ix.Close() })
	return ix
}

func subjects(t testing.TB) plane.Subjects {
	t.Helper()
	s, err := plane.SubjectsFor("test", "backend")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newIngest(t testing.TB, cfg Config, sink Sink) *Ingest {
	t.Helper()
	if cfg.BlockSize == 0 {
		cfg.BlockSize = testBlockSize
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	if cfg.ZMQRetryInterval == 0 {
		cfg.ZMQRetryInterval = 20 * time.Millisecond
	}
	in, err := New(cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	return in
}

// natsHarness is a real nats-server, an Index, an Ingest subscribed to it,
// and a publisher connection.
type natsHarness struct {
	ix  *shard.Index
	in  *Ingest
	pub *nats.Conn
	sub plane.Subjects
	log *logBuf
}

func newNATSHarness(t *testing.T, cfg Config) *natsHarness {
	t.Helper()
	s := natstest.Server(t)
	h := &natsHarness{ix: newIndex(t), pub: natstest.Connect(t, s), sub: subjects(t), log: &logBuf{}}
	cfg.Subjects = h.sub
	cfg.Logger = h.log.logger()
	h.in = newIngest(t, cfg, h.ix)
	if err := h.in.SubscribeNATS(natstest.Connect(t, s)); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *natsHarness) publish(t *testing.T, subject string, msg []byte) {
	t.Helper()
	if err := h.pub.Publish(subject, msg); err != nil {
		t.Fatal(err)
	}
}

// dynamo publishes events as Dynamo event-plane messages, one per event.
func (h *natsHarness) dynamo(t *testing.T, evs ...wire.Event) {
	t.Helper()
	for i := range evs {
		hd := wire.DynamoHeader{PublisherID: evs[i].Worker.Worker, Sequence: evs[i].ID, Topic: []byte("kv-events")}
		h.publish(t, h.sub.KVEvents, wire.AppendDynamo(nil, &hd, &evs[i]))
	}
}

// native publishes events as one native batch.
func (h *natsHarness) native(t *testing.T, evs ...wire.Event) {
	t.Helper()
	h.publish(t, h.sub.KVEventsNative, wire.AppendNative(nil, evs))
}

// waitMessages waits until src has handled n messages, then flushes the index.
func waitMessages(t testing.TB, in *Ingest, ix *shard.Index, src Source, n uint64) {
	t.Helper()
	// DispatchCount counts handler calls that have finished (Messages is
	// counted as a message arrives, before it is decoded and applied).
	waitFor(t, func() bool { return in.Stats().Sources[src].DispatchCount >= n },
		func() string { return "messages of " + src.String() })
	if ix != nil {
		if err := ix.Flush(); err != nil {
			t.Fatal(err)
		}
	}
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t testing.TB, cond func() bool, what func() string) {
	t.Helper()
	waitWithin(t, 10*time.Second, cond, what)
}

// waitWithin is waitFor with a safety limit of d.
func waitWithin(t testing.TB, d time.Duration, cond func() bool, what func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// blocks returns n blocks whose hashes derive from seed.
func blocks(seed uint64, n int) []wire.Block {
	out := make([]wire.Block, n)
	for i := range out {
		x := seed<<20 | uint64(i+1)
		out[i] = wire.Block{Engine: wire.EngineHash(x * 0x9e3779b97f4a7c15), Local: wire.BlockHash(x*0xbf58476d1ce4e5b9 | 1)}
	}
	return out
}

func stored(w uint64, dp uint32, id uint64, bl []wire.Block) wire.Event {
	return wire.Event{Worker: wire.WorkerKey{Worker: w, Dp: dp}, ID: id, Kind: wire.KindStored, Blocks: bl}
}

func cleared(w uint64, dp uint32, id uint64) wire.Event {
	return wire.Event{Worker: wire.WorkerKey{Worker: w, Dp: dp}, ID: id, Kind: wire.KindCleared}
}

// match returns the overlaps of the local hashes of bl, sorted by worker.
func match(t testing.TB, ix *shard.Index, bl []wire.Block) []radix.Overlap {
	t.Helper()
	hs := make([]wire.BlockHash, len(bl))
	for i, b := range bl {
		hs[i] = b.Local
	}
	ov, err := ix.Match(nil, hs)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(ov, func(a, b radix.Overlap) int {
		if a.Worker.Worker != b.Worker.Worker {
			return int(a.Worker.Worker) - int(b.Worker.Worker)
		}
		return int(a.Worker.Dp) - int(b.Worker.Dp)
	})
	return ov
}

// holds reports whether exactly worker k holds all of bl.
func holds(t testing.TB, ix *shard.Index, k wire.WorkerKey, bl []wire.Block) bool {
	t.Helper()
	ov := match(t, ix, bl)
	return len(ov) == 1 && ov[0].Worker == k && int(ov[0].Blocks) == len(bl)
}

// checkGoroutines fails if the goroutine count does not come back to at most
// base (other tests' leftovers settle in the meantime too).
func checkGoroutines(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= base {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%d goroutines, want at most %d:\n%s", n, base, buf)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func mustContain(t *testing.T, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("missing %q in:\n%s", sub, s)
		}
	}
}
