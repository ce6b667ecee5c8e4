package ingest

import (
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/plane"
	"github.com/kvroute/kvroute/wire/zmq"
)

// Sink receives decoded events; *shard.Index satisfies it. Apply must not
// retain events or the slices they point to (shard.Index.Apply copies the
// blocks), so the batch is reused as soon as Apply returns. It is called from
// several goroutines (one per NATS subscription and ZMQ subscriber) and must
// be goroutine-safe.
type Sink interface {
	Apply(events []wire.Event) error
}

// Defaults of Config's zero fields.
const (
	// DefaultPendingMsgs and DefaultPendingBytes are the NATS pending limits
	// per subscription (the client-side queue between the connection's
	// reader and the subscription's callback). At the 250k-400k events/s
	// ingest sustains into a one-shard index on a 2-vCPU VM
	// (BenchmarkNATSIngest), 64Ki messages are 0.15-0.25 s of backlog: enough to
	// ride out a burst or a slow shard, small enough that a router that
	// cannot keep up learns it (dropped messages are counted) instead of
	// buffering without bound. nats.go's defaults are 500k messages / 64 MiB.
	DefaultPendingMsgs  = 1 << 16
	DefaultPendingBytes = 64 << 20
	// DefaultLogInterval is how often one kind of problem (a gap, a block
	// size mismatch, malformed messages, ...) is logged per worker and
	// source; the occurrences in between are counted and reported with the
	// next log line.
	DefaultLogInterval = time.Minute
	// GapRing is the number of recent gaps Gaps returns.
	GapRing = 256
)

// ErrClosed is returned by calls made after Close.
var ErrClosed = errors.New("ingest: closed")

// Config configures an Ingest. It is a plain value that New copies.
type Config struct {
	// BlockSize is the engines' KV block size in tokens (> 0). vLLM/SGLang
	// events (ZMQ) whose block size differs are rejected, counted and logged
	// with both sizes. (Dynamo and native events carry precomputed local
	// hashes and no block size: their publishers must use the same size.)
	BlockSize int
	// Subjects are the NATS subjects (plane.SubjectsFor); needed only by
	// SubscribeNATS.
	Subjects plane.Subjects
	// Logger receives the rate-limited problem reports; nil: slog.Default().
	Logger *slog.Logger
	// PendingMsgs and PendingBytes are the NATS pending limits set on each
	// subscription (SetPendingLimits); zero: DefaultPendingMsgs,
	// DefaultPendingBytes; negative: unlimited (not recommended).
	PendingMsgs, PendingBytes int
	// LogInterval rate-limits problem logs per kind, worker and source;
	// zero: DefaultLogInterval.
	LogInterval time.Duration
	// StartSeq is the first stream sequence ConsumeJetStream applies; 0:
	// only messages stored after it starts (what SubscribeNATS gets). To
	// resume where an Ingest (or a snapshot of the index it fed) left off,
	// pass its LastSeq()+1.
	StartSeq uint64
	// FetchBatch is how many messages the JetStream consumer keeps requested
	// ahead (jetstream.PullMaxMessages); zero: DefaultFetchBatch.
	FetchBatch int
	// Heartbeat is the JetStream consumer's idle heartbeat (500 ms to 30 s;
	// two missed ones make the ordered consumer recreate itself); zero:
	// DefaultHeartbeat.
	Heartbeat time.Duration
	// SafeInterval is how often SubscribeLive samples its safe sequence;
	// zero: DefaultSafeInterval.
	SafeInterval time.Duration
	// ZMQRetryInterval is how often a ZMQ subscriber re-dials an engine that
	// is not up; zero: wire/zmq's default (500 ms).
	ZMQRetryInterval time.Duration
	// ZMQMaxMessageBytes bounds a ZMQ frame and message (--max-event-bytes;
	// zmq.SubscriberConfig.MaxMessageBytes); zero: wire/zmq's default.
	ZMQMaxMessageBytes int
	// EagleWindows hashes the EAGLE pages (bigram token_ids) of ZMQ events
	// as Dynamo does, windows of BlockSize+1 tokens
	// (wire.VLLMConfig.EagleWindows, --eagle-windows); requests must then be
	// hashed with wire.LocalHashesEagle.
	EagleWindows bool
	// AfterApply, if set, is called by ConsumeJetStream's handler goroutine
	// right after the events of the message with stream sequence seq were
	// handed to the sink (and LastSeq is seq), before the next message: the
	// point where shard.Index.Capture(seq) is exact (node's snapshots). It
	// must not block for long: ingest waits for it.
	AfterApply func(seq uint64)
	// Tracked seeds the NATS sources' event-id tracking (Checkpoint's ids,
	// stored with the index snapshot the node restored), so that the
	// stream replayed after the snapshot is checked in order: ids below a
	// key's Last are duplicates, and a key is not a first sighting.
	Tracked []SourceKey
	// Admit, if set, is asked about the worker of each NATS event (once per
	// run of events of one worker in a message): false drops the event,
	// counted in SourceStats.Unknown (node admits registered workers and,
	// for a short grace, workers about to register). ZMQ events are not
	// asked: their subscriptions exist only for known workers. It must be
	// goroutine-safe and fast.
	Admit func(worker uint64) bool
}

// Source is where events came from: a NATS subject's format or ZMQ.
type Source uint8

// Sources.
const (
	SourceNATSDynamo Source = iota // Dynamo msgpack on Subjects.KVEvents
	SourceNATSNative               // kvroute native on Subjects.KVEventsNative
	SourceZMQ                      // vLLM/SGLang ZMQ PUB sockets
	NumSources
)

var sourceNames = [NumSources]string{"nats-dynamo", "nats-native", "zmq"}

// String returns the source's metric label: nats-dynamo, nats-native or zmq.
func (s Source) String() string {
	if s < NumSources {
		return sourceNames[s]
	}
	return fmt.Sprintf("source(%d)", uint8(s))
}

// Gap is one detected hole in a worker's event stream (a plain value): the
// events with ids Expected..Got-1 of Worker, from Source, never arrived or,
// with Batches (ZMQ), the batches with those sequence numbers were lost
// (not recovered from the replay socket, or malformed).
type Gap struct {
	Worker   wire.WorkerKey
	Source   Source
	Expected uint64 // the id (sequence number) that should have come next
	Got      uint64 // the one that came; Got-Expected are missing
	Batches  bool   // Expected and Got are ZMQ sequence numbers
	At       time.Time
}

// Ingest consumes KV events from NATS subjects and ZMQ engines, decodes them
// on the receiving goroutine, tracks event ids per (worker, dp rank) and
// source, and hands the events to a Sink. Its methods are goroutine-safe. The
// zero value is not usable; create one with New and Close it when done.
type Ingest struct {
	cfg  Config
	sink Sink
	log  *slog.Logger
	lim  limiter
	src  [NumSources]counters

	running atomic.Bool
	lost    atomic.Pointer[func(wire.WorkerKey, uint64)] // SetLostHook

	// JetStream: the stream sequence of the last message handed to the
	// sink, and the redelivered messages dropped.
	seq, streamDups, streamRestarts atomic.Uint64
	// SubscribeLive: the safe sequence (SafeSeq), the core messages held
	// during catch-ups and those dropped because the hold was full.
	safe, liveBuffered, liveBufDropped atomic.Uint64

	// zmqOps serializes AddZMQ, RemoveZMQ and Close's ZMQ part, which stop
	// subscribers (and wait for them) outside mu.
	zmqOps sync.Mutex

	gaps struct {
		sync.Mutex
		ring [GapRing]Gap
		n    uint64 // gaps recorded ever; ring[(n-1)%GapRing] is the newest
	}

	mu struct {
		sync.Mutex
		closed           bool
		nc               *nats.Conn
		dynSub, natSub   *nats.Subscription
		legacySub        *nats.Subscription       // Subjects.KVEventsLegacy, into dynPipe
		cc               jetstream.ConsumeContext // ConsumeJetStream's
		dynPipe, natPipe *pipe
		zmq              map[wire.WorkerKey]*zmqSub
		live             *liveState // SubscribeLive's
	}
}

// New returns an Ingest that hands events to sink. It starts nothing:
// call SubscribeNATS and AddZMQ.
func New(cfg Config, sink Sink) (*Ingest, error) {
	if cfg.BlockSize <= 0 {
		return nil, fmt.Errorf("ingest: block size must be > 0 (--block-size), got %d", cfg.BlockSize)
	}
	if sink == nil {
		return nil, errors.New("ingest: nil sink")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.PendingMsgs == 0 {
		cfg.PendingMsgs = DefaultPendingMsgs
	}
	if cfg.PendingBytes == 0 {
		cfg.PendingBytes = DefaultPendingBytes
	}
	if cfg.LogInterval <= 0 {
		cfg.LogInterval = DefaultLogInterval
	}
	if cfg.FetchBatch <= 0 {
		cfg.FetchBatch = DefaultFetchBatch
	}
	if cfg.SafeInterval <= 0 {
		cfg.SafeInterval = DefaultSafeInterval
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.Heartbeat < 500*time.Millisecond || cfg.Heartbeat > 30*time.Second {
		return nil, fmt.Errorf("ingest: JetStream heartbeat must be within 500ms-30s, got %v", cfg.Heartbeat)
	}
	in := &Ingest{cfg: cfg, sink: sink, log: cfg.Logger}
	in.lim.init(cfg.LogInterval)
	in.mu.zmq = make(map[wire.WorkerKey]*zmqSub)
	return in, nil
}

// lockForNATS checks what both NATS paths (SubscribeNATS, ConsumeJetStream)
// need and, on success, returns with in.mu locked for the caller to unlock.
func (in *Ingest) lockForNATS(nc *nats.Conn) error {
	if nc == nil {
		return errors.New("ingest: nil NATS connection")
	}
	if in.cfg.Subjects.KVEvents == "" || in.cfg.Subjects.KVEventsNative == "" {
		return errors.New("ingest: no KV event subjects configured (plane.SubjectsFor)")
	}
	in.mu.Lock()
	switch {
	case in.mu.closed:
		in.mu.Unlock()
		return ErrClosed
	case in.mu.nc != nil:
		in.mu.Unlock()
		return errors.New("ingest: NATS already subscribed (SubscribeNATS or ConsumeJetStream called twice)")
	}
	return nil
}

// SubscribeNATS subscribes to Subjects.KVEvents (Dynamo's event plane:
// msgpack, or a JSON RouterEvent from older Dynamo, wire.DecodeDynamoAny),
// Subjects.KVEventsLegacy (older Dynamo's JSON RouterEvents, when set; its
// events share the Dynamo source's pipe, id tracking and counters) and
// Subjects.KVEventsNative (wire.DecodeNative). Each
// subscription's callback runs on its own goroutine (nats.go's async
// subscriptions) and decodes into its own reused wire.Batch before calling
// sink.Apply. The pending limits of Config are set on both subscriptions, and
// the connection is flushed so that, when connected, the subscriptions are
// live at the server when SubscribeNATS returns. Call it once, and not with
// ConsumeJetStream (the JetStream path, see the package doc); Close
// unsubscribes.
func (in *Ingest) SubscribeNATS(nc *nats.Conn) error {
	if err := in.lockForNATS(nc); err != nil {
		return err
	}
	defer in.mu.Unlock()
	return in.subscribeLocked(nc, newPipe(in, SourceNATSDynamo), newPipe(in, SourceNATSNative))
}

// subscribeLocked is SubscribeNATS with in.mu held, into the pipes dp and np.
func (in *Ingest) subscribeLocked(nc *nats.Conn, dp, np *pipe) error {
	ds, err := in.subscribe(nc, in.cfg.Subjects.KVEvents, dp.onDynamo)
	if err != nil {
		return err
	}
	ns, err := in.subscribe(nc, in.cfg.Subjects.KVEventsNative, np.onNative)
	if err != nil {
		ds.Unsubscribe()
		return err
	}
	var ls *nats.Subscription
	if subj := in.cfg.Subjects.KVEventsLegacy; subj != "" {
		if ls, err = in.subscribe(nc, subj, dp.onDynamo); err != nil {
			ds.Unsubscribe()
			ns.Unsubscribe()
			return err
		}
	}
	_ = nc.Flush() // best effort: a disconnected client subscribes on reconnect
	in.mu.nc, in.mu.dynSub, in.mu.natSub, in.mu.dynPipe, in.mu.natPipe = nc, ds, ns, dp, np
	in.mu.legacySub = ls
	in.running.Store(true)
	return nil
}

// subSources are the sources of the subscriptions dynSub, natSub and
// legacySub: the legacy subject counts as Dynamo.
var subSources = [...]Source{SourceNATSDynamo, SourceNATSNative, SourceNATSDynamo}

func (in *Ingest) subscribe(nc *nats.Conn, subject string, cb nats.MsgHandler) (*nats.Subscription, error) {
	s, err := nc.Subscribe(subject, cb)
	if err != nil {
		return nil, fmt.Errorf("ingest: subscribe %s: %w", subject, err)
	}
	if err := s.SetPendingLimits(in.cfg.PendingMsgs, in.cfg.PendingBytes); err != nil {
		s.Unsubscribe()
		return nil, fmt.Errorf("ingest: pending limits on %s: %w", subject, err)
	}
	return s, nil
}

// Running reports whether events can arrive: SubscribeNATS succeeded and
// its connection is connected now, or a ZMQ worker is subscribed; false
// after Close. While the NATS connection is down (reconnecting) and no ZMQ
// subscription exists, nothing can arrive and Running is false.
func (in *Ingest) Running() bool {
	if !in.running.Load() {
		return false
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return (in.mu.nc != nil && in.mu.nc.IsConnected()) || len(in.mu.zmq) > 0
}

// MarkReconnected tells ingest that its NATS connection was lost and came
// back: the events published meanwhile are lost (core NATS does not
// redeliver). Every tracked (worker, dp rank) of the NATS sources is marked
// so that its next event is checked against the last id seen before the
// loss: a skip is counted as a gap; an id at or below the last, which would
// otherwise be dropped as a duplicate, means the worker restarted during the
// loss, and is counted as a restart and, above 1, a gap from id 1. It
// returns the number of keys marked. Recovering the lost events is left to
// a later layer.
//
// With ConsumeJetStream nothing is lost (the ordered consumer resumes after
// the last delivered stream sequence), and MarkReconnected marks nothing.
func (in *Ingest) MarkReconnected() int {
	in.mu.Lock()
	if in.mu.cc != nil || in.mu.live != nil {
		in.mu.Unlock()
		return 0
	}
	pipes := [...]*pipe{in.mu.dynPipe, in.mu.natPipe}
	in.mu.Unlock()
	return markSuspect(pipes)
}

// markSuspect marks every key of pipes as after a lost connection.
func markSuspect(pipes [2]*pipe) int {
	n := 0
	for _, p := range pipes {
		if p != nil {
			p.lock()
			n += p.tr.markSuspect()
			p.mu.Unlock()
		}
	}
	return n
}

// Forget drops the event-id tracking of every dp rank of worker on the NATS
// sources, so that its next event is taken as a first sighting (no gap, no
// duplicate). Call it when a worker leaves the fleet; a worker that restarts
// (its ids start over at 1) is recognized without it. ZMQ tracking ends with
// RemoveZMQ.
func (in *Ingest) Forget(worker uint64) {
	in.mu.Lock()
	pipes := [...]*pipe{in.mu.dynPipe, in.mu.natPipe}
	in.mu.Unlock()
	for _, p := range pipes {
		if p != nil {
			p.lock()
			p.tr.forget(worker)
			p.mu.Unlock()
		}
	}
}

// Gaps returns the most recent gaps (at most GapRing), oldest first, newest
// last. The slice is the caller's.
func (in *Ingest) Gaps() []Gap {
	in.gaps.Lock()
	defer in.gaps.Unlock()
	n := min(in.gaps.n, GapRing)
	out := make([]Gap, 0, n)
	for i := in.gaps.n - n; i < in.gaps.n; i++ {
		out = append(out, in.gaps.ring[i%GapRing])
	}
	return out
}

func (in *Ingest) recordGap(g Gap) {
	in.gaps.Lock()
	in.gaps.ring[in.gaps.n%GapRing] = g
	in.gaps.n++
	in.gaps.Unlock()
}

// Close unsubscribes from NATS, stops every ZMQ subscriber and waits until
// no handler runs any more: after Close returns the sink is not called again.
// Close is idempotent.
func (in *Ingest) Close() error {
	in.mu.Lock()
	if in.mu.closed {
		in.mu.Unlock()
		return nil
	}
	in.mu.closed = true
	in.running.Store(false)
	var errs []error
	for i, s := range [...]*nats.Subscription{in.mu.dynSub, in.mu.natSub, in.mu.legacySub} {
		if s != nil {
			if d, err := s.Dropped(); err == nil { // keep the count monotonic
				in.src[subSources[i]].droppedGone.Add(uint64(d))
			}
			if err := s.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrBadSubscription) {
				errs = append(errs, fmt.Errorf("ingest: unsubscribe %s: %w", s.Subject, err))
			}
		}
	}
	pipes := [...]*pipe{in.mu.dynPipe, in.mu.natPipe}
	cc, live := in.mu.cc, in.mu.live
	in.mu.Unlock()
	if cc != nil {
		cc.Stop()
	}
	if live != nil {
		live.stop() // the sampler and a catch-up in progress
	}
	for _, p := range pipes {
		if p != nil {
			p.close() // waits for a callback in progress
		}
	}
	in.zmqOps.Lock() // waits for an AddZMQ or RemoveZMQ in progress
	defer in.zmqOps.Unlock()
	in.mu.Lock()
	subs := make([]*zmqSub, 0, len(in.mu.zmq))
	for k, z := range in.mu.zmq {
		subs = append(subs, z)
		delete(in.mu.zmq, k)
	}
	in.mu.Unlock()
	for _, z := range subs {
		z.close()
	}
	return errors.Join(errs...)
}

// Stats is a plain-data snapshot of an Ingest's counters; its ZMQ slice is
// the caller's.
type Stats struct {
	Running bool
	// JetStream (ConsumeJetStream): the stream sequence of the last message
	// handed to the sink (LastSeq), and messages dropped because their
	// sequence was not above it (redeliveries after a consumer reset).
	StreamSeq, StreamDuplicates uint64
	// StreamRestarts counts RestartJetStream calls (the stream was lost).
	StreamRestarts uint64
	Sources        [NumSources]SourceStats
	// ZMQ lists the ZMQ subscriptions by worker and dp rank.
	ZMQ []ZMQStats
}

// SourceStats are one source's counters (monotonic since New, except the
// gauges Pending and PendingHighWater).
type SourceStats struct {
	Source Source
	// Messages received (NATS messages, ZMQ batches), and the events and
	// blocks in them handed to the sink (after dropping duplicates).
	Messages, Events, Blocks uint64
	// Malformed messages (dropped whole); events rejected by the decoder
	// (vLLM: an invalid event of a well-formed batch) of which
	// SizeMismatches had the wrong block size; Ignored events of kinds
	// kvroute does not know; OtherGroups the vLLM events of a hybrid model's
	// KV cache groups other than the main (full-attention) one, not indexed.
	Malformed, Rejected, SizeMismatches, Ignored, OtherGroups uint64
	// Duplicates are events dropped because their id was not above the last
	// seen (NATS); Gaps the jumps forward in the event ids (NATS) or the
	// sequence numbers of well-formed batches (ZMQ), MissingEvents and
	// MissingBatches what they skipped; Restarts the workers seen starting
	// over at id 1 (NATS) or at a lower sequence number (ZMQ).
	Duplicates, Gaps, MissingEvents, MissingBatches, Restarts uint64
	// FirstSightings counts worker keys first seen at an id above 1 (NATS:
	// the router joined a running worker, or restarted without the
	// tracking of its snapshot); each asks the worker for a dump.
	FirstSightings uint64
	// SinkErrors counts messages (ZMQ: batches) whose events Apply refused
	// (the events are lost).
	SinkErrors uint64
	// Unknown counts events dropped because Config.Admit refused their
	// worker (not registered).
	Unknown uint64
	// Dropped: NATS messages the client dropped because the subscription's
	// pending limits were reached (slow consumer); ZMQ batches lost and not
	// recovered from the engine's replay socket.
	Dropped uint64
	// Pending and PendingHighWater: NATS messages queued for the callback
	// now and at most (0 for ZMQ).
	Pending, PendingHighWater int
	// Dispatch time: handler calls, their total and longest duration, and a
	// histogram over DispatchBuckets (Buckets[i] counts calls of at most
	// DispatchBuckets[i]; the last counts the rest).
	DispatchCount uint64
	DispatchSum   time.Duration
	DispatchMax   time.Duration
	Buckets       [len(DispatchBuckets) + 1]uint64
}

// ZMQStats describes one ZMQ subscription.
type ZMQStats struct {
	ZMQWorker
	Connected bool
	zmq.SubscriberStats
}

// Stats returns a snapshot of the counters.
func (in *Ingest) Stats() Stats {
	var st Stats
	st.Running = in.Running()
	st.StreamSeq, st.StreamDuplicates, st.StreamRestarts = in.seq.Load(), in.streamDups.Load(), in.streamRestarts.Load()
	for s := range NumSources {
		in.src[s].snapshot(&st.Sources[s])
		st.Sources[s].Source = s
	}
	in.mu.Lock()
	closed := in.mu.closed
	subs := [...]*nats.Subscription{in.mu.dynSub, in.mu.natSub, in.mu.legacySub}
	zs := make([]*zmqSub, 0, len(in.mu.zmq))
	for _, z := range in.mu.zmq {
		zs = append(zs, z)
	}
	in.mu.Unlock()
	for i, s := range subs {
		if s == nil || closed {
			continue
		}
		ss := &st.Sources[subSources[i]]
		if d, err := s.Dropped(); err == nil {
			ss.Dropped += uint64(d)
		}
		if p, _, err := s.Pending(); err == nil {
			ss.Pending += p
		}
		if p, _, err := s.MaxPending(); err == nil {
			ss.PendingHighWater = max(ss.PendingHighWater, p)
		}
	}
	for _, z := range zs {
		zst := ZMQStats{ZMQWorker: z.w, Connected: z.sub.Connected(), SubscriberStats: z.sub.Stats()}
		st.ZMQ = append(st.ZMQ, zst)
		st.Sources[SourceZMQ].Dropped += zst.Lost
	}
	for s := range NumSources {
		st.Sources[s].Dropped += in.src[s].droppedGone.Load()
	}
	sort.Slice(st.ZMQ, func(i, j int) bool {
		a, b := st.ZMQ[i], st.ZMQ[j]
		if a.Worker != b.Worker {
			return a.Worker < b.Worker
		}
		return a.DpRank < b.DpRank
	})
	return st
}
