package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/puzpuzpuz/xsync/v4"
	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/internal/natsembed"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire/ingest"
	"github.com/kvroute/kvroute/wire/plane"
)

// ServiceConfig configures a whole router process: NATS (external or
// embedded), the sharded index, KV-event ingest, the Router and its HTTP
// listeners. Plain data; cmd/kvroute fills it from flags.
type ServiceConfig struct {
	Router Config
	Index  shard.Config

	// HTTPAddr is the API listener (--http-addr). Default 127.0.0.1:8000;
	// port 0 picks a free port (see Service.Addr).
	HTTPAddr string
	// AdminAddr serves /debug/pprof/* and /metrics when Pprof is set
	// (--admin-addr, --pprof).
	AdminAddr string
	Pprof     bool

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

	// ZMQWorkers are engines whose vLLM ZMQ event streams are subscribed
	// directly (--zmq-worker).
	ZMQWorkers []ingest.ZMQWorker

	// ShutdownGrace bounds how long Close waits for in-flight requests and
	// streams before cutting them (--shutdown-grace). Default 10 s.
	ShutdownGrace time.Duration

	Logger *slog.Logger
}

// Service is a running router process (see ServiceConfig). Its fields are
// for reading; Close stops everything it started.
type Service struct {
	NC      *nats.Conn
	NATSURL string
	Index   *shard.Index
	Ingest  *ingest.Ingest
	Router  *Router

	cfg      ServiceConfig
	embedded *natsembed.Embedded
	http     *fasthttp.Server
	ln       net.Listener
	admin    *http.Server
	adminLn  net.Listener
	drained  bool
	conns    *xsync.Map[net.Conn, struct{}]
}

// StartService starts a router process. On error everything started so far
// is stopped.
func StartService(cfg ServiceConfig) (s *Service, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = "127.0.0.1:8000"
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = 10 * time.Second
	}
	cfg.Router.Logger = cfg.Logger
	cfg.Index.Logger = cfg.Logger
	s = &Service{cfg: cfg, conns: xsync.NewMap[net.Conn, struct{}]()}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()

	if err := s.connectNATS(); err != nil {
		return nil, err
	}
	if s.Index, err = shard.NewIndex(cfg.Index); err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	if s.Ingest, err = ingest.New(ingest.Config{BlockSize: cfg.Router.Sched.BlockSize, Subjects: cfg.Router.Subjects, Logger: cfg.Logger}, s.Index); err != nil {
		return nil, fmt.Errorf("ingest: %w", err)
	}
	if !cfg.Router.Approx {
		if err := s.Ingest.SubscribeNATS(s.NC); err != nil {
			return nil, fmt.Errorf("ingest: %w", err)
		}
		for _, z := range cfg.ZMQWorkers {
			if err := s.Ingest.AddZMQ(z); err != nil {
				return nil, fmt.Errorf("--zmq-worker %d: %w", z.Worker, err)
			}
		}
	}
	hooks := Hooks{
		Publish: s.NC.Publish,
		Metrics: []func(w io.Writer){s.Ingest.WriteMetrics},
	}
	if !cfg.Router.Approx {
		hooks.IngestRunning = s.Ingest.Running
		hooks.WorkerJoined = s.workerJoined
		hooks.WorkerLeft = func(id uint64) {
			s.Ingest.RemoveZMQ(id)
			s.Ingest.Forget(id)
		}
	}
	if s.Router, err = New(cfg.Router, s.Index, hooks); err != nil {
		return nil, err
	}
	s.Router.Start()
	if err := s.Router.SubscribeNATS(s.NC); err != nil {
		return nil, err
	}

	if s.ln, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		return nil, fmt.Errorf("--http-addr %s: %w", cfg.HTTPAddr, err)
	}
	s.http = s.Router.Server()
	s.http.ConnState = s.trackConn
	go func() {
		if err := s.http.Serve(s.ln); err != nil {
			cfg.Logger.Error("API listener stopped", "addr", cfg.HTTPAddr, "err", err)
		}
	}()

	if cfg.Pprof {
		if err := s.startAdmin(); err != nil {
			return nil, err
		}
	}
	cfg.Logger.Info("kvroute serving", "http", s.Addr(), "nats", s.NATSURL, "mode", cfg.Router.Sched.Policy.String(), "approx", cfg.Router.Approx)
	return s, nil
}

// workerJoined subscribes to a registered worker's ZMQ events, if it
// publishes them there (rank r on the endpoint's port + r).
func (s *Service) workerJoined(reg plane.Registration) {
	if reg.EventTransport != plane.TransportZMQ || reg.ZMQEndpoint == "" {
		return
	}
	ranks := reg.DpRanks
	if len(ranks) == 0 {
		ranks = []uint32{0}
	}
	for _, rank := range ranks {
		z := ingest.ZMQWorker{Worker: reg.WorkerID, DpRank: rank, Model: reg.Model,
			Endpoint: offsetPort(reg.ZMQEndpoint, int(rank)), Replay: offsetPort(reg.ZMQReplay, int(rank))}
		if err := s.Ingest.AddZMQ(z); err != nil {
			s.cfg.Logger.Error("cannot subscribe to worker's ZMQ events", "worker", reg.WorkerID, "rank", rank, "err", err)
		}
	}
}

// offsetPort adds off to the port of a tcp://host:port endpoint.
func offsetPort(ep string, off int) string {
	if ep == "" || off == 0 {
		return ep
	}
	const scheme = "tcp://"
	if len(ep) < len(scheme) || ep[:len(scheme)] != scheme {
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

func (s *Service) connectNATS() error {
	url := s.cfg.NATSURL
	if url == "" {
		ns, err := natsembed.Open(natsembed.Config{Host: "127.0.0.1", Port: s.cfg.NATSPort, StoreDir: s.cfg.DataDir})
		if err != nil {
			return fmt.Errorf("embedded NATS (--data-dir %q): %w", s.cfg.DataDir, err)
		}
		s.embedded = ns
		url = ns.ClientURL()
	}
	opts := []nats.Option{nats.Name("kvroute"), nats.MaxReconnects(-1)}
	if s.cfg.NATSCreds != "" {
		opts = append(opts, nats.UserCredentials(s.cfg.NATSCreds))
	}
	if s.cfg.NATSCA != "" {
		opts = append(opts, nats.RootCAs(s.cfg.NATSCA))
	}
	if s.cfg.NATSCert != "" || s.cfg.NATSKey != "" {
		opts = append(opts, nats.ClientCert(s.cfg.NATSCert, s.cfg.NATSKey))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return fmt.Errorf("--nats %s: %w", url, err)
	}
	s.NC, s.NATSURL = nc, url
	return nil
}

func (s *Service) startAdmin() error {
	addr := s.cfg.AdminAddr
	if addr == "" {
		addr = "127.0.0.1:6060"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--admin-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		s.Router.WritePrometheus(w)
	})
	s.admin = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	s.adminLn = ln
	go func() { _ = s.admin.Serve(ln) }()
	return nil
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

// Drain stops the API listener and waits, at most ShutdownGrace, for
// in-flight requests and streams to finish; those still running then are
// cut (their connections closed, which frees their load). The rest of the
// service keeps running until Close. Idempotent.
func (s *Service) Drain() error {
	if s.http == nil || s.drained {
		return nil
	}
	s.drained = true
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownGrace)
	defer cancel()
	err := s.http.ShutdownWithContext(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		// Cut what is still running: a stream's next write fails, the
		// proxy closes the worker connection and frees the request's load.
		s.conns.Range(func(c net.Conn, _ struct{}) bool {
			_ = c.Close()
			return true
		})
		return nil
	}
	return err
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
	}
	if s.Router != nil {
		errs = append(errs, s.Router.Close())
	}
	if s.Ingest != nil {
		errs = append(errs, s.Ingest.Close())
	}
	if s.NC != nil {
		_ = s.NC.Drain()
		s.NC.Close()
	}
	if s.embedded != nil {
		s.embedded.Close()
	}
	if s.Index != nil {
		errs = append(errs, s.Index.Close())
	}
	return errors.Join(errs...)
}
