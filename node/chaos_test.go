//go:build chaos

package node

// Longer fault scenarios for `make chaos` (build tag chaos): each runs on a
// real in-process nats-server and the simulated fleet under traffic, prints
//
//	chaos: <scenario> agreement_after_fault=<f> time_to_agreement=<d> entries=<n>
//	       hit_ratio_lost=<f> phantom_hits=<f> engine_hit_ratio=<f>
//
// (hitProbe: the index's overlap for each request's worker against the
// engine's cached_tokens, during and after the fault) and fails if the index
// does not reach 100% agreement with the fleet's true caches within
// chaosDeadline.

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvroute/kvroute/bench/mock"
	"github.com/kvroute/kvroute/ingest"
	"github.com/kvroute/kvroute/ingest/recovery"
	"github.com/kvroute/kvroute/internal/natstest"
	"github.com/kvroute/kvroute/internal/syncbuf"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire/plane"
)

// chaosDeadline is each scenario's safety limit for 100% agreement after
// its fault traffic ended.
const chaosDeadline = 60 * time.Second

// chaosReport measures the agreement of ix with f now (agreement_after_fault),
// then polls until it is 1 and prints the scenario's line with the time
// since faultEnd; it fails the test past chaosDeadline.
func chaosReport(t *testing.T, name string, ix *shard.Index, f *mock.Fleet, faultEnd time.Time, probe *hitProbe) {
	t.Helper()
	after, _, _, _ := agreement(t, ix, f)
	deadline := time.Now().Add(chaosDeadline)
	for {
		frac, ni, nf, both := agreement(t, ix, f)
		if frac == 1 {
			lost, phantom, hit := probe.lost()
			fmt.Printf("chaos: %s agreement_after_fault=%.4f time_to_agreement=%s entries=%d hit_ratio_lost=%.4f phantom_hits=%.4f engine_hit_ratio=%.4f\n",
				name, after, time.Since(faultEnd).Round(time.Millisecond), ni, lost, phantom, hit)
			return
		}
		if time.Now().After(deadline) {
			fmt.Printf("chaos: %s agreement_after_fault=%.4f time_to_agreement=FAILED (agreement %.4f after %s)\n",
				name, after, frac, chaosDeadline)
			t.Fatalf("%s: agreement %.4f after %s (index %d, fleet %d, both %d)", name, frac, chaosDeadline, ni, nf, both)
		}
		time.Sleep(20 * time.Millisecond) // polling: convergence has no single event to await
	}
}

// replayOnly fails unless n resumed with the event-id tracking stored with
// its snapshot: no worker key was a first sighting (each would have asked
// its worker for a dump). Dumps and duplicates can still occur under load:
// a sweep of the snapshotted node, whose consumer lagged, applied ring
// answers at live ids ahead of its stream position; the replay then drops
// those events as duplicates, as it should.
func replayOnly(t *testing.T, n *Node) {
	t.Helper()
	if fs := n.Ingest.Stats().Sources[ingest.SourceNATSNative].FirstSightings; fs != 0 {
		t.Errorf("restored node saw %d worker keys as first sightings, want none: the tracking was not restored", fs)
	}
}

// chaosConn is a fleet connection to url that reconnects forever, quickly.
func chaosConn(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// chaosNodeConfig is a JetStream node on url, with index snapshots in
// bucket KVSNAP when snapshots is set.
func chaosNodeConfig(t *testing.T, url string, snapshots bool) Config {
	cfg := Config{Index: shard.Config{Shards: 2}, BlockSize: 4, Subjects: subjects(t), NATSURL: url,
		JetStream: true, Stream: ingest.StreamConfig{MaxAge: 10 * time.Minute}, NATSReconnectWait: 50 * time.Millisecond,
		Recovery: recovery.Config{Interval: 250 * time.Millisecond, Timeout: 2 * time.Second, MinBackoff: 20 * time.Millisecond, MaxBackoff: 500 * time.Millisecond},
		Logger:   slog.New(slog.DiscardHandler)}
	if snapshots {
		cfg.Snapshot = SnapshotConfig{Bucket: "KVSNAP", Interval: time.Hour}
	}
	return cfg
}

// cleanFleet is faultyFleet without dropped or duplicated messages.
func cleanFleet() mock.Config {
	fc := faultyFleet(plane.TransportNative)
	fc.DropFraction, fc.DupFraction = 0, 0
	return fc
}

// trafficAsync runs sendTraffic on its own goroutine; the channel yields
// its result.
func trafficAsync(workers []*mock.Worker, seed uint64, n int, probe *hitProbe) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- sendProbed(workers, seed, n, probe) }()
	return ch
}

// trafficProbed is traffic measured by probe.
func trafficProbed(t *testing.T, f *mock.Fleet, seed uint64, n int, probe *hitProbe) {
	t.Helper()
	awaitTraffic(t, f, trafficAsync(f.Workers(), seed, n, probe))
}

// probeOn is a hit probe on ix for the chaos fleet's block size.
func probeOn(ix *shard.Index) *hitProbe { return &hitProbe{ix: ix, blockSize: cleanFleet().BlockSize} }

func awaitTraffic(t *testing.T, f *mock.Fleet, ch <-chan error) {
	t.Helper()
	if err := <-ch; err != nil {
		t.Fatal(err)
	}
	if err := waitIdle(f.Workers(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

// No fault: the reference for the other scenarios' hit_ratio_lost and
// phantom_hits (with 8 requests in flight, a request's lookup misses the
// blocks of requests still running, whose events arrive later).
func TestChaosBaseline(t *testing.T) {
	rg := startRecoveryRig(t, cleanFleet())
	traffic(t, rg.f, 11, 300)
	probe := probeOn(rg.n.Index)
	trafficProbed(t, rg.f, 12, 900, probe)
	chaosReport(t, "baseline-no-fault", rg.n.Index, rg.f, time.Now(), probe)
}

// The router killed abruptly (its NATS connection closed without a drain,
// no snapshot at exit) after a snapshot taken mid-traffic; traffic goes on
// while no router runs and while a new one starts on the same server (a
// persistent store); the new node restores the snapshot, replays the
// stream after it and agrees with the fleet.
func TestChaosKillRestoreSnapshot(t *testing.T) { chaosKillRestore(t, "kill-restore-snapshot", false) }

// TestChaosKillRestoreSnapshotLive is TestChaosKillRestoreSnapshot with the
// live path (Config.LiveEvents): the snapshot is at the safe sequence and
// the new node catches up from the stream, then goes live on core NATS.
func TestChaosKillRestoreSnapshotLive(t *testing.T) {
	chaosKillRestore(t, "kill-restore-snapshot-live", true)
}

func chaosKillRestore(t *testing.T, name string, live bool) {
	s := natstest.ServerStore(t, -1, t.TempDir())
	cfg := chaosNodeConfig(t, s.ClientURL(), true)
	cfg.LiveEvents = live
	n1, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f, err := mock.Start(cleanFleet(), chaosConn(t, s.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	traffic(t, f, 21, 300)
	n1.TriggerSnapshot() // taken at the next message, during the next traffic
	traffic(t, f, 22, 300)
	waitCond(t, "a snapshot stored", func() bool { st, _ := n1.Snapshots(); return st >= 1 })
	_, snapSeq := n1.Snapshots()
	ch := trafficAsync(f.Workers(), 23, 300, nil)
	// kill -9: the connection goes at once; Close then only frees the
	// in-process goroutines (it takes no snapshot).
	n1.NC.Close()
	_ = n1.Close()
	awaitTraffic(t, f, ch) // while no router runs
	n2, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	probe := probeOn(n2.Index)
	ch = trafficAsync(f.Workers(), 24, 300, probe)
	t.Cleanup(func() { _ = n2.Close() })
	restart := time.Now()
	if n2.startSeq != snapSeq+1 {
		t.Fatalf("new node starts at stream sequence %d, want %d (after the snapshot)", n2.startSeq, snapSeq+1)
	}
	awaitTraffic(t, f, ch)
	waitCond(t, "caught up", n2.CaughtUp)
	chaosReport(t, name, n2.Index, f, restart, probe)
	replayOnly(t, n2)
}

// 10% of the event messages dropped and 5% duplicated over a long
// prefix-sharing workload with evictions, on both transports.
func TestChaosDropsAndDuplicates(t *testing.T) {
	for _, tr := range []string{plane.TransportNative, plane.TransportDynamo} {
		t.Run(tr, func(t *testing.T) {
			rg := startRecoveryRig(t, faultyFleet(tr))
			probe := &hitProbe{ix: rg.n.Index, blockSize: faultyFleet(tr).BlockSize}
			trafficProbed(t, rg.f, 41, 5000, probe)
			chaosReport(t, "drop10-dup5-"+tr, rg.n.Index, rg.f, time.Now(), probe)
			if st := rg.n.Recovery.Stats(); st.Events+st.DumpBlocks == 0 {
				t.Fatalf("nothing was recovered (%+v): the faults did not bite", st)
			}
		})
	}
}

// The NATS server shut down and started again on the same port and store
// while traffic runs: the fleet's and the node's connections reconnect,
// the stream kept what it stored, and the index agrees with the fleet.
func TestChaosNATSRestart(t *testing.T) {
	chaosNATSRestart(t, "nats-restart", true, false, 31, func(n *Node) bool { return n.reconnects.Load() > 0 })
}

// TestChaosNATSRestartLive is TestChaosNATSRestart with the live path: the
// node holds its core messages from the disconnection and catches up from
// the stream after the reconnection.
func TestChaosNATSRestartLive(t *testing.T) {
	chaosNATSRestart(t, "nats-restart-live", true, false, 31, func(n *Node) bool {
		ls := n.Ingest.LiveStats()
		return n.reconnects.Load() > 0 && ls.CatchUps > 0 && !ls.CatchingUp
	})
}

// The NATS server shut down and started again on the same port with an
// empty store while traffic runs: the node recreates the stream and the
// snapshot bucket, consumes the new stream and recovers from the workers
// what was published while no stream existed.
func TestChaosNATSStoreLost(t *testing.T) {
	chaosNATSRestart(t, "nats-store-lost", false, true, 34, func(n *Node) bool { return n.Ingest.Stats().StreamRestarts == 1 })
}

// chaosNATSRestart runs a JetStream node (with snapshots if asked) and the
// clean fleet on a server with a store, shuts the server down under
// traffic (seeds seed, seed+1, seed+2) and starts it again on its port with
// its store (keepStore) or an empty one, waits until dealt reports the
// node dealt with it, and reports the scenario as name.
func chaosNATSRestart(t *testing.T, name string, keepStore, snapshots bool, seed uint64, dealt func(*Node) bool) {
	dir := t.TempDir()
	s := natstest.ServerStore(t, -1, dir)
	port := natstest.Port(s)
	cfg := chaosNodeConfig(t, s.ClientURL(), snapshots)
	cfg.LiveEvents = strings.HasSuffix(name, "-live")
	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	f, err := mock.Start(cleanFleet(), chaosConn(t, s.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	traffic(t, f, seed, 300)
	waitAgreement(t, &recoveryRig{n: n, f: f}, "before "+name)
	probe := probeOn(n.Index)
	ch := trafficAsync(f.Workers(), seed+1, 600, probe)
	s.Shutdown()
	s.WaitForShutdown()
	if !keepStore {
		dir = t.TempDir()
	}
	natstest.ServerStore(t, port, dir)
	awaitTraffic(t, f, ch)
	waitCond(t, name+": the node dealt with the restart", func() bool { return dealt(n) })
	trafficProbed(t, f, seed+2, 300, probe) // after the restart: the consumer goes on
	chaosReport(t, name, n.Index, f, time.Now(), probe)
}

// A 3-node JetStream cluster with an R3 stream and snapshot bucket; the
// stream's leader is killed while traffic runs (the fleet publishes with a
// plain publish, so what was sent during the election may be lost and is
// recovered from the workers); the node, connected to all three, agrees
// with the fleet again.
func TestChaosClusterNodeKilled(t *testing.T) {
	chaosClusterNodeKilled(t, "cluster-leader-killed", false)
}

// TestChaosClusterNodeKilledLive is TestChaosClusterNodeKilled with the
// live path: a node connected to the killed server catches up from the R3
// stream after it reconnects to another; what the election lost is
// recovered from the workers, as on the consumer path.
func TestChaosClusterNodeKilledLive(t *testing.T) {
	chaosClusterNodeKilled(t, "cluster-leader-killed-live", true)
}

func chaosClusterNodeKilled(t *testing.T, name string, live bool) {
	ss := natstest.Cluster(t, 3)
	urls := natstest.ClientURLs(ss)
	cfg := chaosNodeConfig(t, urls, true)
	cfg.Stream.Replicas = 3
	cfg.LiveEvents = live
	var n *Node
	deadline := time.Now().Add(30 * time.Second)
	for { // the cluster may still be placing its first stream
		var err error
		if n, err = Start(cfg); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Cleanup(func() { _ = n.Close() })
	f, err := mock.Start(cleanFleet(), chaosConn(t, urls))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	traffic(t, f, 37, 300)
	waitAgreement(t, &recoveryRig{n: n, f: f}, "before the node is killed")
	probe := probeOn(n.Index)
	ch := trafficAsync(f.Workers(), 38, 600, probe)
	killed := ""
	for _, s := range ss {
		if s.JetStreamIsStreamLeader("$G", n.stream.CachedInfo().Config.Name) {
			killed = s.Name()
			s.Shutdown()
			break
		}
	}
	if killed == "" {
		t.Fatal("no node leads the stream")
	}
	awaitTraffic(t, f, ch)
	trafficProbed(t, f, 39, 300, probe)
	chaosReport(t, name, n.Index, f, time.Now(), probe)
}

// A worker restarted (cache emptied, ids starting over) while traffic runs
// on the others, then traffic on all, with events dropped and duplicated.
func TestChaosWorkerRestart(t *testing.T) {
	rg := startRecoveryRig(t, faultyFleet(plane.TransportNative))
	traffic(t, rg.f, 51, 300)
	waitAgreement(t, rg, "before the restart")
	ws := rg.f.Workers()
	probe := &hitProbe{ix: rg.n.Index, blockSize: faultyFleet(plane.TransportNative).BlockSize}
	ch := trafficAsync(ws[1:], 52, 300, probe)
	ws[0].Restart()
	awaitTraffic(t, rg.f, ch)
	trafficProbed(t, rg.f, 53, 300, probe)
	chaosReport(t, "worker-restart", rg.n.Index, rg.f, time.Now(), probe)
}

// A worker paused past its heartbeat expiry (the router forgets it and
// removes its blocks, as router.health does) while traffic runs on the
// others, resumed (it registers again), then traffic on all.
func TestChaosWorkerPause(t *testing.T) {
	rg := startRecoveryRig(t, faultyFleet(plane.TransportDynamo))
	traffic(t, rg.f, 61, 300)
	waitAgreement(t, rg, "before the pause")
	ws := rg.f.Workers()
	w := ws[1]
	w.Pause()
	probe := &hitProbe{ix: rg.n.Index, blockSize: faultyFleet(plane.TransportDynamo).BlockSize}
	ch := trafficAsync([]*mock.Worker{ws[0], ws[2]}, 62, 300, probe)
	rg.n.WorkerLeft(w.ID()) // what the router does when its heartbeats expire
	if _, err := rg.n.Index.RemoveWorker(w.ID()); err != nil {
		t.Fatal(err)
	}
	if err := <-ch; err != nil { // the pause lasts this traffic, far past the 100 ms heartbeat
		t.Fatal(err)
	}
	w.Resume()
	rg.n.WorkerJoined(w.Registration()) // its next heartbeat registers it again
	trafficProbed(t, rg.f, 63, 300, probe)
	chaosReport(t, "worker-pause", rg.n.Index, rg.f, time.Now(), probe)
}

// The real `kvroute serve` binary (built by the test) with JetStream and
// snapshots every 200 ms, killed with SIGKILL mid-traffic after it stored
// a snapshot; traffic goes on; a new node on the same server (a persistent
// store) restores the binary's current snapshot, replays the stream after
// it and agrees with the fleet.
func TestChaosKill9Binary(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "kvroute")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/kvroute/kvroute/cmd/kvroute").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	s := natstest.ServerStore(t, -1, filepath.Join(dir, "store"))
	nc := chaosConn(t, s.ClientURL())
	f, err := mock.Start(cleanFleet(), nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	logf, err := os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, "serve", "--nats", s.ClientURL(), "--events-jetstream", "--snapshot-bucket", "KVSNAP",
		"--snapshot-interval", "200ms", "--shards", "2", "--block-size", "4", "--http-addr", addr, "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	current := func() uint64 { // the bucket's current snapshot's sequence (0: none yet)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		obs, err := OpenSnapshotBucket(ctx, js, "KVSNAP", 1, false)
		if err != nil {
			return 0
		}
		name, err := obs.GetString(ctx, SnapshotCurrent)
		if err != nil {
			return 0
		}
		seq, _ := strconv.ParseUint(strings.TrimPrefix(name, SnapshotPrefix), 10, 64)
		return seq
	}
	ch := trafficAsync(f.Workers(), 71, 3000, nil)
	deadline := time.Now().Add(30 * time.Second)
	for current() == 0 { // the binary stored a snapshot mid-traffic
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logf.Name())
			t.Fatalf("the binary stored no snapshot within 30 s; its log:\n%s", log)
		}
		time.Sleep(20 * time.Millisecond) // polling the bucket: nothing announces the upload
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if cmd.ProcessState.ExitCode() != -1 {
		t.Fatalf("the binary exited with %v, want killed by SIGKILL", cmd.ProcessState)
	}
	awaitTraffic(t, f, ch) // partly while no router runs
	snapSeq := current()
	cfg := chaosNodeConfig(t, s.ClientURL(), true)
	cfg.Stream = ingest.StreamConfig{} // the binary's defaults
	var nodeLog syncbuf.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&nodeLog, &slog.HandlerOptions{Level: slog.LevelInfo}))
	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := os.ReadFile(logf.Name())
			t.Logf("restored node: recovery %+v, ingest %+v; its log:\n%s\nthe binary's log:\n%s", n.Recovery.Stats(), n.Ingest.Stats().Sources[ingest.SourceNATSNative], nodeLog.String(), log)
			a, b := indexEntries(t, n.Index), fleetEntries(f)
			for e := range a {
				if !b[e] {
					t.Logf("index only: %+v", e)
				}
			}
		}
	})
	restart := time.Now()
	probe := probeOn(n.Index)
	ch = trafficAsync(f.Workers(), 72, 300, probe)
	if n.startSeq != snapSeq+1 {
		t.Fatalf("new node starts at stream sequence %d, want %d (after the binary's snapshot)", n.startSeq, snapSeq+1)
	}
	awaitTraffic(t, f, ch)
	waitCond(t, "caught up", n.CaughtUp)
	chaosReport(t, "kill9-binary-restore", n.Index, f, restart, probe)
	replayOnly(t, n)
}
