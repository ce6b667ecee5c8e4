package proxy

import (
	"bufio"
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/valyala/fasthttp"
)

// BenchmarkRelayUsage measures what reading the engine's cached tokens
// costs a proxied request over loopback TCP (client → proxy → worker):
// usage=off relays as before, usage=on reads the usage (a whole answer's,
// or a stream's usage chunk, stripped). A stream has 64 token chunks. The
// ratio of the two is the cost of measuring (target ≤ 3%).
func BenchmarkRelayUsage(b *testing.B) {
	var stream strings.Builder
	for range 64 {
		stream.WriteString(`data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"a","finish_reason":null}]}` + "\n\n")
	}
	stream.WriteString(sseUsage + sseDone)
	whole := `{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"` + strings.Repeat("a", 64) +
		`","finish_reason":"length"}],"usage":{"prompt_tokens":2048,"completion_tokens":64,"total_tokens":2112,"prompt_tokens_details":{"cached_tokens":1024}}}`
	upstream := serve(b, func(ctx *fasthttp.RequestCtx) {
		if ctx.QueryArgs().Has("stream") {
			ctx.SetContentType("text/event-stream")
			ctx.SetBodyString(stream.String())
			return
		}
		ctx.SetContentType("application/json")
		ctx.SetBodyString(whole)
	})
	for _, mode := range []string{"stream", "whole"} {
		for _, on := range []bool{false, true} {
			name := mode + "/usage=off"
			if on {
				name = mode + "/usage=on"
			}
			b.Run(name, func(b *testing.B) {
				p := New(Config{})
				url := upstream + "/v1/completions"
				if mode == "stream" {
					url += "?stream=1"
				}
				var sum int
				usage := func(n int) { sum += n }
				front := serve(b, func(ctx *fasthttp.RequestCtx) {
					u, err := p.Send(url, ctx.PostBody(), mode == "stream")
					if err != nil {
						ctx.SetStatusCode(502)
						return
					}
					h := Hooks{}
					if on {
						h.Usage, h.StripUsage = usage, true
					}
					p.Relay(ctx, u, h)
				})
				c := &fasthttp.Client{}
				req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
				req.SetRequestURI(front)
				req.Header.SetMethod("POST")
				req.SetBodyString(`{"prompt":[1,2,3]}`)
				b.ReportAllocs()
				for b.Loop() {
					if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
						b.Fatal(err, resp.StatusCode())
					}
				}
			})
		}
	}
}

// BenchmarkRelaySSE measures the relay's own work on a stream of 64 token
// chunks and the usage chunk, in memory (no sockets, so the machine's
// noise stays out): usage=on reads the usage and strips its chunk.
func BenchmarkRelaySSE(b *testing.B) {
	var sb strings.Builder
	for range 64 {
		sb.WriteString(`data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"a","finish_reason":null}]}` + "\n\n")
	}
	sb.WriteString(sseUsage + sseDone)
	stream := sb.String()
	for _, on := range []bool{false, true} {
		name := "usage=off"
		if on {
			name = "usage=on"
		}
		b.Run(name, func(b *testing.B) {
			var (
				sr  strings.Reader
				cut atomic.Bool
				n   int
			)
			br := bufio.NewReaderSize(&sr, 16<<10)
			bw := bufio.NewWriterSize(io.Discard, 4096)
			var usage func(int)
			if on {
				usage = func(c int) { n += c }
			}
			first := func() {}
			b.SetBytes(int64(len(stream)))
			b.ReportAllocs()
			for b.Loop() {
				sr.Reset(stream)
				br.Reset(&sr)
				if err := relaySSE(bw, br, first, &cut, usage, on); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
