package natsembed

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

func TestStartAndConnect(t *testing.T) {
	s, err := Start(Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := nc.JetStream()
	if _, err := js.AccountInfo(); err != nil {
		t.Fatalf("JetStream not on: %v", err)
	}
	if _, err := Start(Config{}); err == nil {
		t.Fatal("a missing store directory must be an error")
	}
}

func TestOpenTemporaryStore(t *testing.T) {
	e, err := Open(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(e.Dir); err != nil {
		t.Fatalf("store dir: %v", err)
	}
	nc, err := nats.Connect(e.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	e.Close()
	if _, err := os.Stat(e.Dir); !os.IsNotExist(err) {
		t.Errorf("temporary store %s not removed: %v", e.Dir, err)
	}
	kept := t.TempDir()
	e, err = Open(Config{StoreDir: kept})
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	if _, err := os.Stat(kept); err != nil {
		t.Errorf("a given store dir must be kept: %v", err)
	}
}

// Three servers started with cluster options form one JetStream cluster: a
// client of one node sees subscribers on another, and a meta leader is
// elected.
func TestClusterNodes(t *testing.T) {
	// Random cluster ports, each node routed to the ones before it: ports
	// picked by the test and freed before the servers bind them could be
	// taken meanwhile by another package's test (make test runs packages in
	// parallel), and the server would never become ready.
	var nodes []*server.Server
	var routes []string
	for i := range 3 {
		s, err := Start(Config{StoreDir: t.TempDir(), Name: fmt.Sprintf("n%d", i+1), ClusterPort: -1, Routes: slices.Clone(routes)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		nodes = append(nodes, s)
		routes = append(routes, "nats://"+s.ClusterAddr().String())
	}
	deadline := time.Now().Add(30 * time.Second)
	for !slices.ContainsFunc(nodes, (*server.Server).JetStreamIsLeader) {
		if time.Now().After(deadline) {
			t.Fatal("no JetStream meta leader within 30 s")
		}
		time.Sleep(10 * time.Millisecond) // polling: the server announces no election
	}
	sub, err := nats.Connect(nodes[0].ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	pub, err := nats.Connect(nodes[2].ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if _, err := sub.Subscribe("ping", func(m *nats.Msg) { _ = m.Respond([]byte("pong")) }); err != nil {
		t.Fatal(err)
	}
	_ = sub.Flush()
	var m *nats.Msg
	for m == nil { // the subscription's interest propagates over the route
		if m, err = pub.Request("ping", nil, 200*time.Millisecond); err != nil && time.Now().After(deadline) {
			t.Fatalf("a request from n3 to a responder on n1: %v", err)
		}
	}
	if string(m.Data) != "pong" {
		t.Fatalf("answer %q", m.Data)
	}
	if n := nodes[1].NumRoutes(); n < 2 {
		t.Fatalf("n2 has %d routes, want 2", n)
	}
}

// A fixed cluster port that is taken is an error naming the listener, not
// a server that never becomes ready ("not ready after 10s").
func TestClusterPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	s, err := Start(Config{StoreDir: t.TempDir(), ClusterPort: port})
	if err == nil {
		s.Shutdown()
		t.Fatal("a taken cluster port must be an error")
	}
	if !strings.Contains(err.Error(), "cluster port") {
		t.Fatalf("error %q does not name the cluster port", err)
	}
}
