package router

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/ingest"
	"github.com/kvroute/kvroute/internal/natstest"
	"github.com/kvroute/kvroute/node"
	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/wire/plane"
)

// kvroute serve --nats on a cluster that has no JetStream leader yet (one
// node of three): its port answers from the start, /health, /ready and the
// API 503 "starting: waiting for JetStream", and it serves once the other
// nodes have joined.
func TestServeAnswersWhileWaitingForJetStream(t *testing.T) {
	urls, startNode := natstest.ClusterNodes(t, 3)
	startNode(0)
	subj, err := plane.SubjectsFor("test", "backend")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	sc := sched.DefaultConfig()
	sc.BlockSize = testBlockSize
	type started struct {
		svc *Service
		err error
	}
	done := make(chan started, 1)
	go func() {
		svc, err := StartService(ServiceConfig{
			Router:   Config{Sched: sc, Subjects: subj, TickInterval: 20 * time.Millisecond},
			HTTPAddr: addr, ShutdownGrace: time.Second, ShutdownReadyDelay: -1, Logger: quietLogger(),
			Node: node.Config{NATSURL: urls, NATSReconnectWait: 50 * time.Millisecond, JetStream: true, LiveEvents: true,
				Stream: ingest.StreamConfig{Replicas: 3, MaxAge: time.Minute}},
		})
		done <- started{svc, err}
	}()
	client := &http.Client{Timeout: 5 * time.Second}
	get := func(method, path string) (int, string) {
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(`{"prompt":"hi","max_tokens":1}`))
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const want = "starting: waiting for JetStream"
	waitFor(t, "/health answering 503 while waiting for JetStream", func() bool {
		code, body := get("GET", "/health")
		return code == 503 && strings.Contains(body, want)
	})
	if code, body := get("GET", "/ready"); code != 503 || !strings.Contains(body, "not ready: "+want) {
		t.Errorf("/ready while waiting for JetStream: %d %s", code, body)
	}
	if code, body := get("POST", "/v1/completions"); code != 503 || !strings.Contains(body, want) {
		t.Errorf("a completion while waiting for JetStream: %d %s", code, body)
	}
	select {
	case r := <-done:
		t.Fatalf("StartService returned with one NATS node of three up (no JetStream leader): %v", r.err)
	default:
	}

	startNode(1)
	startNode(2)
	var r started
	select {
	case r = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the router did not start within 2 minutes of the cluster's quorum")
	}
	if r.err != nil {
		t.Fatalf("StartService: %v", r.err)
	}
	t.Cleanup(func() { _ = r.svc.Close() })
	if code, body := get("GET", "/health"); code != 200 || !strings.Contains(body, `"ok"`) {
		t.Errorf("/health once started: %d %s", code, body)
	}
	if code, body := get("GET", "/ready"); code != 503 || !strings.Contains(body, "no worker known yet") {
		t.Errorf("/ready once started, with no worker: %d %s", code, body)
	}
	if err := r.svc.Drain(); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Get("http://" + addr + "/health"); err == nil {
		t.Error("the port still accepts connections after Drain")
	}
}
