package router

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"

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

var routeParsers fastjson.ParserPool

// Server returns a fasthttp server for Handler with the configured body
// limit and timeouts; malformed HTTP gets a JSON error body too.
func (r *Router) Server() *fasthttp.Server {
	return &fasthttp.Server{
		Handler:               r.Handler,
		Name:                  "kvroute",
		MaxRequestBodySize:    r.cfg.MaxBodyBytes,
		ReadTimeout:           r.cfg.ReadTimeout,
		IdleTimeout:           r.cfg.IdleTimeout,
		NoDefaultServerHeader: true,
		CloseOnShutdown:       true,
		Logger:                fasthttpLogger{r.cfg.Logger},
		ErrorHandler: func(ctx *fasthttp.RequestCtx, err error) {
			code := fasthttp.StatusBadRequest
			switch {
			case errors.Is(err, fasthttp.ErrBodyTooLarge):
				code = fasthttp.StatusRequestEntityTooLarge
				err = fmt.Errorf("request body larger than %d bytes (--max-body-bytes)", r.cfg.MaxBodyBytes)
			case isTimeout(err):
				code = fasthttp.StatusRequestTimeout
			}
			proxy.WriteError(ctx, code, err.Error())
		},
	}
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
	ep := epOther
	switch string(path) {
	case "/v1/completions":
		ep = epCompletions
		if r.method(ctx, fasthttp.MethodPost) {
			r.completion(ctx, false)
		}
	case "/v1/chat/completions":
		ep = epChat
		if r.method(ctx, fasthttp.MethodPost) {
			r.completion(ctx, true)
		}
	case "/route":
		ep = epRoute
		if r.method(ctx, fasthttp.MethodPost) {
			r.route(ctx)
		}
	case "/workers":
		ep = epWorkers
		if r.method(ctx, fasthttp.MethodGet) {
			r.workers(ctx)
		}
	case "/health":
		ep = epHealth
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"status":"ok"}`)
	case "/ready":
		ep = epReady
		r.ready(ctx)
	case "/metrics":
		ep = epMetrics
		ctx.SetContentType("text/plain; version=0.0.4")
		r.WritePrometheus(ctx)
	default:
		if bytes.HasPrefix(path, []byte("/route/")) {
			ep = epRouteOp
			if r.method(ctx, fasthttp.MethodPost) {
				r.routeOp(ctx, path[len("/route/"):])
			}
			break
		}
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
	if t, left := r.Throttled(); t {
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

// fail answers a request whose decision failed.
func (r *Router) fail(ctx *fasthttp.RequestCtx, err error) {
	switch {
	case errors.Is(err, ErrAllBusy):
		_, left := r.Throttled()
		r.tooBusy(ctx, left)
	case errors.Is(err, ErrQueueFull), errors.Is(err, ErrQueueTimeout):
		proxy.WriteError(ctx, fasthttp.StatusServiceUnavailable, err.Error())
		ctx.Response.Header.Set("Retry-After", "1")
	default:
		proxy.WriteError(ctx, fasthttp.StatusServiceUnavailable, err.Error())
	}
}

// hash fills p's prompt from tokens.
func (r *Router) hash(p *pending, tokens []uint32, lora []byte) {
	seed := wire.Seed
	if len(lora) > 0 {
		seed = wire.LoRASeedBytes(lora)
	}
	p.isl = uint32(min(len(tokens), math.MaxUint32))
	p.local = wire.LocalHashes(p.local[:0], tokens, r.cfg.Sched.BlockSize, seed)
	p.seq = wire.SequenceHashes(p.seq[:0], p.local)
}

// completion routes and proxies an OpenAI request.
func (r *Router) completion(ctx *fasthttp.RequestCtx, chat bool) {
	if !r.admit(ctx) {
		return
	}
	req := openai.AcquireRequest()
	defer openai.ReleaseRequest(req)
	body := ctx.PostBody()
	if err := openai.Parse(body, chat, r.cfg.Tokenizer, req); err != nil {
		proxy.WriteError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	if len(req.Tokens) == 0 {
		proxy.WriteError(ctx, fasthttp.StatusBadRequest, "prompt is empty")
		return
	}
	p := r.acquire()
	defer r.release(p)
	r.hash(p, req.Tokens, req.LoRA)
	r.submit(p)
	if p.err != nil {
		r.fail(ctx, p.err)
		return
	}
	start := time.Now()
	u := r.send(ctx, p, body, req.Stream)
	if u == nil {
		return // answered
	}
	id := p.id
	r.proxy.Relay(ctx, u, proxy.Hooks{
		FirstToken: func() {
			r.m.ttft.UpdateDuration(start)
			r.notify(opPrefillDone, id)
		},
		Done: func(err error) {
			r.m.e2e.UpdateDuration(start)
			switch {
			case errors.Is(err, proxy.ErrClientGone):
				r.m.clientGone.Inc()
			case err != nil:
				r.m.proxyErrors.Inc()
			}
			r.notify(opFree, id)
		},
	})
	// The headers go out when the handler returns.
	r.setRouteHeaders(ctx, p)
}

func (r *Router) setRouteHeaders(ctx *fasthttp.RequestCtx, p *pending) {
	h := &ctx.Response.Header
	h.Set(HeaderWorker, strconv.FormatUint(p.dec.Worker.Worker, 10))
	h.Set(HeaderDpRank, strconv.FormatUint(uint64(p.dec.Worker.Dp), 10))
	h.Set(HeaderCachedBlocks, strconv.FormatUint(uint64(p.dec.Overlap), 10))
}

// send sends a routed request to its worker and returns the worker's
// answer, nothing yet written to the client. A transport failure (the
// worker cannot be dialed, gives no first byte in time, or drops the
// connection before its answer) counts against the worker's health and the
// request is decided again once, among the other routable workers; if that
// fails too the client gets 502 (or the new decision's error). On nil the
// client has been answered and p's load freed.
func (r *Router) send(ctx *fasthttp.RequestCtx, p *pending, body []byte, stream bool) *proxy.Upstream {
	path := string(ctx.Path())
	for attempt := 0; ; attempt++ {
		info := r.table.Load().byID[p.dec.Worker.Worker]
		if info == nil { // left between the decision and now
			r.notify(opFree, p.id)
			r.m.workerGoneRequest.Inc()
			proxy.WriteError(ctx, fasthttp.StatusServiceUnavailable, ErrWorkerGone.Error())
			return nil
		}
		u, err := r.proxy.Send(info.URL+path, body, stream)
		if err == nil {
			info.health.ok()
			return u
		}
		r.notify(opFree, p.id)
		r.workerFailed(info, err)
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
	parser := routeParsers.Get()
	defer routeParsers.Put(parser)
	v, err := parser.ParseBytes(ctx.PostBody())
	if err != nil {
		proxy.WriteError(ctx, fasthttp.StatusBadRequest, "body is not JSON: "+err.Error())
		return
	}
	if v.Type() != fastjson.TypeObject {
		proxy.WriteError(ctx, fasthttp.StatusBadRequest, "body must be a JSON object")
		return
	}
	req := openai.AcquireRequest()
	defer openai.ReleaseRequest(req)
	if err := openai.ParsePrompt(v, r.cfg.Tokenizer, req); err != nil {
		proxy.WriteError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	if len(req.Tokens) == 0 {
		proxy.WriteError(ctx, fasthttp.StatusBadRequest, "prompt is empty")
		return
	}
	p := r.acquire()
	defer r.release(p)
	if err := r.parseRouteOptions(v, p, req); err != nil {
		proxy.WriteError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	r.hash(p, req.Tokens, req.LoRA)
	if p.routeID == "" {
		p.routeID = "kvr-" + strconv.FormatUint(p.id, 10)
	}
	if _, loaded := r.routeIDs.LoadOrStore(p.routeID, p.id); loaded {
		proxy.WriteError(ctx, fasthttp.StatusConflict, fmt.Sprintf("request_id %q is already active; free it first", p.routeID))
		return
	}
	r.submit(p)
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
	if p.explain {
		b = append(b, `,"candidates":[`...)
		for i, c := range p.cands {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendCandidate(b, &c)
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
			return errors.New("request_id must be a non-empty string of at most 256 bytes without '/'")
		}
		p.routeID = string(s)
	}
	if x := v.Get("lora_name"); x != nil && x.Type() != fastjson.TypeNull {
		s, err := x.StringBytes()
		if err != nil {
			return errors.New("lora_name must be a string")
		}
		req.LoRA = append(req.LoRA[:0], s...)
	}
	if x := v.Get("explain"); x != nil {
		b, err := x.Bool()
		if err != nil {
			return errors.New("explain must be true or false")
		}
		p.explain = b
	}
	o := v.Get("overrides")
	if o == nil || o.Type() == fastjson.TypeNull {
		return nil
	}
	if o.Type() != fastjson.TypeObject {
		return errors.New("overrides must be an object")
	}
	if x := o.Get("overlap_score_weight"); x != nil {
		f, err := x.Float64()
		if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
			return errors.New("overrides.overlap_score_weight must be a number >= 0")
		}
		p.override.Weight, p.override.WeightSet = f, true
	}
	if x := o.Get("router_temperature"); x != nil {
		f, err := x.Float64()
		if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
			return errors.New("overrides.router_temperature must be a number >= 0")
		}
		p.override.Temperature, p.override.TemperatureSet = f, true
	}
	if x := o.Get("worker_id"); x != nil {
		id, err := x.Uint64()
		if err != nil {
			return errors.New("overrides.worker_id must be a worker id (an unsigned integer)")
		}
		rank := uint64(0)
		if y := o.Get("dp_rank"); y != nil {
			if rank, err = y.Uint64(); err != nil || rank > wire.MaxDPRank {
				return fmt.Errorf("overrides.dp_rank must be an integer in [0, %d]", wire.MaxDPRank)
			}
		}
		p.override.Pinned, p.override.PinnedSet = wire.WorkerKey{Worker: id, Dp: uint32(rank)}, true
	} else if o.Get("dp_rank") != nil {
		return errors.New("overrides.dp_rank needs overrides.worker_id")
	}
	if x := o.Get("allowed_workers"); x != nil {
		arr, err := x.Array()
		if err != nil {
			return errors.New("overrides.allowed_workers must be an array of worker ids")
		}
		t := r.table.Load()
		for i, e := range arr {
			id, err := e.Uint64()
			if err != nil {
				return fmt.Errorf("overrides.allowed_workers[%d] must be a worker id", i)
			}
			if w := t.byID[id]; w != nil {
				for _, rank := range w.Ranks {
					p.allowed = append(p.allowed, wire.WorkerKey{Worker: id, Dp: rank})
				}
			}
		}
		if len(p.allowed) == 0 {
			return errors.New("overrides.allowed_workers names no known worker")
		}
	}
	return nil
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
