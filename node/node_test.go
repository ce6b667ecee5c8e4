package node

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvroute/kvroute/ingest"
	"github.com/kvroute/kvroute/internal/natstest"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/plane"
)

func subjects(t *testing.T) plane.Subjects {
	s, err := plane.SubjectsFor("kvroute", "backend")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A Node with an embedded server stores JetStream in a temporary directory
// and removes it at Close.
func TestStartCloseEmbedded(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	n, err := Start(Config{Index: shard.Config{Shards: 2}, BlockSize: 16, Subjects: subjects(t)})
	if err != nil {
		t.Fatal(err)
	}
	if !n.NC.IsConnected() || n.Index == nil || n.Ingest == nil || !n.Ingest.Running() {
		t.Fatalf("node not up: connected %v", n.NC.IsConnected())
	}
	if dirs, _ := filepath.Glob(filepath.Join(tmp, "kvroute-nats-*")); len(dirs) != 1 {
		t.Fatalf("want one temporary store, got %v", dirs)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
	if dirs, _ := filepath.Glob(filepath.Join(tmp, "kvroute-nats-*")); len(dirs) != 0 {
		t.Fatalf("temporary store left behind: %v", dirs)
	}
}

// A failure after the embedded server started stops it and removes its
// store; the error names the flag.
func TestStartFailureCleansUp(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	_, err := Start(Config{Index: shard.Config{Shards: 1 << 20}, BlockSize: 16, Subjects: subjects(t)})
	if err == nil || !strings.Contains(err.Error(), "--shards") {
		t.Fatalf("err %v, want one naming --shards", err)
	}
	if dirs, _ := filepath.Glob(filepath.Join(tmp, "kvroute-nats-*")); len(dirs) != 0 {
		t.Fatalf("temporary store left behind: %v", dirs)
	}
	entries, _ := os.ReadDir(tmp)
	if len(entries) != 0 {
		t.Fatalf("left in TMPDIR: %v", entries)
	}
}

func TestOffsetPort(t *testing.T) {
	for _, c := range []struct {
		in   string
		off  int
		want string
	}{
		{"tcp://127.0.0.1:5557", 2, "tcp://127.0.0.1:5559"},
		{"tcp://[::1]:5557", 1, "tcp://[::1]:5558"},
		{"tcp://h:5557", 0, "tcp://h:5557"},
		{"ipc:///tmp/x", 1, "ipc:///tmp/x"},
		{"", 3, ""},
	} {
		if got := OffsetPort(c.in, c.off); got != c.want {
			t.Errorf("OffsetPort(%q, %d) = %q, want %q", c.in, c.off, got, c.want)
		}
	}
}

func TestRedactURL(t *testing.T) {
	got := redactURL("nats://u:secret@a:4222,nats://b:4222")
	if strings.Contains(got, "secret") || !strings.Contains(got, "nats://u:xxxxx@a:4222") || !strings.Contains(got, "nats://b:4222") {
		t.Errorf("redactURL: %q", got)
	}
}

// publishStored publishes one Stored event of worker w with id and blocks on
// the native subject.
func publishStored(t *testing.T, nc *nats.Conn, sub plane.Subjects, w, id uint64, bl []wire.Block) {
	t.Helper()
	ev := wire.Event{Worker: wire.WorkerKey{Worker: w}, ID: id, Kind: wire.KindStored, Blocks: bl}
	if err := nc.Publish(sub.KVEventsNative, wire.AppendNative(nil, []wire.Event{ev})); err != nil {
		t.Fatal(err)
	}
}

func testBlocks(seed uint64) []wire.Block {
	return []wire.Block{{Engine: wire.EngineHash(seed), Local: wire.BlockHash(seed*0x9e3779b97f4a7c15 | 1)}}
}

// held reports whether the index holds worker w's block bl.
func held(t *testing.T, n *Node, bl []wire.Block) bool {
	t.Helper()
	if err := n.Index.Flush(); err != nil {
		t.Fatal(err)
	}
	ov, err := n.Index.Match(nil, []wire.BlockHash{bl[0].Local})
	if err != nil {
		t.Fatal(err)
	}
	return len(ov) == 1
}

func waitSeq(t *testing.T, n *Node, seq uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for n.Ingest.LastSeq() < seq {
		if time.Now().After(deadline) {
			t.Fatalf("LastSeq %d, want %d", n.Ingest.LastSeq(), seq)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// With JetStream on the embedded server and a --data-dir, the stream
// survives a restart of the node: a new node started at sequence 1 replays
// the events into its empty index; the stream is bound, not recreated.
func TestJetStreamEmbeddedDataDir(t *testing.T) {
	dir := t.TempDir()
	sub := subjects(t)
	cfg := Config{BlockSize: 16, Subjects: sub, DataDir: dir, JetStream: true, Logger: slog.New(slog.DiscardHandler)}
	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range uint64(3) {
		publishStored(t, n.NC, sub, 1, i+1, testBlocks(i+1))
	}
	waitSeq(t, n, 3)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	cfg.StartSeq = 1
	n, err = Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	waitSeq(t, n, 3)
	for i := range uint64(3) {
		if !held(t, n, testBlocks(i+1)) {
			t.Errorf("event %d not replayed after the restart", i+1)
		}
	}
	var b strings.Builder
	n.Ingest.WriteMetrics(&b)
	if !strings.Contains(b.String(), "kvroute_ingest_stream_seq 3\n") {
		t.Errorf("metrics lack kvroute_ingest_stream_seq 3:\n%s", b.String())
	}
}

// With an external server (--nats), events published while the router's
// node is down are applied by a new node started at the saved LastSeq()+1.
func TestJetStreamExternalResume(t *testing.T) {
	s := natstest.Server(t)
	pub := natstest.Connect(t, s)
	sub := subjects(t)
	cfg := Config{BlockSize: 16, Subjects: sub, NATSURL: s.ClientURL(), JetStream: true,
		Stream: ingest.StreamConfig{MaxAge: time.Minute}, Logger: slog.New(slog.DiscardHandler)}
	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	publishStored(t, pub, sub, 1, 1, testBlocks(1))
	waitSeq(t, n, 1)
	saved := n.Ingest.LastSeq()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	publishStored(t, pub, sub, 1, 2, testBlocks(2)) // while down
	cfg.StartSeq = saved + 1
	n, err = Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	waitSeq(t, n, 2)
	if !held(t, n, testBlocks(2)) || held(t, n, testBlocks(1)) {
		t.Errorf("want only event 2 applied by the new node")
	}
	if st := n.Ingest.Stats(); st.Sources[ingest.SourceNATSNative].Events != 1 {
		t.Errorf("new node applied %d events, want 1", st.Sources[ingest.SourceNATSNative].Events)
	}
}
