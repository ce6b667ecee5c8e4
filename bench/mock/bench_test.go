package mock

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/bench/engine"
	"github.com/kvroute/kvroute/internal/natstest"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/plane"
)

// BenchmarkLiveFleet measures how many requests/s a fleet of simulated
// workers in live mode serves over real HTTP on this machine, with the
// clients in the same process: each iteration sends one short request
// (64-token prompts from 8 prefix families, 8 output tokens) from each of
// 64 concurrent keep-alive clients, spread over the workers, and waits for
// all of them. Speedup 10000 makes the engine model's time negligible, so
// the figure is the CPU cost of the mock itself (HTTP, engine, KV events
// over NATS).
func BenchmarkLiveFleet(b *testing.B) {
	for _, workers := range []int{1, 8} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			s := natstest.Server(b)
			nc := natstest.Connect(b, s)
			f := startFleet(b, Config{Workers: workers, BlockSize: 16, KVBlocks: 4096, Speedup: 10000, Transport: plane.TransportDynamo}, nc)
			const clients = 64
			bodies := make([][]byte, clients)
			for i := range bodies {
				p := tokens(i%8, 48)
				p = append(p, tokens(1000+i, 16)...)
				body := []byte(`{"max_tokens":8,"prompt":[`)
				for j, t := range p {
					if j > 0 {
						body = append(body, ',')
					}
					body = strconv.AppendUint(body, uint64(t), 10)
				}
				bodies[i] = append(body, "]}"...)
			}
			hc := &fasthttp.Client{MaxConnsPerHost: clients}
			var wg sync.WaitGroup
			var mu sync.Mutex
			var failed error
			one := func(i int) {
				defer wg.Done()
				req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
				defer fasthttp.ReleaseRequest(req)
				defer fasthttp.ReleaseResponse(resp)
				w := f.Workers()[i%workers]
				req.SetRequestURI(w.URL() + "/v1/completions")
				req.Header.SetMethod(fasthttp.MethodPost)
				req.SetBody(bodies[i])
				if err := hc.DoTimeout(req, resp, 30*time.Second); err != nil || resp.StatusCode() != 200 {
					mu.Lock()
					failed = fmt.Errorf("request: %v %d %s", err, resp.StatusCode(), resp.Body())
					mu.Unlock()
				}
			}
			b.ReportAllocs()
			start := time.Now()
			n := 0
			for b.Loop() {
				wg.Add(clients)
				for i := range clients {
					go one(i)
				}
				wg.Wait()
				n += clients
			}
			if failed != nil {
				b.Fatal(failed)
			}
			b.ReportMetric(float64(n)/time.Since(start).Seconds(), "requests/s")
			b.ReportMetric(float64(workers), "workers")
		})
	}
}

// stepEvents returns the events of a busy engine step: a batch of prefills
// with shared prefixes and the evictions they cause.
func stepEvents(tb testing.TB, bs int) (*Worker, []wire.Event) {
	tb.Helper()
	e := engine.New(engine.Config{Worker: wire.WorkerKey{Worker: 1}, Capacity: 256, BlockSize: bs, MaxBatchedTokens: 4096})
	w := &Worker{cfg: WorkerConfig{ID: 1, BlockSize: bs}}
	w.mu.toks = map[wire.BlockHash]*tokEntry{}
	var now time.Duration
	for round := range 3 {
		for i := range 8 {
			p := tokens(round*8+i, 160)
			local := wire.LocalHashes(nil, p, bs, wire.Seed)
			for j, h := range local {
				w.mu.toks[h] = &tokEntry{tokens: p[j*bs : (j+1)*bs]}
			}
			if err := e.Submit(engine.Request{ID: uint64(round*8 + i + 1), Prompt: local, PromptTokens: len(p), MaxTokens: 1}, now); err != nil {
				tb.Fatal(err)
			}
		}
		if round < 2 {
			for !e.Idle() {
				now += e.Step(now)
			}
			e.Reset()
		}
	}
	now += e.Step(now)
	evs := e.Events()
	if len(evs) < 8 {
		tb.Fatalf("only %d events", len(evs))
	}
	return w, evs
}

// BenchmarkEncodeStep measures encoding one engine step's KV events in each
// transport's format (the per-step publishing cost of a worker).
func BenchmarkEncodeStep(b *testing.B) {
	for _, tr := range []string{plane.TransportDynamo, plane.TransportNative, plane.TransportZMQ} {
		b.Run(tr, func(b *testing.B) {
			w, evs := stepEvents(b, 16)
			w.cfg.Transport = tr
			var o outbox
			o.encode(w, evs)
			b.SetBytes(int64(len(o.buf)))
			b.ReportAllocs()
			for b.Loop() {
				o.encode(w, evs)
			}
			b.ReportMetric(float64(len(evs)), "events/step")
		})
	}
}
