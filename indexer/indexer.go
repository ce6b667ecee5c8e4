package indexer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/ingest"
	"github.com/kvroute/kvroute/ingest/recovery"
	"github.com/kvroute/kvroute/internal/promtext"
	"github.com/kvroute/kvroute/node"
	"github.com/kvroute/kvroute/radix"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/plane"
	"github.com/kvroute/kvroute/wire/proxy"
)

// DefaultTenant is the tenant of requests that name none (as in Dynamo).
const DefaultTenant = "default"

// Config configures a Service. Plain data; cmd/kvroute fills it from the
// flags it shares with `kvroute serve`.
type Config struct {
	// Node configures NATS, the index and ingest; Node.BlockSize and
	// Node.Subjects must be set.
	Node node.Config
	// HTTPAddr is the HTTP API listener (--http-addr). Port 0 picks one.
	HTTPAddr string
	// Peers are other indexers' base URLs (--peers); at start the first
	// that answers GET /dump is loaded before the service is ready.
	Peers []string
	// PeerTimeout bounds loading one peer's dump. Default 30 s.
	PeerTimeout time.Duration
	// ID names this instance in NATS ping replies.
	ID string
	// MaxBodyBytes limits a request body. Default 16 MiB.
	MaxBodyBytes int
	Logger       *slog.Logger
}

// Service is a running standalone indexer. Close stops it.
type Service struct {
	*node.Node
	// Server answers the NATS index queries.
	Server *node.IndexServer

	cfg   Config
	ln    net.Listener
	http  *fasthttp.Server
	ready atomic.Bool
	// up: the node and the registrations are started (the handlers may
	// use them); until then every request is answered 503 with
	// startingWhat.
	up           atomic.Bool
	startingWhat atomic.Pointer[string]

	closeOnce sync.Once
	closeErr  error
	closing   atomic.Bool

	mu      sync.Mutex
	workers map[uint64]*registered // registered over HTTP

	requests [numEndpoints]atomic.Uint64
	errors   atomic.Uint64

	// NATS registrations (registrations.go).
	regMu      sync.Mutex
	regs       *plane.Registry
	changes    []plane.Change
	regStop    chan struct{}
	regDone    chan struct{}
	badControl atomic.Uint64
	// planeDown and planeLosses are what heartbeatsArriveLocked last saw
	// of the NATS connection (guarded by regMu).
	planeDown   bool
	planeLosses uint64
}

type registered struct {
	Model     string
	Tenant    string
	Endpoints map[uint32]string // registered over HTTP, by dp rank
	viaNATS   bool              // known from NATS registrations only
}

var registry = promtext.NewRegistry(indexerFamilies, shard.MetricFamilies, ingest.MetricFamilies, node.MetricFamilies,
	node.SnapshotFamilies, node.QueryFamilies, recovery.MetricFamilies, promtext.ProcessFamilies)

var indexerFamilies = []promtext.Family{
	{Name: "kvroute_indexer_http_requests_total", Type: promtext.Counter, Help: "Indexer HTTP requests, by endpoint"},
	{Name: "kvroute_indexer_http_errors_total", Type: promtext.Counter, Help: "Indexer HTTP requests answered 4xx or 5xx"},
	{Name: "kvroute_indexer_ready", Type: promtext.Gauge, Help: "1 once the indexer loaded its peer's dump and serves queries"},
	{Name: "kvroute_indexer_registered_workers", Type: promtext.Gauge, Help: "Workers registered over HTTP (POST /register)"},
	{Name: "kvroute_indexer_control_messages_invalid_total", Type: promtext.Counter, Help: "NATS worker registrations ignored (undecodable, or another block size)"},
}

type endpoint uint8

const (
	epRegister endpoint = iota
	epUnregister
	epWorkers
	epQuery
	epQueryByHash
	epDump
	epHealth
	epMetrics
	epReady
	epOther
	numEndpoints
)

var endpointNames = [numEndpoints]string{"register", "unregister", "workers", "query", "query_by_hash", "dump", "health", "metrics", "ready", "other"}

// Start starts an indexer: the HTTP listener, the node (NATS, index,
// ingest), the peer load, then the NATS query server. On error everything
// started is stopped and the error names the flag at fault.
func Start(cfg Config) (*Service, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.PeerTimeout <= 0 {
		cfg.PeerTimeout = 30 * time.Second
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 16 << 20
	}
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = "127.0.0.1:8090"
	}
	if cfg.Node.BlockSize <= 0 {
		return nil, errors.New("--block-size must be > 0")
	}
	if cfg.Node.NoEvents {
		return nil, errors.New("kvroute indexer ingests KV events; --no-kv-events is a router mode (serve --serve-indexer --no-kv-events)")
	}
	cfg.Node.Logger = cfg.Logger
	s := &Service{cfg: cfg, workers: map[uint64]*registered{}}
	if err := s.start(); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Service) start() error {
	var err error
	if s.ln, err = net.Listen("tcp", s.cfg.HTTPAddr); err != nil {
		return fmt.Errorf("--http-addr %s: %w", s.cfg.HTTPAddr, err)
	}
	// The port answers from now: 503 "starting: ..." until the node is up
	// (answerStarting), then the API with /health and /ready saying why
	// it is not ready yet.
	s.setStarting("connecting to NATS")
	s.http = &fasthttp.Server{Handler: s.handle, Name: "kvroute-indexer", MaxRequestBodySize: s.cfg.MaxBodyBytes,
		ReadTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, NoDefaultServerHeader: true}
	go func() {
		if err := s.http.Serve(s.ln); err != nil {
			s.cfg.Logger.Error("indexer HTTP listener stopped", "err", err)
		}
	}()
	nc := s.cfg.Node
	nc.Starting = s.setStarting
	if s.Node, err = node.Start(nc); err != nil {
		return err
	}
	if err := s.subscribeRegistrations(); err != nil {
		return fmt.Errorf("NATS registrations: %w", err)
	}
	s.up.Store(true)
	if len(s.cfg.Peers) > 0 {
		s.setStarting("loading a peer's dump (--peers)")
		if err := s.loadPeers(); err != nil {
			return err
		}
	}
	if s.Server, err = node.ServeIndex(s.NC, s.Index, node.IndexServerConfig{Subject: plane.IndexSubject(s.cfg.Node.Subjects),
		ID: s.cfg.ID, Logger: s.cfg.Logger}); err != nil {
		return err
	}
	s.ready.Store(true)
	s.cfg.Logger.Info("kvroute indexer serving", "http", s.Addr(), "nats", s.NATSURL, "subject", plane.IndexSubject(s.cfg.Node.Subjects))
	return nil
}

// Addr is the HTTP listener's address (host:port).
func (s *Service) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Ready reports whether the peer dump is loaded and queries are served.
func (s *Service) Ready() bool { return s.notReady() == "" }

// notReady says why the indexer is not ready, or "" when it is: starting
// (what it waits for: NATS, JetStream, a peer's dump), or its event plane
// is down (node.Node.EventPlane: NATS lost, the stream being replayed).
func (s *Service) notReady() string {
	if !s.up.Load() || !s.ready.Load() {
		if s.closing.Load() {
			return "shutting down"
		}
		return "starting: " + *s.startingWhat.Load()
	}
	if err := s.Node.EventPlane(); err != nil {
		return "event plane down: " + err.Error()
	}
	return ""
}

// setStarting records what the indexer waits for while it starts
// (node.Config.Starting).
func (s *Service) setStarting(what string) {
	if old := s.startingWhat.Swap(&what); old != nil && *old == what {
		return
	}
	s.cfg.Logger.Info("starting: " + what)
}

// answerStarting answers a request that came before the node was up.
func (s *Service) answerStarting(ctx *fasthttp.RequestCtx, path string) {
	why := s.notReady()
	ctx.SetConnectionClose()
	ctx.Response.Header.Set("Retry-After", "1")
	if path == "/health" || path == "/ready" {
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
		writeJSON(ctx, map[string]string{"status": why})
		return
	}
	proxy.WriteError(ctx, fasthttp.StatusServiceUnavailable, why)
}

// Close stops the HTTP API, the query server, then the node. Idempotent.
func (s *Service) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		s.closing.Store(true)
		s.ready.Store(false)
		if s.http != nil {
			errs = append(errs, s.http.Shutdown())
		} else if s.ln != nil {
			_ = s.ln.Close()
		}
		if s.Server != nil {
			errs = append(errs, s.Server.Close())
		}
		if s.regStop != nil {
			close(s.regStop)
			<-s.regDone
		}
		if s.Node != nil {
			errs = append(errs, s.Node.Close())
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

func (s *Service) handle(ctx *fasthttp.RequestCtx) {
	path := ctx.Path()
	if !s.up.Load() {
		s.answerStarting(ctx, string(path))
		s.requests[epOther].Add(1)
		s.errors.Add(1)
		return
	}
	ep := endpointOf(path)
	switch {
	case ep == epOther:
		proxy.WriteError(ctx, fasthttp.StatusNotFound, "no such endpoint "+string(path)+" (see docs/reference/http-api.md)")
	case string(ctx.Method()) != routeMethod[ep]:
		ep = epOther // a known path with another method counts as other
		proxy.WriteError(ctx, fasthttp.StatusMethodNotAllowed, "method "+string(ctx.Method())+" not allowed on "+string(path))
	case ep == epRegister:
		s.register(ctx)
	case ep == epUnregister:
		s.unregister(ctx)
	case ep == epWorkers:
		s.listWorkers(ctx)
	case ep == epQuery:
		s.query(ctx, false)
	case ep == epQueryByHash:
		s.query(ctx, true)
	case ep == epDump:
		s.dump(ctx)
	case ep == epHealth, ep == epReady:
		if why := s.notReady(); why == "" {
			writeJSON(ctx, map[string]string{"status": "ok"})
		} else {
			ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
			writeJSON(ctx, map[string]string{"status": why})
		}
	case ep == epMetrics:
		ctx.SetContentType("text/plain; version=0.0.4")
		s.WritePrometheus(ctx)
	}
	s.requests[ep].Add(1)
	if ctx.Response.StatusCode() >= 400 {
		s.errors.Add(1)
	}
}

func writeJSON(ctx *fasthttp.RequestCtx, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		proxy.WriteError(ctx, fasthttp.StatusInternalServerError, err.Error())
		return
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

func badRequest(ctx *fasthttp.RequestCtx, format string, args ...any) {
	proxy.WriteError(ctx, fasthttp.StatusBadRequest, fmt.Sprintf(format, args...))
}

// decode decodes the JSON body into v, rejecting unknown fields so that a
// misspelled field is an error rather than silently ignored.
func decode(ctx *fasthttp.RequestCtx, v any) bool {
	dec := json.NewDecoder(strings.NewReader(string(ctx.PostBody())))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		badRequest(ctx, "invalid JSON body: %v", err)
		return false
	}
	return true
}

type registerReq struct {
	InstanceID *uint64 `json:"instance_id"`
	Endpoint   string  `json:"endpoint"`
	ModelName  string  `json:"model_name"`
	BlockSize  int     `json:"block_size"`
	TenantID   string  `json:"tenant_id"`
	DpRank     uint32  `json:"dp_rank"`
	Replay     string  `json:"replay_endpoint"`
}

func (s *Service) register(ctx *fasthttp.RequestCtx) {
	var r registerReq
	if !decode(ctx, &r) {
		return
	}
	switch {
	case r.InstanceID == nil || *r.InstanceID == 0:
		badRequest(ctx, "instance_id is required (a worker id > 0)")
		return
	case r.Endpoint == "":
		badRequest(ctx, "endpoint is required (the engine's ZMQ PUB socket, tcp://host:port)")
		return
	case r.ModelName == "":
		badRequest(ctx, "model_name is required")
		return
	case r.BlockSize != s.cfg.Node.BlockSize:
		badRequest(ctx, "block_size %d differs from this indexer's --block-size %d", r.BlockSize, s.cfg.Node.BlockSize)
		return
	}
	if r.TenantID == "" {
		r.TenantID = DefaultTenant
	}
	id := *r.InstanceID
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.workers[id]
	if w != nil && w.viaNATS {
		w = nil // HTTP registration takes over
	}
	if w != nil && (w.Model != r.ModelName || w.Tenant != r.TenantID) {
		badRequest(ctx, "instance %d is registered for model %q tenant %q; unregister it first", id, w.Model, w.Tenant)
		return
	}
	if err := s.Ingest.AddZMQ(ingest.ZMQWorker{Worker: id, DpRank: r.DpRank, Endpoint: r.Endpoint, Replay: r.Replay}); err != nil {
		badRequest(ctx, "cannot subscribe to %s: %v", r.Endpoint, err)
		return
	}
	if w == nil {
		w = &registered{Model: r.ModelName, Tenant: r.TenantID, Endpoints: map[uint32]string{}}
		s.workers[id] = w
	}
	w.Endpoints[r.DpRank] = r.Endpoint
	writeJSON(ctx, map[string]any{"status": "ok", "instance_id": id, "model_name": w.Model, "tenant_id": w.Tenant, "dp_rank": r.DpRank})
}

type unregisterReq struct {
	InstanceID *uint64 `json:"instance_id"`
	ModelName  string  `json:"model_name"`
	TenantID   string  `json:"tenant_id"`
	DpRank     *uint32 `json:"dp_rank"`
}

func (s *Service) unregister(ctx *fasthttp.RequestCtx) {
	var r unregisterReq
	if !decode(ctx, &r) {
		return
	}
	if r.InstanceID == nil || r.ModelName == "" {
		badRequest(ctx, "instance_id and model_name are required")
		return
	}
	id := *r.InstanceID
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.workers[id]
	if w == nil || w.viaNATS || w.Model != r.ModelName || (r.TenantID != "" && r.TenantID != w.Tenant) {
		proxy.WriteError(ctx, fasthttp.StatusNotFound, fmt.Sprintf("instance %d is not registered for model %q", id, r.ModelName))
		return
	}
	s.Ingest.RemoveZMQ(id)
	if r.DpRank != nil {
		if _, ok := w.Endpoints[*r.DpRank]; !ok {
			proxy.WriteError(ctx, fasthttp.StatusNotFound, fmt.Sprintf("instance %d has no dp_rank %d", id, *r.DpRank))
			return
		}
		delete(w.Endpoints, *r.DpRank)
		_, _ = s.Index.RemoveDpRank(wire.WorkerKey{Worker: id, Dp: *r.DpRank})
		// RemoveZMQ drops every rank's subscription: resubscribe the others.
		for rank, ep := range w.Endpoints {
			if err := s.Ingest.AddZMQ(ingest.ZMQWorker{Worker: id, DpRank: rank, Endpoint: ep}); err != nil {
				s.cfg.Logger.Error("cannot resubscribe to a worker's ZMQ events", "worker", id, "rank", rank, "err", err)
			}
		}
	}
	if r.DpRank == nil || len(w.Endpoints) == 0 {
		delete(s.workers, id)
		s.Ingest.Forget(id)
		_, _ = s.Index.RemoveWorker(id)
	}
	writeJSON(ctx, map[string]any{"status": "ok", "instance_id": id})
}

type workerDoc struct {
	InstanceID uint64            `json:"instance_id"`
	ModelName  string            `json:"model_name"`
	TenantID   string            `json:"tenant_id"`
	Endpoints  map[string]string `json:"endpoints"`
}

func (s *Service) listWorkers(ctx *fasthttp.RequestCtx) {
	s.mu.Lock()
	out := make([]workerDoc, 0, len(s.workers))
	for id, w := range s.workers {
		if w.viaNATS {
			continue
		}
		d := workerDoc{InstanceID: id, ModelName: w.Model, TenantID: w.Tenant, Endpoints: map[string]string{}}
		for rank, ep := range w.Endpoints {
			d.Endpoints[strconv.FormatUint(uint64(rank), 10)] = ep
		}
		out = append(out, d)
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b workerDoc) int { return int(a.InstanceID - b.InstanceID) })
	writeJSON(ctx, out)
}

type queryReq struct {
	TokenIDs    []uint32 `json:"token_ids"`
	BlockHashes []uint64 `json:"block_hashes"`
	ModelName   string   `json:"model_name"`
	TenantID    string   `json:"tenant_id"`
	LoraName    string   `json:"lora_name"`
}

// QueryResponse is the answer of /query and /query_by_hash (see the
// package doc).
type QueryResponse struct {
	Scores      map[string]map[string]uint64 `json:"scores"`
	Frequencies []int                        `json:"frequencies"`
	TreeSizes   map[string]map[string]uint32 `json:"tree_sizes"`
}

func (s *Service) query(ctx *fasthttp.RequestCtx, byHash bool) {
	var r queryReq
	if !decode(ctx, &r) {
		return
	}
	if r.ModelName == "" {
		badRequest(ctx, "model_name is required")
		return
	}
	if r.TenantID == "" {
		r.TenantID = DefaultTenant
	}
	var hashes []wire.BlockHash
	if byHash {
		if r.TokenIDs != nil || r.LoraName != "" {
			badRequest(ctx, "/query_by_hash takes block_hashes (token_ids and lora_name belong to /query)")
			return
		}
		if r.BlockHashes == nil {
			badRequest(ctx, "block_hashes is required")
			return
		}
		hashes = make([]wire.BlockHash, len(r.BlockHashes))
		for i, h := range r.BlockHashes {
			hashes[i] = wire.BlockHash(h)
		}
	} else {
		if r.BlockHashes != nil {
			badRequest(ctx, "/query takes token_ids (block_hashes belong to /query_by_hash)")
			return
		}
		if r.TokenIDs == nil {
			badRequest(ctx, "token_ids is required")
			return
		}
		hashes = wire.LocalHashes(nil, r.TokenIDs, s.cfg.Node.BlockSize, wire.LoRASeed(r.LoraName))
	}
	ovs, err := s.Index.Match(nil, hashes)
	if err != nil {
		proxy.WriteError(ctx, fasthttp.StatusServiceUnavailable, err.Error())
		return
	}
	writeJSON(ctx, s.scores(ovs, r.ModelName, r.TenantID))
}

// scores turns overlaps into the API's answer, keeping the workers of
// model and tenant (and those not registered over HTTP).
func (s *Service) scores(ovs []radix.Overlap, model, tenant string) QueryResponse {
	resp := QueryResponse{Scores: map[string]map[string]uint64{}, Frequencies: []int{}, TreeSizes: map[string]map[string]uint32{}}
	s.mu.Lock()
	defer s.mu.Unlock()
	bs := uint64(s.cfg.Node.BlockSize)
	for _, o := range ovs {
		if w := s.workers[o.Worker.Worker]; w != nil && (w.Model != model || w.Tenant != tenant) {
			continue
		}
		id, dp := strconv.FormatUint(o.Worker.Worker, 10), strconv.FormatUint(uint64(o.Worker.Dp), 10)
		if resp.Scores[id] == nil {
			resp.Scores[id], resp.TreeSizes[id] = map[string]uint64{}, map[string]uint32{}
		}
		resp.Scores[id][dp] = uint64(o.Blocks) * bs
		resp.TreeSizes[id][dp] = o.TreeSize
		for i := range int(o.Blocks) {
			if i == len(resp.Frequencies) {
				resp.Frequencies = append(resp.Frequencies, 0)
			}
			resp.Frequencies[i]++
		}
	}
	return resp
}

// DumpEvent is one event of GET /dump: a worker key's stored blocks in
// prefix order.
type DumpEvent struct {
	WorkerID   uint64      `json:"worker_id"`
	DpRank     uint32      `json:"dp_rank"`
	ParentHash *uint64     `json:"parent_hash,omitempty"`
	Blocks     []DumpBlock `json:"blocks"`
	LoraName   string      `json:"lora_name,omitempty"`
}

// DumpBlock is a stored block: its engine hash and local hash.
type DumpBlock struct {
	EngineHash uint64 `json:"engine_hash"`
	LocalHash  uint64 `json:"local_hash"`
}

func (s *Service) dump(ctx *fasthttp.RequestCtx) {
	evs, err := s.Index.Dump(nil)
	if err != nil {
		proxy.WriteError(ctx, fasthttp.StatusServiceUnavailable, err.Error())
		return
	}
	out := map[string][]DumpEvent{}
	s.mu.Lock()
	for _, e := range evs {
		if e.Kind != wire.KindStored {
			continue
		}
		key := "default:" + DefaultTenant
		if w := s.workers[e.Worker.Worker]; w != nil {
			key = w.Model + ":" + w.Tenant
		}
		d := DumpEvent{WorkerID: e.Worker.Worker, DpRank: e.Worker.Dp, LoraName: string(e.LoRA), Blocks: make([]DumpBlock, len(e.Blocks))}
		if e.HasParent {
			p := uint64(e.Parent)
			d.ParentHash = &p
		}
		for i, b := range e.Blocks {
			d.Blocks[i] = DumpBlock{EngineHash: uint64(b.Engine), LocalHash: uint64(b.Local)}
		}
		out[key] = append(out[key], d)
	}
	s.mu.Unlock()
	writeJSON(ctx, out)
}

// loadPeers loads the first answering peer's dump into the index.
func (s *Service) loadPeers() error {
	var errs []error
	for _, peer := range s.cfg.Peers {
		n, err := s.loadPeer(peer)
		if err == nil {
			s.cfg.Logger.Info("loaded a peer's index", "peer", peer, "events", n)
			return nil
		}
		s.cfg.Logger.Warn("cannot load a peer's index", "peer", peer, "err", err)
		errs = append(errs, fmt.Errorf("%s: %w", peer, err))
	}
	return fmt.Errorf("--peers: no peer's dump could be loaded: %w", errors.Join(errs...))
}

func (s *Service) loadPeer(base string) (int, error) {
	c := &fasthttp.Client{ReadTimeout: s.cfg.PeerTimeout, WriteTimeout: s.cfg.PeerTimeout, MaxResponseBodySize: 1 << 30, NoDefaultUserAgentHeader: true}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(strings.TrimRight(base, "/") + "/dump")
	if err := c.DoTimeout(req, resp, s.cfg.PeerTimeout); err != nil {
		return 0, err
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return 0, fmt.Errorf("GET /dump: status %d", resp.StatusCode())
	}
	var dump map[string][]DumpEvent
	if err := json.Unmarshal(resp.Body(), &dump); err != nil {
		return 0, fmt.Errorf("GET /dump: %w", err)
	}
	var evs []wire.Event
	for key, list := range dump {
		model, tenant, _ := strings.Cut(key, ":")
		for _, d := range list {
			e := wire.Event{Worker: wire.WorkerKey{Worker: d.WorkerID, Dp: d.DpRank}, Kind: wire.KindStored, Blocks: make([]wire.Block, len(d.Blocks))}
			if d.ParentHash != nil {
				e.HasParent, e.Parent = true, wire.EngineHash(*d.ParentHash)
			}
			if d.LoraName != "" {
				e.LoRA = []byte(d.LoraName)
			}
			for i, b := range d.Blocks {
				e.Blocks[i] = wire.Block{Engine: wire.EngineHash(b.EngineHash), Local: wire.BlockHash(b.LocalHash)}
			}
			evs = append(evs, e)
			if model != "default" || tenant != DefaultTenant {
				s.mu.Lock()
				if s.workers[d.WorkerID] == nil {
					s.workers[d.WorkerID] = &registered{Model: model, Tenant: tenant, Endpoints: map[uint32]string{}, viaNATS: true}
				}
				s.mu.Unlock()
			}
		}
	}
	if err := s.Index.Apply(evs); err != nil {
		return 0, err
	}
	return len(evs), s.Index.Flush()
}

// WritePrometheus writes every metric of the process: the indexer's HTTP
// counters, the index's, ingest's, the NATS node's and the query server's.
func (s *Service) WritePrometheus(w io.Writer) {
	writers := []func(io.Writer){s.writeSamples, promtext.WriteProcess}
	if s.Node != nil {
		writers = append(writers, s.Index.WriteMetrics, s.Ingest.WriteMetrics, s.Node.WriteMetrics)
		if s.Recovery != nil {
			writers = append(writers, s.Recovery.WriteMetrics)
		}
	}
	if srv := s.Server; srv != nil {
		writers = append(writers, srv.WriteMetrics)
	}
	registry.Write(w, writers...)
}

func (s *Service) writeSamples(w io.Writer) {
	for ep := range numEndpoints {
		fmt.Fprintf(w, "kvroute_indexer_http_requests_total{endpoint=%q} %d\n", endpointNames[ep], s.requests[ep].Load())
	}
	fmt.Fprintf(w, "kvroute_indexer_http_errors_total %d\n", s.errors.Load())
	ready := 0
	if s.Ready() {
		ready = 1
	}
	fmt.Fprintf(w, "kvroute_indexer_ready %d\n", ready)
	s.mu.Lock()
	n := 0
	for _, w := range s.workers {
		if !w.viaNATS {
			n++
		}
	}
	s.mu.Unlock()
	fmt.Fprintf(w, "kvroute_indexer_registered_workers %d\n", n)
	fmt.Fprintf(w, "kvroute_indexer_control_messages_invalid_total %d\n", s.badControl.Load())
}
