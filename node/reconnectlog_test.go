package node

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/natstest"
	"github.com/kvroute/kvroute/internal/syncbuf"
	"github.com/kvroute/kvroute/shard"
)

// After a NATS reconnection, a node that ingests KV events over core NATS
// warns that the index may lack blocks; one that keeps no KV-event ingest
// (a router using remote indexers, or approximate mode) has lost nothing and
// does not say so.
func TestReconnectWarnsOnlyWhenIngesting(t *testing.T) {
	for _, noEvents := range []bool{false, true} {
		s := natstest.Server(t)
		var logs syncbuf.Buffer
		n, err := Start(Config{Index: shard.Config{Shards: 1}, BlockSize: 16, Subjects: subjects(t), NATSURL: s.ClientURL(),
			NATSReconnectWait: 20 * time.Millisecond, NoEvents: noEvents,
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
		if err != nil {
			t.Fatal(err)
		}
		port := natstest.Port(s)
		s.Shutdown()
		s.WaitForShutdown()
		natstest.Restart(t, port)
		deadline := time.Now().Add(20 * time.Second)
		for n.reconnects.Load() == 0 || !strings.Contains(logs.String(), "NATS reconnected") {
			if time.Now().After(deadline) {
				t.Fatalf("no reconnection: %s", logs.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		// The warning follows "NATS reconnected" in the same handler.
		const warning = "the index may lack or keep stale blocks"
		for until := time.Now().Add(time.Second); !noEvents && !strings.Contains(logs.String(), warning) && time.Now().Before(until); {
			time.Sleep(10 * time.Millisecond)
		}
		if noEvents {
			time.Sleep(200 * time.Millisecond)
		}
		warned := strings.Contains(logs.String(), warning)
		if warned == noEvents {
			t.Errorf("no KV events %v: warned %v that the index may lack blocks:\n%s", noEvents, warned, logs.String())
		}
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
