// Package natstest runs a real, in-process nats-server with JetStream for
// tests: a random port, a store under t.TempDir() (or a given directory kept
// across restarts, ServerStore), shut down when the test ends.
package natstest

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsserver "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"
)

// Server starts a JetStream-enabled nats-server on 127.0.0.1 with a random
// port and registers its shutdown with t.Cleanup.
func Server(tb testing.TB) *server.Server {
	tb.Helper()
	return start(tb, -1)
}

// Port returns the client port of s (call it while s runs).
func Port(s *server.Server) int { return s.Addr().(*net.TCPAddr).Port }

// Restart starts a JetStream-enabled nats-server on 127.0.0.1 at port,
// where a server shut down by the test ran (its clients reconnect to it),
// with a fresh store; it is shut down when the test ends.
func Restart(tb testing.TB, port int) *server.Server {
	tb.Helper()
	return start(tb, port)
}

// ServerStore starts a JetStream-enabled nats-server on 127.0.0.1 at port
// (-1: random) storing in storeDir: a server started again on the same port
// and directory after a shutdown keeps its streams and object stores, as a
// restarted server with a persistent store does. It is shut down when the
// test ends.
func ServerStore(tb testing.TB, port int, storeDir string) *server.Server {
	tb.Helper()
	return startIn(tb, port, storeDir)
}

// start runs a JetStream-enabled server on port (-1: random) with a fresh
// store, shut down when the test ends.
func start(tb testing.TB, port int) *server.Server {
	return startIn(tb, port, tb.TempDir())
}

func startIn(tb testing.TB, port int, storeDir string) *server.Server {
	opts := natsserver.DefaultTestOptions
	opts.Port = port
	opts.JetStream = true
	opts.StoreDir = storeDir
	s := natsserver.RunServer(&opts)
	tb.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// Connect returns a client connection to s, closed when the test ends.
func Connect(tb testing.TB, s *server.Server) *nats.Conn {
	tb.Helper()
	nc, err := nats.Connect(s.ClientURL(), nats.Timeout(5*time.Second))
	if err != nil {
		tb.Fatalf("connect to %s: %v", s.ClientURL(), err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// Cluster starts an n-node JetStream cluster on loopback (servers n1..nN,
// random client ports, each with its own store), shut down when the test
// ends, and waits until it has a JetStream meta leader.
func Cluster(tb testing.TB, n int) []*server.Server {
	tb.Helper()
	cports := make([]int, n)
	var routes []string
	for i := range cports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		cports[i] = ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		routes = append(routes, "nats://127.0.0.1:"+strconv.Itoa(cports[i]))
	}
	var ss []*server.Server
	for i, p := range cports {
		o := natsserver.DefaultTestOptions
		o.Port = -1
		o.ServerName = fmt.Sprintf("n%d", i+1)
		o.JetStream = true
		o.StoreDir = tb.TempDir()
		o.Cluster.Name = "kvroute-test"
		o.Cluster.Host = "127.0.0.1"
		o.Cluster.Port = p
		o.Routes = server.RoutesFromStr(strings.Join(routes, ","))
		s := natsserver.RunServer(&o)
		tb.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		ss = append(ss, s)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, s := range ss {
			if s.JetStreamIsLeader() {
				return ss
			}
		}
		if time.Now().After(deadline) {
			tb.Fatal("natstest: the cluster elected no JetStream meta leader within 30 s")
		}
		time.Sleep(10 * time.Millisecond) // polling: the server announces no election
	}
}

// ClusterNodes prepares an n-node JetStream cluster on loopback (servers
// n1..nN, each with its own store) without starting it: it returns the
// nodes' client URLs (a nats.Connect URL list) and a function that starts
// node i (0 to n-1), shut down when the test ends. A test starts the nodes
// when it wants: one node of three has no quorum, so the cluster has no
// JetStream leader until a second one joins.
func ClusterNodes(tb testing.TB, n int) (urls string, start func(i int) *server.Server) {
	tb.Helper()
	free := func() int {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().(*net.TCPAddr).Port
	}
	cports, rports := make([]int, n), make([]int, n)
	var routes, clients []string
	for i := range n {
		cports[i], rports[i] = free(), free()
		routes = append(routes, "nats://127.0.0.1:"+strconv.Itoa(rports[i]))
		clients = append(clients, "nats://127.0.0.1:"+strconv.Itoa(cports[i]))
	}
	return strings.Join(clients, ","), func(i int) *server.Server {
		tb.Helper()
		o := natsserver.DefaultTestOptions
		o.Port = cports[i]
		o.ServerName = fmt.Sprintf("n%d", i+1)
		o.JetStream = true
		o.StoreDir = tb.TempDir()
		o.Cluster.Name = "kvroute-test"
		o.Cluster.Host = "127.0.0.1"
		o.Cluster.Port = rports[i]
		o.Routes = server.RoutesFromStr(strings.Join(routes, ","))
		s := natsserver.RunServer(&o)
		tb.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		return s
	}
}

// ClientURLs is the comma-separated client URLs of ss (a nats.Connect URL
// list).
func ClientURLs(ss []*server.Server) string {
	urls := make([]string, len(ss))
	for i, s := range ss {
		urls[i] = s.ClientURL()
	}
	return strings.Join(urls, ",")
}
