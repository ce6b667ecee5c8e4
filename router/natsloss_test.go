package router

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/natstest"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/plane"
)

// NATS going away and coming back: /ready answers 503 with the reason and
// the gauges say 0 while it is down, 200 and 1 once reconnected, the
// reconnection is counted, and event ids skipped across the loss are
// counted as gaps (a worker that restarted meanwhile too, instead of having
// its events dropped as duplicates).
func TestNATSLossAndReconnect(t *testing.T) {
	e := startEnv(t, envOptions{workers: 2})
	gaps := func() float64 { return e.metric(`kvroute_ingest_gaps_total{source="nats-native"}`) }
	events := func() float64 { return e.metric(`kvroute_ingest_events_total{source="nats-native"}`) }
	publish := func(evs ...wire.Event) {
		t.Helper()
		if err := e.nc.Publish(e.subj.KVEventsNative, wire.AppendNative(nil, evs)); err != nil {
			t.Fatal(err)
		}
	}
	ev := func(worker, id uint64) wire.Event {
		return wire.Event{Worker: wire.WorkerKey{Worker: worker}, ID: id, Kind: wire.KindCleared}
	}
	// Workers 90 and 91 have events 1..3 tracked before the loss.
	publish(ev(90, 1), ev(90, 2), ev(90, 3), ev(91, 1), ev(91, 2), ev(91, 3))
	waitFor(t, "events before the loss", func() bool { return events() == 6 })
	if g := gaps(); g != 0 {
		t.Fatalf("gaps before the loss: %v", g)
	}
	if v := e.metric("kvroute_nats_connected"); v != 1 {
		t.Fatalf("kvroute_nats_connected = %v while connected", v)
	}

	port := natstest.Port(e.ns)
	e.ns.Shutdown()
	e.ns.WaitForShutdown()
	waitFor(t, "/ready 503 while NATS is down", func() bool {
		code, body, _ := e.do("GET", "/ready", "")
		return code == 503 && strings.Contains(string(body), "event plane down")
	})
	if v := e.metric("kvroute_nats_connected"); v != 0 {
		t.Errorf("kvroute_nats_connected = %v while NATS is down", v)
	}
	if v := e.metric("kvroute_ingest_running"); v != 0 {
		t.Errorf("kvroute_ingest_running = %v while nothing can arrive", v)
	}
	if v := e.metric("kvroute_nats_disconnects_total"); v != 1 {
		t.Errorf("kvroute_nats_disconnects_total = %v, want 1", v)
	}

	natstest.Restart(t, port)
	waitFor(t, "/ready 200 after the reconnect", func() bool { c, _, _ := e.do("GET", "/ready", ""); return c == 200 })
	if v := e.metric("kvroute_nats_connected"); v != 1 {
		t.Errorf("kvroute_nats_connected = %v after the reconnect", v)
	}
	if v := e.metric("kvroute_ingest_running"); v != 1 {
		t.Errorf("kvroute_ingest_running = %v after the reconnect", v)
	}
	// The counter moves once the reconnect handler has run.
	waitFor(t, "the reconnect counted", func() bool { return e.metric("kvroute_nats_reconnects_total") >= 1 })
	if v := e.metric("kvroute_nats_reconnects_total"); v != 1 {
		t.Errorf("kvroute_nats_reconnects_total = %v, want 1", v)
	}
	// Worker 90 goes on at 6 (4 and 5 were lost); worker 91 restarted
	// during the loss and is at 2 (its Cleared 1 was lost).
	waitFor(t, "the test's connection back", func() bool { return e.nc.IsConnected() })
	publish(ev(90, 6), ev(91, 2))
	waitFor(t, "events after the reconnect", func() bool { return events() == 8 })
	if g := gaps(); g != 2 {
		t.Errorf("gaps after the reconnect: %v, want 2", g)
	}
	if m := e.metric(`kvroute_ingest_missing_events_total{source="nats-native"}`); m != 3 {
		t.Errorf("missing events: %v, want 3 (90: 4-5, 91: 1)", m)
	}
	if d := e.metric(`kvroute_ingest_duplicate_events_total{source="nats-native"}`); d != 0 {
		t.Errorf("duplicates: %v, want 0", d)
	}
}

// Shutdown: while requests are in flight, /ready answers 503 first while
// requests are still served, then the listener closes.
func TestDrainReadyFirst(t *testing.T) {
	e := startEnv(t, envOptions{workers: 1, grace: 30 * time.Second, readyDelay: 10 * time.Second})
	resp, _ := openStream(t, e, 50000) // in flight: the ready delay applies
	defer resp.Body.Close()
	drained := make(chan error, 1)
	go func() { drained <- e.svc.Drain() }()
	waitFor(t, "/ready 503 while draining", func() bool {
		code, body, _ := e.do("GET", "/ready", "")
		return code == 503 && strings.Contains(string(body), "shutting down")
	})
	if w, _ := e.complete(tokens(1, 1, 32, 0), 2); w == 0 {
		t.Error("no worker served the request during the ready delay")
	}
	select {
	case err := <-drained:
		t.Fatalf("drain ended during the ready delay with a stream in flight (%v)", err)
	default:
	}
	resp.Body.Close() // the client leaves: nothing in flight
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(e.url + "/health"); err == nil {
		t.Error("still accepting connections after Drain")
	}
}

// A NATS outage longer than the heartbeat expiry is no API outage: while the
// router's own connection is down no worker expires (none of their
// heartbeats can arrive) and every request is served by the workers it
// knew; once it reconnects the workers are still there (a fresh grace, not
// their stale deadlines) and expiry works again: a worker that registers
// and then falls silent expires. The same for a router with
// --use-remote-indexer, whose lookups fail at once (routed with zero
// overlap) instead of waiting for their timeout.
func TestNATSOutageKeepsWorkers(t *testing.T) {
	const heartbeat = 200 * time.Millisecond // expiry after 600 ms
	for _, remote := range []bool{false, true} {
		name := "local index"
		if remote {
			name = "remote index"
		}
		t.Run(name, func(t *testing.T) {
			e := startEnv(t, envOptions{workers: 2, heartbeat: heartbeat, serveIndexer: remote})
			r := e
			if remote {
				r = startRemote(t, e, false, time.Second)
			}
			port := natstest.Port(e.ns)
			e.ns.Shutdown()
			e.ns.WaitForShutdown()
			waitFor(t, "/ready 503 while NATS is down", func() bool {
				code, _, _ := r.do("GET", "/ready", "")
				return code == 503
			})
			// Five expiry periods without NATS, requests all along.
			served, failed := 0, 0
			for end := time.Now().Add(5 * plane.ExpiryFactor * heartbeat); time.Now().Before(end); {
				code, body, _ := r.do("POST", "/v1/completions", fmt.Sprintf(`{"prompt":%s,"max_tokens":2}`, promptJSON(tokens(1, served+failed, 32, 4))))
				if code != 200 {
					if failed == 0 {
						t.Errorf("during the outage: %d %s", code, body)
					}
					failed++
					continue
				}
				served++
			}
			if failed > 0 || served == 0 {
				t.Errorf("during the outage: %d requests served, %d failed; want none failed", served, failed)
			}
			if v := r.metric("kvroute_workers_expired_total"); v != 0 {
				t.Errorf("kvroute_workers_expired_total = %v during the outage, want 0", v)
			}
			if n := len(r.workers().Workers); n != 2 {
				t.Errorf("%d workers known during the outage, want 2", n)
			}
			if v := r.metric(`kvroute_remote_index_failures_total{reason="disconnected"}`); remote && v <= 0 {
				t.Errorf(`kvroute_remote_index_failures_total{reason="disconnected"} = %v after %d lookups during the outage, want them all`, v, served)
			}

			natstest.Restart(t, port)
			waitFor(t, "/ready 200 after the reconnect", func() bool { c, _, _ := r.do("GET", "/ready", ""); return c == 200 })
			waitFor(t, "the test's connection back", func() bool { return e.nc.IsConnected() })
			r.complete(tokens(2, 0, 32, 4), 2)
			// Expiry is back: a worker that registers once and falls silent goes.
			silent := plane.Registration{WorkerID: 77, URL: "http://127.0.0.1:1", DpRanks: []uint32{0}, BlockSize: testBlockSize, KVBlocks: 100,
				EventTransport: plane.TransportNative, HeartbeatMillis: int(heartbeat.Milliseconds())}
			if err := e.nc.Publish(e.subj.Heartbeat, plane.Encode(silent)); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the silent worker registered", func() bool { return len(r.workers().Workers) == 3 })
			waitFor(t, "the silent worker expired", func() bool { return r.metric("kvroute_workers_expired_total") == 1 })
			if n := len(r.workers().Workers); n != 2 {
				t.Errorf("%d workers after the silent one expired, want the fleet's 2", n)
			}
		})
	}
}
