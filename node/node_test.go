package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/shard"
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
