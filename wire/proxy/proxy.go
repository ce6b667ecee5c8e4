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
	"strconv"
	"strings"
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
	// FirstByteTimeout bounds, for a streamed request, the wait for the
	// first byte of the worker's answer (--worker-first-byte-timeout); 0:
	// only ReadTimeout. A streaming engine sends its headers as soon as it
	// accepted the request, before prefill, so the wait is short on a
	// healthy engine and a stopped one (SIGSTOP: its kernel still accepts
	// connections) is found out. A non-streamed answer comes only with the
	// whole generation, so FirstByteTimeout does not apply to it.
	FirstByteTimeout time.Duration
	// ResponseTimeout bounds, for a non-streamed request, the wait for the
	// first byte of the worker's answer (--worker-response-timeout), which
	// comes with the whole generation; 0: only ReadTimeout. SendDeadline
	// shortens it to a client's own deadline.
	ResponseTimeout time.Duration
}

// Hooks are called by Relay and Forward. FirstToken is called at most once,
// before Done; Done is called exactly once. Either may be nil.
type Hooks struct {
	FirstToken func()
	Done       func(err error)
	// Usage, when set, is called at most once, before Done, with the
	// engine's usage.prompt_tokens_details.cached_tokens from a whole
	// answer (status 200) or from a stream's chunk that carries it
	// (openai.CachedTokens); never when the answer reports none.
	Usage func(cachedTokens int)
	// StripUsage drops a stream's usage chunk (openai.IsUsageChunk) from
	// what the client gets: the router asked for it
	// (openai.AppendIncludeUsage), the client did not. Every other byte
	// is relayed unchanged.
	StripUsage bool
}

// Errors passed to Hooks.Done when a stream did not complete.
var (
	// ErrClientGone: the client disconnected mid-stream.
	ErrClientGone = errors.New("client disconnected")
	// ErrWorkerGone: the worker's answer broke off (a stream failed, or
	// ended before its "data: [DONE]": the client got an SSE error event;
	// from Send: a non-streamed answer was cut short).
	ErrWorkerGone = errors.New("worker stream ended before [DONE]")
	// ErrShutdown: CutStreams cut the stream; the client got an SSE error
	// event.
	ErrShutdown = errors.New("stream cut at shutdown")
)

// Proxy forwards requests. It is goroutine-safe.
type Proxy struct {
	plain  *fasthttp.Client // non-streamed requests
	stream *fasthttp.Client // streamed: connections bound the first byte

	firstByte bool          // Config.FirstByteTimeout is set and shorter than ReadTimeout
	response  time.Duration // Config.ResponseTimeout if set and shorter than ReadTimeout, else 0
	cut       atomic.Bool
	active    atomic.Int64  // streams being relayed
	abandons  atomic.Uint64 // connections Abandon closed
	mu        struct {
		sync.Mutex
		conns map[*conn]struct{} // open connections to workers
	}
}

// conn is a connection to a worker, tracked for CutStreams and Abandon.
type conn struct {
	net.Conn
	p     *Proxy
	addr  string       // host:port dialed
	state atomic.Int32 // connIdle, connWaiting, connAbandoned
	once  sync.Once
}

// A conn's state: a request written and no byte of its answer read yet is
// waiting; Abandon turns a waiting conn abandoned and closes it.
const (
	connIdle int32 = iota
	connWaiting
	connAbandoned
)

func (c *conn) Write(b []byte) (int, error) {
	c.state.CompareAndSwap(connIdle, connWaiting)
	return c.Conn.Write(b)
}

func (c *conn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if c.state.Load() == connIdle {
		return n, err
	}
	if n > 0 && c.state.CompareAndSwap(connWaiting, connIdle) {
		return n, err
	}
	if c.state.Load() == connAbandoned {
		return 0, ErrAbandoned // what was read raced Abandon: it lost
	}
	return n, err
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
	client := func(dial fasthttp.DialFunc) *fasthttp.Client {
		return &fasthttp.Client{
			MaxConnsPerHost:          cfg.MaxConnsPerHost,
			ReadTimeout:              cfg.ReadTimeout,
			WriteTimeout:             cfg.WriteTimeout,
			StreamResponseBody:       true,
			NoDefaultUserAgentHeader: true,
			Dial:                     dial,
			// Never retried by the client: SendDeadline retries a request
			// that failed on a stale keep-alive connection itself, unless
			// Abandon closed it.
			RetryIfErr: func(*fasthttp.Request, int, error) (bool, bool) { return false, false },
		}
	}
	p := &Proxy{}
	p.mu.conns = map[*conn]struct{}{}
	dial := func(addr string) (net.Conn, error) {
		nc, err := dialer.DialTimeout(addr, cfg.DialTimeout)
		if err != nil {
			return nil, err
		}
		c := &conn{Conn: nc, p: p, addr: addr}
		p.mu.Lock()
		p.mu.conns[c] = struct{}{}
		p.mu.Unlock()
		return c, nil
	}
	bounded := func(timeout time.Duration) fasthttp.DialFunc {
		return func(addr string) (net.Conn, error) {
			c, err := dial(addr)
			if err != nil {
				return nil, err
			}
			return &firstByteConn{Conn: c, timeout: timeout}, nil
		}
	}
	p.plain, p.stream = client(dial), client(dial)
	if fbt := cfg.FirstByteTimeout; fbt > 0 && fbt < cfg.ReadTimeout {
		p.firstByte = true
		p.stream = client(bounded(fbt))
	}
	if rt := cfg.ResponseTimeout; rt > 0 && rt < cfg.ReadTimeout {
		p.response = rt
		p.plain = client(bounded(rt))
	}
	return p
}

// Abandon gives up on the requests sent to url's host (scheme://host:port,
// as the worker's URL) whose answer has not sent a byte yet: it closes
// their connections, so their Send fails with ErrAbandoned and, nothing
// having been written to a client, the caller may send them elsewhere.
// Requests whose answer has begun are left alone. It returns how many it
// gave up on. For a worker taken out of routing (a stopped process answers
// nothing, and would hold each request until its timeout).
func (p *Proxy) Abandon(url string) int {
	addr := hostPort(url)
	n := 0
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.mu.conns {
		if c.addr == addr && c.state.CompareAndSwap(connWaiting, connAbandoned) {
			p.abandons.Add(1) // before the close its Send sees
			_ = c.Conn.Close()
			n++
		}
	}
	return n
}

// hostPort returns the host:port the client dials for url.
func hostPort(url string) string {
	rest, scheme := url, "http"
	if i := strings.Index(url, "://"); i >= 0 {
		scheme, rest = url[:i], url[i+3:]
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	if _, _, err := net.SplitHostPort(rest); err == nil {
		return rest
	}
	if scheme == "https" {
		return net.JoinHostPort(strings.Trim(rest, "[]"), "443")
	}
	return net.JoinHostPort(strings.Trim(rest, "[]"), "80")
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

// Upstream is a worker's answer that Send received and nothing has yet
// written to a client: the headers of a streamed answer with status 200,
// the whole answer otherwise. Pass it to Relay or Release, once.
type Upstream struct {
	resp   *fasthttp.Response
	body   []byte
	url    string
	stream bool
}

var upstreamPool = sync.Pool{New: func() any { return new(Upstream) }}

// StatusCode is the worker's HTTP status.
func (u *Upstream) StatusCode() int { return u.resp.StatusCode() }

// Body is a non-streamed answer's body (nil for a stream), valid until
// Relay or Release.
func (u *Upstream) Body() []byte {
	if u.stream {
		return nil
	}
	return u.body
}

// Release gives back an Upstream that will not be relayed.
func (u *Upstream) Release() {
	if u.resp != nil {
		_ = u.resp.CloseBodyStream()
		fasthttp.ReleaseResponse(u.resp)
	}
	if cap(u.body) > 1<<20 {
		*u = Upstream{} // do not keep a large answer's buffer
	} else {
		*u = Upstream{body: u.body[:0]}
	}
	upstreamPool.Put(u)
}

// Send posts body to url (e.g. http://host:port/v1/completions) and waits
// for the worker's answer: for a streamed request, its headers (at most
// Config.FirstByteTimeout for the first byte), for any other, or an error
// status, the whole body. It writes nothing to any client, so a request
// whose Send fails can be sent to another worker. An error is a transport
// failure: the worker could not be dialed, did not answer in time
// (ErrFirstByteTimeout) or closed the connection before the answer was
// complete; an HTTP error status is an answer, not an error.
func (p *Proxy) Send(url string, body []byte, stream bool) (*Upstream, error) {
	return p.SendRank(url, -1, body, stream)
}

// HeaderDPRank pins a request to one data-parallel rank of a worker that
// serves several behind one URL; vLLM's and SGLang's HTTP servers read it
// (case-insensitively) and hand the request to that rank's engine instead
// of their own load balancer's choice.
const HeaderDPRank = "X-Data-Parallel-Rank"

// SendRank is Send with the request pinned to dp rank dpRank by the
// X-Data-Parallel-Rank header; a negative dpRank sends no header.
func (p *Proxy) SendRank(url string, dpRank int, body []byte, stream bool) (*Upstream, error) {
	return p.SendDeadline(url, dpRank, body, stream, time.Time{})
}

// SendDeadline is SendRank with a client's own deadline: a non-streamed
// request waits for its answer until Config.ResponseTimeout or deadline,
// whichever comes first (a zero deadline: none). Its timeout is
// ErrResponseTimeout when Config.ResponseTimeout ended the wait, a failure
// of the worker's, and ErrClientDeadline when deadline did, which says
// nothing of the worker. Streamed requests ignore deadline.
func (p *Proxy) SendDeadline(url string, dpRank int, body []byte, stream bool, deadline time.Time) (*Upstream, error) {
	return p.SendHeader(url, dpRank, "", "", body, stream, deadline)
}

// SendHeader is SendDeadline with one more request header, key: value
// (none when key is empty): the X-Request-Id both legs of a disaggregated
// request carry.
func (p *Proxy) SendHeader(url string, dpRank int, key, value string, body []byte, stream bool, deadline time.Time) (*Upstream, error) {
	client := p.plain
	if stream {
		client = p.stream
	}
	clientBound := false
	var err error
	if !stream && !deadline.IsZero() {
		left := time.Until(deadline)
		if left <= 0 {
			return nil, fmt.Errorf("worker %s: %w", url, ErrClientDeadline)
		}
		clientBound = p.response == 0 || left < p.response
	}
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	req.SetRequestURI(url)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	if dpRank >= 0 {
		var b [10]byte
		req.Header.SetBytesV(HeaderDPRank, strconv.AppendUint(b[:0], uint64(dpRank), 10))
	}
	if key != "" {
		req.Header.Set(key, value)
	}
	req.SetBodyRaw(body)
	for attempt := 0; ; attempt++ {
		if clientBound {
			req.SetTimeout(max(time.Until(deadline), time.Nanosecond))
		}
		gen := p.abandons.Load()
		err = client.Do(req, resp)
		if err == nil || !(errors.Is(err, io.EOF) || errors.Is(err, fasthttp.ErrConnectionClosed) || errors.Is(err, net.ErrClosed)) {
			break
		}
		// The connection closed before any answer (or, closed under it,
		// setting its deadline failed): Abandon closed it, or
		// it is a keep-alive connection the worker closed while idle,
		// which is tried once more, on a fresh connection, before calling
		// the worker down. (fasthttp reports any error before the first
		// byte as EOF, so the abandons count tells the two apart; another
		// worker's Abandon meanwhile only sends this request elsewhere.)
		if p.abandons.Load() != gen {
			err = ErrAbandoned
			break
		}
		if attempt > 0 {
			break
		}
		resp.Reset()
	}
	fasthttp.ReleaseRequest(req)
	if err != nil {
		fasthttp.ReleaseResponse(resp)
		if errors.Is(err, fasthttp.ErrTimeout) || isTimeout(err) {
			switch {
			case stream && p.firstByte:
				err = ErrFirstByteTimeout
			case !stream && clientBound:
				err = ErrClientDeadline
			case !stream && p.response > 0:
				err = ErrResponseTimeout
			}
		}
		return nil, fmt.Errorf("worker %s: %w", url, err)
	}
	u := upstreamPool.Get().(*Upstream)
	u.resp, u.url, u.stream = resp, url, stream && resp.StatusCode() == fasthttp.StatusOK
	if !u.stream {
		b, rerr := readAll(u.body[:0], resp.BodyStream())
		u.body = b
		if rerr != nil {
			u.Release()
			// A partial answer must not pass for a complete one.
			return nil, fmt.Errorf("%w: read from worker %s: %w", ErrWorkerGone, url, rerr)
		}
	}
	return u, nil
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

func readAll(b []byte, r io.Reader) ([]byte, error) {
	if r == nil {
		return b, nil
	}
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// Relay writes u to ctx and releases it. A streamed answer is relayed as it
// arrives, flushed after every SSE event, and FirstToken is called at the
// first event; Relay returns before it is relayed (fasthttp writes it after
// the handler returns) and Done tells the end. A non-streamed answer is
// written at once, FirstToken and Done called before Relay returns.
func (p *Proxy) Relay(ctx *fasthttp.RequestCtx, u *Upstream, h Hooks) {
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
	resp, url := u.resp, u.url
	ctx.SetStatusCode(resp.StatusCode())
	ctx.Response.Header.SetContentTypeBytes(resp.Header.ContentType())
	if !u.stream {
		ctx.SetBody(u.body)
		code := resp.StatusCode()
		if code == fasthttp.StatusOK && h.Usage != nil {
			if n, ok := openai.CachedTokens(u.body); ok {
				h.Usage(n)
			}
		}
		u.Release()
		if code == fasthttp.StatusOK {
			first()
			done(nil)
			return
		}
		done(fmt.Errorf("worker %s answered %d", url, code))
		return
	}
	u.resp = nil
	u.Release()
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	p.active.Add(1)
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer p.active.Add(-1)
		body := resp.BodyStream()
		err := relaySSE(w, bufio.NewReaderSize(body, 16<<10), first, &p.cut, h.Usage, h.StripUsage)
		if c, ok := body.(fasthttp.ReadCloserWithError); ok && err != nil {
			// Closing with an error closes the worker connection instead of
			// returning a half-read one to the pool: the worker sees the
			// disconnect and stops generating. resp keeps the closed stream
			// (fasthttp has no way to clear it without closing it again),
			// so resp is not released: ReleaseResponse would close the
			// stream a second time and hand the already closed connection
			// back to the client's pool, whose idle-connection cleaner then
			// panicked on it (nil net.Conn in HostClient.CloseConn,
			// fasthttp v1.70's closeReader has no once guard).
			_ = c.CloseWithError(err)
		} else {
			_ = resp.CloseBodyStream()
			fasthttp.ReleaseResponse(resp)
		}
		done(err)
	})
}

// Forward is Send then Relay: it answers a worker that cannot be reached
// with 502 (and Done gets the error) instead of letting the caller retry.
func (p *Proxy) Forward(ctx *fasthttp.RequestCtx, url string, body []byte, stream bool, h Hooks) {
	u, err := p.Send(url, body, stream)
	if err != nil {
		WriteError(ctx, fasthttp.StatusBadGateway, err.Error())
		if h.Done != nil {
			h.Done(err)
		}
		return
	}
	p.Relay(ctx, u, h)
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
	if err := p.plain.Do(req, resp); err != nil {
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
// first at the first data event. With usage set, it passes it the cached
// tokens of the first chunk that reports them; with strip, a usage chunk
// (the whole event, up to its blank line) is not written. A write or flush failure means the client
// went away: it returns ErrClientGone so the upstream stream is closed. A
// read error, or the end of the worker's stream before "data: [DONE]",
// means the worker failed (or, with cut set, the stream was cut at
// shutdown): the client gets an SSE error event, unless the worker sent one
// itself, so that the stream does not pass for a complete answer, and
// relaySSE returns ErrWorkerGone (ErrShutdown).
func relaySSE(w *bufio.Writer, r *bufio.Reader, first func(), cut *atomic.Bool, usage func(int), strip bool) error {
	seenData, seenDone, seenError, midEvent := false, false, false, false
	skipping := false // inside a stripped usage event
	for {
		line, err := r.ReadSlice('\n')
		if skipping && len(line) > 0 {
			if len(bytes.TrimRight(line, "\r\n")) == 0 && err == nil {
				skipping = false
			}
			line = nil
		}
		if len(line) > 0 {
			if data, ok := bytes.CutPrefix(line, []byte("data:")); ok {
				if usage != nil && err == nil && !midEvent && bytes.Contains(data, keyDetails) {
					if n, ok := openai.CachedTokens(data); ok {
						usage(n)
						usage = nil
						if strip && openai.EmptyChoices(data) { // a usage chunk: CachedTokens read it
							skipping = true
							continue
						}
					}
				}
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

// keyDetails pre-filters the chunks that may carry usage details: it
// starts with a byte that is rare in a token chunk ('_', in finish_reason
// only), so the search skips along at memchr speed where a needle starting
// with '"' stops at every quote (measured: BenchmarkRelaySSE).
var keyDetails = []byte(`_tokens_details"`)

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
