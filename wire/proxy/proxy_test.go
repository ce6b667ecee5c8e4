package proxy

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// serve serves h on a loopback port until the test ends and returns its URL.
func serve(t testing.TB, h fasthttp.RequestHandler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &fasthttp.Server{Handler: h}
	go s.Serve(ln) //nolint:errcheck
	t.Cleanup(func() { _ = s.Shutdown() })
	return "http://" + ln.Addr().String()
}

type record struct {
	first atomic.Int32
	done  chan error
}

func (r *record) hooks() Hooks {
	return Hooks{FirstToken: func() { r.first.Add(1) }, Done: func(err error) { r.done <- err }}
}

func TestStreamIsRelayedChunkByChunk(t *testing.T) {
	gate := make(chan struct{})
	upstream := serve(t, func(ctx *fasthttp.RequestCtx) {
		if string(ctx.PostBody()) != `{"x":1}` {
			ctx.Error("bad body", 400)
			return
		}
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			fmt.Fprintf(w, "data: {\"n\":0}\n\n")
			w.Flush()
			<-gate // the rest is sent only after the client saw the first chunk
			for i := 1; i < 4; i++ {
				fmt.Fprintf(w, "data: {\"n\":%d}\n\n", i)
				w.Flush()
			}
			fmt.Fprintf(w, "data: [DONE]\n\n")
		})
	})
	p := New(Config{})
	rec := &record{done: make(chan error, 1)}
	front := serve(t, func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set("X-Kvroute-Worker", "1")
		p.Forward(ctx, upstream+"/v1/completions", ctx.PostBody(), true, rec.hooks())
	})
	resp, err := http.Post(front, "application/json", strings.NewReader(`{"x":1}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("X-Kvroute-Worker") != "1" || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("headers %v", resp.Header)
	}
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "data: {\"n\":0}\n" {
		t.Fatalf("first line %q %v", line, err)
	}
	if rec.first.Load() != 1 {
		t.Fatal("FirstToken not called at the first event")
	}
	close(gate)
	var rest strings.Builder
	for {
		l, err := br.ReadString('\n')
		rest.WriteString(l)
		if err != nil {
			break
		}
	}
	if !strings.Contains(rest.String(), `{"n":3}`) || !strings.HasSuffix(rest.String(), "data: [DONE]\n\n") {
		t.Fatalf("rest %q", rest.String())
	}
	if err := <-rec.done; err != nil {
		t.Fatalf("Done(%v), want nil", err)
	}
	if rec.first.Load() != 1 {
		t.Fatalf("FirstToken called %d times", rec.first.Load())
	}
}

func TestClientDisconnectEndsTheStream(t *testing.T) {
	upstreamErr := make(chan error, 1)
	upstream := serve(t, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			for i := 0; i < 2000; i++ {
				fmt.Fprintf(w, "data: {\"n\":%d,\"pad\":\"%s\"}\n\n", i, strings.Repeat("x", 512))
				if err := w.Flush(); err != nil {
					upstreamErr <- err
					return
				}
				time.Sleep(2 * time.Millisecond)
			}
			upstreamErr <- nil
		})
	})
	p := New(Config{})
	rec := &record{done: make(chan error, 1)}
	front := serve(t, func(ctx *fasthttp.RequestCtx) {
		p.Forward(ctx, upstream, ctx.PostBody(), true, rec.hooks())
	})
	cutAfterFirstChunk(t, front)
	select {
	case err := <-rec.done:
		if !errors.Is(err, ErrClientGone) {
			t.Fatalf("Done(%v), want ErrClientGone", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Done not called after the client went away")
	}
	select {
	case err := <-upstreamErr:
		if err == nil {
			t.Fatal("upstream streamed to the end: the proxy did not close its stream")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("upstream never noticed the closed stream")
	}
}

func TestNonStreamingAndErrors(t *testing.T) {
	upstream := serve(t, func(ctx *fasthttp.RequestCtx) {
		if strings.Contains(string(ctx.PostBody()), "bad") {
			ctx.SetStatusCode(400)
			ctx.SetBodyString(`{"error":{"message":"nope"}}`)
			return
		}
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"choices":[{"text":"hi"}]}`)
	})
	p := New(Config{})
	for _, tc := range []struct {
		body, url string
		code      int
		wantErr   bool
	}{
		{`{}`, upstream, 200, false},
		{`{"bad":1}`, upstream, 400, true},
		{`{}`, "http://127.0.0.1:1", 502, true},
	} {
		rec := &record{done: make(chan error, 1)}
		front := serve(t, func(ctx *fasthttp.RequestCtx) { p.Forward(ctx, tc.url, ctx.PostBody(), false, rec.hooks()) })
		resp, err := http.Post(front, "application/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			t.Fatalf("%s: body is not JSON: %v", tc.url, err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Fatalf("%s %s: status %d, want %d", tc.url, tc.body, resp.StatusCode, tc.code)
		}
		if err := <-rec.done; (err != nil) != tc.wantErr {
			t.Fatalf("%s %s: Done(%v)", tc.url, tc.body, err)
		}
		if tc.code == 200 && rec.first.Load() != 1 {
			t.Fatal("FirstToken not called for a complete answer")
		}
	}
}

// silent accepts connections and never answers (a stopped process's kernel
// still completes the TCP handshake).
func silent(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				for _, c := range conns {
					c.Close()
				}
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return "http://" + ln.Addr().String()
}

// A streamed request to a worker that accepts but never answers fails with
// ErrFirstByteTimeout; nothing has been written, so the caller may retry.
func TestSendFirstByteTimeout(t *testing.T) {
	p := New(Config{FirstByteTimeout: 100 * time.Millisecond})
	_, err := p.Send(silent(t)+"/v1/completions", []byte(`{}`), true)
	if !errors.Is(err, ErrFirstByteTimeout) {
		t.Fatalf("Send to a silent worker: %v, want ErrFirstByteTimeout", err)
	}
}

// The first-byte bound ends at the first byte: a stream whose events come
// slower than it afterwards is relayed whole, and the connection is reused
// for the next request with the bound armed again.
func TestFirstByteTimeoutOnlyBoundsTheStart(t *testing.T) {
	upstream := serve(t, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			for i := range 3 {
				fmt.Fprintf(w, "data: {\"n\":%d}\n\n", i)
				w.Flush()
				time.Sleep(150 * time.Millisecond) // the upstream's pace, not synchronization
			}
			fmt.Fprintf(w, "data: [DONE]\n\n")
		})
	})
	p := New(Config{FirstByteTimeout: 100 * time.Millisecond})
	for i := range 2 {
		u, err := p.Send(upstream+"/v1/completions", []byte(`{}`), true)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body := u.resp.BodyStream()
		b, err := readAll(nil, body)
		u.Release()
		if err != nil || !strings.Contains(string(b), "[DONE]") {
			t.Fatalf("request %d: %q %v", i, b, err)
		}
	}
}

// A worker that refuses connections fails Send with a dial error.
func TestSendRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := New(Config{FirstByteTimeout: time.Second})
	for _, stream := range []bool{false, true} {
		if _, err := p.Send("http://"+addr+"/v1/completions", []byte(`{}`), stream); err == nil {
			t.Errorf("stream=%v: Send to a closed port succeeded", stream)
		}
	}
}

type failingReader struct {
	data string
	err  error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.data == "" {
		return 0, f.err
	}
	n := copy(p, f.data)
	f.data = f.data[n:]
	return n, nil
}

// A stream that breaks off (read error, or EOF before [DONE]) ends with one
// SSE error event, after the broken event if any, unless the worker sent an
// error event itself; a complete stream passes unchanged; a cut stream says
// it was cut at shutdown.
func TestRelayEndsBrokenStreamsWithErrorEvent(t *testing.T) {
	const ev = "data: {\"x\":1}\n\n"
	cases := []struct {
		name, in string
		err      error
		cut      bool
		want     error
		tail     string // the output's end
	}{
		{"complete", ev + "data: [DONE]\n\n", io.EOF, false, nil, ev + "data: [DONE]\n\n"},
		{"eof before done", ev, io.EOF, false, ErrWorkerGone, `"code":"worker_stream_interrupted"}}` + "\n\n"},
		{"reset", ev, syscall.ECONNRESET, false, ErrWorkerGone, `"code":"worker_stream_interrupted"}}` + "\n\n"},
		{"mid event", ev + "data: {\"x\"", io.EOF, false, ErrWorkerGone, `"code":"worker_stream_interrupted"}}` + "\n\n"},
		{"worker error event", ev + "data: {\"error\":{\"message\":\"m\"}}\n\n", io.EOF, false, ErrWorkerGone, "data: {\"error\":{\"message\":\"m\"}}\n\n"},
		{"cut", ev, net.ErrClosed, true, ErrShutdown, `"code":"shutting_down"}}` + "\n\n"},
	}
	for _, c := range cases {
		var out strings.Builder
		w := bufio.NewWriter(&out)
		var cut atomic.Bool
		cut.Store(c.cut)
		firsts := 0
		err := relaySSE(w, bufio.NewReader(&failingReader{c.in, c.err}), func() { firsts++ }, &cut, nil, false)
		got := out.String()
		if !errors.Is(err, c.want) && !(c.want == nil && err == nil) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
		if !strings.HasSuffix(got, c.tail) || firsts != 1 {
			t.Errorf("%s: output %q (first called %d times), want it to end with %q", c.name, got, firsts, c.tail)
		}
		if n := strings.Count(got, `{"error"`); c.want != nil && n != 1 {
			t.Errorf("%s: %d error events: %q", c.name, n, got)
		}
		// Every event parses on its own: the error event is not glued to a broken one.
		if c.want != nil {
			events := strings.Split(strings.TrimSuffix(got, "\n\n"), "\n\n")
			last := strings.TrimPrefix(events[len(events)-1], "data: ")
			if !json.Valid([]byte(last)) {
				t.Errorf("%s: last event %q is not JSON", c.name, last)
			}
		}
	}
}

// A stream ended by the client going away closes the worker connection
// once: the proxy's next streams to the same worker get sound connections.
// (Releasing the response after CloseWithError closed the stream a second
// time and handed the closed connection back to the client's pool, where
// the next request or the idle cleaner dereferenced its nil net.Conn.)
func TestStreamCutLeavesThePoolSound(t *testing.T) {
	upstream := serve(t, func(ctx *fasthttp.RequestCtx) {
		n := 2000
		if strings.Contains(string(ctx.PostBody()), "short") {
			n = 3
		}
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			for i := 0; i < n; i++ {
				fmt.Fprintf(w, "data: {\"n\":%d}\n\n", i)
				if err := w.Flush(); err != nil {
					return
				}
				if n > 3 {
					time.Sleep(2 * time.Millisecond)
				}
			}
			fmt.Fprintf(w, "data: [DONE]\n\n")
		})
	})
	p := New(Config{})
	dones := make(chan error, 8)
	front := serve(t, func(ctx *fasthttp.RequestCtx) {
		p.Forward(ctx, upstream, ctx.PostBody(), true, Hooks{Done: func(err error) { dones <- err }})
	})
	cutAfterFirstChunk(t, front)
	if err := <-dones; !errors.Is(err, ErrClientGone) {
		t.Fatalf("Done(%v), want ErrClientGone", err)
	}
	for i := range 4 {
		code, body := post(t, front, `{"short":true}`)
		if code != 200 || !strings.Contains(body, "[DONE]") {
			t.Fatalf("stream %d after the cut one: %d %q", i, code, body)
		}
		if err := <-dones; err != nil {
			t.Fatalf("stream %d after the cut one: Done(%v)", i, err)
		}
	}
}

// post sends body to url with net/http and returns the status and body.
func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// cutAfterFirstChunk posts a streamed request to front as a raw client
// and closes the connection once the first SSE chunk arrived.
func cutAfterFirstChunk(t *testing.T, front string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(front, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
	br := bufio.NewReader(conn)
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(l, "data:") {
			break
		}
	}
	conn.Close()
}

// A non-streamed request to a worker that accepts but never answers fails
// with ErrResponseTimeout once Config.ResponseTimeout passes, instead of
// waiting for ReadTimeout.
func TestSendResponseTimeout(t *testing.T) {
	p := New(Config{ResponseTimeout: 100 * time.Millisecond})
	start := time.Now()
	_, err := p.Send(silent(t)+"/v1/completions", []byte(`{}`), false)
	if !errors.Is(err, ErrResponseTimeout) {
		t.Fatalf("non-streamed Send to a silent worker: %v, want ErrResponseTimeout", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("gave up after %v", d)
	}
}

// A client's own deadline shorter than Config.ResponseTimeout ends the wait
// with ErrClientDeadline (the worker is not to blame), and one already
// passed sends nothing.
func TestSendClientDeadline(t *testing.T) {
	p := New(Config{ResponseTimeout: time.Hour})
	url := silent(t) + "/v1/completions"
	_, err := p.SendDeadline(url, -1, []byte(`{}`), false, time.Now().Add(100*time.Millisecond))
	if !errors.Is(err, ErrClientDeadline) {
		t.Fatalf("Send with a 100 ms client deadline to a silent worker: %v, want ErrClientDeadline", err)
	}
	if _, err := p.SendDeadline(url, -1, []byte(`{}`), false, time.Now().Add(-time.Second)); !errors.Is(err, ErrClientDeadline) {
		t.Fatalf("Send with a passed deadline: %v, want ErrClientDeadline", err)
	}
}

// waiting counts p's connections whose request has no byte of answer yet.
func (p *Proxy) waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c := range p.mu.conns {
		if c.state.Load() == connWaiting {
			n++
		}
	}
	return n
}

// Abandon gives up on the requests waiting for a silent worker's first byte,
// streamed or not, at once; a stream whose answer has begun on another
// worker is left alone.
func TestAbandonGivesUpOnWaitingRequests(t *testing.T) {
	gate := make(chan struct{})
	slow := serve(t, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			fmt.Fprintf(w, "data: {\"n\":0}\n\n")
			w.Flush()
			<-gate
			fmt.Fprintf(w, "data: [DONE]\n\n")
		})
	})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release) // before the server's shutdown, which waits for the handler
	p := New(Config{}) // no timeouts but the 5 min ReadTimeout
	begun, err := p.Send(slow+"/v1/completions", []byte(`{}`), true)
	if err != nil {
		t.Fatal(err)
	}
	url := silent(t)
	errs := make(chan error, 3)
	for _, stream := range []bool{false, true, false} {
		go func() {
			_, err := p.Send(url+"/v1/completions", []byte(`{}`), stream)
			errs <- err
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for p.waiting() < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := p.Abandon(slow); n != 0 {
		t.Errorf("Abandon of the worker whose answer has begun gave up on %d requests", n)
	}
	if n := p.Abandon(url + "/"); n != 3 {
		t.Fatalf("Abandon gave up on %d requests, want 3", n)
	}
	for range 3 {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrAbandoned) {
				t.Errorf("abandoned Send: %v, want ErrAbandoned", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("an abandoned Send still waits")
		}
	}
	release()
	b, err := readAll(nil, begun.resp.BodyStream())
	begun.Release()
	if err != nil || !strings.Contains(string(b), "[DONE]") {
		t.Errorf("the begun stream: %q %v", b, err)
	}
}

func TestHostPort(t *testing.T) {
	for url, want := range map[string]string{
		"http://10.0.0.5:8000":      "10.0.0.5:8000",
		"http://10.0.0.5:8000/v1/x": "10.0.0.5:8000",
		"http://worker":             "worker:80",
		"https://worker/v1":         "worker:443",
		"http://[::1]:9000/":        "[::1]:9000",
	} {
		if got := hostPort(url); got != want {
			t.Errorf("hostPort(%q) = %q, want %q", url, got, want)
		}
	}
}
