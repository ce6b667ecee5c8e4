// Package proxy forwards OpenAI-compatible requests to a worker over a
// keep-alive fasthttp client and streams the response back chunk by chunk,
// telling the caller when the first token arrived and when the request ended
// (completed, failed, or the client went away), so the router can mark
// prefill done and free the request's load.
package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
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

// ErrClientGone is passed to Done when the client disconnected mid-stream.
var ErrClientGone = errors.New("client disconnected")

// Proxy forwards requests. It is goroutine-safe.
type Proxy struct {
	client *fasthttp.Client
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
	return &Proxy{client: &fasthttp.Client{
		MaxConnsPerHost:          cfg.MaxConnsPerHost,
		ReadTimeout:              cfg.ReadTimeout,
		WriteTimeout:             cfg.WriteTimeout,
		StreamResponseBody:       true,
		NoDefaultUserAgentHeader: true,
		Dial: func(addr string) (net.Conn, error) {
			return dialer.DialTimeout(addr, cfg.DialTimeout)
		},
	}}
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
		ctx.SetBody(b)
		if rerr != nil {
			done(fmt.Errorf("read from worker %s: %w", url, rerr))
			return
		}
		if ctx.Response.StatusCode() == fasthttp.StatusOK {
			first()
			done(nil)
			return
		}
		done(fmt.Errorf("worker %s answered %d", url, resp.StatusCode()))
		return
	}
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		body := resp.BodyStream()
		err := relaySSE(w, bufio.NewReaderSize(body, 16<<10), first)
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

// relaySSE copies SSE events from r to w, flushing after each, and calls
// first at the first data event. A write or flush failure means the client
// went away: it returns ErrClientGone so the upstream stream is closed.
func relaySSE(w *bufio.Writer, r *bufio.Reader, first func()) error {
	seenData := false
	for {
		line, err := r.ReadSlice('\n')
		if len(line) > 0 {
			if !seenData && bytes.HasPrefix(line, []byte("data:")) && !bytes.HasPrefix(bytes.TrimSpace(line[5:]), []byte("[DONE]")) {
				seenData = true
				first()
			}
			if _, werr := w.Write(line); werr != nil {
				return ErrClientGone
			}
			if len(bytes.TrimRight(line, "\r\n")) == 0 { // blank line ends an event
				if ferr := w.Flush(); ferr != nil {
					return ErrClientGone
				}
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == io.EOF {
			if ferr := w.Flush(); ferr != nil {
				return ErrClientGone
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("read from worker: %w", err)
		}
	}
}

// WriteError answers with an OpenAI-style JSON error body.
func WriteError(ctx *fasthttp.RequestCtx, code int, msg string) {
	ctx.Response.Reset()
	ctx.SetStatusCode(code)
	ctx.SetContentType("application/json")
	typ := "server_error"
	if code < 500 {
		typ = "invalid_request_error"
	}
	ctx.SetBody(openai.AppendError(nil, msg, typ, code))
}
