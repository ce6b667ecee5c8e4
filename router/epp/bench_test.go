package epp_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvroute/kvroute/router"
	"github.com/kvroute/kvroute/router/epp"
	"github.com/kvroute/kvroute/router/epp/eppcheck"
	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/plane"
)

// BenchmarkDecision compares an EPP decision with POST /route for the same
// 2,048-token prompts on the same router (16 static workers, each holding
// 3 of 64 prompt families in the index; every fourth request misses), in
// one run:
//
//   - route-http: POST /route over loopback HTTP (fasthttp), as
//     router's BenchmarkRoute measures it.
//   - epp-grpc: one ext_proc stream over loopback gRPC, played as Envoy
//     plays it (request headers, the body with end of stream; the headers
//     answer and the body streamed back), then closed (the booking freed).
//   - echo-grpc: the same stream against a bare ExternalProcessor that
//     answers a constant destination and echoes the body: gRPC's own cost,
//     the baseline of epp-grpc's allocations.
//   - route and pick: the decision without transport: Router.Handler on a
//     RequestCtx for /route, Router.Pick then PickDone for the EPP.
//
// The ratios epp-grpc/route-http and pick/route are the EPP's cost against
// /route's (target <= 1.3); epp-grpc's allocations minus echo-grpc's are
// the EPP's own per stream.
func BenchmarkDecision(b *testing.B) {
	const n = 2048
	routeBodies, oaiBodies := bodies(n, 64)
	b.Run(fmt.Sprintf("tokens=%d/handler=route-http", n), func(b *testing.B) {
		r := benchRouter(b, n)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv := &fasthttp.Server{Handler: r.Handler, MaxRequestBodySize: 16 << 20}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Shutdown()
		client := &fasthttp.Client{}
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://" + ln.Addr().String() + "/route")
		req.Header.SetMethod("POST")
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			req.SetBodyRaw(routeBodies[i%len(routeBodies)])
			i++
			if err := client.Do(req, resp); err != nil || resp.StatusCode() != 200 {
				b.Fatalf("%v %d %s", err, resp.StatusCode(), resp.Body())
			}
		}
	})
	b.Run(fmt.Sprintf("tokens=%d/handler=epp-grpc", n), func(b *testing.B) {
		r := benchRouter(b, n)
		s, err := epp.New(epp.Config{Router: r, Fallbacks: 2, Logger: quiet()})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		runGRPC(b, s.Register, oaiBodies)
	})
	b.Run(fmt.Sprintf("tokens=%d/handler=echo-grpc", n), func(b *testing.B) {
		runGRPC(b, func(g *grpc.Server) { extprocv3.RegisterExternalProcessorServer(g, echoProcessor{}) }, oaiBodies)
	})
	b.Run(fmt.Sprintf("tokens=%d/handler=route", n), func(b *testing.B) {
		r := benchRouter(b, n)
		var ctx fasthttp.RequestCtx
		var req fasthttp.Request
		req.Header.SetMethod("POST")
		req.SetRequestURI("/route")
		ctx.Init(&req, nil, nil)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			ctx.Request.SetBodyRaw(routeBodies[i%len(routeBodies)])
			ctx.Response.Reset()
			i++
			r.Handler(&ctx)
			if ctx.Response.StatusCode() != 200 {
				b.Fatalf("%d %s", ctx.Response.StatusCode(), ctx.Response.Body())
			}
		}
	})
	b.Run(fmt.Sprintf("tokens=%d/handler=pick", n), func(b *testing.B) {
		r := benchRouter(b, n)
		var pk router.Pick
		in := router.PickRequest{Fallbacks: 2}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			in.Body = oaiBodies[i%len(oaiBodies)]
			i++
			if err := r.Pick(&pk, &in); err != nil {
				b.Fatal(err)
			}
			r.PickDone(&pk)
		}
	})
}

// BenchmarkDecisionRatio alternates the two sides of each comparison in
// one loop, request by request, so that a noisy machine's drift falls on
// both alike, and reports their ratio: wire=epp-grpc/route-http (one
// ext_proc stream against one POST /route over loopback), wire-own
// (epp-grpc minus echo-grpc, the EPP's share of its stream, against
// route-http), and work=pick/route (the decisions without transport).
func BenchmarkDecisionRatio(b *testing.B) {
	const n = 2048
	routeBodies, oaiBodies := bodies(n, 64)
	b.Run(fmt.Sprintf("tokens=%d/compare=wire", n), func(b *testing.B) {
		r := benchRouter(b, n)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv := &fasthttp.Server{Handler: r.Handler, MaxRequestBodySize: 16 << 20}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Shutdown()
		client := &fasthttp.Client{}
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://" + ln.Addr().String() + "/route")
		req.Header.SetMethod("POST")
		s, err := epp.New(epp.Config{Router: r, Fallbacks: 2, Logger: quiet()})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		eppC := grpcClient(b, s.Register)
		echoC := grpcClient(b, func(g *grpc.Server) { extprocv3.RegisterExternalProcessorServer(g, echoProcessor{}) })
		var tRoute, tEpp, tEcho time.Duration
		i := 0
		for b.Loop() {
			body := oaiBodies[i%len(oaiBodies)]
			req.SetBodyRaw(routeBodies[i%len(routeBodies)])
			i++
			t0 := time.Now()
			if err := client.Do(req, resp); err != nil || resp.StatusCode() != 200 {
				b.Fatalf("%v %d %s", err, resp.StatusCode(), resp.Body())
			}
			t1 := time.Now()
			stream(b, eppC, body)
			t2 := time.Now()
			stream(b, echoC, body)
			t3 := time.Now()
			tRoute, tEpp, tEcho = tRoute+t1.Sub(t0), tEpp+t2.Sub(t1), tEcho+t3.Sub(t2)
		}
		b.ReportMetric(float64(tEpp)/float64(tRoute), "epp/route")
		b.ReportMetric(float64(tEpp-tEcho)/float64(tRoute), "epp-echo/route")
		b.ReportMetric(float64(tEcho)/float64(tRoute), "echo/route")
	})
	b.Run(fmt.Sprintf("tokens=%d/compare=work", n), func(b *testing.B) {
		r := benchRouter(b, n)
		var ctx fasthttp.RequestCtx
		var req fasthttp.Request
		req.Header.SetMethod("POST")
		req.SetRequestURI("/route")
		ctx.Init(&req, nil, nil)
		var pk router.Pick
		in := router.PickRequest{Fallbacks: 2}
		var tRoute, tPick time.Duration
		i := 0
		for b.Loop() {
			ctx.Request.SetBodyRaw(routeBodies[i%len(routeBodies)])
			ctx.Response.Reset()
			in.Body = oaiBodies[i%len(oaiBodies)]
			i++
			t0 := time.Now()
			r.Handler(&ctx)
			t1 := time.Now()
			if err := r.Pick(&pk, &in); err != nil {
				b.Fatal(err)
			}
			r.PickDone(&pk)
			t2 := time.Now()
			if ctx.Response.StatusCode() != 200 {
				b.Fatalf("%d %s", ctx.Response.StatusCode(), ctx.Response.Body())
			}
			tRoute, tPick = tRoute+t1.Sub(t0), tPick+t2.Sub(t1)
		}
		b.ReportMetric(float64(tPick)/float64(tRoute), "pick/route")
	})
}

func grpcClient(b *testing.B, register func(*grpc.Server)) extprocv3.ExternalProcessorClient {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	g := grpc.NewServer()
	register(g)
	go func() { _ = g.Serve(ln) }()
	b.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	return extprocv3.NewExternalProcessorClient(conn)
}

func stream(b *testing.B, c extprocv3.ExternalProcessorClient, body []byte) {
	x, p, err := eppcheck.Start(context.Background(), c, &eppcheck.Request{Path: "/v1/completions", Body: body, Chunk: 64 << 10})
	if err != nil {
		b.Fatal(err)
	}
	if p.Header == "" || len(p.Body) != len(body) {
		b.Fatalf("answer %+v", p)
	}
	x.Close()
}

// runGRPC serves register's services on loopback gRPC and plays one
// Envoy stream per iteration.
func runGRPC(b *testing.B, register func(*grpc.Server), bodies [][]byte) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	g := grpc.NewServer()
	register(g)
	go func() { _ = g.Serve(ln) }()
	defer g.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	c := extprocv3.NewExternalProcessorClient(conn)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		body := bodies[i%len(bodies)]
		i++
		x, p, err := eppcheck.Start(ctx, c, &eppcheck.Request{Path: "/v1/completions", Body: body, Chunk: 64 << 10})
		if err != nil {
			b.Fatal(err)
		}
		if p.Header == "" || len(p.Body) != len(body) {
			b.Fatalf("answer %+v", p)
		}
		x.Close()
	}
}

// echoProcessor is the bare baseline: a constant destination, the body
// echoed in one chunk.
type echoProcessor struct {
	extprocv3.UnimplementedExternalProcessorServer
}

func (echoProcessor) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	var body []byte
	dest := []byte("127.0.0.1:9000,127.0.0.1:9001,127.0.0.1:9002")
	// The same answers as the EPP's, built per stream.
	hr := &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
			Response: &extprocv3.CommonResponse{ClearRouteCache: true, HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{
				Header: &corev3.HeaderValue{Key: epp.HeaderDestination, RawValue: dest}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}}}}}},
		DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			epp.MetadataNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
				epp.HeaderDestination: structpb.NewStringValue(string(dest)),
			}}),
		}},
	}
	chunk := &extprocv3.StreamedBodyResponse{EndOfStream: true}
	br := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{
		Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
			StreamedResponse: chunk}}}}}}
	for {
		req, err := srv.Recv()
		if err != nil {
			return nil
		}
		rb := req.GetRequestBody()
		if rb == nil {
			continue
		}
		body = append(body, rb.GetBody()...)
		if !rb.GetEndOfStream() {
			continue
		}
		if err := srv.Send(hr); err != nil {
			return err
		}
		chunk.Body = body
		if err := srv.Send(br); err != nil {
			return err
		}
		body = body[:0]
	}
}

func benchTokens(family, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(family*100003 + i + 1)
	}
	return out
}

// bodies returns /route bodies ({"token_ids":[...]}) and completion bodies
// ({"model":"bench","prompt":[...]}) of the same token ids.
func bodies(n, families int) (route, oai [][]byte) {
	for f := range families {
		ids := []byte{'['}
		for i, t := range benchTokens(f, n) {
			if i > 0 {
				ids = append(ids, ',')
			}
			ids = strconv.AppendUint(ids, uint64(t), 10)
		}
		ids = append(ids, ']')
		route = append(route, fmt.Appendf(nil, `{"token_ids":%s}`, ids))
		oai = append(oai, fmt.Appendf(nil, `{"model":"bench","prompt":%s,"max_tokens":1}`, ids))
	}
	return route, oai
}

// benchRouter is a started Router over a populated index with 16 static
// workers (router's BenchmarkRoute's setup).
func benchRouter(b testing.TB, n int) *router.Router {
	ix, err := shard.NewIndex(shard.Config{Shards: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ix.Close() })
	subj, _ := plane.SubjectsFor("bench", "backend")
	sc := sched.DefaultConfig()
	sc.BlockSize = blockSize
	sc.Expiry = time.Second // /route bookings are never freed here: expire them
	cfg := router.Config{Sched: sc, Subjects: subj, Logger: quiet()}
	for w := range 16 {
		cfg.Workers = append(cfg.Workers, router.StaticWorker{ID: uint64(w + 1), URL: fmt.Sprintf("http://127.0.0.1:%d", 9000+w), Model: "bench"})
	}
	for f := range 48 {
		local := wire.LocalHashes(nil, benchTokens(f, n), blockSize, wire.Seed)
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
	r, err := router.New(cfg, ix, router.Hooks{})
	if err != nil {
		b.Fatal(err)
	}
	r.Start()
	b.Cleanup(func() { _ = r.Close() })
	return r
}
