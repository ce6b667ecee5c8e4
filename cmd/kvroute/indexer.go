package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/kvroute/kvroute/indexer"
)

// indexerFlags are the flags `kvroute indexer` takes from serve (the node's:
// NATS, KV-event ingest, index) besides its own.
var indexerFlags = map[string]bool{
	"http-addr": true, "block-size": true, "nats": true, "nats-creds": true, "nats-tls-ca": true, "nats-tls-cert": true,
	"nats-tls-key": true, "data-dir": true, "nats-port": true, "namespace": true, "component": true,
	"events-jetstream": true, "events-live": true, "events-max-age": true, "events-max-bytes": true, "events-replicas": true, "jetstream-wait": true,
	"snapshot-bucket": true, "snapshot-interval": true, "snapshot-events": true, "shards": true, "cpus": true,
	"zmq-worker": true, "log-level": true, "max-body-bytes": true,
	"peers": true, "peer-timeout": true, "indexer-id": true,
}

// indexerHTTPAddr is `kvroute indexer`'s --http-addr default.
const indexerHTTPAddr = "127.0.0.1:8090"

type indexerOptions struct {
	peers       string
	peerTimeout time.Duration
	id          string
}

// indexerConfig parses `kvroute indexer` flags: serve's parsing (and
// checks) restricted to the node's flags, plus --peers.
func indexerConfig(args []string) (indexer.Config, string, error) {
	var opt indexerOptions
	ext := flagExt{
		name: "kvroute indexer",
		add: func(fs *flag.FlagSet) {
			fs.StringVar(&opt.peers, "peers", "", "other indexers' base URLs, comma-separated: at start the first that answers GET /dump is loaded before this one is ready")
			fs.DurationVar(&opt.peerTimeout, "peer-timeout", 30*time.Second, "time to load one peer's dump (with --peers)")
			fs.StringVar(&opt.id, "indexer-id", "", "this instance's name in NATS ping replies (default kvroute-indexer-<pid>)")
			// Dynamo's standalone indexer's port, on the flag itself so
			// that -h and the flags reference show it.
			addr := fs.Lookup("http-addr")
			addr.DefValue = indexerHTTPAddr
			_ = addr.Value.Set(indexerHTTPAddr) // a string flag: never fails
			fs.Usage = func() {
				fmt.Fprintf(fs.Output(), "usage: kvroute indexer [flags]\n\nflags (each also KVROUTE_<NAME>):\n")
				fs.VisitAll(func(f *flag.Flag) {
					if indexerFlags[f.Name] {
						fmt.Fprintf(fs.Output(), "  --%s (default %q)\n    \t%s\n", f.Name, f.DefValue, f.Usage)
					}
				})
			}
		},
		check: func(fs *flag.FlagSet, args []string) error {
			for _, a := range args {
				if !strings.HasPrefix(a, "-") {
					continue
				}
				name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
				if fs.Lookup(name) != nil && !indexerFlags[name] {
					return fmt.Errorf("--%s is a flag of kvroute serve; kvroute indexer only ingests and answers queries (see kvroute indexer -h)", name)
				}
			}
			if opt.peerTimeout <= 0 {
				return fmt.Errorf("--peer-timeout must be > 0 (got %v)", opt.peerTimeout)
			}
			return nil
		},
	}
	sc, o, err := serveConfig(args, ext)
	if err != nil {
		return indexer.Config{}, "", err
	}
	cfg := indexer.Config{Node: sc.Node, HTTPAddr: sc.HTTPAddr, PeerTimeout: opt.peerTimeout, ID: opt.id, MaxBodyBytes: sc.Router.MaxBodyBytes}
	cfg.Node.BlockSize = sc.Router.Sched.BlockSize
	cfg.Node.Subjects = sc.Router.Subjects
	if cfg.ID == "" {
		cfg.ID = fmt.Sprintf("kvroute-indexer-%d", os.Getpid())
	}
	for _, p := range strings.Split(opt.peers, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if !strings.HasPrefix(p, "http://") && !strings.HasPrefix(p, "https://") {
			return cfg, "", fmt.Errorf("--peers %q: a peer is a base URL starting with http:// or https://", p)
		}
		cfg.Peers = append(cfg.Peers, p)
	}
	return cfg, o.logLevel, nil
}

func runIndexer(args []string) error {
	cfg, logLevel, err := indexerConfig(args)
	if err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(logLevel)); err != nil {
		return fmt.Errorf("--log-level: %v", err)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	stop, stopSignals := shutdownSignals("kvroute indexer")
	defer stopSignals()
	cfg.Node.Abort = stop // a signal while waiting for JetStream ends the wait
	svc, err := indexer.Start(cfg)
	if err != nil {
		return err
	}
	fmt.Printf("kvroute indexer serving on http://%s (NATS %s)\n", svc.Addr(), svc.NATSURL)
	<-stop
	fmt.Println("shutting down")
	return errors.Join(svc.Close())
}
