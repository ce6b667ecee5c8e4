package main

import (
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/node"
)

func TestServeRemoteIndexerFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--serve-indexer", "--use-remote-indexer"}, "--serve-indexer and --use-remote-indexer are mutually exclusive"},
		{[]string{"--remote-indexer-timeout", "5ms"}, "--remote-indexer-timeout needs --use-remote-indexer"},
		{[]string{"--use-remote-indexer", "--remote-indexer-timeout", "0s"}, "--remote-indexer-timeout must be > 0"},
		{[]string{"--use-remote-indexer", "--zmq-worker", "1=tcp://127.0.0.1:5557"}, "--use-remote-indexer keeps no index"},
		{[]string{"--use-remote-indexer", "--events-jetstream"}, "--use-remote-indexer keeps no index"},
	} {
		_, _, err := serveConfig(c.args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("serve %v: %v; want an error containing %q", c.args, err, c.want)
		}
	}
	cfg, _, err := serveConfig([]string{"--use-remote-indexer", "--remote-indexer-timeout", "7ms"})
	if err != nil || !cfg.UseRemoteIndexer || cfg.ServeIndexer || cfg.RemoteIndexerTimeout != 7*time.Millisecond {
		t.Fatalf("--use-remote-indexer --remote-indexer-timeout 7ms: %v %+v", err, cfg)
	}
	cfg, _, err = serveConfig([]string{"--serve-indexer"})
	if err != nil || !cfg.ServeIndexer || cfg.RemoteIndexerTimeout != node.DefaultRemoteTimeout {
		t.Fatalf("--serve-indexer: %v %+v", err, cfg)
	}
	t.Setenv("KVROUTE_SERVE_INDEXER", "true")
	if cfg, _, err = serveConfig(nil); err != nil || !cfg.ServeIndexer {
		t.Fatalf("KVROUTE_SERVE_INDEXER=true: %v %+v", err, cfg.ServeIndexer)
	}
}

func TestIndexerConfig(t *testing.T) {
	cfg, level, err := indexerConfig([]string{"--block-size", "32", "--namespace", "ns", "--peers", "http://a:8090, http://b:8090",
		"--zmq-worker", "3=tcp://127.0.0.1:5557", "--nats", "nats://127.0.0.1:4222", "--log-level", "debug"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Node.BlockSize != 32 || cfg.Node.Subjects.Heartbeat != "namespace.ns.component.backend.workers.heartbeat" ||
		len(cfg.Peers) != 2 || cfg.Peers[1] != "http://b:8090" || len(cfg.Node.ZMQWorkers) != 1 || cfg.Node.NATSURL == "" ||
		cfg.HTTPAddr != "127.0.0.1:8090" || level != "debug" || cfg.PeerTimeout != 30*time.Second {
		t.Fatalf("mapped %+v (log level %q)", cfg, level)
	}
	if cfg, _, _ := indexerConfig([]string{"--http-addr", "127.0.0.1:9"}); cfg.HTTPAddr != "127.0.0.1:9" {
		t.Fatalf("--http-addr: %q", cfg.HTTPAddr)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--router-mode", "kv"}, "--router-mode is a flag of kvroute serve"},
		{[]string{"--serve-indexer"}, "--serve-indexer is a flag of kvroute serve"},
		{[]string{"--demo-fleet=2"}, "--demo-fleet is a flag of kvroute serve"},
		{[]string{"--peers", "a:8090"}, "--peers"},
		{[]string{"--peer-timeout", "0s"}, "--peer-timeout"},
		{[]string{"--block-size", "0"}, "--block-size"},
		{[]string{"--nats", "nats://x:4222", "--data-dir", "/tmp/x"}, "--data-dir"},
		{[]string{"--frobnicate"}, "frobnicate"},
	} {
		_, _, err := indexerConfig(c.args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("indexer %v: %v; want an error containing %q", c.args, err, c.want)
		}
	}
}

// `kvroute indexer` starts on an embedded NATS and prints its address; a
// busy --http-addr is a one-line error naming the flag.
func TestIndexerStartupError(t *testing.T) {
	addr := busyPort(t)
	_, stderr, code := runMain(t, t.TempDir(), "indexer", "--http-addr", addr)
	if code == 0 || !strings.Contains(stderr, "--http-addr "+addr) || strings.Contains(stderr, "panic") {
		t.Fatalf("busy --http-addr: exit %d, stderr %s", code, stderr)
	}
}
