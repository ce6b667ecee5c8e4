package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc"

	"github.com/kvroute/kvroute/router"
	"github.com/kvroute/kvroute/router/epp"
	"github.com/kvroute/kvroute/wire/plane"
)

// eppFlags are kvroute epp's own flags; it also takes every flag of
// kvroute serve.
var eppFlags = map[string]bool{"ext-proc-addr": true, "epp-fallbacks": true, "endpoints-file": true, "endpoints-interval": true}

type eppOptions struct {
	addr      string
	fallbacks int
	file      string
	interval  time.Duration
}

// eppConfig parses kvroute epp's flags: serve's, plus the EPP's.
func eppConfig(args []string) (router.ServiceConfig, serveOptions, eppOptions, error) {
	var opt eppOptions
	ext := flagExt{
		name: "kvroute epp",
		add: func(fs *flag.FlagSet) {
			fs.StringVar(&opt.addr, "ext-proc-addr", "127.0.0.1:9002", "gRPC listen address of the endpoint picker (envoy.service.ext_proc.v3.ExternalProcessor and grpc.health.v1); every kvroute serve flag applies too")
			fs.IntVar(&opt.fallbacks, "epp-fallbacks", 2, "endpoints after the chosen one in x-gateway-destination-endpoint, in cost order")
			fs.StringVar(&opt.file, "endpoints-file", "", "YAML or JSON list of pods (ip, port, worker_id, model, role, dp_ranks) to route to besides --worker and NATS registrations; re-read when it changes")
			fs.DurationVar(&opt.interval, "endpoints-interval", 2*time.Second, "how often --endpoints-file is checked for changes")
		},
		check: func(fs *flag.FlagSet, args []string) error {
			if _, _, err := net.SplitHostPort(opt.addr); err != nil {
				return fmt.Errorf("--ext-proc-addr %q: want host:port: %v", opt.addr, err)
			}
			if opt.fallbacks < 0 || opt.fallbacks > 16 {
				return fmt.Errorf("--epp-fallbacks %d must be in [0, 16]", opt.fallbacks)
			}
			if opt.interval <= 0 {
				return fmt.Errorf("--endpoints-interval must be > 0 (got %v)", opt.interval)
			}
			return nil
		},
	}
	cfg, o, err := serveConfig(args, ext)
	return cfg, o, opt, err
}

func runEpp(args []string) error {
	cfg, o, opt, err := eppConfig(args)
	if err != nil {
		return err
	}
	o.attach = func(svc *router.Service, logger *slog.Logger) (func(), error) {
		cfg.Logger = logger
		return startEpp(svc, cfg, opt)
	}
	stop, stopSignals := shutdownSignals("kvroute epp")
	defer stopSignals()
	return serve(cfg, o, stop, nil)
}

// startEpp serves the endpoint picker on svc's router and, with
// --endpoints-file, keeps the router's workers in step with the file.
func startEpp(svc *router.Service, cfg router.ServiceConfig, opt eppOptions) (func(), error) {
	ln, err := net.Listen("tcp", opt.addr)
	if err != nil {
		return nil, fmt.Errorf("--ext-proc-addr %s: %w", opt.addr, err)
	}
	var w *epp.EndpointsWatcher
	if opt.file != "" {
		w, err = epp.WatchEndpoints(epp.EndpointsConfig{Path: opt.file, Interval: opt.interval, Router: svc.Router, Logger: cfg.Logger,
			Joined: func(s router.StaticWorker) {
				svc.WorkerJoined(plane.Registration{WorkerID: s.ID, URL: s.URL, DpRanks: s.DpRanks, Model: s.Model})
			},
			Left: svc.WorkerLeft,
		})
		if err != nil {
			_ = ln.Close()
			return nil, err
		}
	}
	s, err := epp.New(epp.Config{Router: svc.Router, Fallbacks: opt.fallbacks, MaxBodyBytes: cfg.Router.MaxBodyBytes, Logger: cfg.Logger})
	if err != nil {
		_ = ln.Close()
		if w != nil {
			w.Close()
		}
		return nil, err
	}
	g := grpc.NewServer(grpc.MaxRecvMsgSize(4<<20), grpc.MaxConcurrentStreams(1<<16))
	s.Register(g)
	go func() {
		if err := g.Serve(ln); err != nil {
			cfg.Logger.Error("ext_proc listener stopped", "addr", opt.addr, "err", err)
		}
	}()
	fmt.Printf("kvroute endpoint picker (ext_proc) on %s\n", ln.Addr())
	cfg.Logger.Info("endpoint picker serving", "ext_proc", ln.Addr().String(), "fallbacks", opt.fallbacks, "endpoints_file", opt.file)
	return func() {
		s.Close() // health NOT_SERVING first, so Envoy stops choosing this replica
		done := make(chan struct{})
		go func() { g.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(cfg.ShutdownGrace):
			g.Stop()
		}
		if w != nil {
			w.Close()
		}
	}, nil
}
