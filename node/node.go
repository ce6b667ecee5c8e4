package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvroute/kvroute/ingest"
	"github.com/kvroute/kvroute/ingest/recovery"
	"github.com/kvroute/kvroute/internal/natsembed"
	"github.com/kvroute/kvroute/internal/promtext"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire/plane"
)

// Config configures a Node. Plain data; cmd/kvroute fills it from flags.
type Config struct {
	Index shard.Config
	// BlockSize and Subjects configure ingest (--block-size, --namespace,
	// --component).
	BlockSize int
	Subjects  plane.Subjects
	// EagleWindows hashes the ZMQ events' EAGLE (bigram) pages as windows
	// of BlockSize+1 tokens (ingest.Config.EagleWindows; serve sets it from
	// router.Config.EagleWindows, --eagle-windows).
	EagleWindows bool
	// NoEvents (approximate mode, --no-kv-events) builds the ingest but
	// subscribes to nothing.
	NoEvents bool
	// JetStream (--events-jetstream, the binary's default) keeps the KV
	// events in a JetStream stream (Stream; ingest.EnsureStream creates it
	// or binds to it) and consumes them through an ordered consumer from
	// StartSeq (0: new messages only), so that nothing published while
	// the connection is down is lost. False (the zero value) subscribes
	// with core NATS.
	JetStream bool
	// LiveEvents (--events-live, kvroute serve's default with
	// --events-jetstream) takes the live KV events from core NATS
	// subscriptions while the stream keeps them, and reads the stream only
	// to catch up: at start from StartSeq (or the restored snapshot's
	// sequence + 1) and after every reconnection from the live path's safe
	// sequence (ingest.Ingest.SubscribeLive). False consumes every event
	// from the stream (ConsumeJetStream). Only with JetStream.
	LiveEvents bool
	// SafeInterval is how often the live path samples its safe sequence
	// (ingest.Config.SafeInterval); zero: ingest.DefaultSafeInterval.
	SafeInterval time.Duration
	// Stream configures the stream (--events-max-age, --events-max-bytes,
	// --events-replicas); its Subjects are taken from Subjects.
	Stream ingest.StreamConfig
	// StartSeq is the first stream sequence ingest applies (with JetStream).
	// With Snapshot.Bucket set it is ignored: ingest starts after the
	// restored snapshot's sequence, or at 1 without a usable snapshot.
	StartSeq uint64
	// Snapshot configures index snapshots in a NATS object store and the
	// restore at start (with JetStream only; snapshot.go).
	Snapshot SnapshotConfig

	// NATSURL connects to an external NATS (--nats); empty embeds a
	// nats-server with JetStream storing in DataDir (--data-dir; empty: a
	// temporary directory removed at Close) on NATSPort (--nats-port, 0:
	// random) at 127.0.0.1.
	NATSURL   string
	NATSCreds string // --nats-creds: a credentials file
	NATSCA    string // --nats-tls-ca
	NATSCert  string // --nats-tls-cert (with NATSKey)
	NATSKey   string // --nats-tls-key
	DataDir   string
	NATSPort  int
	// NATSAuth (--nats-auth) makes the embedded server require a user:
	// the node connects as RouterUser, and the URL workers connect with
	// (user WorkerUser, a random password) is written to NATSAuthFile
	// (--nats-auth-file, mode 0600) and kept in Node.WorkerURL. See
	// authUsers for the subject permissions.
	NATSAuth     bool
	NATSAuthFile string
	// NATSConnectTimeout bounds the first connection (default 5 s). Later
	// losses reconnect forever.
	NATSConnectTimeout time.Duration
	// NATSReconnectWait is the pause between reconnection attempts to the
	// same server (default nats.go's, 2 s).
	NATSReconnectWait time.Duration
	// JetStreamWait bounds how long Start waits for JetStream to answer
	// (the stream, the snapshot bucket: --jetstream-wait), retrying with
	// backoff and logging what it waits for; a cluster that has no
	// JetStream leader yet answers nothing. Default DefaultJetStreamWait.
	JetStreamWait time.Duration
	// Starting, when set, is told what Start is doing ("connecting to
	// NATS", "waiting for JetStream: ...", "restoring the index
	// snapshot"), for a service's /health and /ready while it starts. It
	// is called on Start's goroutine.
	Starting func(what string)
	// Abort, when closed, makes Start give up waiting for JetStream (a
	// signal during start-up). Nil: never.
	Abort <-chan struct{}

	// ZMQWorkers are engines whose vLLM ZMQ event streams are subscribed
	// directly (--zmq-worker).
	ZMQWorkers []ingest.ZMQWorker
	// MaxEventBytes bounds a ZMQ event frame and message
	// (--max-event-bytes); zero: zmq.DefaultMaxMessageBytes. (NATS
	// messages are bounded by the server's max_payload, 1 MiB by default.)
	MaxEventBytes int

	// Recovery configures the requester of lost KV events (Subjects are
	// Config.Subjects); Recovery.Interval < 0 turns its sweep off.
	Recovery recovery.Config
	// Fleet bounds the index entries of unregistered and registered
	// workers (fleet.go).
	Fleet FleetConfig

	Logger *slog.Logger
}

// Node is a running NATS connection, index and ingest (see Config).
//
// The NATS connection reconnects forever; its losses are logged (Warn, with
// the error), its reconnections too (Info), and counted (WriteMetrics).
// After a reconnection the ingest is told that events may have been lost
// (ingest.Ingest.MarkReconnected).
type Node struct {
	NC *nats.Conn
	// NATSURL is the URL connected to, its password redacted.
	NATSURL string
	// WorkerURL is the URL, with credentials, workers connect to the
	// embedded server with under Config.NATSAuth ("" otherwise).
	WorkerURL string
	Index     *shard.Index
	Ingest    *ingest.Ingest
	// Recovery asks workers for lost KV events (nil with NoEvents).
	Recovery *recovery.Requester

	cfg       Config
	embedded  *natsembed.Embedded
	closeOnce sync.Once
	closeErr  error

	ingest   atomic.Pointer[ingest.Ingest] // for the NATS callbacks
	recovery atomic.Pointer[recovery.Requester]
	gapStop  chan struct{} // stops watchIndexGaps
	gapDone  chan struct{}
	fleet    *fleet
	// Index gaps (dropped Stored events) by what was done: a dump asked
	// for, or nothing (the worker's tracking was forgotten, or ZMQ).
	gapsDump, gapsUntracked, gapsThrottled atomic.Uint64
	gapLog, capLog, unknownLog             logLimit
	closing                                atomic.Bool
	disconnects                            atomic.Uint64
	reconnects                             atomic.Uint64
	lastErr                                atomic.Pointer[string] // why the connection was lost

	// JetStream catch-up at start: ready once the message with sequence
	// replayTo (the stream's last KV event at start) was applied.
	stream      jetstream.Stream
	snap        *snapshotter
	startSeq    uint64
	replayTo    uint64
	caughtUp    atomic.Bool
	live        bool        // Config.JetStream && Config.LiveEvents (set before ingest starts)
	checking    atomic.Bool // checkStream running
	replayStart time.Time
	replayDur   atomic.Int64
	replayMsgs  atomic.Uint64
}

// Start starts a Node. On error everything started so far is stopped and the
// error names the flag at fault.
func Start(cfg Config) (*Node, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.NATSConnectTimeout <= 0 {
		cfg.NATSConnectTimeout = 5 * time.Second
	}
	if cfg.JetStreamWait <= 0 {
		cfg.JetStreamWait = DefaultJetStreamWait
	}
	cfg.Index.Logger = cfg.Logger
	if cfg.Index.BlockSize == 0 {
		cfg.Index.BlockSize = cfg.BlockSize // recorded in snapshots, checked at restore
	}
	n := &Node{cfg: cfg}
	if err := n.start(); err != nil {
		_ = n.Close()
		return nil, err
	}
	return n, nil
}

func (n *Node) start() error {
	n.starting("connecting to NATS")
	if err := n.connectNATS(); err != nil {
		return err
	}
	var err error
	if n.Index, err = shard.NewIndex(n.cfg.Index); err != nil {
		return fmt.Errorf("index (--shards, --cpus): %w", err)
	}
	n.startSeq = n.cfg.StartSeq
	n.caughtUp.Store(true)
	if n.cfg.JetStream && !n.cfg.NoEvents {
		if err := n.prepareJetStream(); err != nil {
			return err
		}
	}
	ic := ingest.Config{BlockSize: n.cfg.BlockSize, Subjects: n.cfg.Subjects, Logger: n.cfg.Logger, StartSeq: n.startSeq, SafeInterval: n.cfg.SafeInterval,
		ZMQMaxMessageBytes: n.cfg.MaxEventBytes, EagleWindows: n.cfg.EagleWindows}
	n.fleet = newFleet(n.cfg.Fleet, n.Index)
	if n.cfg.Fleet.Filter {
		ic.Admit = n.fleet.admit
	}
	if n.snap != nil || !n.caughtUp.Load() {
		ic.AfterApply = n.afterApply
	}
	n.live = n.cfg.JetStream && n.cfg.LiveEvents
	if n.snap != nil {
		ic.Tracked = n.snap.tracked
	}
	if n.Ingest, err = ingest.New(ic, n.Index); err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	if n.snap != nil {
		n.snap.checkpoint = n.Ingest.Checkpoint
	}
	n.ingest.Store(n.Ingest)
	if n.cfg.NoEvents {
		return nil
	}
	rc := n.cfg.Recovery
	rc.Subjects, rc.Logger = n.cfg.Subjects, n.cfg.Logger
	rc.SweepWhen = n.caughtUp.Load // the replay at start is lag, not loss
	if n.Recovery, err = recovery.Start(rc, n.NC, n.Index, n.Ingest); err != nil {
		return err
	}
	n.recovery.Store(n.Recovery)
	n.Ingest.SetLostHook(n.Recovery.Lost)
	n.gapStop, n.gapDone = make(chan struct{}), make(chan struct{})
	go n.watchIndexGaps(indexGapPoll)
	if n.live {
		if err := n.subscribeLive(); err != nil {
			return err
		}
	} else if n.cfg.JetStream {
		if err := n.consumeJetStream(); err != nil {
			return err
		}
	} else if err := n.Ingest.SubscribeNATS(n.NC); err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	for _, z := range n.cfg.ZMQWorkers {
		if err := n.Ingest.AddZMQ(z); err != nil {
			return fmt.Errorf("--zmq-worker %d: %w", z.Worker, err)
		}
	}
	return nil
}

// prepareJetStream creates or binds the KV-event stream and, with
// snapshots on, the snapshot bucket, restores the current snapshot into the
// fresh index and sets the start sequence after it. It notes the stream's
// last KV-event sequence: the node is caught up (EventPlane) once ingest
// applied it.
func (n *Node) prepareJetStream() error {
	js, err := jetstream.New(n.NC)
	if err != nil {
		return fmt.Errorf("--events-jetstream: %w", err)
	}
	sc := n.cfg.Stream
	sc.Subjects = n.cfg.Subjects
	streamName := sc.Name
	if streamName == "" {
		streamName = ingest.StreamName(sc.Subjects)
	}
	if err := n.waitJetStream("the KV-event stream "+streamName, func(ctx context.Context) error {
		n.stream, err = ingest.EnsureStream(ctx, js, sc)
		return err
	}); err != nil {
		return fmt.Errorf("--events-jetstream: %w", err)
	}
	// A restore reads the whole snapshot: bounded like the first
	// connection, plus a minute.
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.NATSConnectTimeout+time.Minute)
	defer cancel()
	if sn := n.cfg.Snapshot; sn.Bucket != "" {
		var obs jetstream.ObjectStore
		if err := n.waitJetStream("the snapshot bucket "+sn.Bucket, func(ctx context.Context) error {
			obs, err = OpenSnapshotBucket(ctx, js, sn.Bucket, n.stream.CachedInfo().Config.Replicas, true)
			return err
		}); err != nil {
			return err
		}
		n.snap = newSnapshotter(sn, n.cfg.Logger, n.Index, obs)
		n.startSeq = 1
		n.starting("restoring the index snapshot from " + sn.Bucket)
		if seq, ok := n.snap.restore(ctx); ok {
			n.startSeq = seq + 1
		}
	}
	if n.startSeq > 0 {
		var last uint64
		err := n.waitJetStream("the KV-event stream's last sequence", func(ctx context.Context) error {
			last, err = lastKVSeq(ctx, n.stream, n.cfg.Subjects)
			return err
		})
		if err != nil {
			return fmt.Errorf("--events-jetstream: stream %s: %w", n.stream.CachedInfo().Config.Name, err)
		}
		if last >= n.startSeq {
			n.replayTo = last
			n.caughtUp.Store(false)
		}
	}
	return nil
}

// consumeJetStream starts ingest's ordered consumer on the stream.
func (n *Node) consumeJetStream() error {
	st := n.stream
	n.replayStart = time.Now()
	if err := n.Ingest.ConsumeJetStream(n.NC, st); err != nil {
		return fmt.Errorf("--events-jetstream: %w", err)
	}
	n.cfg.Logger.Info("KV events on JetStream", "stream", st.CachedInfo().Config.Name,
		"max_age", st.CachedInfo().Config.MaxAge, "max_bytes", st.CachedInfo().Config.MaxBytes,
		"replicas", st.CachedInfo().Config.Replicas, "start_seq", n.startSeq, "replay_to", n.replayTo)
	if n.snap != nil {
		n.snap.start()
	}
	return nil
}

// subscribeLive starts ingest's live path: core subscriptions, the stream
// read from startSeq to catch up (none with 0).
func (n *Node) subscribeLive() error {
	st := n.stream
	n.replayStart = time.Now()
	if err := n.Ingest.SubscribeLive(n.NC, st, n.startSeq); err != nil {
		return fmt.Errorf("--events-jetstream: %w", err)
	}
	n.cfg.Logger.Info("KV events live on core NATS, kept in the JetStream stream for catch-up", "stream", st.CachedInfo().Config.Name,
		"max_age", st.CachedInfo().Config.MaxAge, "max_bytes", st.CachedInfo().Config.MaxBytes,
		"replicas", st.CachedInfo().Config.Replicas, "start_seq", n.startSeq, "replay_to", n.replayTo)
	if n.snap != nil {
		in := n.Ingest
		n.snap.startLive(in.SafeSeq, func() uint64 {
			st := in.Stats()
			return st.Sources[ingest.SourceNATSDynamo].Messages + st.Sources[ingest.SourceNATSNative].Messages
		})
	}
	return nil
}

// afterApply runs on the JetStream handler goroutine after each applied
// message (ingest.Config.AfterApply).
func (n *Node) afterApply(seq uint64) {
	if !n.caughtUp.Load() && seq >= n.replayTo {
		d := time.Since(n.replayStart)
		n.replayDur.Store(int64(d))
		n.replayMsgs.Store(seq - n.startSeq + 1)
		n.caughtUp.Store(true)
		n.cfg.Logger.Info("KV-event stream replayed up to its last sequence at start: ready", "from_seq", n.startSeq, "to_seq", seq, "duration", d)
	}
	if n.snap != nil && !n.live { // the live path snapshots from its ticker (startLive)
		n.snap.afterApply(seq)
	}
}

// TriggerSnapshot makes the next applied stream message take an index
// snapshot, as the interval does (no-op without snapshots).
func (n *Node) TriggerSnapshot() {
	if n.snap != nil {
		n.snap.due.Store(true)
		select {
		case n.snap.kick <- struct{}{}:
		default:
		}
	}
}

// Snapshots returns the number of index snapshots stored so far and the
// stream sequence of the newest stored or restored one.
func (n *Node) Snapshots() (stored, lastSeq uint64) {
	if n.snap == nil {
		return 0, 0
	}
	return n.snap.total.Load(), n.snap.lastSeq.Load()
}

// checkStream recreates the KV-event stream (and the snapshot bucket) if the
// server lost them (it came back without its store: the ordered consumer
// cannot recreate itself then) and restarts ingest's consumer on it; the
// workers' recovery then fills in what was published meanwhile.
func (n *Node) checkStream() {
	in := n.ingest.Load()
	if in == nil || n.stream == nil || n.closing.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.NATSConnectTimeout+10*time.Second)
	defer cancel()
	name := n.stream.CachedInfo().Config.Name
	_, err := n.stream.Info(ctx)
	if err == nil || !errors.Is(err, jetstream.ErrStreamNotFound) {
		return
	}
	n.cfg.Logger.Error("the KV-event stream is gone (the NATS server came back without its store): recreating it; events published meanwhile are lost, the workers are asked for them",
		"stream", name, "last_seq", in.LastSeq())
	js, err := jetstream.New(n.NC)
	if err == nil {
		sc := n.cfg.Stream
		sc.Subjects = n.cfg.Subjects
		var st jetstream.Stream
		if st, err = ingest.EnsureStream(ctx, js, sc); err == nil {
			n.stream = st
			var marked int
			if n.live {
				marked, err = in.SetLiveStream(st)
			} else {
				marked, err = in.RestartJetStream(st)
			}
			n.cfg.Logger.Info("KV-event stream recreated; consuming it from its first message", "stream", name, "tracked_worker_ranks", marked)
		}
		if err == nil && n.snap != nil {
			var obs jetstream.ObjectStore
			if obs, err = OpenSnapshotBucket(ctx, js, n.cfg.Snapshot.Bucket, st.CachedInfo().Config.Replicas, true); err == nil {
				n.snap.setStore(obs)
			}
		}
	}
	if err != nil {
		n.cfg.Logger.Error("cannot recreate the KV-event stream: ingest stays stopped until the next reconnection", "stream", name, "err", err)
		return
	}
	if rc := n.recovery.Load(); rc != nil {
		rc.Sweep()
	}
}

// CaughtUp reports whether ingest applied the stream's KV events up to the
// last one stored when the node started (always true without JetStream or
// a start sequence).
func (n *Node) CaughtUp() bool { return n.caughtUp.Load() }

func (n *Node) connectNATS() error {
	url := n.cfg.NATSURL
	if url == "" {
		ec := natsembed.Config{Host: "127.0.0.1", Port: n.cfg.NATSPort, StoreDir: n.cfg.DataDir}
		var routerPass, workerPass string
		if n.cfg.NATSAuth {
			ec.Users, routerPass, workerPass = authUsers(n.cfg.Subjects)
		}
		ns, err := natsembed.Open(ec)
		if err != nil {
			return embeddedError(n.cfg, err)
		}
		n.embedded = ns
		url = ns.ClientURL()
		if n.cfg.NATSAuth {
			n.WorkerURL = userURL(url, WorkerUser, workerPass)
			if n.cfg.NATSAuthFile != "" {
				if err := writeWorkerURL(n.cfg.NATSAuthFile, n.WorkerURL); err != nil {
					return err
				}
			}
			url = userURL(url, RouterUser, routerPass)
		}
	}
	opts := []nats.Option{nats.Name("kvroute"), nats.MaxReconnects(-1), nats.Timeout(n.cfg.NATSConnectTimeout),
		nats.DisconnectErrHandler(n.onDisconnect), nats.ReconnectHandler(n.onReconnect), nats.ClosedHandler(n.onClosed)}
	if n.cfg.NATSReconnectWait > 0 {
		opts = append(opts, nats.ReconnectWait(n.cfg.NATSReconnectWait))
	}
	if n.cfg.NATSCreds != "" {
		opts = append(opts, nats.UserCredentials(n.cfg.NATSCreds))
	}
	if n.cfg.NATSCA != "" {
		opts = append(opts, nats.RootCAs(n.cfg.NATSCA))
	}
	if n.cfg.NATSCert != "" || n.cfg.NATSKey != "" {
		opts = append(opts, nats.ClientCert(n.cfg.NATSCert, n.cfg.NATSKey))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		if n.embedded != nil {
			return fmt.Errorf("embedded NATS at %s: cannot connect: %w", url, err)
		}
		return fmt.Errorf("--nats %s: cannot connect: %w", url, err)
	}
	n.NC, n.NATSURL = nc, redactURL(url)
	return nil
}

func (n *Node) onDisconnect(nc *nats.Conn, err error) {
	if n.closing.Load() {
		return
	}
	n.disconnects.Add(1)
	if in := n.ingest.Load(); in != nil && n.live {
		in.Hold() // what arrives after the reconnection waits for the catch-up
	}
	msg := "connection lost"
	if err != nil {
		msg = err.Error()
	}
	n.lastErr.Store(&msg)
	n.cfg.Logger.Warn("NATS connection lost: no registrations, load reports or KV events arrive until it reconnects; /ready answers 503",
		"url", redactURL(n.NATSURL), "err", msg)
}

func (n *Node) onReconnect(nc *nats.Conn) {
	marked := 0
	if in := n.ingest.Load(); in != nil {
		marked = in.MarkReconnected()
	}
	if rc := n.recovery.Load(); rc != nil {
		rc.Sweep()
	}
	n.reconnects.Add(1) // after marking: a scrape that sees it sees the marks
	n.cfg.Logger.Info("NATS reconnected", "url", nc.ConnectedUrlRedacted(), "reconnects", n.reconnects.Load())
	if in := n.ingest.Load(); in != nil && n.live {
		in.CatchUp()
		n.cfg.Logger.Info("KV events published meanwhile are read from the JetStream stream, then live again", "after_seq", in.SafeSeq())
	} else if in != nil && n.cfg.JetStream {
		n.cfg.Logger.Info("KV events published meanwhile are read from the JetStream stream", "after_seq", in.LastSeq())
	}
	if in := n.ingest.Load(); n.cfg.JetStream && in != nil {
		if n.checking.CompareAndSwap(false, true) {
			go func() {
				defer n.checking.Store(false)
				n.checkStream()
			}()
		}
		return
	}
	if n.cfg.NoEvents {
		return // no KV-event ingest (remote indexers, approximate mode): nothing was lost
	}
	n.cfg.Logger.Warn("KV events published while NATS was disconnected are lost; the index may lack or keep stale blocks until the workers' next events",
		"tracked_worker_ranks", marked)
}

func (n *Node) onClosed(nc *nats.Conn) {
	if n.closing.Load() {
		return
	}
	n.cfg.Logger.Error("NATS connection closed for good: the router no longer receives registrations or KV events", "err", nc.LastError())
}

// EventPlane reports why the NATS connection is down, or nil while it is
// connected (router.Hooks.EventPlane).
func (n *Node) EventPlane() error {
	if n.NC == nil || n.NC.IsConnected() {
		if !n.caughtUp.Load() {
			return fmt.Errorf("replaying KV events from the JetStream stream (at sequence %d of %d)", n.Ingest.LastSeq(), n.replayTo)
		}
		return nil
	}
	why := "NATS " + strings.ToLower(n.NC.Status().String())
	if e := n.lastErr.Load(); e != nil {
		why += " (" + *e + ")"
	}
	return errors.New(why)
}

// ControlPlane reports whether the NATS connection is up and how many times
// it was lost so far (router.Hooks.ControlPlane): the owners of worker
// registries stop expiring workers while it is down, since no heartbeat can
// arrive, and give them a fresh grace after a loss.
func (n *Node) ControlPlane() (up bool, losses uint64) {
	return n.NC == nil || n.NC.IsConnected(), n.disconnects.Load()
}

// MetricFamilies declares the families WriteMetrics writes, for a
// promtext.Registry.
var MetricFamilies = []promtext.Family{
	{Name: "kvroute_nats_connected", Type: promtext.Gauge, Help: "1 while the NATS connection (registrations, load, KV events) is up"},
	{Name: "kvroute_nats_disconnects_total", Type: promtext.Counter, Help: "Times the NATS connection was lost"},
	{Name: "kvroute_nats_reconnects_total", Type: promtext.Counter, Help: "Times the NATS connection was re-established"},
	{Name: "kvroute_unknown_workers_pending", Type: promtext.Gauge, Help: "Unregistered workers whose KV events are applied for --unknown-worker-grace, waiting for their registration"},
	{Name: "kvroute_unknown_workers_evicted_total", Type: promtext.Counter, Help: "Unregistered workers whose grace ended: their blocks were removed from the index"},
	{Name: "kvroute_index_gaps_total", Type: promtext.Counter, Help: "Stored events the index dropped (parent missing, or over the worker's cap), by action: dump (asked for), throttled (over cap, a dump asked for less than a minute ago), none (the worker is not tracked: forgotten, or ZMQ)"},
	{Name: "kvroute_refused_total", Type: promtext.Counter, Help: "Input refused by a bound or a trust check, by reason (docs/operations.md: Limits and trust)"},
}

// WriteMetrics writes the NATS connection's metrics (MetricFamilies) in
// Prometheus text format.
func (n *Node) WriteMetrics(w io.Writer) {
	up := uint64(0)
	if n.NC != nil && n.NC.IsConnected() {
		up = 1
	}
	metrics.WriteGaugeUint64(w, "kvroute_nats_connected", up)
	metrics.WriteCounterUint64(w, "kvroute_nats_disconnects_total", n.disconnects.Load())
	metrics.WriteCounterUint64(w, "kvroute_nats_reconnects_total", n.reconnects.Load())
	if n.Ingest != nil {
		var unknown uint64
		st := n.Ingest.Stats()
		for i := range st.Sources {
			unknown += st.Sources[i].Unknown
		}
		metrics.WriteCounterUint64(w, `kvroute_refused_total{reason="unknown_worker_events"}`, unknown)
		var oversized uint64
		for _, z := range st.ZMQ {
			oversized += z.Oversized
		}
		metrics.WriteCounterUint64(w, `kvroute_refused_total{reason="event_too_large"}`, oversized)
	}
	if n.Index != nil {
		if ss, err := n.Index.Stats(nil); err == nil {
			metrics.WriteCounterUint64(w, `kvroute_refused_total{reason="worker_over_capacity"}`, shard.Sum(ss).OverCapEvents)
		}
	}
	if n.fleet != nil {
		metrics.WriteGaugeUint64(w, "kvroute_unknown_workers_pending", uint64(n.fleet.pending()))
		metrics.WriteCounterUint64(w, "kvroute_unknown_workers_evicted_total", n.fleet.evicted.Load())
	}
	metrics.WriteCounterUint64(w, `kvroute_index_gaps_total{action="dump"}`, n.gapsDump.Load())
	metrics.WriteCounterUint64(w, `kvroute_index_gaps_total{action="none"}`, n.gapsUntracked.Load())
	metrics.WriteCounterUint64(w, `kvroute_index_gaps_total{action="throttled"}`, n.gapsThrottled.Load())
	if n.snap != nil {
		n.snap.writeMetrics(w, n.replayMsgs.Load(), time.Duration(n.replayDur.Load()))
	}
}

// embeddedError names the flag behind an embedded server that would not
// start: a busy or forbidden --nats-port, or an unusable --data-dir.
func embeddedError(cfg Config, err error) error {
	var op *net.OpError
	if errors.As(err, &op) || strings.Contains(err.Error(), "listen") || strings.Contains(err.Error(), "address already in use") {
		return fmt.Errorf("--nats-port %d: embedded NATS cannot listen: %w", cfg.NATSPort, err)
	}
	if cfg.DataDir != "" {
		return fmt.Errorf("--data-dir %q: embedded NATS cannot start: %w", cfg.DataDir, err)
	}
	return fmt.Errorf("embedded NATS cannot start: %w", err)
}

// WorkerJoined subscribes to a registered worker's ZMQ events, if it
// publishes them there (rank r on the endpoint's port + r).
//
// It also admits the worker's KV events (FleetConfig.Filter) and caps its
// index entries at FleetConfig.CapFactor × its kv_blocks per dp rank.
func (n *Node) WorkerJoined(reg plane.Registration) {
	if n.fleet != nil {
		n.fleet.join(reg)
	}
	if n.Recovery != nil && (reg.EventTransport == plane.TransportDynamo || reg.EventTransport == plane.TransportNative) {
		n.Recovery.Joined(reg.WorkerID, reg.DpRanks)
	}
	if reg.EventTransport != plane.TransportZMQ || reg.ZMQEndpoint == "" {
		return
	}
	ranks := reg.DpRanks
	if len(ranks) == 0 {
		ranks = []uint32{0}
	}
	for _, rank := range ranks {
		z := ingest.ZMQWorker{Worker: reg.WorkerID, DpRank: rank, Model: reg.Model,
			Endpoint: OffsetPort(reg.ZMQEndpoint, int(rank)), Replay: OffsetPort(reg.ZMQReplay, int(rank))}
		if err := n.Ingest.AddZMQ(z); err != nil {
			n.cfg.Logger.Error("cannot subscribe to worker's ZMQ events", "worker", reg.WorkerID, "rank", rank, "err", err)
		}
	}
}

// WorkerLeft stops a worker's ZMQ subscriptions and forgets its event-id
// tracking.
func (n *Node) WorkerLeft(id uint64) {
	if n.fleet != nil {
		n.fleet.leave(id)
	}
	n.Ingest.RemoveZMQ(id)
	n.Ingest.Forget(id)
	if n.Recovery != nil {
		n.Recovery.Forget(id)
	}
}

// OffsetPort adds off to the port of a tcp://host:port endpoint.
func OffsetPort(ep string, off int) string {
	if ep == "" || off == 0 {
		return ep
	}
	const scheme = "tcp://"
	if !strings.HasPrefix(ep, scheme) {
		return ep
	}
	host, port, err := net.SplitHostPort(ep[len(scheme):])
	if err != nil {
		return ep
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return ep
	}
	return scheme + net.JoinHostPort(host, strconv.Itoa(p+off))
}

// Close stops ingest, drains and closes the NATS connection, shuts the
// embedded server down (removing its temporary store), then closes the
// index. It is safe on a partly started Node and idempotent.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		n.closing.Store(true)
		var errs []error
		if n.gapStop != nil {
			close(n.gapStop)
			<-n.gapDone
		}
		if n.Recovery != nil {
			n.Recovery.Close()
		}
		if n.Ingest != nil {
			errs = append(errs, n.Ingest.Close())
		}
		if n.snap != nil {
			n.snap.close()
		}
		if n.NC != nil {
			_ = n.NC.Drain()
			n.NC.Close()
		}
		if n.embedded != nil {
			n.embedded.Close()
		}
		if n.Index != nil {
			errs = append(errs, n.Index.Close())
		}
		n.closeErr = errors.Join(errs...)
	})
	return n.closeErr
}

// redactURL hides passwords in a NATS URL list (url.URL.Redacted).
func redactURL(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		if u, err := url.Parse(strings.TrimSpace(p)); err == nil {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}

// indexGapPoll is how often watchIndexGaps drains the index's gap outbox.
const indexGapPoll = 100 * time.Millisecond

// capDumpEvery is how often a worker over its index cap is asked for a dump.
const capDumpEvery = time.Minute

// watchIndexGaps asks for a dump of every NATS-tracked worker key whose
// Stored event the index dropped because its parent was missing: the event
// ids can be in order while a block the event builds on is gone (a dump
// overtaken by live events, a removal applied out of order), and then no id
// gap tells recovery that the index lacks blocks. A dump repairs it; ZMQ
// workers, which do not speak the recovery protocol, are left out.
func (n *Node) watchIndexGaps(every time.Duration) {
	defer close(n.gapDone)
	t := time.NewTicker(every)
	defer t.Stop()
	var (
		gaps    []shard.Gap
		tracked []ingest.TrackedKey
		err     error
		// Over-cap gaps ask for a dump at most every capDumpEvery per
		// worker: a worker lying about its capacity refuses its own dump
		// again, and would otherwise be asked for one after another.
		capDumped = map[uint64]time.Time{}
	)
	for {
		select {
		case <-n.gapStop:
			return
		case <-t.C:
		}
		if n.fleet != nil {
			n.evictUnknown()
		}
		if gaps, err = n.Index.Gaps(gaps[:0]); err != nil || len(gaps) == 0 {
			continue
		}
		tracked = n.Ingest.Tracked(tracked[:0])
		var overCap, parent int
		for _, g := range gaps {
			if g.OverCap {
				overCap++
			} else {
				parent++
			}
			asked, throttled := false, false
			for _, k := range tracked {
				if k.Worker != g.Worker {
					continue
				}
				if g.OverCap {
					if last, ok := capDumped[g.Worker.Worker]; ok && time.Since(last) < capDumpEvery {
						throttled = true
						break
					}
					if len(capDumped) >= maxExpired {
						clear(capDumped)
					}
					capDumped[g.Worker.Worker] = time.Now()
				}
				n.Recovery.Lost(g.Worker, recovery.DumpAll)
				asked = true
				break
			}
			switch {
			case asked:
				n.gapsDump.Add(1)
			case throttled:
				n.gapsThrottled.Add(1)
			default:
				n.gapsUntracked.Add(1)
			}
		}
		if parent > 0 {
			n.gapLog.log(n.cfg.Logger, slog.LevelWarn, "index dropped Stored events whose parent block is unknown; asking their workers for a dump",
				"events", parent, "first_worker", gaps[0].Worker.Worker)
		}
		if overCap > 0 {
			n.capLog.log(n.cfg.Logger, slog.LevelWarn, "index refused Stored events over a worker's cap (--index-cap-factor × its kv_blocks): the worker lies about its capacity or removals were missed; asking for a dump",
				"events", overCap)
		}
	}
}

// evictUnknown removes the blocks of unknown workers whose grace ended.
func (n *Node) evictUnknown() {
	for _, id := range n.fleet.sweep(time.Now(), nil) {
		_, _ = n.Index.RemoveWorker(id)
		_ = n.Index.SetCap(id, 0)
		n.Ingest.Forget(id)
		if n.Recovery != nil {
			n.Recovery.Forget(id)
		}
		n.fleet.evicted.Add(1)
		n.unknownLog.log(n.cfg.Logger, slog.LevelWarn, "KV events from a worker that never registered: its blocks were removed and its events are dropped until it registers (--unknown-worker-grace)",
			"worker", id, "grace", n.fleet.cfg.Grace)
	}
}
