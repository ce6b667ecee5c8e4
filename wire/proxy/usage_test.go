package proxy

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/valyala/fasthttp"
)

// sseStream is a vLLM-shaped stream: token chunks, the usage chunk that
// stream_options.include_usage adds (no choices), then [DONE].
const (
	sseTokens = "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"text\":\"a\",\"finish_reason\":null}]}\n\n" +
		"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"text\":\"\\\"prompt_tokens_details\\\"\",\"finish_reason\":\"length\"}]}\n\n"
	sseUsage = "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":32}}}\n\n"
	sseDone  = "data: [DONE]\n\n"
)

// A stream relayed with StripUsage reaches the client byte for byte as the
// worker sent it, less the usage chunk; Usage gets its cached tokens.
// Without StripUsage (the client asked for usage) it passes unchanged.
func TestRelayStripsTheUsageChunk(t *testing.T) {
	upstream := serve(t, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			for _, s := range []string{sseTokens, sseUsage, sseDone} {
				w.WriteString(s) //nolint:errcheck
				w.Flush()        //nolint:errcheck
			}
		})
	})
	p := New(Config{})
	for _, strip := range []bool{true, false} {
		var got atomic.Int64
		got.Store(-1)
		calls := atomic.Int32{}
		rec := &record{done: make(chan error, 1)}
		front := serve(t, func(ctx *fasthttp.RequestCtx) {
			h := rec.hooks()
			h.Usage = func(n int) { calls.Add(1); got.Store(int64(n)) }
			h.StripUsage = strip
			p.Forward(ctx, upstream, ctx.PostBody(), true, h)
		})
		resp, err := http.Post(front, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err := <-rec.done; err != nil {
			t.Fatalf("strip=%v: Done(%v)", strip, err)
		}
		want := sseTokens + sseUsage + sseDone
		if strip {
			want = sseTokens + sseDone
		}
		if string(body) != want {
			t.Errorf("strip=%v: client got\n%q\nwant\n%q", strip, body, want)
		}
		if got.Load() != 32 || calls.Load() != 1 {
			t.Errorf("strip=%v: Usage got %d in %d calls, want 32 once", strip, got.Load(), calls.Load())
		}
	}
}

// A whole answer's cached tokens go to Usage; an answer without usage
// details calls nothing, and the body is relayed unchanged either way.
func TestRelayReadsAnAnswersUsage(t *testing.T) {
	for _, c := range []struct {
		body string
		want int
	}{
		{`{"choices":[{"text":"hi"}],"usage":{"prompt_tokens":20,"prompt_tokens_details":{"cached_tokens":16}}}`, 16},
		{`{"choices":[{"text":"hi"}],"usage":{"prompt_tokens":20}}`, -1},
	} {
		upstream := serve(t, func(ctx *fasthttp.RequestCtx) {
			ctx.SetContentType("application/json")
			ctx.SetBodyString(c.body)
		})
		p := New(Config{})
		got := -1
		rec := &record{done: make(chan error, 1)}
		front := serve(t, func(ctx *fasthttp.RequestCtx) {
			h := rec.hooks()
			h.Usage = func(n int) { got = n }
			p.Forward(ctx, upstream, ctx.PostBody(), false, h)
		})
		resp, err := http.Post(front, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		<-rec.done
		if string(body) != c.body || got != c.want {
			t.Errorf("body %q usage %d, want %q and %d", body, got, c.body, c.want)
		}
	}
}

// A usage chunk that ends a broken stream (no [DONE]) is still read and
// stripped, and the client gets the error event. A chunk longer than the
// reader's buffer arrives in pieces and is relayed as it is, unread.
func TestRelaySSEStripEdges(t *testing.T) {
	for _, c := range []struct {
		size    int
		want    int
		touched bool
	}{{4096, 32, true}, {16, -1, false}} {
		var out strings.Builder
		w := bufio.NewWriter(&out)
		var cut atomic.Bool
		n := -1
		err := relaySSE(w, bufio.NewReaderSize(&failingReader{sseTokens + sseUsage, io.EOF}, c.size), func() {}, &cut, func(x int) { n = x }, true)
		got := out.String()
		if err == nil || !strings.HasPrefix(got, sseTokens) || !strings.Contains(got, "worker_stream_interrupted") {
			t.Fatalf("buffer %d: err %v, out %q", c.size, err, got)
		}
		if n != c.want || strings.Contains(got, "cached_tokens") == c.touched {
			t.Errorf("buffer %d: usage %d, out %q", c.size, n, got)
		}
	}
}

// FuzzRelaySSEStrip relays arbitrary worker bytes with and without
// stripping: reading the usage never changes what is relayed, and
// stripping only ever removes whole usage events.
func FuzzRelaySSEStrip(f *testing.F) {
	f.Add([]byte(sseTokens + sseUsage + sseDone))
	f.Add([]byte(sseUsage + sseUsage + sseDone))
	f.Add([]byte("data: {\"choices\":[],\"usage\":{\"prompt_tokens_details\":{\"cached_tokens\":1}}}\r\n\r\ndata: [DONE]\n\n"))
	f.Add([]byte("event: x\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens_details\":{\"cached_tokens\":1}}}\n\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		relay := func(usage func(int), strip bool) string {
			var out strings.Builder
			w := bufio.NewWriter(&out)
			var cut atomic.Bool
			_ = relaySSE(w, bufio.NewReaderSize(strings.NewReader(string(in)), 64), func() {}, &cut, usage, strip)
			return out.String()
		}
		plain := relay(nil, false)
		n := -1
		if read := relay(func(c int) { n = c }, false); read != plain {
			t.Fatalf("reading the usage changed the stream:\n%q\n%q", plain, read)
		}
		stripped := relay(func(int) {}, true)
		if len(stripped) > len(plain) {
			t.Fatalf("stripping added bytes:\n%q\n%q", plain, stripped)
		}
		if n < 0 && stripped != plain {
			t.Fatalf("no usage read, yet bytes were stripped:\n%q\n%q", plain, stripped)
		}
	})
}
