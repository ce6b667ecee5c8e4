package node

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvroute/kvroute/ingest"
	"github.com/kvroute/kvroute/internal/natstest"
	"github.com/kvroute/kvroute/internal/syncbuf"
	"github.com/kvroute/kvroute/wire/plane"
)

// A JetStream that never answers (one node of a 3-node cluster: no
// quorum, no JetStream leader) is waited for, with retries logged and
// reported through Config.Starting, until --jetstream-wait; the error then
// says so, and does not blame a server without JetStream.
func TestStartWaitsForJetStreamUntilDeadline(t *testing.T) {
	urls, startNode := natstest.ClusterNodes(t, 3)
	startNode(0)
	sub, err := plane.SubjectsFor("test", "backend")
	if err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	var mu sync.Mutex
	var phases []string
	const wait = 2 * time.Second
	begin := time.Now()
	n, err := Start(Config{NATSURL: urls, BlockSize: 16, Subjects: sub, JetStream: true, JetStreamWait: wait,
		Stream: ingest.StreamConfig{Replicas: 3, MaxAge: time.Minute}, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Starting: func(what string) { mu.Lock(); phases = append(phases, what); mu.Unlock() }})
	took := time.Since(begin)
	if err == nil {
		_ = n.Close()
		t.Fatal("Start succeeded without a JetStream leader")
	}
	if !strings.Contains(err.Error(), "JetStream did not answer within 2s (--jetstream-wait)") || strings.Contains(err.Error(), "needs JetStream enabled") {
		t.Errorf("error: %v; want it to name --jetstream-wait and not blame the server's JetStream setting", err)
	}
	if took < wait {
		t.Errorf("gave up after %v, before --jetstream-wait %v", took, wait)
	}
	if !strings.Contains(logs.String(), "waiting for JetStream") || !strings.Contains(logs.String(), "gives_up_in=") {
		t.Errorf("no retry logged with its deadline:\n%s", logs.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(phases) < 2 || phases[0] != "connecting to NATS" || !strings.HasPrefix(phases[1], "waiting for JetStream: the KV-event stream") {
		t.Errorf("phases reported: %q", phases)
	}
}
