package proxy

import (
	"bytes"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// completion is a worker's fixed non-streamed answer, as bench-proxy's
// trivial backends send it.
var completion = []byte(`{"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"m","choices":[{"index":0,"text":" fixed answer","logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":2048,"completion_tokens":16,"total_tokens":2064}}`)

func benchWorker(b *testing.B) string {
	return serve(b, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBody(completion)
	}) + "/v1/completions"
}

// BenchmarkSend posts a 2 KB completion request to a worker over loopback
// TCP and reads its whole answer, from 16 goroutines: Send with the
// router's timeouts (first-byte and response bounds on, as kvroute serve's
// defaults), with none, and a bare fasthttp.Client.Do, the naive baseline,
// for the ratio. The worker runs in the same process, so ns/op is the
// whole round trip's CPU on this machine.
func BenchmarkSend(b *testing.B) {
	body := append([]byte(`{"model":"m","max_tokens":16,"prompt":"`), bytes.Repeat([]byte("x"), 2048)...)
	body = append(body, `"}`...)
	run := func(b *testing.B, do func() error) {
		b.SetParallelism(8)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := do(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"client=proxy/timeouts=serve", Config{FirstByteTimeout: 10 * time.Second, ResponseTimeout: time.Minute}},
		{"client=proxy/timeouts=none", Config{}},
	} {
		b.Run(c.name, func(b *testing.B) {
			url, p := benchWorker(b), New(c.cfg)
			run(b, func() error {
				u, err := p.Send(url, body, false)
				if err != nil {
					return err
				}
				u.Release()
				return nil
			})
		})
	}
	b.Run("client=fasthttp", func(b *testing.B) {
		url := benchWorker(b)
		client := &fasthttp.Client{ReadTimeout: 5 * time.Minute, WriteTimeout: 30 * time.Second}
		run(b, func() error {
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.SetRequestURI(url)
			req.Header.SetMethod(fasthttp.MethodPost)
			req.SetBodyRaw(body)
			return client.Do(req, resp)
		})
	})
}
