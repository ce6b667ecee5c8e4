// Package proxy forwards OpenAI-compatible requests to a worker over a
// keep-alive fasthttp client and streams the response back chunk by chunk,
// telling the caller when the first token arrived and when the request ended
// (completed, failed, or the client went away), so the router can mark
// prefill done and free the request's load. A stream the worker breaks off,
// or that CutStreams cuts at shutdown, ends with an SSE error event so it
// never passes for a complete answer. WriteAPIError is the one writer of
// OpenAI-style error answers.
package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/wire/openai"
)

// Config configures a Proxy.
type Config struct {
	MaxConnsPerHost int           // default 1024
	ReadTimeout     time.Duration // per read from the worker (default 5m: long generations)
	WriteTimeout    time.Duration // default 30s
	DialTimeout     time.Duration // default 5s
}

// Hooks are called by Forward. FirstToken is called at most once, before
// Done; Done is called exactly once. Either may be nil.
type Hooks struct {
	FirstToken func()
	Done       func(err error)
}

// Errors passed to Hooks.Done when a stream did not complete.
var (
	// ErrClientGone: the client disconnected mid-stream.
	ErrClientGone = errors.New("client disconnected")
	// ErrWorkerGone: the worker's stream failed, or ended before its
	// "data: [DONE]"; the client got an SSE error event.
	ErrWorkerGone = errors.New("worker stream ended before [DONE]")
	// ErrShutdown: CutStreams cut the stream; the client got an SSE error
	// event.
	ErrShutdown = errors.New("stream cut at shutdown")
)

// Proxy forwards requests. It is goroutine-safe.
type Proxy struct {
	client *fasthttp.Client
	cut    atomic.Bool
	active atomic.Int64 // streams being relayed
	mu     struct {
		sync.Mutex
		conns map[*conn]struct{} // open connections to workers
	}
}

// conn is a connection to a worker, tracked for CutStreams.
type conn struct {
	net.Conn
	p    *Proxy
	once sync.Once
}

func (c *conn) Close() error {
	c.once.Do(func() {
		c.p.mu.Lock()
		delete(c.p.mu.conns, c)
		c.p.mu.Unlock()
	})
	return c.Conn.Close()
}

// New returns a Proxy with keep-alive connection pools per worker.
func New(cfg Config) *Proxy {
	if cfg.MaxConnsPerHost <= 0 {
		cfg.MaxConnsPerHost = 1024
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = 5 * time.Minute
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 30 * time.Second
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	dialer := &fasthttp.TCPDialer{}
	p := &Proxy{}
	p.mu.conns = map[*conn]struct{}{}
	p.client = &fasthttp.Client{
		MaxConnsPerHost:          cfg.MaxConnsPerHost,
		ReadTimeout:              cfg.ReadTimeout,
		WriteTimeout:             cfg.WriteTimeout,
		StreamResponseBody:       true,
		NoDefaultUserAgentHeader: true,
		Dial: func(addr string) (net.Conn, error) {
			nc, err := dialer.DialTimeout(addr, cfg.DialTimeout)
			if err != nil {
				return nil, err
			}
			c := &conn{Conn: nc, p: p}
			p.mu.Lock()
			p.mu.conns[c] = struct{}{}
			p.mu.Unlock()
			return c, nil
		},
	}
	return p
}

// CutStreams ends the streams being relayed, for a shutdown whose grace
// period is over: it closes every connection to a worker, so each stream's
// client gets an SSE error event (code shutting_down) and Done gets
// ErrShutdown. It then waits, at most timeout, for the streams to end and
// reports how many are still running. Requests forwarded afterwards fail too.
func (p *Proxy) CutStreams(timeout time.Duration) int64 {
	p.cut.Store(true)
	p.mu.Lock()
	for c := range p.mu.conns {
		_ = c.Conn.Close()
	}
	p.mu.Unlock()
	deadline := time.Now().Add(timeout)
	for p.active.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // rare (shutdown): a poll is simpler than a condition
	}
	return p.active.Load()
}

// Forward sends body as a POST to url (e.g. http://host:port/v1/completions)
// and writes the worker's answer to ctx. With stream set, the answer is
// relayed as it arrives, flushed after every SSE event; FirstToken is called
// at the first event. Without it, the whole answer is relayed at once and
// FirstToken is called when it arrives. Forward returns before a streamed
// body is relayed (fasthttp writes it after the handler returns); Done tells
// the end. A worker that cannot be reached is answered with 502.
func (p *Proxy) Forward(ctx *fasthttp.RequestCtx, url string, body []byte, stream bool, h Hooks) {
	var once sync.Once
	done := func(err error) {
		once.Do(func() {
			if h.Done != nil {
				h.Done(err)
			}
		})
	}
	first := func() {
		if h.FirstToken != nil {
			h.FirstToken()
		}
	}
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	req.SetRequestURI(url)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.SetBodyRaw(body)
	err := p.client.Do(req, resp)
	fasthttp.ReleaseRequest(req)
	if err != nil {
		fasthttp.ReleaseResponse(resp)
		WriteError(ctx, fasthttp.StatusBadGateway, fmt.Sprintf("worker %s: %v", url, err))
		done(fmt.Errorf("worker %s: %w", url, err))
		return
	}
	ctx.SetStatusCode(resp.StatusCode())
	ctx.Response.Header.SetContentTypeBytes(resp.Header.ContentType())
	if !stream || resp.StatusCode() != fasthttp.StatusOK {
		b, rerr := io.ReadAll(resp.BodyStream())
		_ = resp.CloseBodyStream()
		fasthttp.ReleaseResponse(resp)
		if rerr != nil {
			// A partial answer must not pass for a complete one.
			WriteError(ctx, fasthttp.StatusBadGateway, fmt.Sprintf("worker %s: its answer broke off: %v", url, rerr))
			done(fmt.Errorf("%w: read from worker %s: %w", ErrWorkerGone, url, rerr))
			return
		}
		ctx.SetBody(b)
		if ctx.Response.StatusCode() == fasthttp.StatusOK {
			first()
			done(nil)
			return
		}
		done(fmt.Errorf("worker %s answered %d", url, resp.StatusCode()))
		return
	}
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	p.active.Add(1)
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer p.active.Add(-1)
		body := resp.BodyStream()
		err := relaySSE(w, bufio.NewReaderSize(body, 16<<10), first, &p.cut)
		if c, ok := body.(fasthttp.ReadCloserWithError); ok && err != nil {
			// Closing with an error closes the worker connection instead of
			// returning a half-read one to the pool: the worker sees the
			// disconnect and stops generating.
			_ = c.CloseWithError(err)
		} else {
			_ = resp.CloseBodyStream()
		}
		fasthttp.ReleaseResponse(resp)
		done(err)
	})
}

// Models asks a worker which models it serves: GET baseURL/v1/models, the
// list vLLM and SGLang serve, within timeout.
func (p *Proxy) Models(baseURL string, timeout time.Duration) ([]string, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(baseURL + "/v1/models")
	req.Header.SetMethod(fasthttp.MethodGet)
	req.SetTimeout(timeout)
	if err := p.client.Do(req, resp); err != nil {
		return nil, fmt.Errorf("GET %s/v1/models: %w", baseURL, err)
	}
	body, err := resp.Body(), error(nil)
	if bs := resp.BodyStream(); bs != nil {
		body, err = io.ReadAll(io.LimitReader(bs, 1<<20))
		_ = resp.CloseBodyStream()
	}
	if err != nil {
		return nil, fmt.Errorf("GET %s/v1/models: %w", baseURL, err)
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return nil, fmt.Errorf("GET %s/v1/models: status %d", baseURL, resp.StatusCode())
	}
	ids, err := openai.ParseModelIDs(nil, body)
	if err != nil {
		return nil, fmt.Errorf("GET %s/v1/models: %w", baseURL, err)
	}
	return ids, nil
}

// relaySSE copies SSE events from r to w, flushing after each, and calls
// first at the first data event. A write or flush failure means the client
// went away: it returns ErrClientGone so the upstream stream is closed. A
// read error, or the end of the worker's stream before "data: [DONE]",
// means the worker failed (or, with cut set, the stream was cut at
// shutdown): the client gets an SSE error event, unless the worker sent one
// itself, so that the stream does not pass for a complete answer, and
// relaySSE returns ErrWorkerGone (ErrShutdown).
func relaySSE(w *bufio.Writer, r *bufio.Reader, first func(), cut *atomic.Bool) error {
	seenData, seenDone, seenError, midEvent := false, false, false, false
	for {
		line, err := r.ReadSlice('\n')
		if len(line) > 0 {
			if data, ok := bytes.CutPrefix(line, []byte("data:")); ok {
				data = bytes.TrimSpace(data)
				switch {
				case bytes.HasPrefix(data, []byte("[DONE]")):
					seenDone = true
				case bytes.HasPrefix(data, []byte(`{"error"`)):
					seenError = true
				}
				if !seenData && !seenDone {
					seenData = true
					first()
				}
			}
			if _, werr := w.Write(line); werr != nil {
				return ErrClientGone
			}
			midEvent = true
			if len(bytes.TrimRight(line, "\r\n")) == 0 { // blank line ends an event
				midEvent = false
				if ferr := w.Flush(); ferr != nil {
					return ErrClientGone
				}
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == nil {
			continue
		}
		if err == io.EOF && seenDone {
			if ferr := w.Flush(); ferr != nil {
				return ErrClientGone
			}
			return nil
		}
		cause := err
		if err == io.EOF {
			cause = io.ErrUnexpectedEOF
		}
		e := openai.Error{
			Message: "the worker's stream broke off before the end of the answer: " + cause.Error(),
			Type:    openai.TypeServer, Code: openai.CodeWorkerStreamInterrupt,
		}
		end := fmt.Errorf("%w: %w", ErrWorkerGone, cause)
		if cut.Load() {
			e = openai.Error{Message: "kvroute is shutting down: the stream was cut at the end of the shutdown grace period",
				Type: openai.TypeServer, Code: openai.CodeShuttingDown}
			end = ErrShutdown
		}
		if !seenError {
			var buf []byte
			if midEvent { // end the broken event so the error event parses on its own
				buf = append(buf, "\n\n"...)
			}
			buf = openai.AppendErrorEvent(buf, e)
			if _, werr := w.Write(buf); werr != nil {
				return end
			}
		}
		_ = w.Flush()
		return end
	}
}

// WriteError answers status with an OpenAI-style JSON error body carrying
// msg, its type and code the defaults for status (openai.StatusError).
func WriteError(ctx *fasthttp.RequestCtx, status int, msg string) {
	WriteAPIError(ctx, status, openai.StatusError(status, msg))
}

// WriteAPIError answers status with e as an OpenAI-style JSON error body
// ({"error":{"message","type","param","code"}}); it is the one writer of
// the router's error answers. An empty e.Type or e.Code takes the default
// for status.
func WriteAPIError(ctx *fasthttp.RequestCtx, status int, e openai.Error) {
	def := openai.StatusError(status, e.Message)
	if e.Type == "" {
		e.Type = def.Type
	}
	if e.Code == "" {
		e.Code = def.Code
	}
	ctx.Response.Reset()
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(openai.AppendError(nil, e))
}
