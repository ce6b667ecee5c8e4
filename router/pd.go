package router

import (
	"bytes"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/internal/promtext"
	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/openai"
	"github.com/kvroute/kvroute/wire/pd"
	"github.com/kvroute/kvroute/wire/plane"
	"github.com/kvroute/kvroute/wire/proxy"
)

// Disaggregated prefill/decode serving: a request of a fleet with
// prefill-role workers is one pair decision (sched.Scheduler.DecidePD) and,
// when its prompt is computed remotely, two legs: the prefill leg to the
// prefill worker and the decode leg to the decode worker, whose answer the
// client gets. The legs' bodies are wire/pd's; this file sends them and
// applies the failure rules (docs/decisions/0040-pd-serving.md):
//
//   - the prefill leg fails, answers an error or passes --prefill-timeout:
//     the request is served aggregated on its decode worker (the client's
//     body, unchanged), counted in kvroute_pd_prefill_fallbacks_total;
//   - the decode leg fails before its first byte (a transport failure):
//     it is decided again once among the other decode workers and sent
//     there with the same transfer parameters (the KV is still on the
//     prefill worker), counted in kvroute_pd_decode_retries_total; a decode
//     leg answering 5xx (it could not get the KV) is served aggregated on
//     that worker, counted as a fallback;
//   - a vLLM prefill answer without kv_transfer_params (an engine without
//     a KV connector) is a 502 naming the worker, and the worker is marked
//     not P/D capable (logged once): from then on it is routed as an
//     aggregated worker (role both).

// DefaultPrefillTimeout is the default of Config.PrefillTimeout: a prefill
// of a 128k-token prompt on one H100 takes about 10 s; thrice that leaves
// room for a queue before it.
const DefaultPrefillTimeout = 30 * time.Second

// HeaderRequestID is the header both legs of a disaggregated request carry
// with the same value (the client's own, or "kvr-" and 128 random bits), as
// vLLM's reference proxy sends it.
const HeaderRequestID = "X-Request-Id"

// HeaderPrefillWorker is the response header naming a disaggregated
// request's prefill worker (X-Kvroute-Worker names its decode worker).
const HeaderPrefillWorker = "X-Kvroute-Prefill-Worker"

// pdState is a worker's P/D standing, shared by every snapshot of it.
type pdState struct {
	// incapable: the worker answered a prefill leg without
	// kv_transfer_params; it is routed as an aggregated worker since.
	incapable atomic.Bool
}

// pdPending is the P/D part of a pending request.
type pdPending struct {
	paired bool           // decided by DecidePD (the fleet has prefill ranks)
	pre    sched.Decision // the prefill leg; Outcome Routed when disaggregated
	rule   sched.PairRule
	pcands []sched.Candidate // explain: the prefill pool's candidates
	// decodeOnly decides the request on the decode (and aggregated) ranks
	// alone, with Decide: a decode leg decided again, or a fallback.
	decodeOnly bool
	leg        []byte // a leg's body
}

func (d *pdPending) reset() {
	d.paired, d.pre, d.rule, d.decodeOnly = false, sched.Decision{}, sched.RuleNone, false
	d.pcands = d.pcands[:0]
	if cap(d.leg) > 1<<20 {
		d.leg = nil
	}
}

// pdFamilies are the P/D metrics (registry).
var pdFamilies = []promtext.Family{
	{Name: "kvroute_pd_decisions_total", Type: promtext.Counter, Help: "Decisions in a fleet with prefill workers, by the disaggregation rule that decided (remote, short-prompt, load, prefill-busy)"},
	{Name: "kvroute_pd_prefill_fallbacks_total", Type: promtext.Counter, Help: "Disaggregated requests served aggregated on their decode worker because the prefill leg (or the KV pull) failed or passed --prefill-timeout"},
	{Name: "kvroute_pd_decode_retries_total", Type: promtext.Counter, Help: "Decode legs sent again to another decode worker, with the same transfer parameters, after a connection failure"},
	{Name: "kvroute_pd_no_transfer_params_total", Type: promtext.Counter, Help: "Prefill answers without kv_transfer_params (answered 502; the worker is then routed as aggregated)"},
	{Name: "kvroute_pd_legs_total", Type: promtext.Counter, Help: "Disaggregated requests whose prefill and decode legs were both sent, by protocol"},
}

// pdMetrics are the P/D counters.
type pdMetrics struct {
	rules                        [6]*metrics.Counter // by sched.PairRule
	fallbacks, retries, noParams *metrics.Counter
	legsVLLM, legsSGLang         *metrics.Counter
}

func newPDMetrics(s *metrics.Set) *pdMetrics {
	m := &pdMetrics{
		fallbacks:  s.NewCounter("kvroute_pd_prefill_fallbacks_total"),
		retries:    s.NewCounter("kvroute_pd_decode_retries_total"),
		noParams:   s.NewCounter("kvroute_pd_no_transfer_params_total"),
		legsVLLM:   s.NewCounter(`kvroute_pd_legs_total{protocol="vllm-nixl"}`),
		legsSGLang: s.NewCounter(`kvroute_pd_legs_total{protocol="sglang"}`),
	}
	for _, r := range []sched.PairRule{sched.RuleRemote, sched.RuleShortPrompt, sched.RuleLoad, sched.RulePrefillBusy} {
		m.rules[r] = s.NewCounter(fmt.Sprintf(`kvroute_pd_decisions_total{rule=%q}`, r.String()))
	}
	return m
}

// decidePairs decides a batch in a fleet with prefill ranks, in order:
// runs of plain requests together (DecidePDBatch), explained and
// decode-only ones alone (decidePD).
func (r *Router) decidePairs(batch []*pending, now int64) {
	for i := 0; i < len(batch); {
		if batch[i].explain || batch[i].pd.decodeOnly {
			r.decidePD(batch[i], now)
			i++
			continue
		}
		j := i
		reqs, ovs := r.b.reqs[:0], r.b.ovs[:0]
		for ; j < len(batch) && !batch[j].explain && !batch[j].pd.decodeOnly; j++ {
			reqs = append(reqs, r.request(batch[j]))
			ovs = append(ovs, batch[j].ovs)
		}
		r.b.reqs, r.b.ovs = reqs, ovs
		r.b.pairs = r.s.DecidePDBatch(r.b.pairs[:0], reqs, ovs, now)
		for k := range r.b.pairs {
			r.pairOutcome(batch[i+k], &r.b.pairs[k])
		}
		clear(ovs)
		i = j
	}
}

// pairOutcome acts on a pair decision made for p.
func (r *Router) pairOutcome(p *pending, pair *sched.PairDecision) {
	p.pd.paired, p.pd.pre, p.pd.rule = true, pair.Prefill, pair.Rule
	if c := r.m.pd.rules[min(int(pair.Rule), len(r.m.pd.rules)-1)]; c != nil {
		c.Inc()
	}
	r.outcome(p, pair.Decode)
}

// decidePD decides one request of a fleet with prefill ranks (batcher
// goroutine): a pair decision, or, for p.pd.decodeOnly, an aggregated one
// on the decode and aggregated ranks. Neither it nor decidePairs allocates
// once the scheduler's tables and the buffers have grown
// (TestPDDecisionAllocs).
func (r *Router) decidePD(p *pending, now int64) {
	req := r.request(p)
	if p.pd.decodeOnly {
		var d sched.Decision
		if p.explain {
			d, p.cands = r.s.DecideExplained(p.cands[:0], &req, p.ovs, now)
		} else {
			r.b.reqs = append(r.b.reqs[:0], req)
			r.b.ovs = append(r.b.ovs[:0], p.ovs)
			r.b.decs = r.s.Decide(r.b.decs[:0], r.b.reqs, r.b.ovs, now)
			d = r.b.decs[0]
			clear(r.b.ovs)
		}
		r.outcome(p, d)
		return
	}
	var pair sched.PairDecision
	if p.explain {
		pair, p.cands, p.pd.pcands = r.s.DecidePDExplained(p.cands[:0], p.pd.pcands[:0], &req, p.ovs, now)
	} else {
		pair = r.s.DecidePD(&req, p.ovs, now)
	}
	r.pairOutcome(p, &pair)
}

// remote reports whether p was decided with a prefill leg.
func (p *pending) remote() bool { return p.pd.pre.Outcome == sched.Routed }

// rankHeader is the X-Data-Parallel-Rank to send to w for rank (-1: none,
// w serves one rank).
func rankHeader(w *workerInfo, rank uint32) int {
	if len(w.Ranks) > 1 {
		return int(rank)
	}
	return -1
}

// requestID returns the client's X-Request-Id, or a new one.
func requestID(ctx *fasthttp.RequestCtx) string {
	if v := ctx.Request.Header.Peek(HeaderRequestID); len(v) > 0 && len(v) <= 256 {
		return string(v)
	}
	var b [16]byte
	_, _ = crand.Read(b[:])
	return "kvr-" + hex.EncodeToString(b[:])
}

// sendPD sends a disaggregated request's legs and returns the answer to
// relay (the decode worker's, or the fallback's), nothing yet written to
// the client; on nil the client has been answered and p's bookings freed.
func (r *Router) sendPD(ctx *fasthttp.RequestCtx, p *pending, body []byte, stream bool, deadline time.Time) *proxy.Upstream {
	pinfo := r.table.Load().byID[p.pd.pre.Worker.Worker]
	if pinfo == nil || pinfo.health.down.Load() {
		return r.fallback(ctx, p, body, stream, deadline, "prefill worker left or is down", nil)
	}
	ctx.Response.Header.Set(HeaderPrefillWorker, strconv.FormatUint(pinfo.ID, 10))
	rid := requestID(ctx)
	if pinfo.Protocol == plane.ProtocolSGLang {
		return r.sendSGLang(ctx, p, pinfo, body, stream, deadline, rid)
	}
	return r.sendVLLM(ctx, p, pinfo, body, stream, deadline, rid)
}

// fallback serves p aggregated on its decode worker: the client's body,
// unchanged, through send (with its own retry rules).
func (r *Router) fallback(ctx *fasthttp.RequestCtx, p *pending, body []byte, stream bool, deadline time.Time, why string, err error) *proxy.Upstream {
	r.notify(opPrefillLegDone, p.id)
	r.m.pd.fallbacks.Inc()
	ctx.Response.Header.Del(HeaderPrefillWorker) // served aggregated after all
	r.cfg.Logger.Debug("prefill leg failed: serving the request aggregated on its decode worker",
		"prefill_worker", p.pd.pre.Worker.Worker, "decode_worker", p.dec.Worker.Worker, "why", why, "err", err)
	p.pd.decodeOnly = true
	return r.send(ctx, p, body, stream, deadline)
}

// prefillDeadline is when a prefill leg started now gives up: after
// --prefill-timeout, or at the client's own deadline when that comes first
// (clientBound).
func (r *Router) prefillDeadline(deadline time.Time) (d time.Time, clientBound bool) {
	d = time.Now().Add(r.cfg.PrefillTimeout)
	if !deadline.IsZero() && deadline.Before(d) {
		return deadline, true
	}
	return d, false
}

// legFailed records a prefill leg's failure against its worker's health,
// as a failed request's: a timeout by --prefill-timeout counts (the worker
// did not compute one token in time), one by the client's own deadline
// does not, nor does an abandon (the worker was ejected meanwhile).
func (r *Router) legFailed(w *workerInfo, err error, clientBound bool) {
	switch {
	case errors.Is(err, proxy.ErrAbandoned):
	case errors.Is(err, proxy.ErrClientDeadline) && clientBound:
	default:
		r.workerFailed(w, err)
	}
}

// sendVLLM runs the vLLM NIXL protocol: the prefill leg (one token, not
// streamed), then the decode leg with the kv_transfer_params it returned.
func (r *Router) sendVLLM(ctx *fasthttp.RequestCtx, p *pending, pinfo *workerInfo, body []byte, stream bool, deadline time.Time, rid string) *proxy.Upstream {
	var err error
	if p.pd.leg, err = pd.AppendVLLMPrefill(p.pd.leg[:0], body); err != nil {
		r.notify(opFree, p.id)
		badRequest(ctx, err)
		return nil
	}
	path := string(ctx.Path())
	pdl, clientBound := r.prefillDeadline(deadline)
	u, err := r.proxy.SendHeader(pinfo.URL+path, rankHeader(pinfo, p.pd.pre.Worker.Dp), HeaderRequestID, rid, p.pd.leg, false, pdl)
	r.notify(opPrefillLegDone, p.id)
	if err != nil {
		r.legFailed(pinfo, err, clientBound)
		return r.fallback(ctx, p, body, stream, deadline, "prefill leg failed", err)
	}
	pinfo.health.ok()
	if code := u.StatusCode(); code != fasthttp.StatusOK {
		u.Release()
		return r.fallback(ctx, p, body, stream, deadline, "prefill leg answered "+strconv.Itoa(code), nil)
	}
	params, err := pd.TransferParams(u.Body())
	if errors.Is(err, pd.ErrNoTransferParams) {
		u.Release()
		r.m.pd.noParams.Inc()
		r.notify(opFree, p.id)
		r.markIncapable(pinfo)
		proxy.WriteError(ctx, fasthttp.StatusBadGateway, fmt.Sprintf(
			"prefill worker %d (%s) answered without kv_transfer_params: it runs without a KV connector, so it is now routed as an aggregated worker",
			pinfo.ID, pinfo.URL))
		r.setRouteHeaders(ctx, p)
		return nil
	}
	if err == nil {
		p.pd.leg, err = pd.AppendVLLMDecode(p.pd.leg[:0], body, params)
	}
	u.Release()
	if err != nil {
		return r.fallback(ctx, p, body, stream, deadline, "unreadable prefill answer", err)
	}
	r.m.pd.legsVLLM.Inc()
	return r.sendDecode(ctx, p, p.pd.leg, body, stream, deadline, rid, 1)
}

// sendDecode sends a decode leg to p's decode worker. A transport failure
// before the answer decides the request again among the other decode
// workers and sends the same leg there, retries times; a 5xx answer (the
// decode worker could not get the KV) serves the request aggregated on that
// worker instead (client is the client's body).
func (r *Router) sendDecode(ctx *fasthttp.RequestCtx, p *pending, leg, client []byte, stream bool, deadline time.Time, rid string, retries int) *proxy.Upstream {
	path := string(ctx.Path())
	for attempt := 0; ; attempt++ {
		info := r.table.Load().byID[p.dec.Worker.Worker]
		if info == nil {
			r.notify(opFree, p.id)
			r.m.workerGoneRequest.Inc()
			proxy.WriteError(ctx, fasthttp.StatusServiceUnavailable, ErrWorkerGone.Error())
			return nil
		}
		var (
			u   *proxy.Upstream
			err error
		)
		if info.health.down.Load() {
			err = proxy.ErrAbandoned
		} else {
			u, err = r.proxy.SendHeader(info.URL+path, rankHeader(info, p.dec.Worker.Dp), HeaderRequestID, rid, leg, stream, deadline)
		}
		if err == nil {
			info.health.ok()
			if u.StatusCode() >= 500 {
				code := u.StatusCode()
				u.Release()
				return r.fallback(ctx, p, client, stream, deadline, "decode leg answered "+strconv.Itoa(code), nil)
			}
			return u
		}
		if r.sendFailed(ctx, p, info, err) {
			return nil
		}
		if attempt >= retries || !r.decodeExcept(p, info.ID) {
			r.m.proxyErrors.Inc()
			proxy.WriteError(ctx, fasthttp.StatusBadGateway, err.Error())
			r.setRouteHeaders(ctx, p)
			return nil
		}
		r.m.pd.retries.Inc()
		r.cfg.Logger.Debug("decode leg failed: sending it to another decode worker", "worker", info.ID, "err", err)
		if !r.redecide(ctx, p) {
			return nil
		}
	}
}

// redecide decides p again on the decode ranks alone (a new id; the old
// one's bookings were freed), weighing the pull as a decode leg does. On
// false the client has been answered.
func (r *Router) redecide(ctx *fasthttp.RequestCtx, p *pending) bool {
	p.id = r.nextID.Add(1)
	p.dec, p.err = sched.Decision{}, nil
	p.pd.decodeOnly = true
	if !p.override.WeightSet {
		p.override.Weight, p.override.WeightSet = r.cfg.Sched.TransferWeight, true
	}
	if r.submit(p); p.err != nil {
		r.fail(ctx, p.err)
		return false
	}
	return true
}

// decodeExcept restricts p to the routable decode-capable ranks (not
// prefill-only) other than worker's, within any restriction it had; it
// reports whether any is left.
func (r *Router) decodeExcept(p *pending, worker uint64) bool {
	t := r.table.Load()
	ok := func(k wire.WorkerKey) bool {
		w := t.byID[k.Worker]
		return k.Worker != worker && w != nil && !w.health.down.Load() && w.Capacity.Role != sched.RolePrefill
	}
	if len(p.allowed) > 0 {
		kept := p.allowed[:0]
		for _, k := range p.allowed {
			if ok(k) {
				kept = append(kept, k)
			}
		}
		p.allowed = kept
		return len(kept) > 0
	}
	for _, id := range t.ids {
		for _, rank := range t.byID[id].Ranks {
			if k := (wire.WorkerKey{Worker: id, Dp: rank}); ok(k) {
				p.allowed = append(p.allowed, k)
			}
		}
	}
	return len(p.allowed) > 0
}

// markIncapable routes w as an aggregated worker from now on: it answered
// a prefill leg without kv_transfer_params. Logged once per worker.
func (r *Router) markIncapable(w *workerInfo) {
	if w.pd.incapable.Swap(true) {
		return
	}
	r.cfg.Logger.Error("prefill worker answered without kv_transfer_params: it runs without a KV connector (vLLM --kv-transfer-config); it is routed as an aggregated worker from now on",
		"worker", w.ID, "url", w.URL)
	r.post(func() {
		cur, ok := r.b.workers[w.ID]
		if !ok || cur.pd != w.pd {
			return
		}
		c := *cur
		c.Capacity.Role = sched.RoleBoth
		r.b.workers[w.ID] = &c
		if !c.health.down.Load() {
			for _, rank := range c.Ranks {
				r.s.AddWorker(wire.WorkerKey{Worker: w.ID, Dp: rank}, c.Capacity)
			}
		}
		r.publishTable()
	})
}

// legResult is a leg's answer or failure.
type legResult struct {
	u   *proxy.Upstream
	err error
}

// failed reports whether the leg failed (a transport failure or an error
// status), releasing its answer if so.
func (l *legResult) failed() bool {
	if l.err != nil {
		return true
	}
	if l.u.StatusCode() >= 300 {
		l.u.Release()
		l.u = nil
		return true
	}
	return false
}

// sendSGLang runs the SGLang PD protocol: the same body, with
// bootstrap_host, bootstrap_port and a random bootstrap_room, to the
// prefill and the decode worker at once; the decode worker's answer is the
// client's, the prefill worker's is dropped.
func (r *Router) sendSGLang(ctx *fasthttp.RequestCtx, p *pending, pinfo *workerInfo, body []byte, stream bool, deadline time.Time, rid string) *proxy.Upstream {
	dinfo := r.table.Load().byID[p.dec.Worker.Worker]
	if dinfo == nil || dinfo.health.down.Load() {
		return r.fallback(ctx, p, body, stream, deadline, "decode worker left or is down", nil) // send answers it
	}
	b := pd.Bootstrap{Host: bootstrapHost(pinfo.URL), Port: pinfo.BootstrapPort, Room: rand.Uint64() & pd.MaxRoom}
	leg, err := pd.AppendSGLang(nil, body, b) // its own buffer: the legs may outlive the handler
	if err != nil {
		r.notify(opFree, p.id)
		badRequest(ctx, err)
		return nil
	}
	path := string(ctx.Path())
	pch, dch := make(chan legResult, 1), make(chan legResult, 1)
	prank := rankHeader(pinfo, p.pd.pre.Worker.Dp)
	pdl, clientBound := r.prefillDeadline(deadline)
	go func() {
		u, err := r.proxy.SendHeader(pinfo.URL+path, prank, HeaderRequestID, rid, leg, false, pdl)
		pch <- legResult{u, err}
	}()
	drank := rankHeader(dinfo, p.dec.Worker.Dp)
	go func() {
		u, err := r.proxy.SendHeader(dinfo.URL+path, drank, HeaderRequestID, rid, leg, stream, deadline)
		dch <- legResult{u, err}
	}()
	r.m.pd.legsSGLang.Inc()
	id := p.id
	prefillEnded := func(res legResult) bool { // reports whether the prefill leg failed
		r.notify(opPrefillLegDone, id)
		if res.err != nil {
			r.legFailed(pinfo, res.err, clientBound)
			return true
		}
		pinfo.health.ok()
		bad := res.u.StatusCode() != fasthttp.StatusOK
		res.u.Release()
		return bad
	}
	var prefillBad, prefillIn bool
	for {
		select {
		case res := <-pch:
			prefillIn, prefillBad = true, prefillEnded(res)
			if prefillBad {
				// Stop waiting for the decode leg (its worker waits for a
				// prefill that will not come): release it when it ends.
				go func() {
					if d := <-dch; d.u != nil {
						d.u.Release()
					}
				}()
				return r.fallback(ctx, p, body, stream, deadline, "prefill leg failed", nil)
			}
		case d := <-dch:
			if d.err == nil && d.u.StatusCode() < 500 {
				dinfo.health.ok()
				if !prefillIn {
					go func() { prefillEnded(<-pch) }()
				}
				return d.u
			}
			transport := d.err != nil
			if !transport {
				d.u.Release()
			}
			if !prefillIn {
				prefillIn, prefillBad = true, prefillEnded(<-pch)
			}
			if prefillBad || !transport {
				if transport {
					r.workerFailed(dinfo, d.err)
				}
				return r.fallback(ctx, p, body, stream, deadline, "prefill or decode leg failed", d.err)
			}
			// The decode worker failed before its first byte; the prefill
			// worker holds the KV for the room: the same leg elsewhere.
			r.notify(opFree, p.id)
			r.workerFailed(dinfo, d.err)
			if !r.decodeExcept(p, dinfo.ID) {
				r.m.proxyErrors.Inc()
				proxy.WriteError(ctx, fasthttp.StatusBadGateway, d.err.Error())
				r.setRouteHeaders(ctx, p)
				return nil
			}
			r.m.pd.retries.Inc()
			if !r.redecide(ctx, p) {
				return nil
			}
			return r.sendDecode(ctx, p, leg, body, stream, deadline, rid, 0)
		}
	}
}

// bootstrapHost is the host of a worker URL as SGLang's bootstrap_host
// reads it (an IPv6 address in brackets).
func bootstrapHost(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	h := u.Hostname()
	if net.ParseIP(h) != nil && bytes.IndexByte([]byte(h), ':') >= 0 {
		return "[" + h + "]"
	}
	return h
}

// protocolOrDefault is a worker's P/D protocol, vllm-nixl when unset.
func protocolOrDefault(p string) string {
	if p == "" {
		return plane.ProtocolVLLMNIXL
	}
	return p
}

// checkStaticPD checks a static worker's P/D settings.
func checkStaticPD(w StaticWorker) error {
	switch w.PDProtocol {
	case "", plane.ProtocolVLLMNIXL, plane.ProtocolSGLang:
	default:
		return fmt.Errorf("--worker: worker %d: pd_protocol %q: want vllm-nixl or sglang", w.ID, w.PDProtocol)
	}
	switch {
	case w.BootstrapPort < 0 || w.BootstrapPort > 65535:
		return fmt.Errorf("--worker: worker %d: bootstrap_port %d must be in [1, 65535]", w.ID, w.BootstrapPort)
	case w.BootstrapPort != 0 && w.PDProtocol != plane.ProtocolSGLang:
		return fmt.Errorf("--worker: worker %d: bootstrap_port needs pd_protocol=sglang", w.ID)
	case w.Capacity.Role > sched.RoleDecode:
		return fmt.Errorf("--worker: worker %d: role %d", w.ID, w.Capacity.Role)
	}
	return nil
}

// appendWorkerPD appends a worker's P/D fields to its /workers entry.
func appendWorkerPD(b []byte, w *workerInfo) []byte {
	b = append(b, `,"role":`...)
	b = openai.AppendJSONString(b, w.Capacity.Role.String())
	b = append(b, `,"pd_protocol":`...)
	b = openai.AppendJSONString(b, w.Protocol)
	if w.BootstrapPort != 0 {
		b = append(b, `,"bootstrap_port":`...)
		b = strconv.AppendInt(b, int64(w.BootstrapPort), 10)
	}
	b = append(b, `,"pd_capable":`...)
	return strconv.AppendBool(b, !w.pd.incapable.Load())
}

// appendPair appends /route's pair fields: "prefill" (null when served on
// the decode worker alone), "decode" and "disagg_rule"; with explain, the
// prefill pool's candidates.
func (r *Router) appendPair(b []byte, p *pending) []byte {
	t := r.table.Load()
	leg := func(b []byte, d *sched.Decision) []byte {
		b = append(b, `{"worker_id":`...)
		b = strconv.AppendUint(b, d.Worker.Worker, 10)
		b = append(b, `,"dp_rank":`...)
		b = strconv.AppendUint(b, uint64(d.Worker.Dp), 10)
		b = append(b, `,"url":`...)
		u := ""
		if w := t.byID[d.Worker.Worker]; w != nil {
			u = w.URL
		}
		b = openai.AppendJSONString(b, u)
		b = append(b, `,"overlap_blocks":`...)
		b = strconv.AppendUint(b, uint64(d.Overlap), 10)
		return append(b, '}')
	}
	b = append(b, `,"prefill":`...)
	if p.remote() {
		b = leg(b, &p.pd.pre)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"decode":`...)
	b = leg(b, &p.dec)
	b = append(b, `,"disagg_rule":`...)
	b = openai.AppendJSONString(b, p.pd.rule.String())
	if p.explain && len(p.pd.pcands) > 0 {
		b = append(b, `,"prefill_candidates":[`...)
		for i := range p.pd.pcands {
			if i > 0 {
				b = append(b, ',')
			}
			b = r.appendCandidateRole(b, &p.pd.pcands[i], true)
		}
		b = append(b, ']')
	}
	return b
}

// appendCandidateRole is appendCandidate with, in a fleet with prefill
// workers (withRole), the rank's "role" last.
func (r *Router) appendCandidateRole(b []byte, c *sched.Candidate, withRole bool) []byte {
	b = appendCandidate(b, c)
	if !withRole {
		return b
	}
	role := sched.RoleBoth
	if w := r.table.Load().byID[c.Worker.Worker]; w != nil {
		role = w.Capacity.Role
	}
	b = append(b[:len(b)-1], `,"role":`...)
	b = openai.AppendJSONString(b, role.String())
	return append(b, '}')
}
