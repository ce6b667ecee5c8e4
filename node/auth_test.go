package node

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire/plane"
)

// TestNATSAuth: with --nats-auth the embedded server refuses anonymous
// clients; the worker credentials written to --nats-auth-file may publish
// registrations and KV events but not all-workers-busy.
func TestNATSAuth(t *testing.T) {
	sub := subjects(t)
	file := filepath.Join(t.TempDir(), "worker.url")
	n, err := Start(Config{Index: shard.Config{Shards: 1}, BlockSize: 16, Subjects: sub, NATSAuth: true, NATSAuthFile: file,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if strings.Contains(n.NATSURL, n.WorkerURL) || !strings.Contains(n.NATSURL, "xxxxx") {
		t.Fatalf("NATSURL %q is not redacted", n.NATSURL)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o600 {
		t.Errorf("auth file mode %v", fi.Mode().Perm())
	}
	workerURL := strings.TrimSpace(string(b))
	if workerURL != n.WorkerURL || !strings.Contains(workerURL, WorkerUser+":") {
		t.Fatalf("auth file %q", workerURL)
	}
	plain := strings.Replace(workerURL, WorkerUser+":", "x:", 1)
	if nc, err := nats.Connect(plain); err == nil {
		nc.Close()
		t.Fatal("a wrong user connected")
	}
	perm := make(chan error, 4)
	wc, err := nats.Connect(workerURL, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { perm <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()
	busy, err := n.NC.SubscribeSync(sub.AllBusy)
	if err != nil {
		t.Fatal(err)
	}
	hb, err := n.NC.SubscribeSync(sub.Heartbeat)
	if err != nil {
		t.Fatal(err)
	}
	_ = n.NC.Flush()
	if err := wc.Publish(sub.Heartbeat, plane.Encode(plane.Registration{WorkerID: 1})); err != nil {
		t.Fatal(err)
	}
	if _, err := hb.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("the worker's registration did not arrive: %v", err)
	}
	publishStored(t, wc, sub, 1, 1, testBlocks(1))
	waitFor(t, "the worker's KV event applied", func() bool { return held(t, n, testBlocks(1)) })
	if err := wc.Publish(sub.AllBusy, plane.Encode(plane.AllWorkersBusy{Router: "forged"})); err != nil {
		t.Fatal(err)
	}
	_ = wc.Flush()
	select {
	case err := <-perm:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("want a permissions violation, got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a worker published all-workers-busy without a permissions violation")
	}
	if m, err := busy.NextMsg(100 * time.Millisecond); err == nil {
		t.Fatalf("forged all-workers-busy delivered: %s", m.Data)
	}
}
