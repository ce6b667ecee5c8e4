package main

import (
	"fmt"
	"strings"

	"github.com/kvroute/kvroute/internal/natsembed"
)

// natsConfig parses `kvroute nats` flags.
func natsConfig(args []string) (natsembed.Config, error) {
	fs := newFlagSet("kvroute nats")
	var (
		host        = fs.String("host", "127.0.0.1", "listen host (clients and cluster routes)")
		port        = fs.Int("port", 4222, "client port")
		name        = fs.String("name", "", "server name; the nodes of a cluster need distinct ones (default: a generated id)")
		dataDir     = fs.String("data-dir", "", "JetStream store directory (default: a temporary directory, removed at exit)")
		clusterPort = fs.Int("cluster-port", 0, "port for routes from the other cluster nodes (0: a single server, no cluster)")
		clusterName = fs.String("cluster-name", "kvroute", "cluster name, the same on every node (with --cluster-port)")
		routes      = fs.String("routes", "", "the cluster nodes' route URLs, comma-separated (nats://host:cluster-port; this node's own may be listed; with --cluster-port)")
		quiet       = fs.Bool("quiet", false, "do not log the server's notices")
	)
	if err := parseFlags(fs, args); err != nil {
		return natsembed.Config{}, err
	}
	cfg := natsembed.Config{Host: *host, Port: *port, Name: *name, StoreDir: *dataDir, ClusterPort: *clusterPort,
		ClusterName: *clusterName, Log: !*quiet}
	if *port <= 0 || *port > 65535 {
		return cfg, fmt.Errorf("--port must be in 1..65535 (got %d)", *port)
	}
	if *clusterPort < 0 || *clusterPort > 65535 || *clusterPort == *port {
		return cfg, fmt.Errorf("--cluster-port must be in 1..65535 and differ from --port (got %d)", *clusterPort)
	}
	for _, r := range strings.Split(*routes, ",") {
		if r = strings.TrimSpace(r); r == "" {
			continue
		}
		if !strings.HasPrefix(r, "nats://") && !strings.HasPrefix(r, "nats-route://") {
			return cfg, fmt.Errorf("--routes %q: a route is nats://host:cluster-port", r)
		}
		cfg.Routes = append(cfg.Routes, r)
	}
	if len(cfg.Routes) > 0 && *clusterPort == 0 {
		return cfg, fmt.Errorf("--routes needs --cluster-port (this node's own route listener)")
	}
	if *clusterPort > 0 && *name == "" {
		return cfg, fmt.Errorf("--cluster-port needs --name: the nodes of a JetStream cluster need distinct, stable names")
	}
	return cfg, nil
}

// runNats runs one embedded nats-server node with JetStream until SIGINT
// or SIGTERM: a single server, or with --cluster-port and --routes a node
// of a cluster (make run-cluster starts three).
func runNats(args []string) error {
	cfg, err := natsConfig(args)
	if err != nil {
		return err
	}
	stop, stopSignals := shutdownSignals("kvroute nats")
	defer stopSignals()
	e, err := natsembed.Open(cfg)
	if err != nil {
		return err
	}
	where := ""
	if cfg.ClusterPort > 0 {
		where = fmt.Sprintf(" (cluster %s, routes on %s:%d)", cfg.ClusterName, cfg.Host, cfg.ClusterPort)
	}
	fmt.Printf("kvroute nats %s serving %s%s, JetStream store %s\n", e.Name(), e.ClientURL(), where, e.Dir)
	<-stop
	fmt.Println("shutting down")
	e.Close()
	return nil
}
