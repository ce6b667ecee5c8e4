// Package natstest runs a real, in-process nats-server with JetStream for
// tests: a random port, a store under t.TempDir() (or a given directory kept
// across restarts, ServerStore), shut down when the test ends.
package natstest

import (
	"net"
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
