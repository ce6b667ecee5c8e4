package router

import (
	"bytes"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"

	"github.com/kvroute/kvroute/internal/linger"
	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/openai"
	"github.com/kvroute/kvroute/wire/proxy"
)

// Response headers of a proxied request.
const (
	HeaderWorker       = "X-Kvroute-Worker"
	HeaderDpRank       = "X-Kvroute-Dp-Rank"
	HeaderCachedBlocks = "X-Kvroute-Cached-Blocks"
)

// HeaderClientTimeout is the request header in which the OpenAI SDKs send
// their own timeout, in seconds: a non-streamed request waits for its
// worker's answer no longer than that (clientDeadline).
const HeaderClientTimeout = "X-Stainless-Timeout"

// clientDeadline returns the deadline a request's HeaderClientTimeout
// (seconds, counted from start) sets, or the zero time when it has none or
// an unusable one.
func clientDeadline(ctx *fasthttp.RequestCtx, start time.Time) time.Time {
	d, ok := parseSeconds(ctx.Request.Header.Peek(HeaderClientTimeout))
	if !ok {
		return time.Time{}
	}
	return start.Add(d)
}

// parseSeconds parses a positive decimal number of seconds ("600",
// "12.5") of at most a week, without allocating.
func parseSeconds(v []byte) (time.Duration, bool) {
	var whole, frac, scale int64 = 0, 0, 1
	dot := false
	for _, c := range v {
		switch {
		case c == '.' && !dot:
			dot = true
		case c >= '0' && c <= '9' && !dot:
			whole = whole*10 + int64(c-'0')
			if whole > 7*24*3600 {
				return 0, false
			}
		case c >= '0' && c <= '9':
			if scale < int64(time.Second) {
				frac, scale = frac*10+int64(c-'0'), scale*10
			}
		default:
			return 0, false
		}
	}
	d := time.Duration(whole)*time.Second + time.Duration(frac*int64(time.Second)/scale)
	return d, len(v) > 0 && d > 0
}

var routeParsers fastjson.ParserPool

// Server returns a fasthttp server for Handler with the configured body and
// header limits and timeouts; malformed HTTP gets a JSON error body too
// (connError). Serve it on a linger.Listen listener so that those answers
// reach a client that is still sending.
//
// Memory is bounded: at most MaxConns connections (each with its
// MaxHeaderBytes read buffer; beyond, 503 and close, counted as
// kvroute_refused_total{reason="conn_limit"}), and the bodies being read or
// handled at once fit MaxInflightBodyBytes by their declared length
// (fasthttp allocates a body's Content-Length before reading it): a request
// whose body does not fit gets 503 before its body is read (bodyBudget).
func (r *Router) Server() *fasthttp.Server {
	srv := &fasthttp.Server{
		Handler:               r.Handler,
		HeaderReceived:        r.headerReceived,
		Name:                  "kvroute",
		Concurrency:           r.cfg.MaxConns,
		MaxRequestBodySize:    r.cfg.MaxBodyBytes,
		ReadBufferSize:        r.cfg.MaxHeaderBytes,
		ReadTimeout:           r.cfg.ReadTimeout,
		IdleTimeout:           r.cfg.IdleTimeout,
		NoDefaultServerHeader: true,
		CloseOnShutdown:       true,
		SecureErrorLogMessage: true,
		Logger:                fasthttpLogger{r.cfg.Logger},
		ErrorHandler:          r.connError,
	}
	r.srv.Store(srv)
	return srv
}

// bodyBudget accounts the declared lengths of the request bodies being
// read or handled. headerReceived reserves a body's length (chunked: the
// largest allowed) before fasthttp allocates it; Handler and connError
// release it. Keyed by the request's header, which fasthttp reuses with its
// RequestCtx: a reservation nobody released (a connection that broke in a
// way that calls neither) is released when its header is reused. The map
// reuses its slots, so the hot path does not allocate. Goroutine-safe.
type bodyBudget struct {
	limit, maxBody int64
	mu             sync.Mutex
	used           int64
	held           map[*fasthttp.RequestHeader]int64 // reserved bytes; -1: refused
}

// reserve accounts h's body and reports whether it does not fit.
func (b *bodyBudget) reserve(h *fasthttp.RequestHeader) (refused bool) {
	n := int64(h.ContentLength())
	if n == -1 { // chunked: unknown, up to the largest allowed
		n = b.maxBody
	}
	n = min(n, b.maxBody) // larger bodies are refused with 413 before they are read
	b.mu.Lock()
	defer b.mu.Unlock()
	if old, ok := b.held[h]; ok {
		delete(b.held, h)
		b.used -= max(old, 0)
	}
	switch {
	case n <= 0:
		return false
	case b.used+n > b.limit:
		b.held[h] = -1
		return true
	}
	b.used += n
	b.held[h] = n
	return false
}

// release ends h's accounting and reports whether its body was refused.
func (b *bodyBudget) release(h *fasthttp.RequestHeader) (refused bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.held[h]
	if !ok {
		return false
	}
	delete(b.held, h)
	b.used -= max(v, 0)
	return v < 0
}

// refused reports whether h's body was refused (without releasing it).
func (b *bodyBudget) refused(h *fasthttp.RequestHeader) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held[h] < 0
}

func (b *bodyBudget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// headerReceived runs after a request's headers were read, before its body
// is: a body over the budget is not read (a 1-byte limit makes fasthttp
// stop at once; connError or Handler answers 503).
func (r *Router) headerReceived(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	if r.budget.reserve(h) {
		return fasthttp.RequestConfig{MaxRequestBodySize: 1}
	}
	return fasthttp.RequestConfig{}
}

// overBudget answers a request whose body did not fit the budget.
func (r *Router) overBudget(ctx *fasthttp.RequestCtx) {
	r.m.refused[refBodyBudget].Inc()
	proxy.WriteError(ctx, fasthttp.StatusServiceUnavailable,
		fmt.Sprintf("too many request bodies in flight (--max-inflight-body-bytes %d); retry", r.cfg.MaxInflightBodyBytes))
	ctx.Response.Header.Set("Retry-After", "1")
}

// connError answers a request fasthttp could not read: 413 for a body over
// --max-body-bytes, 431 for headers over --max-header-bytes, 408 for a
// request not read within --http-read-timeout, 400 for malformed HTTP. The
// messages never quote the request (fasthttp's errors embed its head,
// Authorization included). The connection is then closed lingeringly (see
// internal/linger) so a client still sending its body reads the answer
// instead of a reset. Counted in kvroute_http_requests_total under the
// path's endpoint when the request line was read, else "connection".
func (r *Router) connError(ctx *fasthttp.RequestCtx, err error) {
	if r.budget.release(&ctx.Request.Header) {
		r.overBudget(ctx)
		linger.Set(ctx.Conn())
		r.m.request(endpointOf(ctx.Path()), fasthttp.StatusServiceUnavailable, 0)
		return
	}
	ep, status, msg := epConnection, fasthttp.StatusBadRequest, "malformed HTTP request: its request line or headers could not be parsed"
	var small *fasthttp.ErrSmallBuffer
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		ep, status = endpointOf(ctx.Path()), fasthttp.StatusRequestEntityTooLarge
		msg = fmt.Sprintf("request body larger than %d bytes (--max-body-bytes)", r.cfg.MaxBodyBytes)
	case errors.As(err, &small):
		status = fasthttp.StatusRequestHeaderFieldsTooLarge
		msg = fmt.Sprintf("request line and headers larger than %d bytes (--max-header-bytes)", r.cfg.MaxHeaderBytes)
	case isTimeout(err):
		status = fasthttp.StatusRequestTimeout
		msg = fmt.Sprintf("request not received within %s (--http-read-timeout)", r.cfg.ReadTimeout)
	}
	proxy.WriteError(ctx, status, msg)
	if status != fasthttp.StatusRequestTimeout {
		linger.Set(ctx.Conn())
	}
	r.m.request(ep, status, 0)
}

// endpointOf returns the endpoint of a path: the route whose path it is,
// else the {param} route whose prefix it starts with, else epOther.
// Comparing string(path) allocates nothing.
func endpointOf(path []byte) endpoint {
	if n := len(path); n < len(exactPaths) {
		for _, pe := range exactPaths[n] {
			if string(path) == pe.path {
				return pe.ep
			}
		}
	}
	for _, pe := range prefixPaths {
		if len(path) >= len(pe.path) && string(path[:len(pe.path)]) == pe.path {
			return pe.ep
		}
	}
	return epOther
}

// fasthttpLogger sends fasthttp's connection errors to the debug log: each
// is answered to the client (ErrorHandler) and counted by status code.
type fasthttpLogger struct{ l *slog.Logger }

func (f fasthttpLogger) Printf(format string, args ...any) {
	f.l.Debug("http: " + fmt.Sprintf(format, args...))
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// Handler serves the router's HTTP API (see the package doc).
func (r *Router) Handler(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	path := ctx.Path()
	if r.budget.refused(&ctx.Request.Header) { // a body of at most 1 byte over the budget
		r.budget.release(&ctx.Request.Header)
		r.overBudget(ctx)
		r.m.request(endpointOf(path), ctx.Response.StatusCode(), time.Since(start))
		return
	}
	defer r.budget.release(&ctx.Request.Header)
	ep := endpointOf(path)
	if ep != epOther && !r.method(ctx, routeMethod[ep]) {
		r.m.request(ep, ctx.Response.StatusCode(), time.Since(start))
		return
	}
	switch ep {
	case epCompletions:
		r.completion(ctx, false)
	case epChat:
		r.completion(ctx, true)
	case epModels:
		r.models(ctx)
	case epRoute:
		r.route(ctx)
	case epRouteOp:
		r.routeOp(ctx, path[len(routeMatch[epRouteOp]):])
	case epWorkers:
		r.workers(ctx)
	case epHealth:
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"status":"ok"}`)
	case epReady:
		r.ready(ctx)
	case epMetrics:
		ctx.SetContentType("text/plain; version=0.0.4")
		r.WritePrometheus(ctx)
	default:
		proxy.WriteError(ctx, fasthttp.StatusNotFound, "no such endpoint: "+string(path))
	}
	r.m.request(ep, ctx.Response.StatusCode(), time.Since(start))
}

func (r *Router) method(ctx *fasthttp.RequestCtx, m string) bool {
	if string(ctx.Method()) == m {
		return true
	}
	proxy.WriteError(ctx, fasthttp.StatusMethodNotAllowed, fmt.Sprintf("%s %s: use %s", ctx.Method(), ctx.Path(), m))
	ctx.Response.Header.Set("Allow", m)
	return false
}

// admit answers 429 during the all-workers-busy window and 503 when there
// is no worker; it reports whether the request may proceed.
func (r *Router) admit(ctx *fasthttp.RequestCtx) bool {
	if t, left := r.Throttled(); t && !r.critical(ctx) {
		r.m.throttled.Inc()
		r.tooBusy(ctx, left)
		return false
	}
	if r.nworkers.Load() == 0 {
		if k := len(r.table.Load().ids); k > 0 {
			proxy.WriteError(ctx, fasthttp.StatusServiceUnavailable, fmt.Sprintf("no workers: all %d are down (unreachable)", k))
			return false
		}
		proxy.WriteError(ctx, fasthttp.StatusServiceUnavailable, "no workers: none registered or configured (--worker)")
		return false
	}
	return true
}

func (r *Router) tooBusy(ctx *fasthttp.RequestCtx, left time.Duration) {
	proxy.WriteError(ctx, fasthttp.StatusTooManyRequests, "all workers are busy; retry later")
	ctx.Response.Header.Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(left.Seconds())))))
}

// fail answers a request whose decision failed (the answer pickFailed
// maps err to).
func (r *Router) fail(ctx *fasthttp.RequestCtx, err error) {
	pe := r.pickFailed(err)
	proxy.WriteError(ctx, pe.Status, pe.Err.Message)
	if pe.RetryAfter > 0 {
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(pe.RetryAfter))
	}
}

// hash fills p's prompt from req's tokens, hashed as the engines' events
// are: seeded by the LoRA adapter and the cache salt (wire.SaltSeed), with
// the hashes of the multimodal objects req declares folded into the blocks
// they overlap (wire.LocalHashesMM). With Config.EagleWindows a request
// without multimodal objects is hashed in windows of a block and the token
// after it (wire.LocalHashesEagle), as the EAGLE pages are.
func (r *Router) hash(p *pending, req *openai.Request) {
	tokens := req.Tokens
	seed := wire.SaltSeed(req.LoRA, req.Salt)
	p.isl = uint32(min(len(tokens), math.MaxUint32))
	if r.cfg.EagleWindows && len(req.MM) == 0 {
		p.local = wire.LocalHashesEagle(p.local[:0], tokens, r.cfg.Sched.BlockSize, seed)
	} else {
		p.local, p.mm, p.mmBytes = wire.LocalHashesMM(p.local[:0], tokens, r.cfg.Sched.BlockSize, seed, req.MM, p.mm, p.mmBytes)
	}
	p.seq = wire.SequenceHashes(p.seq[:0], p.local)
}

// completion routes and proxies an OpenAI request.
func (r *Router) completion(ctx *fasthttp.RequestCtx, chat bool) {
	if !r.admit(ctx) {
		return
	}
	req := openai.AcquireRequest()
	defer openai.ReleaseRequest(req)
	req.TokenLimit = r.table.Load().maxPrompt
	body := ctx.PostBody()
	if err := openai.ParseWith(body, chat, r.cfg.Tokenizer, r.tmpls, req); err != nil {
		badRequest(ctx, err)
		return
	}
	if r.promptTooLong(ctx, req, chat) {
		return
	}
	if len(req.Tokens) == 0 {
		badRequest(ctx, emptyPrompt(chat))
		return
	}
	ranks, restrict, ok := r.table.Load().ranksFor(req.Model)
	if !ok {
		modelNotFound(ctx, req.Model)
		return
	}
	p := r.acquire()
	defer r.release(p)
	if !r.identify(ctx, p, req.Model, len(req.Tokens)) {
		return
	}
	if restrict {
		p.allowed = append(p.allowed[:0], ranks...)
	}
	if r.cfg.ForwardTokenIDs && req.TextPrompt {
		var err error
		if p.body, err = openai.ReplacePrompt(p.body[:0], body, req.Tokens); err != nil {
			badRequest(ctx, err)
			return
		}
		body = p.body
	}
	r.hash(p, req)
	if err := r.table.Load().fitCapacity(p); err != nil {
		r.m.refused[refPromptTooLong].Inc()
		badRequest(ctx, err)
		return
	}
	if ok, limit := r.table.Load().fitPrompt(p, len(req.Tokens)); !ok {
		r.refusePrompt(ctx, len(req.Tokens), false, limit, chat)
		return
	}
	arrived := time.Now()
	r.submit(p)
	r.counted(p, p.err, arrived)
	if p.err != nil {
		r.fail(ctx, p.err)
		return
	}
	// A stream asks the engine for its usage chunk (cached tokens) when
	// the client did not; the relay strips it again (verify.go). A
	// disaggregated request is not checked, so its body stays the client's.
	strip := false
	if req.Stream && !req.StreamOptions && !p.pd.paired {
		if b, ok := openai.AppendIncludeUsage(p.ubody[:0], body); ok {
			p.ubody, body, strip = b, b, true
		}
	}
	start := time.Now()
	var u *proxy.Upstream
	if p.remote() {
		u = r.sendPD(ctx, p, body, req.Stream, clientDeadline(ctx, start))
	} else {
		u = r.send(ctx, p, body, req.Stream, clientDeadline(ctx, start))
	}
	if u == nil {
		return // answered
	}
	id, wid, ttft := p.id, p.dec.Worker.Worker, r.tm.seconds("kvroute_tenant_ttft_seconds_total", &p.who)
	var chk *check
	// A disaggregated request's report is the decode engine's, which
	// counts what it pulled; only aggregated answers are checked.
	if u.StatusCode() == fasthttp.StatusOK && !p.pd.paired {
		chk = r.newCheck(p)
	}
	hooks := proxy.Hooks{
		FirstToken: func() {
			ttft.Add(time.Since(arrived).Seconds())
			r.m.ttft.UpdateDuration(start)
			r.notify(opPrefillDone, id)
		},
		Done: func(err error) {
			r.m.e2e.UpdateDuration(start)
			switch {
			case errors.Is(err, proxy.ErrClientGone):
				r.m.clientGone.Inc()
			case errors.Is(err, proxy.ErrWorkerGone):
				r.m.proxyErrors.Inc()
				r.m.workerGone.Inc()
				r.cfg.Logger.Warn("worker stream interrupted; the client got an error event", "worker", wid, "request", id, "err", err)
			case errors.Is(err, proxy.ErrShutdown):
				r.m.proxyErrors.Inc()
				r.cfg.Logger.Warn("stream cut at shutdown; the client got an error event", "worker", wid, "request", id)
			case err != nil:
				r.m.proxyErrors.Inc()
			}
			if chk != nil {
				if err == nil {
					r.verifyEnd(chk)
				} else {
					checkPool.Put(chk)
				}
			}
			r.notify(opFree, id)
		},
	}
	if chk != nil {
		hooks.Usage, hooks.StripUsage = chk.usage, strip
	}
	r.proxy.Relay(ctx, u, hooks)
	// The headers go out when the handler returns.
	r.setRouteHeaders(ctx, p)
}

func (r *Router) setRouteHeaders(ctx *fasthttp.RequestCtx, p *pending) {
	h := &ctx.Response.Header
	h.Set(HeaderWorker, strconv.FormatUint(p.dec.Worker.Worker, 10))
	h.Set(HeaderDpRank, strconv.FormatUint(uint64(p.dec.Worker.Dp), 10))
	h.Set(HeaderCachedBlocks, strconv.FormatUint(uint64(p.dec.Overlap), 10))
}

// sendFailed frees p's load after its send to info failed with err and
// counts the failure: against the worker's health, unless the request was
// abandoned or the client's own deadline passed. True when the client has
// been answered (504: its deadline passed).
func (r *Router) sendFailed(ctx *fasthttp.RequestCtx, p *pending, info *workerInfo, err error) bool {
	r.notify(opFree, p.id)
	switch {
	case errors.Is(err, proxy.ErrClientDeadline):
		r.m.clientDeadline.Inc()
		proxy.WriteError(ctx, fasthttp.StatusGatewayTimeout, fmt.Sprintf(
			"worker %d did not answer within the client's deadline (%s header)", info.ID, HeaderClientTimeout))
		r.setRouteHeaders(ctx, p)
		return true
	case errors.Is(err, proxy.ErrAbandoned):
		r.m.abandoned.Inc()
	default:
		r.workerFailed(info, err)
	}
	return false
}

// send sends a routed request to its worker and returns the worker's
// answer, nothing yet written to the client. A transport failure (the
// worker cannot be dialed, gives no first byte in time, or drops the
// connection before its answer) counts against the worker's health and the
// request is decided again once, among the other routable workers; if that
// fails too the client gets 502 (or the new decision's error). A request
// decided onto a worker that was ejected since, or given up on by the
// ejection while it waited for its answer (proxy.ErrAbandoned), is decided
// again the same way. A non-streamed request waits for its answer at most
// --worker-response-timeout and the client's own deadline (clientDeadline):
// when the client's passes first it gets 504 and the worker is not blamed.
// On nil the client has been answered and p's load freed.
func (r *Router) send(ctx *fasthttp.RequestCtx, p *pending, body []byte, stream bool, deadline time.Time) *proxy.Upstream {
	path := string(ctx.Path())
	for attempt := 0; ; attempt++ {
		info := r.table.Load().byID[p.dec.Worker.Worker]
		if info == nil { // left between the decision and now
			r.notify(opFree, p.id)
			r.m.workerGoneRequest.Inc()
			proxy.WriteError(ctx, fasthttp.StatusServiceUnavailable, ErrWorkerGone.Error())
			return nil
		}
		// A worker serving several dp ranks behind one URL gets the chosen
		// rank in X-Data-Parallel-Rank, or its own load balancer would
		// pick one and miss the cache the decision counted on.
		rank := -1
		if len(info.Ranks) > 1 {
			rank = int(p.dec.Worker.Dp)
		}
		var (
			u   *proxy.Upstream
			err error
		)
		if info.health.down.Load() { // ejected since the decision
			err = proxy.ErrAbandoned
		} else {
			u, err = r.proxy.SendDeadline(info.URL+path, rank, body, stream, deadline)
		}
		if err == nil {
			info.health.ok()
			return u
		}
		if r.sendFailed(ctx, p, info, err) {
			return nil
		}
		if attempt > 0 || !r.allowedExcept(p, info.ID) {
			r.m.proxyErrors.Inc()
			proxy.WriteError(ctx, fasthttp.StatusBadGateway, err.Error())
			r.setRouteHeaders(ctx, p)
			return nil
		}
		r.m.retries.Inc()
		r.cfg.Logger.Debug("retrying request on another worker", "worker", info.ID, "err", err)
		p.id = r.nextID.Add(1)
		p.dec, p.err = sched.Decision{}, nil
		if r.submit(p); p.err != nil {
			r.fail(ctx, p.err)
			return nil
		}
	}
}

// route answers the decision API: POST /route.
func (r *Router) route(ctx *fasthttp.RequestCtx) {
	if !r.admit(ctx) {
		return
	}
	req := openai.AcquireRequest()
	defer openai.ReleaseRequest(req)
	req.TokenLimit = r.table.Load().maxPrompt
	if req.PrecheckPrompt(ctx.PostBody(), r.cfg.Tokenizer) {
		r.promptTooLong(ctx, req, false)
		return
	}
	parser := routeParsers.Get()
	defer routeParsers.Put(parser)
	v, err := parser.ParseBytes(ctx.PostBody())
	if err != nil {
		proxy.WriteError(ctx, fasthttp.StatusBadRequest, openai.InvalidJSON(ctx.PostBody()).Error())
		return
	}
	if v.Type() != fastjson.TypeObject {
		proxy.WriteError(ctx, fasthttp.StatusBadRequest, "body must be a JSON object")
		return
	}
	if v.Get("messages") != nil && v.Get("prompt") == nil && v.Get("token_ids") == nil {
		// A chat: rendered as /v1/chat/completions renders it (the model's
		// chat template; parseRouteOptions checks model's type below).
		err = openai.ParseMessages(v, openai.TokenizerFor(r.cfg.Tokenizer, v.GetStringBytes("model")), r.tmpls.For(v.GetStringBytes("model")), req)
	} else {
		err = openai.ParsePrompt(v, openai.TokenizerFor(r.cfg.Tokenizer, v.GetStringBytes("model")), req)
	}
	if err != nil {
		badRequest(ctx, err)
		return
	}
	if r.promptTooLong(ctx, req, false) {
		return
	}
	if len(req.Tokens) == 0 {
		badRequest(ctx, emptyPrompt(false))
		return
	}
	p := r.acquire()
	defer r.release(p)
	if err := r.parseRouteOptions(v, p, req); err != nil {
		var mnf *modelNotFoundError
		if errors.As(err, &mnf) {
			modelNotFound(ctx, mnf.model)
			return
		}
		badRequest(ctx, err)
		return
	}
	if !r.identify(ctx, p, req.Model, len(req.Tokens)) {
		return
	}
	r.hash(p, req)
	if err := r.table.Load().fitCapacity(p); err != nil {
		r.m.refused[refPromptTooLong].Inc()
		badRequest(ctx, err)
		return
	}
	if ok, limit := r.table.Load().fitPrompt(p, len(req.Tokens)); !ok {
		r.refusePrompt(ctx, len(req.Tokens), false, limit, false)
		return
	}
	if p.routeID == "" {
		p.routeID = newRouteID()
	}
	if _, loaded := r.routeIDs.LoadOrStore(p.routeID, p.id); loaded {
		proxy.WriteError(ctx, fasthttp.StatusConflict, fmt.Sprintf("request_id %q is already active; free it first", p.routeID))
		return
	}
	arrived := time.Now()
	r.submit(p)
	r.counted(p, p.err, arrived)
	if p.err != nil {
		r.forgetRoute(p.routeID, p.id)
		r.fail(ctx, p.err)
		return
	}
	info := r.table.Load().byID[p.dec.Worker.Worker]
	url := ""
	if info != nil {
		url = info.URL
	}
	b := append(p.buf[:0], `{"request_id":`...)
	b = openai.AppendJSONString(b, p.routeID)
	b = append(b, `,"worker_id":`...)
	b = strconv.AppendUint(b, p.dec.Worker.Worker, 10)
	b = append(b, `,"dp_rank":`...)
	b = strconv.AppendUint(b, uint64(p.dec.Worker.Dp), 10)
	b = append(b, `,"url":`...)
	b = openai.AppendJSONString(b, url)
	b = append(b, `,"overlap_blocks":`...)
	b = strconv.AppendUint(b, uint64(p.dec.Overlap), 10)
	b = append(b, `,"prompt_blocks":`...)
	b = strconv.AppendInt(b, int64(len(p.local)), 10)
	if p.pd.paired {
		b = r.appendPair(b, p)
	}
	if p.explain {
		b = append(b, `,"candidates":[`...)
		for i, c := range p.cands {
			if i > 0 {
				b = append(b, ',')
			}
			b = r.appendCandidateRole(b, &c, p.pd.paired)
			b = r.appendAgreement(b[:len(b)-1], c.Worker) // inside the candidate's object
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = append(b, "}\n"...)
	p.buf = b
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

func appendCandidate(b []byte, c *sched.Candidate) []byte {
	b = append(b, `{"worker_id":`...)
	b = strconv.AppendUint(b, c.Worker.Worker, 10)
	b = append(b, `,"dp_rank":`...)
	b = strconv.AppendUint(b, uint64(c.Worker.Dp), 10)
	b = append(b, `,"overlap_blocks":`...)
	b = strconv.AppendUint(b, uint64(c.Overlap), 10)
	b = append(b, `,"host_overlap_blocks":`...)
	b = strconv.AppendUint(b, uint64(c.Host), 10)
	b = append(b, `,"disk_overlap_blocks":`...)
	b = strconv.AppendUint(b, uint64(c.Disk), 10)
	b = append(b, `,"prefill_blocks":`...)
	b = appendFloat(b, c.PrefillBlocks)
	b = append(b, `,"decode_blocks":`...)
	b = appendFloat(b, c.DecodeBlocks)
	b = append(b, `,"cost":`...)
	b = appendFloat(b, c.Cost)
	b = append(b, `,"busy":`...)
	b = strconv.AppendBool(b, c.Busy)
	if c.Excluded != sched.NotExcluded {
		b = append(b, `,"excluded":`...)
		b = openai.AppendJSONString(b, c.Excluded.String())
	}
	b = append(b, `,"chosen":`...)
	b = strconv.AppendBool(b, c.Chosen)
	return append(b, '}')
}

func appendFloat(b []byte, f float64) []byte {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return append(b, "null"...)
	}
	return strconv.AppendFloat(b, f, 'g', -1, 64)
}

// parseRouteOptions reads /route's optional fields into p and req.
func (r *Router) parseRouteOptions(v *fastjson.Value, p *pending, req *openai.Request) error {
	if x := v.Get("request_id"); x != nil {
		s, err := x.StringBytes()
		if err != nil || len(s) == 0 || len(s) > 256 || bytes.ContainsRune(s, '/') {
			return fieldErr("request_id", "request_id must be a non-empty string of at most 256 bytes without '/'")
		}
		p.routeID = string(s)
	}
	if x := v.Get("lora_name"); x != nil && x.Type() != fastjson.TypeNull {
		s, err := x.StringBytes()
		if err != nil {
			return fieldErr("lora_name", "lora_name must be a string")
		}
		req.LoRA = append(req.LoRA[:0], s...)
	}
	if err := openai.ParseCacheKeys(v, req); err != nil {
		return err
	}
	if x := v.Get("explain"); x != nil {
		b, err := x.Bool()
		if err != nil {
			return fieldErr("explain", "explain must be true or false")
		}
		p.explain = b
	}
	if err := r.parseOverrides(v.Get("overrides"), p); err != nil {
		return err
	}
	if x := v.Get("model"); x != nil && x.Type() != fastjson.TypeNull {
		s, err := x.StringBytes()
		if err != nil {
			return fieldErr("model", "model must be a string")
		}
		req.Model = append(req.Model[:0], s...)
		return restrictToModel(p, r.table.Load(), req.Model)
	}
	return nil
}

// parseOverrides reads /route's "overrides" into p. A worker or rank it
// names must be known.
func (r *Router) parseOverrides(o *fastjson.Value, p *pending) error {
	if o == nil || o.Type() == fastjson.TypeNull {
		return nil
	}
	if o.Type() != fastjson.TypeObject {
		return fieldErr("overrides", "overrides must be an object")
	}
	if x := o.Get("overlap_score_weight"); x != nil {
		f, err := x.Float64()
		if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
			return fieldErr("overrides.overlap_score_weight", "overrides.overlap_score_weight must be a number >= 0")
		}
		p.override.Weight, p.override.WeightSet = f, true
	}
	if x := o.Get("router_temperature"); x != nil {
		f, err := x.Float64()
		if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
			return fieldErr("overrides.router_temperature", "overrides.router_temperature must be a number >= 0")
		}
		p.override.Temperature, p.override.TemperatureSet = f, true
	}
	t := r.table.Load()
	if x := o.Get("worker_id"); x != nil {
		id, err := x.Uint64()
		if err != nil {
			return fieldErr("overrides.worker_id", "overrides.worker_id must be a worker id (an unsigned integer)")
		}
		rank := uint64(0)
		if y := o.Get("dp_rank"); y != nil {
			if rank, err = y.Uint64(); err != nil || rank > wire.MaxDPRank {
				return fieldErr("overrides.dp_rank", "overrides.dp_rank must be an integer in [0, %d]", wire.MaxDPRank)
			}
		}
		w := t.byID[id]
		if w == nil {
			return fieldErr("overrides.worker_id", "overrides.worker_id %d names no known worker (GET /workers lists them)", id)
		}
		if !slices.Contains(w.Ranks, uint32(rank)) {
			return fieldErr("overrides.dp_rank", "overrides.dp_rank %d: worker %d has dp ranks %v", rank, id, w.Ranks)
		}
		p.override.Pinned, p.override.PinnedSet = wire.WorkerKey{Worker: id, Dp: uint32(rank)}, true
	} else if o.Get("dp_rank") != nil {
		return fieldErr("overrides.dp_rank", "overrides.dp_rank needs overrides.worker_id")
	}
	if x := o.Get("allowed_workers"); x != nil {
		arr, err := x.Array()
		if err != nil {
			return fieldErr("overrides.allowed_workers", "overrides.allowed_workers must be an array of worker ids")
		}
		for i, e := range arr {
			id, err := e.Uint64()
			if err != nil {
				return fieldErr(fmt.Sprintf("overrides.allowed_workers[%d]", i), "overrides.allowed_workers[%d] must be a worker id", i)
			}
			w := t.byID[id]
			if w == nil {
				return fieldErr(fmt.Sprintf("overrides.allowed_workers[%d]", i),
					"overrides.allowed_workers[%d]: %d names no known worker (GET /workers lists them)", i, id)
			}
			for _, rank := range w.Ranks {
				p.allowed = append(p.allowed, wire.WorkerKey{Worker: id, Dp: rank})
			}
		}
		if len(p.allowed) == 0 {
			return fieldErr("overrides.allowed_workers", "overrides.allowed_workers is empty")
		}
	}
	return nil
}

// restrictToModel narrows p's candidates to the ranks serving the model
// /route names: a pinned rank must serve it, allowed workers are
// intersected with its workers, and otherwise its workers become the
// allowed set.
func restrictToModel(p *pending, t *workerTable, model []byte) error {
	ranks, restrict, ok := t.ranksFor(model)
	if !ok {
		return &modelNotFoundError{model: string(model)}
	}
	if !restrict {
		return nil
	}
	switch {
	case p.override.PinnedSet:
		if !slices.Contains(ranks, p.override.Pinned) {
			return fieldErr("overrides.worker_id", "worker %d (dp rank %d) does not serve model %q",
				p.override.Pinned.Worker, p.override.Pinned.Dp, model)
		}
	case len(p.allowed) > 0:
		p.allowed = slices.DeleteFunc(p.allowed, func(k wire.WorkerKey) bool { return !slices.Contains(ranks, k) })
		if len(p.allowed) == 0 {
			return fieldErr("overrides.allowed_workers", "no worker of overrides.allowed_workers serves model %q", model)
		}
	default:
		p.allowed = append(p.allowed[:0], ranks...)
	}
	return nil
}

// modelNotFoundError is a request naming a model no worker serves.
type modelNotFoundError struct{ model string }

func (e *modelNotFoundError) Error() string {
	return fmt.Sprintf("model %q is not served by any worker", e.model)
}

// modelNotFound answers 404 model_not_found, as OpenAI does.
func modelNotFound[S ~string | ~[]byte](ctx *fasthttp.RequestCtx, model S) {
	proxy.WriteAPIError(ctx, fasthttp.StatusNotFound, openai.Error{
		Message: fmt.Sprintf("model %q is not served by any worker (GET /v1/models lists the models served)", model),
		Type:    openai.TypeInvalidRequest, Param: "model", Code: openai.CodeModelNotFound,
	})
}

// badRequest answers 400 with err's message and, when err names a field
// (openai.FieldError), that field as the error's param.
func badRequest(ctx *fasthttp.RequestCtx, err error) {
	proxy.WriteAPIError(ctx, fasthttp.StatusBadRequest, openai.Error{Message: err.Error(), Param: openai.ParamOf(err)})
}

func fieldErr(param, format string, args ...any) error {
	return &openai.FieldError{Param: param, Msg: fmt.Sprintf(format, args...)}
}

// promptTooLong answers 400 to a prompt parsed past its token limit
// (req.TooLong: more than the table's maxPrompt tokens) and reports whether
// it did.
func (r *Router) promptTooLong(ctx *fasthttp.RequestCtx, req *openai.Request, chat bool) bool {
	if !req.TooLong {
		return false
	}
	r.refusePrompt(ctx, req.AtLeast, true, req.TokenLimit, chat)
	return true
}

// refusePrompt answers 400 context_length_exceeded to a prompt of n tokens
// (at least n, when atLeast: tokenizing stopped past the limit) over limit.
func (r *Router) refusePrompt(ctx *fasthttp.RequestCtx, n int, atLeast bool, limit int, chat bool) {
	r.m.refused[refPromptTooLong].Inc()
	param := "prompt"
	if chat {
		param = "messages"
	}
	size := strconv.Itoa(n)
	if atLeast {
		size = "at least " + size
	}
	proxy.WriteAPIError(ctx, fasthttp.StatusBadRequest, openai.Error{
		Message: fmt.Sprintf("prompt of %s tokens is longer than the %d allowed (--max-prompt-tokens, the workers' max_model_len, or the largest worker's KV capacity)", size, limit),
		Param:   param, Code: "context_length_exceeded",
	})
}

// newRouteID returns an unguessable /route request id ("kvr-" and 128
// random bits): the id is the capability to free the booking.
func newRouteID() string {
	var b [16]byte
	_, _ = crand.Read(b[:]) // never fails (crypto/rand)
	var s [4 + 32]byte
	copy(s[:], "kvr-")
	hex.Encode(s[4:], b[:])
	return string(s[:])
}

func emptyPrompt(chat bool) error {
	if chat {
		return fieldErr("messages", "messages render to an empty prompt")
	}
	return fieldErr("prompt", "prompt is empty")
}

// routeOp answers POST /route/{id}/prefill_done and /route/{id}/free.
func (r *Router) routeOp(ctx *fasthttp.RequestCtx, rest []byte) {
	i := bytes.LastIndexByte(rest, '/')
	if i <= 0 {
		proxy.WriteError(ctx, fasthttp.StatusNotFound, "use POST /route/{request_id}/prefill_done or /route/{request_id}/free")
		return
	}
	rid, action := string(rest[:i]), string(rest[i+1:])
	var kind opKind
	switch action {
	case "prefill_done":
		kind = opPrefillDone
	case "free":
		kind = opFree
	default:
		proxy.WriteError(ctx, fasthttp.StatusNotFound, fmt.Sprintf("unknown action %q: use prefill_done or free", action))
		return
	}
	id, ok := r.routeIDs.Load(rid)
	if !ok {
		proxy.WriteError(ctx, fasthttp.StatusNotFound, fmt.Sprintf("request_id %q is not active (never routed, freed, or expired)", rid))
		return
	}
	r.notify(kind, id)
	var arr [512]byte
	b := append(arr[:0], `{"request_id":`...)
	b = openai.AppendJSONString(b, rid)
	b = append(b, `,"status":`...)
	b = openai.AppendJSONString(b, action)
	b = append(b, "}\n"...)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// ready answers GET /ready: 200 while the router can route, 503 with the
// reason otherwise (shutting down, the event plane down, no routable
// worker, ingest not running).
func (r *Router) ready(ctx *fasthttp.RequestCtx) {
	n := r.nworkers.Load()
	ingest := r.hooks.IngestRunning == nil || r.hooks.IngestRunning()
	var plane error
	if r.hooks.EventPlane != nil {
		plane = r.hooks.EventPlane()
	}
	switch {
	case r.draining.Load():
		proxy.WriteError(ctx, fasthttp.StatusServiceUnavailable, "not ready: shutting down")
	case plane != nil:
		proxy.WriteError(ctx, fasthttp.StatusServiceUnavailable, "not ready: event plane down: "+plane.Error())
	case n == 0 && len(r.table.Load().ids) > 0:
		proxy.WriteError(ctx, fasthttp.StatusServiceUnavailable,
			fmt.Sprintf("not ready: all %d workers are down (unreachable; probed until they answer GET /health)", len(r.table.Load().ids)))
	case n == 0:
		proxy.WriteError(ctx, fasthttp.StatusServiceUnavailable, "not ready: no worker known yet")
	case !ingest:
		proxy.WriteError(ctx, fasthttp.StatusServiceUnavailable, "not ready: KV event ingest is not running")
	default:
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"status":"ready","workers":` + strconv.Itoa(int(n)) + "}\n")
	}
}
