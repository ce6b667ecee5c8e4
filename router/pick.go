package router

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"slices"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/openai"
	"github.com/kvroute/kvroute/wire/plane"
)

// PickRequest is one request an endpoint picker (router/epp) asks the
// router to place: an OpenAI body, parsed, tokenized and hashed exactly as
// POST /v1/completions and /v1/chat/completions do.
type PickRequest struct {
	Body []byte
	// Chat: the body is a chat completion (messages), else a completion.
	Chat bool
	// Subset, when not nil, are the only endpoints ("host:port") the
	// request may go to; none of them a routable worker is a 503.
	Subset []string
	// Fallbacks is how many other endpoints follow the chosen one in
	// Pick.Endpoints, in cost order.
	Fallbacks int
}

// Pick is a placed request: the chosen worker and its booking, held until
// Router.PickDone. Not goroutine-safe; the zero value is ready for
// Router.Pick, and a Pick may be reused after PickDone.
type Pick struct {
	// Endpoints are "host:port": the chosen worker's first, then up to
	// PickRequest.Fallbacks other workers' in cost order. Valid until the
	// next Pick into this value.
	Endpoints []string
	// Worker is the chosen rank; MultiRank says its worker serves several
	// dp ranks behind one address (send Worker.Dp in X-Data-Parallel-Rank).
	Worker    wire.WorkerKey
	MultiRank bool
	// Overlap is the chosen rank's cached prefix in blocks, of
	// PromptBlocks.
	Overlap      uint32
	PromptBlocks int

	p *pending // the booking; nil when none is held
}

// Booked reports whether pk holds a booking (between Pick and PickDone).
func (pk *Pick) Booked() bool { return pk.p != nil }

// PickError is a request the picker answers itself instead of routing it:
// Status with Body, the OpenAI-style JSON error `kvroute serve` answers in
// the same case, and RetryAfter seconds (0: no Retry-After header).
type PickError struct {
	Status     int
	RetryAfter int
	Body       []byte
	Err        openai.Error
}

func (e *PickError) Error() string { return fmt.Sprintf("%d: %s", e.Status, e.Err.Message) }

func pickErr(status int, e openai.Error, retryAfter int) *PickError {
	def := openai.StatusError(status, e.Message)
	if e.Type == "" {
		e.Type = def.Type
	}
	if e.Code == "" {
		e.Code = def.Code
	}
	return &PickError{Status: status, RetryAfter: retryAfter, Body: openai.AppendError(nil, e), Err: e}
}

func pickErrMsg(status int, msg string, retryAfter int) *PickError {
	return pickErr(status, openai.StatusError(status, msg), retryAfter)
}

// Pick places a request as the OpenAI endpoints do (admission, parsing,
// tokenizing, hashing, prompt limits, model restriction, the batcher's
// decision with its queue and shedding) and books it on the chosen rank.
// It blocks while the request is queued. On a *PickError nothing is
// booked. On success the caller reports the first answer byte with
// PickPrefillDone and must end the booking with PickDone.
//
// Goroutine-safe (for distinct Picks).
func (r *Router) Pick(dst *Pick, in *PickRequest) error {
	if dst.p != nil {
		return errors.New("router: Pick into a Pick that still holds a booking (PickDone first)")
	}
	if t, left := r.Throttled(); t {
		r.m.throttled.Inc()
		return busyErr(left)
	}
	t := r.table.Load()
	if r.nworkers.Load() == 0 {
		return noWorkersErr(t)
	}
	req := openai.AcquireRequest()
	defer openai.ReleaseRequest(req)
	req.TokenLimit = t.maxPrompt
	if err := openai.ParseWith(in.Body, in.Chat, r.cfg.Tokenizer, r.tmpls, req); err != nil {
		return pickErr(fasthttp.StatusBadRequest, openai.Error{Message: err.Error(), Param: openai.ParamOf(err)}, 0)
	}
	if req.TooLong {
		r.m.refused[refPromptTooLong].Inc()
		return promptErr(req.AtLeast, true, req.TokenLimit, in.Chat)
	}
	if len(req.Tokens) == 0 {
		err := emptyPrompt(in.Chat)
		return pickErr(fasthttp.StatusBadRequest, openai.Error{Message: err.Error(), Param: openai.ParamOf(err)}, 0)
	}
	ranks, restrict, ok := t.ranksFor(req.Model)
	if !ok {
		return pickErr(fasthttp.StatusNotFound, openai.Error{
			Message: fmt.Sprintf("model %q is not served by any worker (GET /v1/models lists the models served)", req.Model),
			Type:    openai.TypeInvalidRequest, Param: "model", Code: openai.CodeModelNotFound,
		}, 0)
	}
	p := r.acquire()
	p.explain = true // the candidates' costs order the fallbacks
	if restrict {
		p.allowed = append(p.allowed[:0], ranks...)
	}
	if in.Subset != nil {
		if err := subsetRanks(p, t, in.Subset, restrict, ranks); err != nil {
			r.release(p)
			return err
		}
	}
	r.hash(p, req)
	if err := t.fitCapacity(p); err != nil {
		r.release(p)
		r.m.refused[refPromptTooLong].Inc()
		return pickErr(fasthttp.StatusBadRequest, openai.Error{Message: err.Error(), Param: openai.ParamOf(err)}, 0)
	}
	if ok, limit := t.fitPrompt(p, len(req.Tokens)); !ok {
		r.release(p)
		r.m.refused[refPromptTooLong].Inc()
		return promptErr(len(req.Tokens), false, limit, in.Chat)
	}
	r.submit(p)
	if p.err != nil {
		err := r.pickFailed(p.err)
		r.release(p)
		return err
	}
	r.fillPick(dst, p, in.Fallbacks)
	return nil
}

// fillPick writes p's decision into dst: the chosen worker's endpoint,
// then the other workers' in the order of their best rank's cost.
func (r *Router) fillPick(dst *Pick, p *pending, fallbacks int) {
	t := r.table.Load()
	dst.p = p
	dst.Worker = p.dec.Worker
	dst.Overlap = p.dec.Overlap
	dst.PromptBlocks = len(p.local)
	dst.MultiRank = false
	dst.Endpoints = dst.Endpoints[:0]
	if w := t.byID[p.dec.Worker.Worker]; w != nil {
		dst.MultiRank = len(w.Ranks) > 1
	}
	dst.Endpoints = append(dst.Endpoints, t.addrOf[p.dec.Worker.Worker])
	if fallbacks <= 0 {
		return
	}
	slices.SortStableFunc(p.cands, func(a, b sched.Candidate) int {
		switch {
		case a.Cost < b.Cost:
			return -1
		case a.Cost > b.Cost:
			return 1
		}
		return 0
	})
	n := 0
	for i := range p.cands {
		c := &p.cands[i]
		if c.Excluded != sched.NotExcluded || c.Worker.Worker == p.dec.Worker.Worker || math.IsInf(c.Cost, 0) || math.IsNaN(c.Cost) {
			continue
		}
		a := t.addrOf[c.Worker.Worker]
		if a == "" || slices.Contains(dst.Endpoints, a) {
			continue
		}
		dst.Endpoints = append(dst.Endpoints, a)
		if n++; n == fallbacks {
			break
		}
	}
}

// subsetRanks narrows p to the ranks of the workers at the endpoints of
// subset (intersected with a model's ranks when restrict).
func subsetRanks(p *pending, t *workerTable, subset []string, restrict bool, model []wire.WorkerKey) *PickError {
	var out []wire.WorkerKey
	for _, ep := range subset {
		id, ok := t.byAddr[ep]
		if !ok {
			continue
		}
		for _, rank := range t.byID[id].Ranks {
			k := wire.WorkerKey{Worker: id, Dp: rank}
			if (restrict && !slices.Contains(model, k)) || slices.Contains(out, k) {
				continue
			}
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		return pickErrMsg(fasthttp.StatusServiceUnavailable, fmt.Sprintf(
			"no worker among the %d endpoints of the request's subset (x-gateway-destination-endpoint-subset) can take it", len(subset)), 0)
	}
	p.allowed = append(p.allowed[:0], out...)
	return nil
}

// PickPrefillDone marks pk's prefill done (the first answer byte arrived).
func (r *Router) PickPrefillDone(pk *Pick) {
	if pk.p != nil {
		r.notify(opPrefillDone, pk.p.id)
	}
}

// PickServed moves pk's booking to the worker at endpoint when it is
// another worker than the chosen one (the proxy sent the request to a
// fallback). It reports whether the booking moved. It waits for the
// batcher.
func (r *Router) PickServed(pk *Pick, endpoint string) bool {
	p := pk.p
	if p == nil {
		return false
	}
	t := r.table.Load()
	id, ok := t.byAddr[endpoint]
	if !ok || id == p.dec.Worker.Worker {
		return false
	}
	w := t.byID[id]
	key := wire.WorkerKey{Worker: id, Dp: w.Ranks[0]}
	var overlap uint32
	for _, o := range p.ovs {
		if o.Worker.Worker == id {
			key, overlap = o.Worker, o.Device
			break
		}
	}
	newID := r.nextID.Add(1)
	moved := false
	done := make(chan struct{})
	r.post(func() {
		defer close(done)
		now := r.now()
		if err := r.s.AddRequest(newID, key, p.seq, p.isl, overlap, sched.PrefillLoadHint{}, now); err != nil {
			return
		}
		r.s.Free(p.id, now)
		r.syncOp(plane.SyncFree, p.id)
		p.id = newID
		d := sched.Decision{ID: newID, Outcome: sched.Routed, Worker: key, Overlap: overlap, PrefillTokens: p.isl}
		r.syncBooked(p, d)
		p.dec = d
		moved = true
	})
	// No timeout: p is the batcher's until the closure ran, or until the
	// batcher stopped (it runs what is queued before it does).
	select {
	case <-done:
	case <-r.done:
		return false
	}
	if !moved {
		return false
	}
	pk.Worker, pk.Overlap = key, overlap
	pk.MultiRank = len(w.Ranks) > 1
	return true
}

// PickDone ends pk's booking (the answer ended, failed or was abandoned)
// and makes pk reusable. A Pick without a booking is left alone.
func (r *Router) PickDone(pk *Pick) {
	p := pk.p
	if p == nil {
		return
	}
	pk.p = nil
	r.notify(opFree, p.id)
	r.release(p)
}

// Routable reports whether the router can take requests: a routable
// worker is known, KV-event ingest runs and the event plane is up (the
// conditions of GET /ready besides draining).
func (r *Router) Routable() error {
	if r.nworkers.Load() == 0 {
		return errors.New("no routable worker")
	}
	if r.hooks.IngestRunning != nil && !r.hooks.IngestRunning() {
		return errors.New("KV event ingest is not running")
	}
	if r.hooks.EventPlane != nil {
		if err := r.hooks.EventPlane(); err != nil {
			return fmt.Errorf("event plane down: %w", err)
		}
	}
	return nil
}

// Endpoint is a worker given by address (an endpoints file): Addr is
// "host:port", served over http.
type Endpoint struct {
	Addr   string
	Worker StaticWorker
}

// SetEndpoints makes ws the workers from source (e.g. an endpoints file),
// replacing what source set before: new ones are added as static workers,
// changed ones replaced (their load dropped), missing ones removed. A
// worker id known from elsewhere (--worker, a registration) is left alone
// and reported in the error. It waits for the batcher and returns the ids
// added and removed.
func (r *Router) SetEndpoints(source string, ws []StaticWorker) (added, removed []uint64, err error) {
	var errs []error
	callErr := r.call(func() {
		now := r.now()
		want := make(map[uint64]StaticWorker, len(ws))
		for _, w := range ws {
			want[w.ID] = w
		}
		for id, info := range r.b.workers {
			if info.Source != source || source == "" {
				continue
			}
			w, keep := want[id]
			if keep && w.URL == info.URL && slices.Equal(ranksOrZero(w.DpRanks), info.Ranks) &&
				(w.Model == "" && len(info.Models) <= 1 || len(info.Models) == 1 && info.Models[0] == w.Model) &&
				w.Capacity == info.Capacity {
				delete(want, id) // unchanged
				continue
			}
			r.removeWorker(id, now)
			if !keep {
				removed = append(removed, id)
			}
		}
		for _, w := range ws {
			if _, ok := want[w.ID]; !ok {
				continue
			}
			if old, ok := r.b.workers[w.ID]; ok {
				errs = append(errs, fmt.Errorf("worker %d (%s) is already known at %s (--worker or a registration): kept", w.ID, w.URL, old.URL))
				continue
			}
			r.addStatic(w)
			c := *r.b.workers[w.ID]
			c.Source = source
			r.b.workers[w.ID] = &c
			added = append(added, w.ID)
		}
		r.publishTable()
	}, 5*time.Second)
	for _, id := range added {
		if w := r.table.Load().byID[id]; w != nil && len(w.Models) == 0 {
			go r.askModelsOf(id, w.URL)
		}
	}
	return added, removed, errors.Join(append(errs, callErr)...)
}

func ranksOrZero(r []uint32) []uint32 {
	if len(r) == 0 {
		return []uint32{0}
	}
	return r
}

// indexAddrs fills t's endpoint maps from its workers' URLs.
func (t *workerTable) indexAddrs() {
	t.byAddr = make(map[string]uint64, len(t.byID))
	t.addrOf = make(map[uint64]string, len(t.byID))
	for _, id := range t.ids {
		a := HostPort(t.byID[id].URL)
		if a == "" {
			continue
		}
		t.addrOf[id] = a
		t.byAddr[a] = id
	}
}

// HostPort returns the "host:port" of an http(s) URL, with the scheme's
// default port when it names none, or "" when it is not one.
func HostPort(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.Host == "" {
		return ""
	}
	if p.Port() != "" {
		return p.Host
	}
	port := "80"
	if p.Scheme == "https" {
		port = "443"
	}
	return net.JoinHostPort(p.Hostname(), port)
}

func busyErr(left time.Duration) *PickError {
	return pickErrMsg(fasthttp.StatusTooManyRequests, "all workers are busy; retry later", max(1, int(math.Ceil(left.Seconds()))))
}

func noWorkersErr(t *workerTable) *PickError {
	if k := len(t.ids); k > 0 {
		return pickErrMsg(fasthttp.StatusServiceUnavailable, fmt.Sprintf("no workers: all %d are down (unreachable)", k), 0)
	}
	return pickErrMsg(fasthttp.StatusServiceUnavailable, "no workers: none registered or configured (--worker, --endpoints-file)", 0)
}

// pickFailed maps a failed decision to its answer: the endpoint picker's,
// and the one Router.fail writes.
func (r *Router) pickFailed(err error) *PickError {
	switch {
	case errors.Is(err, ErrAllBusy):
		_, left := r.Throttled()
		return busyErr(left)
	case errors.Is(err, ErrQueueWait):
		// Retry after about the bound: the queue the request would have
		// joined takes that long to drain.
		return pickErrMsg(fasthttp.StatusTooManyRequests, fmt.Sprintf(
			"all workers are busy and the predicted queue wait is over --max-queue-wait (%v); retry later", r.cfg.Sched.MaxQueueWait),
			max(1, int(math.Ceil(r.cfg.Sched.MaxQueueWait.Seconds()))))
	case errors.Is(err, ErrQueueFull), errors.Is(err, ErrQueueTimeout), errors.Is(err, ErrEvicted):
		return pickErrMsg(fasthttp.StatusServiceUnavailable, err.Error(), 1)
	case errors.Is(err, ErrNoWorkers) && r.nworkers.Load() == 0 && len(r.table.Load().ids) > 0:
		return noWorkersErr(r.table.Load())
	}
	return pickErrMsg(fasthttp.StatusServiceUnavailable, err.Error(), 0)
}

// promptErr is refusePrompt's answer.
func promptErr(n int, atLeast bool, limit int, chat bool) *PickError {
	param := "prompt"
	if chat {
		param = "messages"
	}
	size := fmt.Sprint(n)
	if atLeast {
		size = "at least " + size
	}
	return pickErr(fasthttp.StatusBadRequest, openai.Error{
		Message: fmt.Sprintf("prompt of %s tokens is longer than the %d allowed (--max-prompt-tokens, the workers' max_model_len, or the largest worker's KV capacity)", size, limit),
		Param:   param, Code: "context_length_exceeded",
	}, 0)
}

// PickErrorBody is the OpenAI-style JSON error body `kvroute serve`
// answers with status (code "" takes the status's default).
func PickErrorBody(status int, code, msg string) []byte {
	e := openai.StatusError(status, msg)
	if code != "" {
		e.Code = code
	}
	return pickErr(status, e, 0).Body
}

// AnyEndpoint returns a routable worker's endpoint for a request that
// needs no decision (one without a body): the n-th of the routable workers
// in id order (modulo their number), among subset's when subset is not
// nil; "" when there is none.
func (r *Router) AnyEndpoint(n uint64, subset []string) string {
	t := r.table.Load()
	k := 0
	for _, id := range t.ids {
		if a := t.addrOf[id]; a != "" && !t.byID[id].health.down.Load() && (subset == nil || slices.Contains(subset, a)) {
			k++
		}
	}
	if k == 0 {
		return ""
	}
	i := int(n % uint64(k))
	for _, id := range t.ids {
		if a := t.addrOf[id]; a != "" && !t.byID[id].health.down.Load() && (subset == nil || slices.Contains(subset, a)) {
			if i == 0 {
				return a
			}
			i--
		}
	}
	return ""
}

// Endpoints returns the "host:port" of every known worker, in id order.
func (r *Router) Endpoints() []string {
	t := r.table.Load()
	out := make([]string, 0, len(t.ids))
	for _, id := range t.ids {
		if a := t.addrOf[id]; a != "" {
			out = append(out, a)
		}
	}
	return out
}

// SchedStats returns the scheduler's counters (active bookings, queue
// depth), read on the batcher.
func (r *Router) SchedStats() (sched.Stats, error) {
	var st sched.Stats
	err := r.call(func() { st = r.s.Stats() }, 2*time.Second)
	return st, err
}

// AppendModels appends GET /v1/models's answer: the union of the workers'
// models, as `kvroute serve` answers it.
func (r *Router) AppendModels(dst []byte) []byte {
	return openai.AppendModelList(dst, r.table.Load().list)
}
