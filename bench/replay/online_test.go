package replay

import (
	"bytes"
	"context"
	"errors"
	"math"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvroute/kvroute/bench/mock"
	"github.com/kvroute/kvroute/bench/synth"
	"github.com/kvroute/kvroute/wire/plane"
)

// startFleet starts n simulated workers without an event plane.
func startFleet(t *testing.T, n int, speedup float64) *mock.Fleet {
	t.Helper()
	f, err := mock.Start(mock.Config{Workers: n, Transport: plane.TransportNone, Speedup: speedup}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// synthWorkload is a small synthetic workload with shared prefixes and
// multi-turn sessions.
func synthWorkload(t testing.TB, n int) *Workload {
	t.Helper()
	c := synth.Default()
	c.Requests = n
	tr, err := synth.Generate(c)
	if err != nil {
		t.Fatal(err)
	}
	w, err := Prepare(tr, 16, "synthetic")
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestOnlineAgainstMock replays a synthetic workload against two simulated
// workers, spread in turn by the client, and compares with the offline
// round-robin replay of the same fleet: same shares and prompt tokens, hit
// ratios within 0.05, every latency measured. It compares no wall-clock
// latency with the model's (a loaded machine stretches the online side).
func TestOnlineAgainstMock(t *testing.T) {
	const speed = 10
	w := synthWorkload(t, 60)
	f := startFleet(t, 2, speed)
	var ended atomic.Int64
	rep, err := RunOnline(context.Background(), w, OnlineConfig{
		URLs: []string{f.Workers()[0].URL(), f.Workers()[1].URL()}, Speedup: speed,
		Progress: func(n int) { ended.Add(int64(n)) },
	})
	if err != nil {
		t.Fatal(err)
	}
	on := rep.Policies[0]
	if on.Completed != 60 || on.Rejected != 0 || on.Failed != 0 || ended.Load() != 60 {
		t.Fatalf("online: completed %d rejected %d failed %d progress %d", on.Completed, on.Rejected, on.Failed, ended.Load())
	}
	if rep.Mode != "online" || rep.Workers != 2 || on.MaxWorkerShare != 1 || on.Policy != "online" {
		t.Fatalf("online report: mode %s workers %d share %v policy %s", rep.Mode, rep.Workers, on.MaxWorkerShare, on.Policy)
	}
	if len(on.Workers) != 2 || on.Workers[0].Worker != "1" || on.Workers[1].Worker != "2" {
		t.Fatalf("workers %+v: want the mock's ids 1 and 2 (from the response ids), in order", on.Workers)
	}
	cfg := DefaultConfig()
	cfg.Fleet.Workers, cfg.Fleet.EngineSpeedup, cfg.Speedup = 2, speed, speed
	off, err := Simulate(w, cfg, mustPolicy(t, "round-robin"))
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(on.HitRatio-off.HitRatio) > 0.05 {
		t.Fatalf("hit ratio online %.4f offline %.4f: differ by more than 0.05", on.HitRatio, off.HitRatio)
	}
	if on.HitRatio == 0 || on.PromptTokens != off.PromptTokens {
		t.Fatalf("online hit %v prompt tokens %d, offline %d", on.HitRatio, on.PromptTokens, off.PromptTokens)
	}
	// Latencies are measured, not compared: wall-clock time on a loaded
	// machine says nothing about the replay (benchmarks compare timings).
	if on.TTFTMeanMs <= 0 || on.ITLMeanMs <= 0 || on.E2EMeanMs < on.TTFTMeanMs {
		t.Fatalf("TTFT %.1f ms, ITL %v ms, E2E %v ms: want measured latencies, E2E ≥ TTFT", on.TTFTMeanMs, on.ITLMeanMs, on.E2EMeanMs)
	}
	t.Logf("online hit %.4f TTFT %.1f ms; offline hit %.4f TTFT %.1f ms", on.HitRatio, on.TTFTMeanMs, off.HitRatio, off.TTFTMeanMs)
}

func TestOnlineConcurrency(t *testing.T) {
	w := synthWorkload(t, 20)
	f := startFleet(t, 1, 20)
	rep, err := RunOnline(context.Background(), w, OnlineConfig{URLs: []string{f.Workers()[0].URL()}, Concurrency: 3, Label: "mock"})
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Policies[0]
	if r.Completed != 20 || r.Policy != "mock" || rep.Concurrency != 3 || r.HitRatio <= 0 || r.Saturated {
		t.Fatalf("completed %d policy %s concurrency %d hit %v saturated %v", r.Completed, r.Policy, rep.Concurrency, r.HitRatio, r.Saturated)
	}
	if got := f.Workers()[0].Stats().Finished; got != 20 {
		t.Fatalf("worker finished %d requests, want 20", got)
	}
}

// TestOnlineRejections answers 429 to every other request and checks they
// count as rejected while the rest complete; the worker header names the
// worker.
func TestOnlineRejections(t *testing.T) {
	w := head(t, 10)
	f := startFleet(t, 1, 50)
	target := f.Workers()[0].URL()
	var n atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if n.Add(1)%2 == 0 {
			rw.Header().Set("Retry-After", "1")
			http.Error(rw, `{"error":"busy"}`, http.StatusTooManyRequests)
			return
		}
		// Forward to the worker, streaming back.
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, target+r.URL.Path, r.Body)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		rw.Header().Set(DefaultWorkerHeader, "w7")
		rw.WriteHeader(resp.StatusCode)
		buf := make([]byte, 4096)
		for {
			k, err := resp.Body.Read(buf)
			rw.Write(buf[:k])
			rw.(http.Flusher).Flush()
			if err != nil {
				return
			}
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	rep, err := RunOnline(context.Background(), w, OnlineConfig{URLs: []string{"http://" + ln.Addr().String()}, Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Policies[0]
	if r.Completed != 5 || r.Rejected != 5 || r.Failed != 0 || !r.Saturated {
		t.Fatalf("completed %d rejected %d failed %d saturated %v", r.Completed, r.Rejected, r.Failed, r.Saturated)
	}
	if len(r.Workers) != 1 || r.Workers[0].Worker != "w7" || r.Workers[0].Requests != 5 {
		t.Fatalf("workers %+v: want w7 from the header", r.Workers)
	}
}

func TestOnlineErrors(t *testing.T) {
	w := head(t, 3)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	rep, err := RunOnline(context.Background(), w, OnlineConfig{URLs: []string{"http://" + addr}, Concurrency: 1, Timeout: 5 * time.Second})
	if err == nil || rep == nil || rep.Policies[0].Failed != 3 {
		t.Fatalf("err %v, report %+v: want 3 failures and an error", err, rep)
	}
	for _, bad := range []OnlineConfig{{}, {URLs: []string{"localhost:8000"}}, {URLs: []string{"http://x"}, Concurrency: -1}} {
		if _, err := RunOnline(context.Background(), w, bad); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: err %v, want ErrConfig", bad, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := RunOnline(ctx, w, OnlineConfig{URLs: []string{"http://" + addr}}); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled run: %v", err)
	}
}

func TestStreamParse(t *testing.T) {
	o := &online{start: time.Now()}
	body := strings.Join([]string{
		`data: {"id":"cmpl-mock-3-9","choices":[{"index":0,"text":"a"}]}`, "",
		`data: {"id":"cmpl-mock-3-9","choices":[{"index":0,"text":"b","finish_reason":"length"}],"usage":{"prompt_tokens":40,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":32}}}`, "",
		"data: [DONE]", "",
	}, "\n")
	var rec record
	worker := ""
	if err := o.stream(&rec, strings.NewReader(body), &worker); err != nil {
		t.Fatal(err)
	}
	if !rec.done || !rec.hasFirst || rec.cached != 32 || rec.output != 2 || rec.prompt != 40 || worker != "3" {
		t.Fatalf("record %+v worker %q", rec, worker)
	}
	for _, bad := range []string{
		"data: {\"choices\":[{\"text\":\"a\"}]}\n\n",              // no [DONE]
		"data: [DONE]\n\n",                                        // no token
		"data: {nope\n\n",                                         // bad JSON
		"data: {\"error\":{\"message\":\"x\"}}\n\ndata: [DONE]\n", // error event
	} {
		var r record
		w := ""
		if err := o.stream(&r, strings.NewReader(bad), &w); err == nil {
			t.Errorf("stream %q accepted", bad)
		}
	}
}

func FuzzStream(f *testing.F) {
	f.Add([]byte("data: {\"id\":\"cmpl-mock-1-1\",\"choices\":[{\"text\":\"a\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data: [DONE]\n"))
	f.Add([]byte(": keep-alive\ndata: {}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		o := &online{start: time.Now()}
		var rec record
		w := ""
		err := o.stream(&rec, bytes.NewReader(b), &w)
		if err == nil && (!rec.done || !rec.hasFirst) {
			t.Fatalf("accepted a stream without end or token: %+v", rec)
		}
	})
}
