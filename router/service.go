package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/puzpuzpuz/xsync/v4"
	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/ingest/recovery"
	"github.com/kvroute/kvroute/internal/handover"
	"github.com/kvroute/kvroute/internal/linger"
	"github.com/kvroute/kvroute/node"
	"github.com/kvroute/kvroute/radix"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/openai"
	"github.com/kvroute/kvroute/wire/plane"
	"github.com/kvroute/kvroute/wire/proxy"
)

// ServiceConfig configures a whole router process: the shared Node (NATS,
// the sharded index, KV-event ingest), the Router and its HTTP listeners.
// Plain data; cmd/kvroute fills it from flags.
type ServiceConfig struct {
	Router Config
	// Node configures NATS, the index and ingest; its BlockSize, Subjects
	// and NoEvents are taken from Router.
	Node node.Config

	// HTTPAddr is the API listener (--http-addr). Default 127.0.0.1:8000;
	// port 0 picks a free port (see Service.Addr).
	HTTPAddr string
	// AdminAddr serves /debug/pprof/* and /metrics when Pprof is set
	// (--admin-addr, --pprof).
	AdminAddr string
	Pprof     bool

	// ServeIndexer answers index queries from other routers on NATS
	// (--serve-indexer; node.IndexServer on plane.IndexSubject).
	ServeIndexer bool
	// UseRemoteIndexer keeps no index: no KV-event ingest, lookups (and,
	// in approximate mode, decisions) go to the serving indexes over NATS
	// (--use-remote-indexer; node.RemoteIndex). Exclusive with
	// ServeIndexer.
	UseRemoteIndexer bool
	// RemoteIndexerTimeout bounds one remote lookup
	// (--remote-indexer-timeout). Default node.DefaultRemoteTimeout.
	RemoteIndexerTimeout time.Duration
	// RemoteTreeInterval is how often a UseRemoteIndexer router asks the
	// serving index for every worker's tree size (the tie-break between
	// workers a request does not overlap; a match answer carries them only
	// for the workers it overlaps). Default DefaultRemoteTreeInterval.
	RemoteTreeInterval time.Duration

	// ShutdownGrace bounds how long Close waits for in-flight requests and
	// streams before cutting them (--shutdown-grace). Default 10 s.
	ShutdownGrace time.Duration
	// ShutdownReadyDelay is the first part of ShutdownGrace, during which
	// /ready answers 503 while the listener still serves, so that load
	// balancers polling /ready stop sending before connections are refused
	// (--shutdown-ready-delay). It ends early once no request has been in
	// flight and none has arrived for half a second: an idle router stops at
	// once. 0 takes min(5 s, ShutdownGrace/2); negative: none. It must be
	// shorter than ShutdownGrace.
	ShutdownReadyDelay time.Duration

	Logger *slog.Logger
}

// Service is a running router process (see ServiceConfig). Its fields are
// for reading; Close stops everything it started.
type Service struct {
	*node.Node
	Router *Router
	// IndexServer answers other routers' index queries (ServeIndexer).
	IndexServer *node.IndexServer
	// Remote is the remote index looked up (UseRemoteIndexer).
	Remote *node.RemoteIndex

	cfg ServiceConfig
	// treeStop and treeDone stop the remote tree-size poller.
	treeStop, treeDone chan struct{}
	http               *fasthttp.Server
	ln                 net.Listener
	admin              *http.Server
	adminLn            net.Listener
	drained            bool
	conns              *xsync.Map[net.Conn, struct{}]
	// shared is the API port, open from the start: early answers 503
	// "starting: ..." (startingWhat) on it until the router serves it.
	shared       *handover.Listener
	early        *fasthttp.Server
	earlyView    net.Listener // the view early serves; closed with it
	startingWhat atomic.Pointer[string]
}

// StartService starts a router process. On error everything started so far
// is stopped (no listener, connection or temporary directory is left
// behind) and the error names the flag at fault.
func StartService(cfg ServiceConfig) (*Service, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = "127.0.0.1:8000"
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = 10 * time.Second
	}
	switch {
	case cfg.ShutdownReadyDelay == 0:
		cfg.ShutdownReadyDelay = min(5*time.Second, cfg.ShutdownGrace/2)
	case cfg.ShutdownReadyDelay < 0:
		cfg.ShutdownReadyDelay = 0
	case cfg.ShutdownReadyDelay >= cfg.ShutdownGrace:
		return nil, fmt.Errorf("--shutdown-ready-delay %v must be shorter than --shutdown-grace %v", cfg.ShutdownReadyDelay, cfg.ShutdownGrace)
	}
	cfg.Router.Logger = cfg.Logger
	cfg.Node.Logger = cfg.Logger
	cfg.Node.BlockSize = cfg.Router.Sched.BlockSize
	cfg.Node.EagleWindows = cfg.Router.EagleWindows
	cfg.Node.Subjects = cfg.Router.Subjects
	cfg.Node.NoEvents = cfg.Router.Approx
	// KV events of workers that never registered are dropped after a grace
	// (node.FleetConfig); static workers do not register.
	cfg.Node.Fleet.Filter = !cfg.Router.Approx
	for _, w := range cfg.Router.Workers {
		cfg.Node.Fleet.Known = append(cfg.Node.Fleet.Known, w.ID)
	}
	for _, z := range cfg.Node.ZMQWorkers {
		cfg.Node.Fleet.Known = append(cfg.Node.Fleet.Known, z.Worker)
	}
	if cfg.ServeIndexer && cfg.UseRemoteIndexer {
		return nil, errors.New("--serve-indexer and --use-remote-indexer are mutually exclusive: a router either serves its index or keeps none and queries a serving one")
	}
	if cfg.UseRemoteIndexer {
		if len(cfg.Node.ZMQWorkers) > 0 {
			return nil, errors.New("--zmq-worker subscribes to KV events; with --use-remote-indexer the router keeps no index (give --zmq-worker to the serving indexer)")
		}
		cfg.Node.NoEvents = true // no ingest: the serving indexes have it
	}
	s := &Service{cfg: cfg, conns: xsync.NewMap[net.Conn, struct{}]()}
	if err := s.start(); err != nil {
		_ = s.stop()
		return nil, err
	}
	cfg.Logger.Info("kvroute serving", "http", s.Addr(), "nats", s.NATSURL, "mode", cfg.Router.Sched.Policy.String(), "approx", cfg.Router.Approx)
	return s, nil
}

func (s *Service) start() error {
	cfg := s.cfg
	// Listeners first: a busy or malformed address is the commonest
	// start-up error and costs nothing to find before NATS is up.
	var err error
	if s.ln, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		return fmt.Errorf("--http-addr %s: %w", cfg.HTTPAddr, err)
	}
	// Connection-level error answers (413, 431, 400) close lingeringly, so
	// that a client still sending reads them (Router.Server).
	s.ln = linger.Listen(s.ln, linger.Config{})
	// The port answers from now: 503 "starting: ..." on every path,
	// /health and /ready included, until the router serves it.
	s.shared = handover.Share(s.ln)
	s.setStarting("connecting to NATS")
	s.early = &fasthttp.Server{Handler: s.answerStarting, Name: "kvroute", NoDefaultServerHeader: true, ReadTimeout: 10 * time.Second,
		IdleTimeout: 10 * time.Second, CloseOnShutdown: true, Logger: fasthttpLogger{cfg.Logger}}
	early, view := s.early, s.shared.View()
	s.earlyView = view
	go func() { _ = early.Serve(view) }()
	cfg.Node.Starting = s.setStarting
	if cfg.Pprof {
		addr := cfg.AdminAddr
		if addr == "" {
			addr = "127.0.0.1:6060"
		}
		if s.adminLn, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("--admin-addr %s: %w", addr, err)
		}
	}
	if s.Node, err = node.Start(cfg.Node); err != nil {
		return err
	}
	s.setStarting("starting the router")
	hooks := Hooks{
		Publish:      s.NC.Publish,
		EventPlane:   s.Node.EventPlane,
		ControlPlane: s.Node.ControlPlane,
		Metrics:      []func(w io.Writer){s.Ingest.WriteMetrics, s.Node.WriteMetrics},
	}
	if s.Node.Recovery != nil {
		hooks.Metrics = append(hooks.Metrics, s.Node.Recovery.WriteMetrics)
		hooks.Repair = func(k wire.WorkerKey) { s.Node.Recovery.Lost(k, recovery.DumpAll) }
	}
	if cfg.UseRemoteIndexer {
		s.Remote = node.NewRemoteIndex(s.NC, node.RemoteIndexConfig{Subject: plane.IndexSubject(cfg.Router.Subjects),
			Timeout: cfg.RemoteIndexerTimeout, Logger: cfg.Logger})
		hooks.Lookup = s.Remote
		hooks.Metrics = append(hooks.Metrics, s.Remote.WriteMetrics)
	} else if !cfg.Router.Approx {
		hooks.IngestRunning = s.Ingest.Running
		hooks.WorkerJoined = s.WorkerJoined
		hooks.WorkerLeft = s.WorkerLeft
	}
	if cfg.ServeIndexer {
		id := cfg.Router.ID
		if id == "" {
			id = fmt.Sprintf("kvroute-%d", os.Getpid())
		}
		if s.IndexServer, err = node.ServeIndex(s.NC, s.Index, node.IndexServerConfig{Subject: plane.IndexSubject(cfg.Router.Subjects),
			Approx: cfg.Router.Approx, ID: id, Logger: cfg.Logger}); err != nil {
			return err
		}
		hooks.Metrics = append(hooks.Metrics, s.IndexServer.WriteMetrics)
	}
	if s.Router, err = New(cfg.Router, s.Index, hooks); err != nil {
		return err
	}
	s.Router.Start()
	if err := s.Router.SubscribeNATS(s.NC); err != nil {
		return fmt.Errorf("NATS control plane: %w", err)
	}
	if s.Remote != nil {
		s.treeStop, s.treeDone = make(chan struct{}), make(chan struct{})
		go s.pollRemoteTrees()
	}

	s.http = s.Router.Server()
	s.http.ConnState = s.trackConn
	go func() {
		if err := s.http.Serve(s.shared.Last()); err != nil {
			cfg.Logger.Error("API listener stopped", "addr", cfg.HTTPAddr, "err", err)
		}
	}()
	s.stopEarly()
	if s.adminLn != nil {
		s.startAdmin()
	}
	return nil
}

func (s *Service) startAdmin() {
	s.admin = &http.Server{Handler: s.adminMux(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.admin.Serve(s.adminLn) }()
}

// setStarting records what the service is waiting for while it starts
// (node.Config.Starting), for answerStarting.
func (s *Service) setStarting(what string) {
	if old := s.startingWhat.Swap(&what); old != nil && *old == what {
		return
	}
	if s.cfg.Logger != nil {
		s.cfg.Logger.Info("starting: " + what)
	}
}

// answerStarting answers every request while the service starts: 503 with
// what it waits for ("starting: waiting for JetStream: ..."), on /health
// as {"status": ...}, elsewhere as an OpenAI-style error; the connection
// is closed after the answer, so that the next request reaches the router
// once it serves.
func (s *Service) answerStarting(ctx *fasthttp.RequestCtx) {
	why := "starting: " + *s.startingWhat.Load()
	ctx.SetConnectionClose()
	ctx.Response.Header.Set("Retry-After", "1")
	switch string(ctx.Path()) {
	case "/health":
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
		ctx.SetContentType("application/json")
		ctx.SetBody(append(openai.AppendJSONString(append([]byte(nil), `{"status":`...), why), "}\n"...))
	case "/ready":
		proxy.WriteError(ctx, fasthttp.StatusServiceUnavailable, "not ready: "+why)
	default:
		proxy.WriteError(ctx, fasthttp.StatusServiceUnavailable, why)
	}
}

// stopEarly stops the starting answers (the router serves the port from
// now, or the start failed); a request being answered gets a second.
func (s *Service) stopEarly() {
	if s.early == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = s.early.ShutdownWithContext(ctx)
	// Closing the view ends a Serve that had not yet registered it when
	// Shutdown ran (a start that fails at once).
	_ = s.earlyView.Close()
	s.early, s.earlyView = nil, nil
}

// Addr is the API listener's address (host:port).
func (s *Service) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// AdminAddr is the admin listener's address, or "" without --pprof.
func (s *Service) AdminAddr() string {
	if s.adminLn == nil {
		return ""
	}
	return s.adminLn.Addr().String()
}

// Close shuts down gracefully: the listener stops accepting, in-flight
// requests and streams get ShutdownGrace to finish (then their connections
// are cut, which frees their load), the batcher stops, ingest and NATS
// close, then the index.
func (s *Service) Close() error {
	return s.stop()
}

// Drain shuts the API down in two steps within ShutdownGrace: for the
// first ShutdownReadyDelay /ready answers 503 while requests are still
// served (load balancers stop sending), then the listener stops and
// in-flight requests and streams get the rest of the grace to finish; those
// still running then are cut (their connections closed, which frees their
// load). The rest of the service keeps running until Close. Idempotent.
func (s *Service) Drain() error {
	if s.http == nil || s.drained {
		return nil
	}
	s.drained = true
	s.Router.draining.Store(true)
	if d := s.cfg.ShutdownReadyDelay; d > 0 {
		s.cfg.Logger.Info("shutting down: /ready answers 503, still serving", "for", d)
		if waited := s.readyDelay(d); waited < d {
			s.cfg.Logger.Info("shutting down: nothing in flight, ready delay ended early", "after", waited.Round(time.Millisecond))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownGrace-s.cfg.ShutdownReadyDelay)
	defer cancel()
	err := s.http.ShutdownWithContext(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		// Cut what is still running. Streams first, from the worker side:
		// each relay sends its client an SSE error event (code
		// shutting_down) and ends, freeing the request's load. Then the
		// client connections still open (requests waiting for a worker's
		// whole answer, or a client that does not read) are closed: those
		// clients see the connection end without an answer.
		if n := s.Router.CutStreams(time.Second); n > 0 {
			s.cfg.Logger.Warn("streams still running after being cut at shutdown", "streams", n)
		}
		s.conns.Range(func(c net.Conn, _ struct{}) bool {
			_ = c.Close()
			return true
		})
		return nil
	}
	return err
}

// readyQuiet is how long a draining router must see no request in flight
// and none arriving before it ends the ready delay early, and readyPoll how
// often it looks.
const (
	readyQuiet = 500 * time.Millisecond
	readyPoll  = 50 * time.Millisecond
)

// readyDelay serves for up to d with /ready answering 503, so that load
// balancers stop sending. The delay only matters while requests are being
// served: it ends once no request has been in flight and none has arrived
// for readyQuiet, so an idle router stops within about that. It returns
// how long it waited.
func (s *Service) readyDelay(d time.Duration) time.Duration {
	start := time.Now()
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	lastID, quietSince := s.Router.nextID.Load(), start
	for now := start; now.Sub(start) < d; now = <-tick.C {
		if id := s.Router.nextID.Load(); id != lastID || s.Router.busy() {
			lastID, quietSince = id, now
		} else if now.Sub(quietSince) >= readyQuiet {
			return now.Sub(start)
		}
	}
	return d
}

// trackConn keeps the set of open API connections, for Drain to cut.
func (s *Service) trackConn(c net.Conn, st fasthttp.ConnState) {
	switch st {
	case fasthttp.StateNew:
		s.conns.Store(c, struct{}{})
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		s.conns.Delete(c)
	}
}

func (s *Service) stop() error {
	var errs []error
	errs = append(errs, s.Drain())
	if s.admin != nil {
		_ = s.admin.Close()
	} else if s.adminLn != nil {
		_ = s.adminLn.Close()
	}
	s.stopEarly()
	if s.http == nil && s.shared != nil {
		_ = s.shared.Close() // never served
	} else if s.http == nil && s.ln != nil {
		_ = s.ln.Close()
	}
	if s.treeStop != nil {
		close(s.treeStop)
		<-s.treeDone
		s.treeStop = nil
	}
	if s.IndexServer != nil {
		errs = append(errs, s.IndexServer.Close())
	}
	if s.Router != nil {
		errs = append(errs, s.Router.Close())
	}
	if s.Node != nil {
		errs = append(errs, s.Node.Close())
	}
	return errors.Join(errs...)
}

// DefaultRemoteTreeInterval is the default ServiceConfig.RemoteTreeInterval:
// tree sizes only break ties between workers without overlap, and a
// second's staleness moves them by a second's worth of KV events.
const DefaultRemoteTreeInterval = time.Second

// pollRemoteTrees asks the remote index for every worker key's tree size
// every RemoteTreeInterval (node.RemoteIndex.Workers, off the batcher, which
// must not wait on NATS) and hands them to the batcher's scheduler. A
// serving index of an older build, which does not know the query, is asked
// once: the router then breaks ties by load alone, as before.
func (s *Service) pollRemoteTrees() {
	defer close(s.treeDone)
	every := s.cfg.RemoteTreeInterval
	if every <= 0 {
		every = DefaultRemoteTreeInterval
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var ws []radix.Overlap
	for first := true; ; first = false {
		if !first {
			select {
			case <-s.treeStop:
				return
			case <-t.C:
			}
		}
		var err error
		if ws, err = s.Remote.Workers(ws[:0]); err != nil {
			if strings.Contains(err.Error(), "unknown index query kind") {
				s.cfg.Logger.Warn("the serving index answers no tree sizes (an older kvroute): ties between workers without overlap are broken by load only")
				return
			}
			continue // unreachable: the lookups count and log it
		}
		sizes := slices.Clone(ws)
		s.Router.post(func() {
			for _, w := range sizes {
				_ = s.Router.s.SetTreeSize(w.Worker, w.TreeSize)
			}
		})
	}
}
