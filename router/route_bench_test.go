package router

import (
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"

	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/openai"
	"github.com/kvroute/kvroute/wire/plane"
)

// BenchmarkRoute measures POST /route end to end over loopback TCP (client,
// HTTP parsing, hashing, the batcher, a batched index lookup, the
// scheduler, the JSON answer) against a bare fasthttp handler that only
// parses the same body (JSON and token ids) and answers a constant: the
// ratio route/parse of the two throughputs is the router's efficiency
// (target >= 0.5). 16 workers, each holding 16 prompt families of the
// benchmark's length in the index; requests cycle over 64 families (every
// fourth misses).
func BenchmarkRoute(b *testing.B) {
	for _, n := range []int{2048, 8192} {
		bodies := routeBodies(n, 64)
		b.Run(fmt.Sprintf("tokens=%d/handler=route", n), func(b *testing.B) {
			r, ix := benchRouter(b, n)
			defer ix.Close()
			defer r.Close()
			runHTTPBench(b, r.Handler, "/route", bodies)
		})
		b.Run(fmt.Sprintf("tokens=%d/handler=parse", n), func(b *testing.B) {
			runHTTPBench(b, parseOnly, "/route", bodies)
		})
	}
}

// parseOnly is the naive baseline: parse the body as /route does, answer a
// constant.
func parseOnly(ctx *fasthttp.RequestCtx) {
	p := routeParsers.Get()
	defer routeParsers.Put(p)
	v, err := p.ParseBytes(ctx.PostBody())
	if err != nil || v.Type() != fastjson.TypeObject {
		ctx.SetStatusCode(400)
		return
	}
	req := openai.AcquireRequest()
	defer openai.ReleaseRequest(req)
	if err := openai.ParsePrompt(v, openai.BytesTokenizer{}, req); err != nil || len(req.Tokens) == 0 {
		ctx.SetStatusCode(400)
		return
	}
	ctx.SetContentType("application/json")
	ctx.SetBodyString(`{"request_id":"x","worker_id":1,"dp_rank":0,"url":"http://127.0.0.1:1","overlap_blocks":0}`)
}

func benchTokens(family, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(family*100003 + i + 1)
	}
	return out
}

func routeBodies(n, families int) [][]byte {
	out := make([][]byte, families)
	for f := range out {
		b := []byte(`{"token_ids":[`)
		for i, t := range benchTokens(f, n) {
			if i > 0 {
				b = append(b, ',')
			}
			b = fmt.Appendf(b, "%d", t)
		}
		out[f] = append(b, "]}"...)
	}
	return out
}

// benchRouter is a Router over a populated index with 16 static workers,
// started.
func benchRouter(b testing.TB, n int) (*Router, *shard.Index) {
	sc := sched.DefaultConfig()
	sc.Expiry = time.Second // bookings are never freed here: expire them
	r, ix := benchFleet(b, n, sc, nil)
	r.Start()
	return r, ix
}

// benchFleet is a Router (not started) over an index where worker w of 16
// holds families w, w+16 and w+32 of n tokens; role, when not nil, gives
// worker w's role.
func benchFleet(b testing.TB, n int, sc sched.Config, role func(w int) sched.Role) (*Router, *shard.Index) {
	ix, err := shard.NewIndex(shard.Config{Shards: 1})
	if err != nil {
		b.Fatal(err)
	}
	subj, _ := plane.SubjectsFor("bench", "backend")
	sc.BlockSize = testBlockSize
	cfg := Config{Sched: sc, Subjects: subj, Logger: quietLogger()}
	for w := range 16 {
		// A model given: the router does not ask these (absent) workers for
		// theirs, whose retrying goroutine would allocate during AllocsPerRun.
		sw := StaticWorker{ID: uint64(w + 1), URL: fmt.Sprintf("http://127.0.0.1:%d", 9000+w), Model: "bench"}
		if role != nil {
			sw.Capacity.Role = role(w)
		}
		cfg.Workers = append(cfg.Workers, sw)
	}
	// Worker w holds families w, w+16, w+32 (48 of the 64 families).
	for f := range 48 {
		local := wire.LocalHashes(nil, benchTokens(f, n), testBlockSize, wire.Seed)
		blocks := make([]wire.Block, len(local))
		for i, h := range local {
			blocks[i] = wire.Block{Engine: wire.EngineHash(uint64(f)<<32 | uint64(i) + 1), Local: h}
		}
		if err := ix.Apply([]wire.Event{{Worker: wire.WorkerKey{Worker: uint64(f%16 + 1)}, Kind: wire.KindStored, Blocks: blocks}}); err != nil {
			b.Fatal(err)
		}
	}
	if err := ix.Flush(); err != nil {
		b.Fatal(err)
	}
	r, err := New(cfg, ix, Hooks{})
	if err != nil {
		b.Fatal(err)
	}
	return r, ix
}

// runHTTPBench serves h on loopback TCP and posts bodies (cycling) from
// 4×GOMAXPROCS client goroutines, reporting req/s and the p50/p99 latency.
func runHTTPBench(b *testing.B, h fasthttp.RequestHandler, path string, bodies [][]byte) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: h, MaxRequestBodySize: 16 << 20}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Shutdown()
	client := &fasthttp.Client{MaxConnsPerHost: 1024}
	url := "http://" + ln.Addr().String() + path
	var (
		mu  sync.Mutex
		lat []time.Duration
	)
	b.SetParallelism(4)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI(url)
		req.Header.SetMethod("POST")
		mine := make([]time.Duration, 0, 1024)
		i := 0
		for pb.Next() {
			req.SetBodyRaw(bodies[i%len(bodies)])
			i++
			t := time.Now()
			if err := client.Do(req, resp); err != nil {
				b.Error(err)
				return
			}
			mine = append(mine, time.Since(t))
			if resp.StatusCode() != 200 {
				b.Errorf("status %d: %s", resp.StatusCode(), resp.Body())
				return
			}
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "req/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
