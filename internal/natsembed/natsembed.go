// Package natsembed starts the nats-server that `kvroute serve` and
// `kvroute mock` embed when no --nats URL is given: JetStream on, store in a
// data directory, listening on loopback.
package natsembed

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Config says where the embedded server listens and stores its data.
type Config struct {
	Host     string // default 127.0.0.1
	Port     int    // 0 or -1: a random free port
	StoreDir string // JetStream store; required
	// Users, when set, are the only clients allowed (user/password, each
	// with its subject permissions); nil: no authentication.
	Users []*server.User
	// Name is the server's name (a cluster needs distinct ones); empty:
	// nats-server's generated id.
	Name string
	// ClusterPort, when > 0, makes the server a node of the cluster
	// ClusterName (default "kvroute"), listening for routes from the other
	// nodes on Host:ClusterPort and connecting to Routes (nats://host:port
	// of the nodes' cluster listeners; its own is skipped). JetStream then
	// runs clustered: it needs a quorum of the nodes to be up. -1 does the
	// same on a random free port (the server's ClusterAddr says which):
	// for nodes started in one process, each given the earlier nodes'
	// addresses as Routes (the routes then gossip a full mesh).
	ClusterPort int
	ClusterName string
	Routes      []string
	// Log sends the server's notices and errors to the process's stderr
	// (nats-server's own format); false: silent.
	Log bool
}

// Start runs an embedded nats-server and waits until it accepts connections.
// The caller shuts it down with Shutdown and WaitForShutdown.
func Start(cfg Config) (*server.Server, error) {
	if cfg.StoreDir == "" {
		return nil, fmt.Errorf("natsembed: a JetStream store directory is required")
	}
	host := cfg.Host
	if host == "" {
		host = "127.0.0.1"
	}
	port := cfg.Port
	if port == 0 {
		port = -1
	}
	// nats-server reports a listen failure only to its log and then never
	// becomes ready; check fixed ports first so the caller gets the cause
	// at once.
	if err := checkListen(host, port, "client"); err != nil {
		return nil, err
	}
	if err := checkListen(host, cfg.ClusterPort, "cluster"); err != nil {
		return nil, err
	}
	opts := &server.Options{
		ServerName: cfg.Name,
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		NoSigs:     true,
		NoLog:      !cfg.Log,
		Users:      cfg.Users,
	}
	if cfg.ClusterPort > 0 || cfg.ClusterPort == -1 {
		opts.Cluster.Name = cfg.ClusterName
		if opts.Cluster.Name == "" {
			opts.Cluster.Name = "kvroute"
		}
		opts.Cluster.Host = host
		opts.Cluster.Port = cfg.ClusterPort
		opts.Routes = server.RoutesFromStr(strings.Join(cfg.Routes, ","))
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natsembed: %w", err)
	}
	if cfg.Log {
		s.ConfigureLogger()
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("natsembed: server on %s:%d not ready after 10s", host, port)
	}
	return s, nil
}

// checkListen returns why host:port cannot be listened on (port > 0 only:
// the other values mean none or a random one).
func checkListen(host string, port int, what string) error {
	if port <= 0 {
		return nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("natsembed: %s port: %w", what, err)
	}
	_ = ln.Close()
	return nil
}

// Embedded is a running embedded server and the store directory it uses;
// Close shuts it down and removes the directory if Open created it.
type Embedded struct {
	*server.Server
	Dir string // the JetStream store directory
	tmp bool   // Dir was created by Open
}

// Open is Start with an optional store directory: an empty cfg.StoreDir
// gets a temporary directory, removed again by Close.
func Open(cfg Config) (*Embedded, error) {
	e := &Embedded{Dir: cfg.StoreDir}
	if e.Dir == "" {
		d, err := os.MkdirTemp("", "kvroute-nats-")
		if err != nil {
			return nil, fmt.Errorf("natsembed: %w", err)
		}
		e.Dir, e.tmp = d, true
		cfg.StoreDir = d
	}
	s, err := Start(cfg)
	if err != nil {
		if e.tmp {
			_ = os.RemoveAll(e.Dir)
		}
		return nil, err
	}
	e.Server = s
	return e, nil
}

// Close shuts the server down, waits for it, and removes a temporary store.
func (e *Embedded) Close() {
	e.Shutdown()
	e.WaitForShutdown()
	if e.tmp {
		_ = os.RemoveAll(e.Dir)
	}
}
