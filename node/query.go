package node

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/nats-io/nats.go"

	"github.com/kvroute/kvroute/internal/promtext"
	"github.com/kvroute/kvroute/radix"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/plane"
)

// QueryFamilies declares the families IndexServer.WriteMetrics and
// RemoteIndex.WriteMetrics write, for a promtext.Registry.
var QueryFamilies = []promtext.Family{
	{Name: "kvroute_index_queries_served_total", Type: promtext.Counter, Help: "Index queries (match, record, ping) this process answered on NATS for other routers (--serve-indexer, kvroute indexer)"},
	{Name: "kvroute_index_query_prompts_total", Type: promtext.Counter, Help: "Prompts looked up for other routers (a match query carries a batch)"},
	{Name: "kvroute_index_queries_invalid_total", Type: promtext.Counter, Help: "Index queries answered with an error (undecodable, or a decision whose local and sequence hashes do not come 1:1)"},
	{Name: "kvroute_remote_index_lookups_total", Type: promtext.Counter, Help: "Prompts this router looked up in a remote index (--use-remote-indexer)"},
	{Name: "kvroute_remote_index_failures_total", Type: promtext.Counter, Help: "Prompts routed with zero overlap because the remote index query failed, by reason (timeout, no_responders, disconnected: the NATS connection was down, error)"},
	{Name: "kvroute_remote_index_records_total", Type: promtext.Counter, Help: "Routing decisions sent to the remote index (approximate mode)"},
	{Name: "kvroute_remote_index_record_errors_total", Type: promtext.Counter, Help: "Routing decisions that could not be sent to the remote index"},
}

// IndexServerConfig configures an IndexServer.
type IndexServerConfig struct {
	// Subject is the query subject (plane.IndexSubject).
	Subject string
	// Approx: the index records routing decisions (approximate mode). Only
	// one approximate-mode server may serve a subject: ServeIndex refuses
	// to start when another one answers (decisions recorded in two indexes
	// would each hold half of them).
	Approx bool
	// ID names this instance in ping replies.
	ID string
	// PingTimeout bounds the check for another serving instance. Default
	// 250 ms.
	PingTimeout time.Duration
	// Handlers is the number of queue subscriptions (each answered on its
	// own goroutine by NATS) this instance serves with; approximate mode
	// uses one, so that decisions are recorded in order. Default
	// GOMAXPROCS, at most 4 (on 2 CPUs, 1 and 2 handlers measured alike:
	// BenchmarkRemoteLookup, docs/decisions/0030-served-index.md).
	Handlers int
	Logger   *slog.Logger
}

// IndexServer answers index queries (the plane query protocol) on NATS
// from an index: match queries with the overlaps per worker key and their
// tree sizes, record queries (approximate mode) by recording the decision,
// pings with its mode and id. Queries are served in the queue group
// plane.QueueGroup, so that several servers share the load.
//
// Its methods are goroutine-safe. Close it before the index and the NATS
// connection.
type IndexServer struct {
	cfg  IndexServerConfig
	ix   *shard.Index
	nc   *nats.Conn
	subs []*nats.Subscription
	seen metricsCounters
}

// queryHandler is one subscription's scratch: NATS runs a subscription's
// callbacks on one goroutine, so it is used by one goroutine at a time.
type queryHandler struct {
	s   *IndexServer
	q   plane.Query
	mrs []shard.MatchRequest
	ovs [][]radix.Overlap
	ws  []radix.Overlap
	out []byte
}

type metricsCounters struct {
	served, prompts, invalid atomic.Uint64
}

// ServeIndex starts answering queries on cfg.Subject from ix. In
// approximate mode it first asks the subject whether an approximate-mode
// server answers already and refuses to start if one does.
func ServeIndex(nc *nats.Conn, ix *shard.Index, cfg IndexServerConfig) (*IndexServer, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.PingTimeout <= 0 {
		cfg.PingTimeout = 250 * time.Millisecond
	}
	if cfg.Subject == "" {
		return nil, errors.New("node: IndexServerConfig.Subject not set")
	}
	// Any approximate-mode serving index, or any serving index when this
	// one is approximate, conflicts: decisions would be split between
	// indexes (Dynamo refuses the same way).
	msg, err := nc.Request(cfg.Subject, plane.AppendPingQuery(nil), cfg.PingTimeout)
	if err == nil {
		var r plane.QueryReply
		if derr := plane.DecodeQueryReply(msg.Data, plane.QueryPing, &r); derr == nil && (r.Approx || cfg.Approx) {
			return nil, fmt.Errorf("--serve-indexer: another serving index (%q, approximate mode %v) answers on %s; approximate mode (--no-kv-events) records routing decisions in one index, so it must be the only serving instance", r.ID, r.Approx, cfg.Subject)
		}
	}
	if cfg.Handlers <= 0 {
		cfg.Handlers = min(runtime.GOMAXPROCS(0), 4)
	}
	if cfg.Approx {
		cfg.Handlers = 1
	}
	s := &IndexServer{cfg: cfg, ix: ix, nc: nc}
	for range cfg.Handlers {
		h := &queryHandler{s: s}
		sub, err := nc.QueueSubscribe(cfg.Subject, plane.QueueGroup, h.handle)
		if err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("--serve-indexer: subscribe %s: %w", cfg.Subject, err)
		}
		// Pending limits: a burst of queries from many routers queues
		// here rather than being dropped as a slow consumer (dropped ones
		// time out at the router and degrade to zero overlap).
		_ = sub.SetPendingLimits(1<<16, 256<<20)
		s.subs = append(s.subs, sub)
	}
	// A round trip to the server: once ServeIndex returns, its
	// subscriptions are live there, so a query sent right after (or a
	// readiness probe that trusts this return) finds a responder instead
	// of "no responders" (TestServedIndexMatchesLocal failed that way once
	// in CI under load).
	if err := nc.Flush(); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("--serve-indexer: subscribe %s: %w", cfg.Subject, err)
	}
	return s, nil
}

func (h *queryHandler) handle(m *nats.Msg) {
	if out := h.answer(m.Data, m.Reply != ""); out != nil && m.Reply != "" {
		_ = m.Respond(out)
	}
}

// answer answers one query (src, the message's data) and returns the reply
// to send, or nil when there is none (a record sent without a reply
// subject, hasReply false). The reply is h's scratch, valid until the next
// call. A match query allocates nothing once the scratch has grown to the
// batch (TestAllocsServeMatch).
func (h *queryHandler) answer(src []byte, hasReply bool) []byte {
	s := h.s
	s.seen.served.Add(1)
	if err := plane.DecodeQuery(src, &h.q); err != nil {
		return h.fail(err, hasReply)
	}
	switch h.q.Kind {
	case plane.QueryPing:
		h.out = plane.AppendPingReply(h.out[:0], s.cfg.Approx, s.cfg.ID)
	case plane.QueryWorkers:
		ws, err := s.ix.Workers(h.ws[:0])
		if err != nil {
			return h.fail(err, hasReply)
		}
		h.ws = ws
		h.out = plane.AppendReplyPrompt(plane.AppendReplyHeader(h.out[:0], 1), ws)
	case plane.QueryRecord:
		if !s.cfg.Approx {
			return h.fail(errNotApprox, hasReply)
		}
		if err := s.ix.RecordDecision(h.q.Worker, h.q.Hashes, h.q.Seq); err != nil {
			return h.fail(err, hasReply)
		}
		if !hasReply {
			return nil
		}
		h.out = plane.AppendReplyHeader(h.out[:0], 0)
	case plane.QueryMatch:
		n := h.q.Prompts()
		s.seen.prompts.Add(uint64(n))
		for len(h.ovs) < n {
			h.ovs = append(h.ovs, nil)
		}
		h.mrs = h.mrs[:0]
		for i := range n {
			h.mrs = append(h.mrs, shard.MatchRequest{Hashes: h.q.Prompt(i), Overlaps: h.ovs[i][:0]})
		}
		if err := s.ix.MatchBatch(h.mrs); err != nil {
			return h.fail(err, hasReply)
		}
		h.out = plane.AppendReplyHeaderFlags(h.out[:0], n, h.q.Flags)
		for i := range h.mrs {
			h.ovs[i] = h.mrs[i].Overlaps
			h.out = plane.AppendReplyPromptFlags(h.out, h.ovs[i], h.q.Flags)
		}
	}
	return h.out
}

var errNotApprox = errors.New("this index is fed by KV events; it records no routing decisions (start it with --no-kv-events)")

// fail counts a refused query and returns its error reply (nil without a
// reply subject).
func (h *queryHandler) fail(err error, hasReply bool) []byte {
	h.s.seen.invalid.Add(1)
	if !hasReply {
		return nil
	}
	h.out = plane.AppendErrorReply(h.out[:0], err.Error())
	return h.out
}

// WriteMetrics writes the served-query counters (QueryFamilies).
func (s *IndexServer) WriteMetrics(w io.Writer) {
	metrics.WriteCounterUint64(w, "kvroute_index_queries_served_total", s.seen.served.Load())
	metrics.WriteCounterUint64(w, "kvroute_index_query_prompts_total", s.seen.prompts.Load())
	metrics.WriteCounterUint64(w, "kvroute_index_queries_invalid_total", s.seen.invalid.Load())
}

// Close stops answering: once it returns, the NATS server sends this
// instance no more queries (a query already received and not yet answered
// is dropped; its router times out and routes it with zero overlap).
// Idempotent.
func (s *IndexServer) Close() error {
	if s == nil {
		return nil
	}
	var errs []error
	for _, sub := range s.subs {
		if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrBadSubscription) && !errors.Is(err, nats.ErrConnectionClosed) {
			errs = append(errs, err)
		}
	}
	if s.nc != nil && s.nc.IsConnected() {
		if err := s.nc.FlushTimeout(2 * time.Second); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// RemoteIndexConfig configures a RemoteIndex.
type RemoteIndexConfig struct {
	// Subject is the query subject (plane.IndexSubject).
	Subject string
	// Timeout bounds one batch query (--remote-indexer-timeout). Default
	// DefaultRemoteTimeout.
	Timeout time.Duration
	// LogEvery bounds the failure log to one line per period (with the
	// count since the last line). Default 10 s.
	LogEvery time.Duration
	Logger   *slog.Logger
}

// DefaultRemoteTimeout is the default --remote-indexer-timeout: a lookup
// takes ~100 µs on loopback (docs/decisions/0030-served-index.md), so 20 ms is far above a
// healthy answer yet keeps a dead indexer from adding visible latency to
// every decision batch.
const DefaultRemoteTimeout = 20 * time.Millisecond

// RemoteIndex looks prompts up in a serving index over NATS (the router's
// --use-remote-indexer): one request per batch, answered by one of the
// serving instances (a queue group spreads them). A batch whose query fails
// or times out gets zero overlap for every prompt; each such prompt is
// counted by reason and the failures are logged at most once per LogEvery.
//
// MatchBatch and RecordDecision are meant for one goroutine (the router's
// batcher): they reuse scratch buffers. WriteMetrics is goroutine-safe.
type RemoteIndex struct {
	cfg RemoteIndexConfig
	nc  *nats.Conn

	buf   []byte
	reply plane.QueryReply
	// The reply inbox (request): subscribed at the first query.
	inbox   string
	replyTo string
	sub     *nats.Subscription
	ch      chan *nats.Msg
	seq     uint64
	timer   *time.Timer
	// noTiers: the serving index refused plane.FlagTiers (an older
	// build); ask without it from then on.
	noTiers bool

	// Workers has its own scratch: it runs on its own goroutine.
	wmu    sync.Mutex
	wbuf   []byte
	wreply plane.QueryReply

	lookups, records, recordErrs          atomic.Uint64
	timeouts, noResponders, otherFailures atomic.Uint64
	disconnected                          atomic.Uint64
	lastLog                               time.Time
	unlogged                              uint64
}

// NewRemoteIndex returns a RemoteIndex querying over nc.
func NewRemoteIndex(nc *nats.Conn, cfg RemoteIndexConfig) *RemoteIndex {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultRemoteTimeout
	}
	if cfg.LogEvery <= 0 {
		cfg.LogEvery = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &RemoteIndex{cfg: cfg, nc: nc}
}

// MatchBatch fills every request's Overlaps from the remote index. On
// failure every request's Overlaps are left empty, the failure is counted
// and the error returned (callers route with zero overlap).
func (r *RemoteIndex) MatchBatch(reqs []shard.MatchRequest) error {
	for i := range reqs {
		reqs[i].Overlaps = reqs[i].Overlaps[:0]
	}
	if len(reqs) == 0 {
		return nil
	}
	r.lookups.Add(uint64(len(reqs)))
	err := r.matchBatch(reqs)
	if err != nil {
		for i := range reqs {
			reqs[i].Overlaps = reqs[i].Overlaps[:0]
		}
		r.failed(len(reqs), err)
	}
	return err
}

func (r *RemoteIndex) matchBatch(reqs []shard.MatchRequest) error {
	flags := plane.FlagTiers // per-tier overlaps, so that tiers weigh as with a local index
	if r.noTiers {
		flags = 0
	}
	if err := r.appendMatch(reqs, flags); err != nil {
		return err
	}
	msg, err := r.request(r.buf)
	if err != nil {
		return err
	}
	retry, err := r.takeMatch(msg.Data, reqs, flags)
	if retry {
		// An older serving index that knows no tiers: device overlaps
		// only from now on (this batch is asked again at once).
		r.noTiers = true
		r.cfg.Logger.Warn("the serving index answers no per-tier overlaps (an older kvroute): routing on device overlaps only", "subject", r.cfg.Subject)
		return r.matchBatch(reqs)
	}
	return err
}

// appendMatch encodes the query of reqs into r.buf. With takeMatch, the
// part of a lookup that is this package's own: it allocates nothing once
// r's scratch has grown to the batch (TestAllocsRemoteMatch).
func (r *RemoteIndex) appendMatch(reqs []shard.MatchRequest, flags uint16) error {
	var err error
	if r.buf, err = plane.AppendMatchHeaderFlags(r.buf[:0], "", "", len(reqs), flags); err != nil {
		return err
	}
	for i := range reqs {
		r.buf = plane.AppendMatchPrompt(r.buf, reqs[i].Hashes)
	}
	return nil
}

// takeMatch decodes the reply to the query of reqs into their Overlaps.
// retry: the serving index refused the flags (an older build).
func (r *RemoteIndex) takeMatch(data []byte, reqs []shard.MatchRequest, flags uint16) (retry bool, err error) {
	if err := plane.DecodeQueryReply(data, plane.QueryMatch, &r.reply); err != nil {
		return false, err
	}
	if r.reply.Status != plane.ReplyOK && flags != 0 && strings.Contains(r.reply.Err, "flags") {
		return true, nil
	}
	if r.reply.Status != plane.ReplyOK {
		return false, fmt.Errorf("remote index: %s", r.reply.Err)
	}
	if len(r.reply.Ends) != len(reqs) {
		return false, fmt.Errorf("remote index answered %d prompts for %d", len(r.reply.Ends), len(reqs))
	}
	for i := range reqs {
		reqs[i].Overlaps = append(reqs[i].Overlaps, r.reply.Prompt(i)...)
	}
	return false, nil
}

// request publishes data on the query subject with a reply subject of this
// RemoteIndex's own and waits up to Timeout for the answer. Unlike
// nats.Conn.Request, whose replies pass through a subscription goroutine
// and a map of per-request channels, the connection's reader hands the
// answer straight to the channel this goroutine waits on; and the reply
// subject stays the same from one request to the next (only one is in
// flight), so the NATS server routes the answers from its subject cache
// instead of matching a new subject each time. A request that gets no
// answer retires its reply subject: a late answer then arrives on a subject
// no later request waits on and is dropped.
func (r *RemoteIndex) request(data []byte) (*nats.Msg, error) {
	if r.sub == nil {
		inbox := r.nc.NewInbox()
		ch := make(chan *nats.Msg, 16)
		sub, err := r.nc.ChanSubscribe(inbox+".*", ch)
		if err != nil {
			return nil, err
		}
		r.inbox, r.ch, r.sub = inbox+".", ch, sub
		r.timer = time.NewTimer(time.Hour)
		r.nextReply()
	}
	if !r.nc.IsConnected() {
		// nats.go would buffer the query until it reconnects: no answer
		// can come before Timeout, so do not wait for one.
		return nil, nats.ErrDisconnected
	}
	if err := r.nc.PublishRequest(r.cfg.Subject, r.replyTo, data); err != nil {
		r.nextReply()
		return nil, err
	}
	r.timer.Reset(r.cfg.Timeout)
	defer r.timer.Stop()
	for {
		select {
		case m := <-r.ch:
			if m.Subject != r.replyTo {
				continue // the late answer to an earlier request that timed out
			}
			if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
				return nil, nats.ErrNoResponders
			}
			return m, nil
		case <-r.timer.C:
			r.nextReply()
			return nil, nats.ErrTimeout
		}
	}
}

// nextReply retires the reply subject for a new one.
func (r *RemoteIndex) nextReply() {
	r.seq++
	r.replyTo = r.inbox + strconv.FormatUint(r.seq, 36)
}

func (r *RemoteIndex) failed(n int, err error) {
	switch {
	case errors.Is(err, nats.ErrTimeout):
		r.timeouts.Add(uint64(n))
	case errors.Is(err, nats.ErrNoResponders):
		r.noResponders.Add(uint64(n))
	case errors.Is(err, nats.ErrDisconnected):
		r.disconnected.Add(uint64(n))
	default:
		r.otherFailures.Add(uint64(n))
	}
	r.unlogged += uint64(n)
	if now := time.Now(); now.Sub(r.lastLog) >= r.cfg.LogEvery {
		r.cfg.Logger.Warn("remote index query failed: prompts routed with zero overlap", "subject", r.cfg.Subject,
			"err", err, "prompts_since_last_log", r.unlogged, "timeout", r.cfg.Timeout)
		r.lastLog, r.unlogged = now, 0
	}
}

// RecordDecision sends a routing decision to the serving index
// (approximate mode), without waiting for an answer. Local and sequence
// hashes must come 1:1.
func (r *RemoteIndex) RecordDecision(worker wire.WorkerKey, local []wire.BlockHash, seq []wire.SeqHash) error {
	var err error
	if r.buf, err = plane.AppendRecordQuery(r.buf[:0], "", "", worker, local, seq); err != nil {
		r.recordErrs.Add(1)
		return err
	}
	if err := r.nc.Publish(r.cfg.Subject, r.buf); err != nil {
		r.recordErrs.Add(1)
		return err
	}
	r.records.Add(1)
	return nil
}

// Workers appends every worker key the remote index holds, with its tree
// size (Blocks 0), to dst: the tie-break between workers a request does not
// overlap, which a match answer carries only for the workers it overlaps.
// It sends its own query (one NATS request, bounded by Timeout), so it may
// run on any goroutine, one call at a time per RemoteIndex (calls are
// serialized).
func (r *RemoteIndex) Workers(dst []radix.Overlap) ([]radix.Overlap, error) {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	r.wbuf = plane.AppendWorkersQuery(r.wbuf[:0])
	msg, err := r.nc.Request(r.cfg.Subject, r.wbuf, r.cfg.Timeout)
	if err != nil {
		return dst, err
	}
	if err := plane.DecodeQueryReply(msg.Data, plane.QueryWorkers, &r.wreply); err != nil {
		return dst, err
	}
	if r.wreply.Status != plane.ReplyOK {
		return dst, fmt.Errorf("remote index: %s", r.wreply.Err)
	}
	if len(r.wreply.Ends) != 1 {
		return dst, fmt.Errorf("remote index answered %d worker lists for 1", len(r.wreply.Ends))
	}
	return append(dst, r.wreply.Prompt(0)...), nil
}

// Failures returns the prompts routed with zero overlap because a query
// failed.
func (r *RemoteIndex) Failures() uint64 {
	return r.timeouts.Load() + r.noResponders.Load() + r.disconnected.Load() + r.otherFailures.Load()
}

// WriteMetrics writes the remote-lookup counters (QueryFamilies).
func (r *RemoteIndex) WriteMetrics(w io.Writer) {
	metrics.WriteCounterUint64(w, "kvroute_remote_index_lookups_total", r.lookups.Load())
	metrics.WriteCounterUint64(w, `kvroute_remote_index_failures_total{reason="timeout"}`, r.timeouts.Load())
	metrics.WriteCounterUint64(w, `kvroute_remote_index_failures_total{reason="no_responders"}`, r.noResponders.Load())
	metrics.WriteCounterUint64(w, `kvroute_remote_index_failures_total{reason="disconnected"}`, r.disconnected.Load())
	metrics.WriteCounterUint64(w, `kvroute_remote_index_failures_total{reason="error"}`, r.otherFailures.Load())
	metrics.WriteCounterUint64(w, "kvroute_remote_index_records_total", r.records.Load())
	metrics.WriteCounterUint64(w, "kvroute_remote_index_record_errors_total", r.recordErrs.Load())
}
