package node

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvroute/kvroute/ingest"
	"github.com/kvroute/kvroute/internal/promtext"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire/plane"
)

// Snapshot defaults (kvroute serve's flag defaults).
const (
	DefaultSnapshotInterval = 60 * time.Second
	DefaultSnapshotEvents   = 1_000_000
)

// Object names in the snapshot bucket.
const (
	// SnapshotCurrent is the object whose content names the current
	// snapshot object; it is updated only after that object is complete.
	SnapshotCurrent = "current"
	// SnapshotPrefix starts every snapshot object's name, followed by its
	// stream sequence in 20 digits (names sort by sequence).
	SnapshotPrefix = "snapshot-"
	// TrackingPrefix starts the object beside each snapshot that holds
	// ingest's event-id tracking at the snapshot's sequence (same 20
	// digits; ingest.AppendTracking), stored before the snapshot object.
	TrackingPrefix = "tracking-"
	snapshotKeep   = 2 // newest snapshot objects kept
)

// SnapshotConfig configures index snapshots in a NATS object store (with
// Config.JetStream only).
type SnapshotConfig struct {
	// Bucket is the object store bucket (--snapshot-bucket; created if
	// missing); empty: no snapshots, no restore.
	Bucket string
	// Interval is the time between snapshots (--snapshot-interval; zero:
	// DefaultSnapshotInterval).
	Interval time.Duration
	// Events takes a snapshot after this many stream messages since the
	// last one, whatever the interval (--snapshot-events; zero:
	// DefaultSnapshotEvents). A message carries one event from Dynamo
	// publishers, a batch from native ones.
	Events uint64
}

// SnapshotObjectName is the object name of the snapshot at stream sequence
// seq.
func SnapshotObjectName(seq uint64) string { return fmt.Sprintf("%s%020d", SnapshotPrefix, seq) }

// TrackingObjectName is the object name of the event-id tracking stored
// with the snapshot at stream sequence seq.
func TrackingObjectName(seq uint64) string { return fmt.Sprintf("%s%020d", TrackingPrefix, seq) }

// TrackingObjectFor is the name of the tracking object stored beside the
// snapshot object named snapshot.
func TrackingObjectFor(snapshot string) string {
	return TrackingPrefix + strings.TrimPrefix(snapshot, SnapshotPrefix)
}

// ReadTracking reads and verifies the event-id tracking stored beside the
// snapshot object named snapshot (ingest.DecodeTracking).
func ReadTracking(ctx context.Context, obs jetstream.ObjectStore, snapshot string) ([]ingest.SourceKey, error) {
	b, err := obs.GetBytes(ctx, TrackingObjectFor(snapshot))
	if err != nil {
		return nil, err
	}
	return ingest.DecodeTracking(b)
}

// OpenSnapshotBucket binds the snapshot bucket, creating it (file storage,
// replicas) if it is missing and create is true.
func OpenSnapshotBucket(ctx context.Context, js jetstream.JetStream, bucket string, replicas int, create bool) (jetstream.ObjectStore, error) {
	obs, err := js.ObjectStore(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) && create {
		if replicas < 1 {
			replicas = 1
		}
		obs, err = js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: bucket,
			Description: "kvroute index snapshots", Storage: jetstream.FileStorage, Replicas: replicas})
	}
	if err != nil {
		return nil, fmt.Errorf("--snapshot-bucket %s: %w", bucket, err)
	}
	return obs, nil
}

// OpenCurrentSnapshot opens the current snapshot of a bucket for reading;
// jetstream.ErrObjectNotFound if there is none yet.
func OpenCurrentSnapshot(ctx context.Context, obs jetstream.ObjectStore) (jetstream.ObjectResult, error) {
	name, err := obs.GetString(ctx, SnapshotCurrent)
	if err != nil {
		return nil, err
	}
	name = strings.TrimSpace(name)
	if !strings.HasPrefix(name, SnapshotPrefix) {
		return nil, fmt.Errorf("object %q names %q, not a snapshot", SnapshotCurrent, name)
	}
	return obs.Get(ctx, name)
}

// snapshotter takes the snapshots: the JetStream handler goroutine captures
// the index (afterApply) when one is due, a goroutine uploads it.
type snapshotter struct {
	cfg    SnapshotConfig
	log    *slog.Logger
	ix     *shard.Index
	obsMu  sync.Mutex
	obs    jetstream.ObjectStore // under obsMu (store, setStore)
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	due     atomic.Bool   // set by the ticker and Trigger
	kick    chan struct{} // one slot: Trigger wakes the live path's loop
	busy    atomic.Bool   // an upload is in progress
	lastCap uint64        // handler goroutine only: sequence of the last capture or skip
	// checkpoint is ingest's Checkpoint (set before the consumer starts):
	// the capture runs inside it, so the tracked ids match the capture.
	checkpoint func(func([]ingest.SourceKey))
	tracked    []ingest.SourceKey // restored with the snapshot (nil: none)

	total, failures, skipped, restoreFailures atomic.Uint64
	lastBytes, lastDur, lastAt                atomic.Int64 // lastAt: unix ns of the newest complete snapshot
	lastSeq                                   atomic.Uint64
	restoreDur                                atomic.Int64
}

func newSnapshotter(cfg SnapshotConfig, log *slog.Logger, ix *shard.Index, obs jetstream.ObjectStore) *snapshotter {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultSnapshotInterval
	}
	if cfg.Events == 0 {
		cfg.Events = DefaultSnapshotEvents
	}
	s := &snapshotter{cfg: cfg, log: log, ix: ix, obs: obs, kick: make(chan struct{}, 1)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s
}

func (s *snapshotter) store() jetstream.ObjectStore {
	s.obsMu.Lock()
	defer s.obsMu.Unlock()
	return s.obs
}

// setStore replaces the bucket (recreated after the server lost its store).
func (s *snapshotter) setStore(obs jetstream.ObjectStore) {
	s.obsMu.Lock()
	s.obs = obs
	s.obsMu.Unlock()
}

// restore restores the bucket's current snapshot into the fresh index and
// returns its stream sequence; ok false if there is none or it is
// unusable (logged and counted; the index is left empty).
func (s *snapshotter) restore(ctx context.Context) (seq uint64, ok bool) {
	t0 := time.Now()
	r, err := OpenCurrentSnapshot(ctx, s.obs)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		s.log.Info("no index snapshot in the bucket yet: starting empty, replaying the KV-event stream from its first message", "bucket", s.cfg.Bucket)
		return 0, false
	}
	if err == nil {
		seq, err = s.ix.Restore(bufio.NewReaderSize(r, 1<<20))
		_ = r.Close()
	}
	if err != nil {
		s.restoreFailures.Add(1)
		s.log.Error("index snapshot unusable: starting empty, replaying the KV-event stream from its first message",
			"bucket", s.cfg.Bucket, "err", err)
		return 0, false
	}
	s.tracked = s.restoreTracking(ctx, seq)
	d := time.Since(t0)
	s.restoreDur.Store(int64(d))
	s.lastSeq.Store(seq)
	if oi, err := r.Info(); err == nil {
		s.lastAt.Store(oi.ModTime.UnixNano())
	}
	s.lastCap = seq
	s.log.Info("index restored from snapshot", "bucket", s.cfg.Bucket, "stream_seq", seq, "duration", d)
	return seq, true
}

// restoreTracking reads the event-id tracking stored with the snapshot at
// seq; nil if it is missing or unusable (logged: every worker key seen in
// the replay is then a first sighting, answered by a dump).
func (s *snapshotter) restoreTracking(ctx context.Context, seq uint64) []ingest.SourceKey {
	keys, err := ReadTracking(ctx, s.store(), SnapshotObjectName(seq))
	if err != nil {
		s.log.Warn("no usable event-id tracking beside the index snapshot: the workers seen in the replay will be asked for dumps",
			"bucket", s.cfg.Bucket, "object", TrackingObjectName(seq), "err", err)
		return nil
	}
	return keys
}

// start starts the interval ticker.
func (s *snapshotter) start() {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(s.cfg.Interval)
		defer t.Stop()
		for {
			select {
			case <-s.ctx.Done():
				return
			case <-t.C:
				s.due.Store(true)
			}
		}
	}()
}

// startLive starts the live path's snapshot loop (Config.LiveEvents): no
// goroutine applies the stream's messages in order there, so a snapshot is
// captured from this loop inside ingest's Checkpoint (no NATS event is being
// applied meanwhile) at the live path's safe sequence (safeSeq): every
// stream message up to it is in the index, and the restore's replay from
// it + 1 drops the messages the capture already holds by their event ids
// (stored beside it). Due every Interval, after Events NATS messages
// (msgs counts them; checked every second), or on Trigger; skipped while
// no message arrived since the last one.
func (s *snapshotter) startLive(safeSeq, msgs func() uint64) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		poll := min(s.cfg.Interval, time.Second)
		t := time.NewTicker(poll)
		defer t.Stop()
		last, lastMsgs := time.Now(), msgs()
		for {
			select {
			case <-s.ctx.Done():
				return
			case <-t.C:
			case <-s.kick:
			}
			m := msgs()
			if !s.due.Load() && time.Since(last) < s.cfg.Interval && m-lastMsgs < s.cfg.Events {
				continue
			}
			if m == lastMsgs {
				continue // nothing new; s.due stays set
			}
			s.due.Store(false)
			last, lastMsgs = time.Now(), m
			s.take(safeSeq)
		}
	}()
}

// take captures the index at the live path's safe sequence and uploads it.
func (s *snapshotter) take(safeSeq func() uint64) {
	if s.busy.Load() {
		s.skipped.Add(1)
		s.log.Warn("index snapshot skipped: the previous one is still uploading")
		return
	}
	s.captureUpload(safeSeq)
}

// captureUpload captures the index at the sequence seq returns (read inside
// the ingest checkpoint, with the id tracking beside it) and starts its
// upload.
func (s *snapshotter) captureUpload(seq func() uint64) {
	var (
		cp       *shard.Capture
		err      error
		tracking []byte
		at       uint64
	)
	s.checkpoint(func(keys []ingest.SourceKey) {
		at = seq()
		if cp, err = s.ix.Capture(at); err == nil {
			tracking = ingest.AppendTracking(nil, keys)
		}
	})
	if err != nil {
		s.failures.Add(1)
		s.log.Warn("index snapshot capture failed", "stream_seq", at, "err", err)
		return
	}
	s.busy.Store(true)
	s.wg.Add(1)
	go s.upload(cp, tracking, at)
}

// afterApply runs on the JetStream handler goroutine after the message with
// stream sequence seq was applied: it captures the index there when a
// snapshot is due.
func (s *snapshotter) afterApply(seq uint64) {
	if seq < s.lastCap { // the stream was recreated: its sequences started over
		s.lastCap = 0
	}
	if !s.due.Load() && seq-s.lastCap < s.cfg.Events {
		return
	}
	s.due.Store(false)
	s.lastCap = seq
	if s.busy.Load() {
		s.skipped.Add(1)
		s.log.Warn("index snapshot skipped: the previous one is still uploading", "stream_seq", seq)
		return
	}
	s.captureUpload(func() uint64 { return seq })
}

// upload streams the capture into the bucket as snapshot-<seq>, then points
// "current" at it and deletes the older snapshots beyond the newest
// snapshotKeep. The previous snapshot stays current until then.
func (s *snapshotter) upload(cp *shard.Capture, tracking []byte, seq uint64) {
	defer s.wg.Done()
	t0 := time.Now()
	name := SnapshotObjectName(seq)
	obs := s.store()
	if _, err := obs.PutBytes(s.ctx, TrackingObjectName(seq), tracking); err != nil {
		if s.ctx.Err() == nil {
			s.log.Warn("index snapshot upload failed (its event-id tracking); retried at the next interval", "bucket", s.cfg.Bucket, "stream_seq", seq, "err", err)
			s.failures.Add(1)
		}
		s.busy.Store(false)
		return
	}
	pr, pw := io.Pipe()
	var written int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		var err error
		written, err = cp.WriteTo(pw)
		pw.CloseWithError(err)
	}()
	_, err := obs.Put(s.ctx, jetstream.ObjectMeta{Name: name, Description: "kvroute index snapshot"}, pr)
	pr.CloseWithError(errors.New("upload ended")) // unblocks the writer if Put failed
	<-done
	if err == nil {
		_, err = obs.PutString(s.ctx, SnapshotCurrent, name)
	}
	if err != nil {
		if s.ctx.Err() == nil {
			s.log.Warn("index snapshot upload failed; retried at the next interval", "bucket", s.cfg.Bucket, "stream_seq", seq, "err", err)
			_ = obs.Delete(s.ctx, name)
			_ = obs.Delete(s.ctx, TrackingObjectName(seq))
			s.failures.Add(1)
		}
		s.busy.Store(false)
		return
	}
	d := time.Since(t0)
	s.prune(obs, name)
	s.lastBytes.Store(written)
	s.lastDur.Store(int64(d))
	s.lastSeq.Store(seq)
	s.lastAt.Store(time.Now().UnixNano())
	s.log.Info("index snapshot stored", "bucket", s.cfg.Bucket, "object", name, "stream_seq", seq, "bytes", written, "duration", d)
	s.busy.Store(false)
	s.total.Add(1) // last: who sees it sees the upload over
}

// prune deletes the snapshot objects older than the newest snapshotKeep.
func (s *snapshotter) prune(obs jetstream.ObjectStore, current string) {
	infos, err := obs.List(s.ctx)
	if err != nil {
		return
	}
	var names []string
	for _, oi := range infos {
		if strings.HasPrefix(oi.Name, SnapshotPrefix) {
			names = append(names, oi.Name)
		}
	}
	slices.Sort(names)
	for i := 0; i < len(names)-snapshotKeep; i++ {
		if names[i] == current {
			continue
		}
		if err := obs.Delete(s.ctx, names[i]); err != nil {
			s.log.Warn("cannot delete an old index snapshot", "object", names[i], "err", err)
		}
		_ = obs.Delete(s.ctx, TrackingObjectFor(names[i]))
	}
}

// close stops the ticker and any upload in progress and waits for them.
func (s *snapshotter) close() {
	s.cancel()
	s.wg.Wait()
}

// lastKVSeq returns the stream sequence of the newest KV event stored in st
// (0: none): the stream's last sequence when it holds nothing but the KV
// events, else the newest of either KV-event subject.
func lastKVSeq(ctx context.Context, st jetstream.Stream, sub plane.Subjects) (uint64, error) {
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	ours := []string{sub.KVEvents, sub.KVEventsNative, ingest.MarkSubject(sub)}
	only := true
	for _, subj := range info.Config.Subjects {
		if !slices.Contains(ours, subj) {
			only = false
		}
	}
	if only {
		return info.State.LastSeq, nil
	}
	var last uint64
	for _, subj := range ours[:2] {
		m, err := st.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return 0, err
		}
		last = max(last, m.Sequence)
	}
	return last, nil
}

// SnapshotFamilies declares the families WriteMetrics adds with snapshots
// on (Config.Snapshot.Bucket), for a promtext.Registry.
var SnapshotFamilies = []promtext.Family{
	{Name: "kvroute_snapshots_total", Type: promtext.Counter, Help: "Index snapshots stored in the object store (--snapshot-bucket)"},
	{Name: "kvroute_snapshot_failures_total", Type: promtext.Counter, Help: "Index snapshots that failed to capture or upload (retried at the next interval)"},
	{Name: "kvroute_snapshot_skipped_total", Type: promtext.Counter, Help: "Index snapshots skipped because the previous one was still uploading"},
	{Name: "kvroute_snapshot_last_bytes", Type: promtext.Gauge, Help: "Size of the newest stored index snapshot"},
	{Name: "kvroute_snapshot_last_duration_seconds", Type: promtext.Gauge, Help: "Time the newest index snapshot took from capture to current"},
	{Name: "kvroute_snapshot_last_seq", Type: promtext.Gauge, Help: "Stream sequence of the newest index snapshot stored or restored"},
	{Name: "kvroute_snapshot_age_seconds", Type: promtext.Gauge, Help: "Age of the newest index snapshot stored or restored (absent before the first)"},
	{Name: "kvroute_snapshot_restore_seconds", Type: promtext.Gauge, Help: "Time the restore of the index snapshot at start took (0: none restored)"},
	{Name: "kvroute_snapshot_restore_failures_total", Type: promtext.Counter, Help: "Index snapshots found unusable at start (corrupt or unreadable; the stream was replayed from its first message)"},
	{Name: "kvroute_snapshot_replay_messages", Type: promtext.Gauge, Help: "KV-event stream messages replayed at start after the restored snapshot, until the stream's last sequence at start"},
	{Name: "kvroute_snapshot_replay_seconds", Type: promtext.Gauge, Help: "Time from the start of the consumer to the end of the replay at start (0 while replaying)"},
}

func (s *snapshotter) writeMetrics(w io.Writer, replayMsgs uint64, replayDur time.Duration) {
	metrics.WriteCounterUint64(w, "kvroute_snapshots_total", s.total.Load())
	metrics.WriteCounterUint64(w, "kvroute_snapshot_failures_total", s.failures.Load())
	metrics.WriteCounterUint64(w, "kvroute_snapshot_skipped_total", s.skipped.Load())
	metrics.WriteGaugeUint64(w, "kvroute_snapshot_last_bytes", uint64(s.lastBytes.Load()))
	metrics.WriteGaugeFloat64(w, "kvroute_snapshot_last_duration_seconds", time.Duration(s.lastDur.Load()).Seconds())
	metrics.WriteGaugeUint64(w, "kvroute_snapshot_last_seq", s.lastSeq.Load())
	if at := s.lastAt.Load(); at != 0 {
		metrics.WriteGaugeFloat64(w, "kvroute_snapshot_age_seconds", time.Since(time.Unix(0, at)).Seconds())
	}
	metrics.WriteGaugeFloat64(w, "kvroute_snapshot_restore_seconds", time.Duration(s.restoreDur.Load()).Seconds())
	metrics.WriteCounterUint64(w, "kvroute_snapshot_restore_failures_total", s.restoreFailures.Load())
	metrics.WriteGaugeUint64(w, "kvroute_snapshot_replay_messages", replayMsgs)
	metrics.WriteGaugeFloat64(w, "kvroute_snapshot_replay_seconds", replayDur.Seconds())
}
