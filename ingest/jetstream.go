package ingest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/plane"
)

// probJetStream rate-limits the consumer's error logs (far from log.go's list).
const probJetStream problem = 200

// Defaults of StreamConfig's zero fields and of the JetStream consumer.
const (
	DefaultStreamMaxAge   = time.Hour
	DefaultStreamMaxBytes = 1 << 30
	// DefaultFetchBatch is how many messages the ordered consumer keeps
	// requested ahead of the handler (jetstream.PullMaxMessages; nats.go's
	// default too): 4096 was not faster in BenchmarkNATSIngest, and
	// sometimes slower.
	DefaultFetchBatch = 500
	// DefaultHeartbeat is the ordered consumer's idle heartbeat: two missed
	// ones (a lost consumer, e.g. its server died) make it recreate itself
	// from the last delivered stream sequence.
	DefaultHeartbeat = 2 * time.Second
)

// StreamConfig describes the JetStream stream that keeps a namespace's KV
// events (EnsureStream).
type StreamConfig struct {
	// Name of the stream; empty: StreamName(Subjects).
	Name string
	// Subjects are the namespace's subjects; the stream captures
	// KVEvents and KVEventsNative.
	Subjects plane.Subjects
	// MaxAge and MaxBytes bound the retention (the oldest messages are
	// discarded first); zero: DefaultStreamMaxAge, DefaultStreamMaxBytes.
	MaxAge   time.Duration
	MaxBytes int64
	// Replicas of the stream (1, or 3 in a cluster); zero: 1.
	Replicas int
	// Storage of a stream EnsureStream creates: jetstream.FileStorage (the
	// zero value) or MemoryStorage (lost with its server; MaxBytes of RAM).
	// An existing stream keeps its storage.
	Storage jetstream.StorageType
}

// StreamName returns the name of the stream that keeps the KV events of
// subjects: KVROUTE_EVENTS_<namespace>_<component> for plane.SubjectsFor's
// subjects (e.g. KVROUTE_EVENTS_kvroute_backend), otherwise KVROUTE_EVENTS_
// followed by the Dynamo subject with dots replaced by underscores. Characters
// a stream name cannot hold (/ \ and control characters) become _.
func StreamName(s plane.Subjects) string {
	name := s.KVEvents
	if t := strings.Split(s.KVEvents, "."); len(t) == 5 && t[0] == "namespace" && t[2] == "component" && t[4] == "kv-events" {
		name = t[1] + "_" + t[3]
	}
	return "KVROUTE_EVENTS_" + strings.Map(func(r rune) rune {
		if r == '.' || r == '/' || r == '\\' || r <= ' ' || r == '*' || r == '>' || r == 0x7f {
			return '_'
		}
		return r
	}, name)
}

// EnsureStream creates the stream of cfg or binds to it if it exists. An
// existing stream must capture both KV-event subjects (it may capture more);
// its retention limits and replicas are updated to cfg's when they differ.
// Errors name the flags involved.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg StreamConfig) (jetstream.Stream, error) {
	if cfg.Subjects.KVEvents == "" || cfg.Subjects.KVEventsNative == "" {
		return nil, errors.New("ingest: no KV event subjects configured (plane.SubjectsFor)")
	}
	if cfg.Name == "" {
		cfg.Name = StreamName(cfg.Subjects)
	}
	if cfg.MaxAge == 0 {
		cfg.MaxAge = DefaultStreamMaxAge
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = DefaultStreamMaxBytes
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	switch {
	case cfg.MaxAge < 0:
		return nil, fmt.Errorf("--events-max-age must be > 0 (got %v)", cfg.MaxAge)
	case cfg.MaxBytes < 0:
		return nil, fmt.Errorf("--events-max-bytes must be > 0 (got %d)", cfg.MaxBytes)
	case cfg.Replicas < 1 || cfg.Replicas > 5:
		return nil, fmt.Errorf("--events-replicas must be in [1, 5] (got %d)", cfg.Replicas)
	}
	subjects := []string{cfg.Subjects.KVEvents, cfg.Subjects.KVEventsNative}
	mark := MarkSubject(cfg.Subjects)
	s, err := js.Stream(ctx, cfg.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name:        cfg.Name,
			Description: "kvroute KV events (Dynamo msgpack and native)",
			Subjects:    append(slices.Clip(subjects), mark),
			Retention:   jetstream.LimitsPolicy,
			Discard:     jetstream.DiscardOld,
			Storage:     cfg.Storage,
			PersistMode: persistMode(cfg.Replicas, cfg.Storage),
			MaxAge:      cfg.MaxAge,
			MaxBytes:    cfg.MaxBytes,
			Replicas:    cfg.Replicas,
		})
		if err != nil {
			return nil, fmt.Errorf("ingest: create JetStream stream %s over %v (--events-replicas %d): %w", cfg.Name, subjects, cfg.Replicas, err)
		}
		return s, nil
	}
	if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("ingest: JetStream stream %s: %w (no JetStream answered: a server started without it (nats-server -js), or a cluster that has no JetStream leader yet; or use --events-jetstream=false)", cfg.Name, err)
	}
	if err != nil {
		return nil, fmt.Errorf("ingest: JetStream stream %s: %w", cfg.Name, err)
	}
	sc := s.CachedInfo().Config
	for _, want := range subjects {
		if !covered(sc.Subjects, want) {
			return nil, fmt.Errorf("ingest: the existing JetStream stream %s captures %v, not %s (--namespace/--component): delete it or choose another namespace",
				cfg.Name, sc.Subjects, want)
		}
	}
	addMark := !covered(sc.Subjects, mark) // a stream created before the live path
	if addMark {
		sc.Subjects = append(sc.Subjects, mark)
	}
	if addMark || sc.MaxAge != cfg.MaxAge || sc.MaxBytes != cfg.MaxBytes || sc.Replicas != cfg.Replicas {
		sc.MaxAge, sc.MaxBytes, sc.Replicas = cfg.MaxAge, cfg.MaxBytes, cfg.Replicas
		if cfg.Replicas > 1 {
			sc.PersistMode = jetstream.DefaultPersistMode
		}
		if s, err = js.UpdateStream(ctx, sc); err != nil {
			return nil, fmt.Errorf("ingest: update JetStream stream %s to --events-max-age %v, --events-max-bytes %d, --events-replicas %d: %w",
				cfg.Name, cfg.MaxAge, cfg.MaxBytes, cfg.Replicas, err)
		}
	}
	return s, nil
}

// persistMode is the stream's persist mode: a single replica flushes its
// writes asynchronously (batched: the R1 file store otherwise writes every
// message with its own system call), which can lose the last moments of
// events if the server crashes: acceptable for a cache mirror that the
// workers' next events correct. Replicated streams flush asynchronously by
// themselves and refuse the setting.
func persistMode(replicas int, storage jetstream.StorageType) jetstream.PersistModeType {
	if replicas > 1 || storage == jetstream.MemoryStorage {
		return jetstream.DefaultPersistMode
	}
	return jetstream.AsyncPersistMode
}

// covered reports whether one of the subject filters in fs matches subject.
func covered(fs []string, subject string) bool {
	st := strings.Split(subject, ".")
	for _, f := range fs {
		ft := strings.Split(f, ".")
		ok := true
		for i, t := range ft {
			if t == ">" {
				ok = i < len(st)
				break
			}
			if i >= len(st) || (t != "*" && t != st[i]) {
				ok = false
				break
			}
			if i == len(ft)-1 && len(ft) != len(st) {
				ok = false
			}
		}
		if ok && len(ft) > 0 {
			return true
		}
	}
	return false
}

// ConsumeJetStream consumes the KV events of stream (EnsureStream) through
// one ordered consumer filtered on Subjects.KVEvents and KVEventsNative,
// starting at stream sequence Config.StartSeq (0: new messages only). Its
// handler runs on one goroutine, decodes each message by its subject exactly
// as SubscribeNATS's callbacks do, and records the message's stream sequence
// (LastSeq) after the sink took its events. The ordered consumer recreates
// itself after a lost connection or server from the last delivered sequence,
// so nothing published meanwhile is lost. Call it once, instead of
// SubscribeNATS; Close stops the consumer.
func (in *Ingest) ConsumeJetStream(nc *nats.Conn, stream jetstream.Stream) error {
	if stream == nil {
		return errors.New("ingest: nil JetStream stream")
	}
	if err := in.lockForNATS(nc); err != nil {
		return err
	}
	defer in.mu.Unlock()
	cc, jp, err := in.consume(stream, in.cfg.StartSeq, newPipe(in, SourceNATSDynamo), newPipe(in, SourceNATSNative), 0)
	if err != nil {
		return err
	}
	in.mu.nc, in.mu.cc, in.mu.dynPipe, in.mu.natPipe = nc, cc, jp.dyn, jp.nat
	in.running.Store(true)
	return nil
}

// consume starts an ordered consumer on stream from startSeq (0: new
// messages only) feeding the pipes dyn and nat; with stopAt (a live
// catch-up's marker, changeable through jsPipe.stopAt) the handler signals
// jsPipe.reached once it applied a message at or beyond it.
func (in *Ingest) consume(stream jetstream.Stream, startSeq uint64, dyn, nat *pipe, stopAt uint64) (jetstream.ConsumeContext, *jsPipe, error) {
	// A stream that holds nothing but the KV events needs no filter: with
	// two filter subjects the server intersects its subject tree for every
	// message it delivers (a third of the consumer side's CPU in a replay).
	occ := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy}
	ours := []string{in.cfg.Subjects.KVEvents, in.cfg.Subjects.KVEventsNative, MarkSubject(in.cfg.Subjects)}
	for _, subj := range stream.CachedInfo().Config.Subjects {
		if !slices.Contains(ours, subj) {
			occ.FilterSubjects = ours
			break
		}
	}
	if startSeq > 0 {
		occ.DeliverPolicy, occ.OptStartSeq = jetstream.DeliverByStartSequencePolicy, startSeq
		in.seq.Store(startSeq - 1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := stream.OrderedConsumer(ctx, occ)
	if err != nil {
		return nil, nil, fmt.Errorf("ingest: ordered consumer on stream %s: %w", stream.CachedInfo().Config.Name, err)
	}
	jp := &jsPipe{in: in, dyn: dyn, nat: nat, dynSubject: in.cfg.Subjects.KVEvents, markSubject: MarkSubject(in.cfg.Subjects),
		first: startSeq, after: in.cfg.AfterApply, reached: make(chan struct{}, 1)}
	jp.stopAt.Store(stopAt)
	cc, err := cons.Consume(jp.onMsg, jetstream.PullMaxMessages(in.cfg.FetchBatch),
		jetstream.PullHeartbeat(in.cfg.Heartbeat), jetstream.ConsumeErrHandler(jp.onErr))
	if err != nil {
		return nil, nil, fmt.Errorf("ingest: consume stream %s: %w", stream.CachedInfo().Config.Name, err)
	}
	return cc, jp, nil
}

// RestartJetStream replaces the JetStream consumer with one on stream (a
// stream recreated after the server lost its store: its sequences start
// over) from its first message. Events published while no stream existed
// are lost, so every tracked worker key is marked as after a lost
// connection (MarkReconnected): its next event is checked against the last
// id seen, and a recovery sweep finds what is missing. The id tracking and
// the counters carry over; LastSeq restarts with the new stream's
// sequences. It returns the number of keys marked.
func (in *Ingest) RestartJetStream(stream jetstream.Stream) (int, error) {
	if stream == nil {
		return 0, errors.New("ingest: nil JetStream stream")
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.mu.closed {
		return 0, ErrClosed
	}
	if in.mu.cc == nil {
		return 0, errors.New("ingest: RestartJetStream without ConsumeJetStream")
	}
	old := in.mu.cc
	old.Stop()
	select { // the old handler finishes its message before the sequences start over
	case <-old.Closed():
	case <-time.After(5 * time.Second):
	}
	dyn, nat := in.mu.dynPipe, in.mu.natPipe
	marked := 0
	for _, p := range [...]*pipe{dyn, nat} {
		p.lock()
		marked += p.tr.markSuspect()
		p.mu.Unlock()
	}
	in.seq.Store(0)
	cc, _, err := in.consume(stream, 1, dyn, nat, 0)
	if err != nil {
		return marked, err
	}
	in.mu.cc = cc
	in.streamRestarts.Add(1)
	return marked, nil
}

// LastSeq returns the stream sequence of the last JetStream message whose
// events were handed to the sink (Config.StartSeq-1 before the first; 0
// without JetStream). A new Ingest with StartSeq = LastSeq()+1 resumes
// exactly after it.
func (in *Ingest) LastSeq() uint64 { return in.seq.Load() }

// jsPipe is the ordered consumer's handler state: it routes each message to
// the pipe of its subject's format.
type jsPipe struct {
	in          *Ingest
	dyn, nat    *pipe
	dynSubject  string
	markSubject string           // MarkSubject: a live catch-up's marker, no events
	first       uint64           // StartSeq: the sequence the first message should have
	after       func(seq uint64) // Config.AfterApply
	stopAt      atomic.Uint64    // live catch-up: signal reached at this sequence
	reached     chan struct{}    // one slot
}

func (j *jsPipe) onMsg(m jetstream.Msg) { j.onNATS(m.Subject(), m.Reply(), m.Data()) }

// onNATS handles one stream message. It does not coalesce (see doc.go):
// each message is applied, LastSeq set and AfterApply called before the
// next.
func (j *jsPipe) onNATS(subject, reply string, data []byte) {
	seq := replyStreamSeq(reply)
	if seq != 0 && seq <= j.in.seq.Load() {
		j.in.streamDups.Add(1) // a redelivery after a reset
		return
	}
	if j.first != 0 {
		if seq > j.first {
			j.in.log.Warn("ingest: KV events between the start sequence and the stream's oldest message are gone (aged out of the stream, --events-max-age/--events-max-bytes)",
				"start_seq", j.first, "first_seq", seq, "missing", seq-j.first)
		}
		j.first = 0
	}
	applied := false
	switch subject {
	case j.markSubject:
		if applied = seq != 0; applied {
			j.in.seq.Store(seq)
		}
	case j.dynSubject:
		applied = j.dyn.onData(data, seq)
	default:
		applied = j.nat.onData(data, seq)
	}
	if applied && seq != 0 {
		if j.after != nil {
			j.after(seq)
		}
		if s := j.stopAt.Load(); s != 0 && seq >= s {
			select {
			case j.reached <- struct{}{}:
			default:
			}
		}
	}
}

func (j *jsPipe) onErr(_ jetstream.ConsumeContext, err error) {
	if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, nats.ErrConnectionClosed) {
		return
	}
	if sup, ok := j.in.lim.allow(probJetStream, SourceNATSDynamo, wire.WorkerKey{}); ok {
		j.in.log.Warn("ingest: JetStream consumer", "err", err, "suppressed_since_last_log", sup)
	}
}

// onData handles one NATS message body of the pipe's format (the JetStream
// path's counterpart of onDynamo and onNative) with its stream sequence seq,
// without coalescing. It reports whether the events went to the sink
// (LastSeq is then seq; false: the pipe is closed).
func (p *pipe) onData(data []byte, seq uint64) bool {
	start := time.Now()
	p.mu.Lock()
	flushed := false
	if !p.closed {
		var err error
		if p.src == SourceNATSDynamo {
			err = wire.DecodeDynamoAny(&p.batch, data)
		} else {
			err = wire.DecodeNative(&p.batch, data)
		}
		flushed = p.decoded(err, 1, seq)
	}
	p.mu.Unlock()
	p.c.observe(time.Since(start))
	return flushed
}

// replyStreamSeq returns the stream sequence in a JetStream message's reply
// subject, without allocating: $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>...
// (9 tokens) or $JS.ACK.<domain>.<account>.<stream>.<consumer>.<delivered>.<sseq>...
// (12 or more); 0 if it is not one.
func replyStreamSeq(reply string) uint64 {
	n := strings.Count(reply, ".") + 1
	var pos int
	switch {
	case n == 9:
		pos = 5
	case n >= 11:
		pos = 7
	default:
		return 0
	}
	for range pos {
		i := strings.IndexByte(reply, '.')
		if i < 0 {
			return 0
		}
		reply = reply[i+1:]
	}
	var v uint64
	for i := 0; i < len(reply) && reply[i] != '.'; i++ {
		c := reply[i]
		if c < '0' || c > '9' {
			return 0
		}
		v = v*10 + uint64(c-'0')
	}
	return v
}
