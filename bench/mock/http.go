package mock

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/bench/engine"
	"github.com/kvroute/kvroute/internal/promtext"
	"github.com/kvroute/kvroute/wire/openai"
)

// DefaultMaxTokens is the output length of a request without max_tokens.
const DefaultMaxTokens = 16

// dispatch is the HTTP handler of the worker's front (rank 0): completions
// go to the rank the request names in its X-Data-Parallel-Rank header, or
// to the least loaded rank without one (vLLM's internal DP load balancer).
func (w *Worker) dispatch(ctx *fasthttp.RequestCtx) {
	if w.ranks == nil {
		w.handle(ctx)
		return
	}
	path := string(ctx.Path())
	if path != "/v1/completions" && path != "/v1/chat/completions" {
		w.handle(ctx)
		return
	}
	if h := ctx.Request.Header.Peek(HeaderDPRank); h != nil {
		r, err := strconv.ParseUint(string(h), 10, 32)
		if err != nil || r >= uint64(len(w.ranks)) {
			w.badRequest(ctx, fmt.Sprintf("%s %q: this worker has dp ranks 0 to %d", HeaderDPRank, h, len(w.ranks)-1), "")
			return
		}
		w.ranks[r].handle(ctx)
		return
	}
	// Least loaded, ties to the rank after the last one chosen.
	n := len(w.ranks)
	start := int(w.rr.Add(1)) % n
	best, bestLoad := start, w.ranks[start].load()
	for i := 1; i < n; i++ {
		r := (start + i) % n
		if l := w.ranks[r].load(); l < bestLoad {
			best, bestLoad = r, l
		}
	}
	w.ranks[best].handle(ctx)
}

func (w *Worker) handle(ctx *fasthttp.RequestCtx) {
	path := string(ctx.Path())
	switch path {
	case "/v1/completions", "/v1/chat/completions":
		if !ctx.IsPost() {
			w.fail(ctx, fasthttp.StatusMethodNotAllowed, "use POST", "invalid_request_error")
			return
		}
		w.complete(ctx, path == "/v1/chat/completions")
	case "/v1/models":
		ctx.SetContentType("application/json")
		ctx.SetBody(openai.AppendModelList(nil, []openai.Model{{ID: w.cfg.Model, Created: w.epoch.Unix(), OwnedBy: "kvroute-mock"}}))
	case "/health":
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"status":"ok"}`)
	case "/metrics":
		w.metrics(ctx)
	case transferPath:
		w.serveTransfer(ctx)
	case FaultEventsPath, FaultClearCachePath:
		w.serveFault(ctx, path)
	default:
		w.fail(ctx, fasthttp.StatusNotFound, "no route "+path, "not_found_error")
	}
}

func (w *Worker) fail(ctx *fasthttp.RequestCtx, code int, msg, typ string) {
	e := openai.StatusError(code, msg)
	e.Type = typ
	ctx.SetStatusCode(code)
	ctx.SetContentType("application/json")
	ctx.SetBody(openai.AppendError(nil, e))
}

func (w *Worker) badRequest(ctx *fasthttp.RequestCtx, msg, param string) {
	w.mu.Lock()
	w.mu.c.badRequests++
	w.mu.Unlock()
	e := openai.StatusError(fasthttp.StatusBadRequest, msg)
	e.Param = param
	ctx.SetStatusCode(fasthttp.StatusBadRequest)
	ctx.SetContentType("application/json")
	ctx.SetBody(openai.AppendError(nil, e))
}

func (w *Worker) complete(ctx *fasthttp.RequestCtx, chat bool) {
	req := openai.AcquireRequest()
	defer openai.ReleaseRequest(req)
	if err := openai.ParseWith(ctx.PostBody(), chat, w.cfg.Tokenizer, w.tmpls, req); err != nil {
		w.badRequest(ctx, err.Error(), openai.ParamOf(err))
		return
	}
	if len(req.Tokens) == 0 {
		w.badRequest(ctx, "prompt is empty", "prompt")
		return
	}
	if req.N > 1 {
		w.badRequest(ctx, fmt.Sprintf("n > 1 is not supported: the simulated engine generates one choice per request (n = %d)", req.N), "n")
		return
	}
	maxTokens := req.MaxTokens
	if maxTokens == 0 {
		maxTokens = DefaultMaxTokens
	}
	var (
		l   *leg
		opt submitOpts
		err error
	)
	if w.cfg.Role != RoleBoth {
		var param string
		if l, param, err = w.parseLeg(ctx.PostBody()); err != nil {
			w.badRequest(ctx, err.Error(), param)
			return
		}
	}
	switch {
	case l == nil:
	case l.prefill:
		opt.pin = true
		if w.cfg.PDProtocol == ProtocolSGLang {
			maxTokens = 1 // an SGLang prefill server stops after the first token
		}
	default:
		if opt.pulled, err = w.pull(l); err != nil {
			w.pullFailed(ctx, l, err)
			return
		}
		time.Sleep(w.transferTime(len(opt.pulled)))
	}
	c, err := w.submit(req.Tokens, maxTokens, req.LoRA, req.Salt, req.MM, opt)
	if c != nil {
		c.usageChunk = req.IncludeUsage
	}
	switch {
	case errors.Is(err, engine.ErrTooLong):
		w.badRequest(ctx, fmt.Sprintf("prompt of %d tokens plus max_tokens %d exceeds the KV cache of %d blocks of %d tokens",
			len(req.Tokens), maxTokens, w.cfg.KVBlocks, w.cfg.BlockSize), "max_tokens")
		return
	case err != nil:
		w.fail(ctx, fasthttp.StatusServiceUnavailable, err.Error(), "server_error")
		return
	}
	model := w.cfg.Model
	if len(req.Model) > 0 {
		model = string(req.Model)
	}
	id := "cmpl-mock-" + strconv.FormatUint(w.cfg.ID, 10) + "-"
	if w.cfg.DPSize > 1 {
		id += "r" + strconv.FormatUint(uint64(w.rank), 10) + "-"
	}
	h := openai.Header{
		ID:    id + strconv.FormatUint(c.id, 10),
		Model: model, Created: time.Now().Unix(), Chat: chat,
	}
	// A client that disconnects has its request aborted in the engine, as
	// vLLM does: noticed when its connection closes, or when a streamed
	// chunk fails to write.
	stop := watchClose(ctx.Conn(), func() { w.abort(c) })
	if l != nil && l.prefill {
		w.respondPrefill(ctx, c, h, l)
		stop()
		return
	}
	if !req.Stream {
		w.respond(ctx, c, h)
		stop()
		return
	}
	w.mu.Lock()
	w.mu.c.streams++
	w.mu.Unlock()
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	// fasthttp runs the writer in its own goroutine, writing into a pipe
	// that the server copies to the connection while the watch goes on.
	ctx.SetBodyStreamWriter(func(bw *bufio.Writer) {
		defer stop()
		w.stream(bw, c, h)
	})
}

// wait blocks until c made progress past emitted tokens or ended, and
// returns its state.
func (w *Worker) wait(c *call, emitted int) (n, cached int, done bool, err error) {
	for {
		w.mu.Lock()
		n, cached, done, err = c.emitted, c.cached, c.done, c.err
		w.mu.Unlock()
		if done || n > emitted {
			return
		}
		<-c.ring
	}
}

// waitAnswer waits for c's whole answer: its tokens and cached tokens, or
// false when the client left (the connection is closed) or the call failed
// (answered 503).
func (w *Worker) waitAnswer(ctx *fasthttp.RequestCtx, c *call) (n, cached int, ok bool) {
	n, cached, _, err := w.wait(c, c.max)
	switch {
	case errors.Is(err, errClientGone):
		ctx.SetConnectionClose()
		return 0, 0, false
	case err != nil:
		w.fail(ctx, fasthttp.StatusServiceUnavailable, err.Error(), "server_error")
		return 0, 0, false
	}
	return n, cached, true
}

func (w *Worker) respond(ctx *fasthttp.RequestCtx, c *call, h openai.Header) {
	n, cached, ok := w.waitAnswer(ctx, c)
	if !ok {
		return
	}
	text := appendText(make([]byte, 0, n), c.digest, 0, n)
	ctx.SetContentType("application/json")
	ctx.SetBody(openai.AppendResponse(nil, h, string(text), "length",
		openai.Usage{PromptTokens: c.prompt, CompletionTokens: n, CachedTokens: cached}))
}

// respondPrefill answers a prefill leg once its prompt is computed, and
// pins its blocks for the decode worker; a NIXL answer carries the
// kv_transfer_params naming them.
func (w *Worker) respondPrefill(ctx *fasthttp.RequestCtx, c *call, h openai.Header, l *leg) {
	n, cached, ok := w.waitAnswer(ctx, c)
	if !ok {
		return
	}
	key := l.key
	if w.cfg.PDProtocol == ProtocolNIXL {
		key = "nixl:" + h.ID
	}
	w.hold(key, c)
	text := appendText(make([]byte, 0, n), c.digest, 0, n)
	body := openai.AppendResponse(nil, h, string(text), "length", openai.Usage{PromptTokens: c.prompt, CompletionTokens: n, CachedTokens: cached})
	if w.cfg.PDProtocol == ProtocolNIXL {
		body = w.appendKVParams(body, h.ID, c.prompt/w.cfg.BlockSize)
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}

// pullFailed answers a decode leg whose blocks could not be pulled: vLLM
// refuses parameters naming no pending transfer (400); SGLang fails a
// request whose prefill never arrived (500).
func (w *Worker) pullFailed(ctx *fasthttp.RequestCtx, l *leg, err error) {
	switch {
	case errors.Is(err, errNoTransfer) && w.cfg.PDProtocol == ProtocolNIXL:
		w.badRequest(ctx, fmt.Sprintf("kv_transfer_params name no pending transfer on %s", l.from), "kv_transfer_params")
	case errors.Is(err, errNoTransfer):
		w.fail(ctx, fasthttp.StatusInternalServerError,
			fmt.Sprintf("bootstrap room %s: no prefill from %s within %v", l.key[len("room:"):], l.from, l.wait), "server_error")
	default:
		w.fail(ctx, fasthttp.StatusBadGateway, "pull KV from "+l.from+": "+err.Error(), "server_error")
	}
}

// stream writes one SSE chunk per generated token as the engine produces
// them. A write error (the client went away) stops the stream and aborts the
// request in the engine.
func (w *Worker) stream(bw *bufio.Writer, c *call, h openai.Header) {
	var buf []byte
	sent := 0
	for {
		n, cached, done, err := w.wait(c, sent)
		if errors.Is(err, errClientGone) {
			return
		}
		if err != nil {
			buf = openai.AppendErrorEvent(buf[:0], openai.StatusError(fasthttp.StatusServiceUnavailable, err.Error()))
			bw.Write(buf) //nolint:errcheck // the stream ends either way
			bw.Flush()    //nolint:errcheck
			return
		}
		buf = buf[:0]
		for ; sent < n; sent++ {
			if done && sent == n-1 {
				break
			}
			buf = openai.AppendChunk(buf, h, tokenText(c.digest, sent), "", nil)
		}
		if done {
			u := openai.Usage{PromptTokens: c.prompt, CompletionTokens: n, CachedTokens: cached}
			if c.usageChunk {
				// As vLLM: the last token's chunk, then the usage alone.
				buf = openai.AppendChunk(buf, h, tokenText(c.digest, n-1), "length", nil)
				buf = openai.AppendUsageChunk(buf, h, u)
			} else {
				buf = openai.AppendChunk(buf, h, tokenText(c.digest, n-1), "length", &u)
			}
			buf = append(buf, openai.Done...)
		}
		_, err = bw.Write(buf)
		if err == nil {
			err = bw.Flush()
		}
		if err != nil {
			w.abort(c)
			return
		}
		if c.trace != nil {
			w.mu.Lock()
			for range n - len(c.trace.sent) {
				c.trace.sent = append(c.trace.sent, w.mu.clock)
			}
			w.mu.Unlock()
		}
		if done {
			return
		}
	}
}

// metricFamilies describes a worker's /metrics.
var metricFamilies = promtext.NewRegistry([]promtext.Family{
	{Name: "mock_requests_total", Type: promtext.Counter, Help: "Completion requests accepted by the simulated worker"},
	{Name: "mock_stream_requests_total", Type: promtext.Counter, Help: "Accepted requests that asked for a streamed response"},
	{Name: "mock_failed_requests_total", Type: promtext.Counter, Help: "Accepted requests that failed (engine stopped or the worker closed)"},
	{Name: "mock_bad_requests_total", Type: promtext.Counter, Help: "Requests answered 400"},
	{Name: "mock_prompt_tokens_total", Type: promtext.Counter, Help: "Prompt tokens of accepted requests"},
	{Name: "mock_completion_tokens_total", Type: promtext.Counter, Help: "Tokens generated for finished requests"},
	{Name: "mock_cached_tokens_total", Type: promtext.Counter, Help: "Prompt tokens of finished requests found in the KV cache"},
	{Name: "mock_preemptions_total", Type: promtext.Counter, Help: "Requests the engine preempted to free KV blocks"},
	{Name: "mock_engine_steps_total", Type: promtext.Counter, Help: "Engine scheduling steps"},
	{Name: "mock_kv_used_blocks", Type: promtext.Gauge, Help: "KV cache blocks in use"},
	{Name: "mock_kv_total_blocks", Type: promtext.Gauge, Help: "KV cache blocks in total"},
	{Name: "mock_kv_usage", Type: promtext.Gauge, Help: "Fraction of the KV cache in use"},
	{Name: "mock_requests_waiting", Type: promtext.Gauge, Help: "Requests waiting for the engine"},
	{Name: "mock_requests_running", Type: promtext.Gauge, Help: "Requests the engine is running"},
})

// metrics writes Prometheus text, with HELP and TYPE lines (metricFamilies):
// one sample per family and rank, labelled {worker} without dp ranks and
// {worker,dp_rank} with them.
func (w *Worker) metrics(ctx *fasthttp.RequestCtx) {
	type snap struct {
		lbl           string
		c             counters
		used, total   int
		waiting, runs int
		st            engine.Stats
	}
	ranks := w.all()
	snaps := make([]snap, len(ranks))
	for i, rw := range ranks {
		s := &snaps[i]
		rw.mu.Lock()
		s.c = rw.mu.c
		s.used, s.total = rw.mu.eng.KV().Usage()
		s.waiting, s.runs = rw.mu.eng.Load()
		s.st = rw.mu.eng.Stats()
		rw.mu.Unlock()
		s.lbl = `{worker="` + strconv.FormatUint(w.cfg.ID, 10) + `"}`
		if w.ranks != nil {
			s.lbl = `{worker="` + strconv.FormatUint(w.cfg.ID, 10) + `",dp_rank="` + strconv.Itoa(i) + `"}`
		}
	}
	ctx.SetContentType("text/plain; version=0.0.4")
	metricFamilies.Write(ctx, func(out io.Writer) {
		counter := func(name string, v func(*snap) uint64) {
			for i := range snaps {
				metrics.WriteCounterUint64(out, name+snaps[i].lbl, v(&snaps[i]))
			}
		}
		gauge := func(name string, v func(*snap) float64) {
			for i := range snaps {
				metrics.WriteGaugeFloat64(out, name+snaps[i].lbl, v(&snaps[i]))
			}
		}
		counter("mock_requests_total", func(s *snap) uint64 { return s.c.requests })
		counter("mock_stream_requests_total", func(s *snap) uint64 { return s.c.streams })
		counter("mock_failed_requests_total", func(s *snap) uint64 { return s.c.failed })
		counter("mock_bad_requests_total", func(s *snap) uint64 { return s.c.badRequests })
		counter("mock_prompt_tokens_total", func(s *snap) uint64 { return s.c.promptTokens })
		counter("mock_completion_tokens_total", func(s *snap) uint64 { return s.c.completionTokens })
		counter("mock_cached_tokens_total", func(s *snap) uint64 { return s.c.cachedTokens })
		counter("mock_preemptions_total", func(s *snap) uint64 { return s.st.Preemptions })
		counter("mock_engine_steps_total", func(s *snap) uint64 { return s.st.Steps })
		gauge("mock_kv_used_blocks", func(s *snap) float64 { return float64(s.used) })
		gauge("mock_kv_total_blocks", func(s *snap) float64 { return float64(s.total) })
		gauge("mock_kv_usage", func(s *snap) float64 { return float64(s.used) / float64(s.total) })
		gauge("mock_requests_waiting", func(s *snap) float64 { return float64(s.waiting) })
		gauge("mock_requests_running", func(s *snap) float64 { return float64(s.runs) })
	})
}
