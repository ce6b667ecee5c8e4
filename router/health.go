package router

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/proxy"
)

// workerHealth is a worker's passive health (Envoy's outlier detection,
// consecutive gateway failures): handlers count its consecutive transport
// failures and the one that reaches Config.EjectAfter marks it down and has
// the batcher take it out of the scheduler; a prober then asks its
// GET /health on a doubling backoff until it answers, and the batcher puts it
// back. The pointer is shared by every table snapshot of the worker.
type workerHealth struct {
	fails atomic.Int32 // consecutive transport failures
	down  atomic.Bool  // set by the ejecting handler, cleared by the batcher

	// Batcher-owned.
	since     time.Time     // down since
	forgotten bool          // its index entries were dropped (down > ForgetAfter)
	stop      chan struct{} // closed to stop the prober
}

// ok records a request that reached the worker.
func (h *workerHealth) ok() {
	if h.fails.Load() != 0 {
		h.fails.Store(0)
	}
}

// workerFailed records a transport failure of a request to w (it could not
// be dialed, gave no first byte in time, or closed the connection before its
// answer) and ejects w when the failures reach Config.EjectAfter.
func (r *Router) workerFailed(w *workerInfo, err error) {
	switch {
	case errors.Is(err, proxy.ErrFirstByteTimeout):
		r.m.firstByteTimeouts.Inc()
	case errors.Is(err, proxy.ErrResponseTimeout):
		r.m.responseTimeouts.Inc()
	}
	h := w.health
	if int(h.fails.Add(1)) < r.cfg.EjectAfter || !h.down.CompareAndSwap(false, true) {
		return
	}
	r.m.ejections.Inc()
	r.post(func() { r.eject(w, err) })
}

// eject takes a worker marked down out of the scheduler (its active
// requests are dropped; its index entries stay, for when it comes back),
// gives up on the requests it holds that have had no byte of their answer
// yet (proxy.Proxy.Abandon: their handlers send them elsewhere), and starts
// its prober. Batcher goroutine.
func (r *Router) eject(w *workerInfo, err error) {
	cur, ok := r.b.workers[w.ID]
	if !ok || cur.health != w.health || w.health.stop != nil {
		return // left since, or already ejected
	}
	h := w.health
	h.since = time.Now()
	h.forgotten = false
	h.stop = make(chan struct{})
	r.s.RemoveWorker(w.ID, r.now())
	r.b.down[w.ID] = h
	r.publishTable()
	abandoned := r.proxy.Abandon(w.URL)
	r.cfg.Logger.Warn("worker down: taken out of routing until it answers GET /health",
		"worker", w.ID, "url", w.URL, "static", w.Static, "consecutive_failures", h.fails.Load(), "err", err,
		"waiting_requests_resent", abandoned, "first_probe_in", r.cfg.ProbeInterval)
	go r.probe(w.ID, w.URL, h, h.stop)
}

// probe asks a down worker's GET /health on a doubling backoff
// (Config.ProbeInterval up to ProbeMaxInterval) until it answers 2xx, then
// has the batcher put it back. stop is h.stop (h's fields are the
// batcher's).
func (r *Router) probe(id uint64, url string, h *workerHealth, stop <-chan struct{}) {
	wait := r.cfg.ProbeInterval
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-r.stop:
			return
		case <-t.C:
		}
		if err := r.probeOnce(url); err == nil {
			r.post(func() { r.recover(id, h) })
			return
		}
		wait = min(2*wait, r.cfg.ProbeMaxInterval)
		t.Reset(wait)
	}
}

func (r *Router) probeOnce(url string) error {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(url + "/health")
	req.Header.SetMethod(fasthttp.MethodGet)
	if err := r.probeClient.DoTimeout(req, resp, r.cfg.ProbeTimeout); err != nil {
		return err
	}
	if c := resp.StatusCode(); c < 200 || c > 299 {
		return errors.New("health check answered " + fasthttp.StatusMessage(c))
	}
	return nil
}

// recover puts a worker that answered its health check back into the
// scheduler. Batcher goroutine.
func (r *Router) recover(id uint64, h *workerHealth) {
	w, ok := r.b.workers[id]
	if !ok || w.health != h || h.stop == nil {
		return
	}
	close(h.stop)
	h.stop = nil
	delete(r.b.down, id)
	for _, rank := range w.Ranks {
		r.s.AddWorker(wire.WorkerKey{Worker: id, Dp: rank}, w.Capacity)
	}
	h.fails.Store(0)
	h.down.Store(false)
	r.m.recoveries.Inc()
	r.publishTable()
	r.cfg.Logger.Info("worker up: back in routing", "worker", id, "url", w.URL,
		"down_for", time.Since(h.since).Round(time.Millisecond), "index_kept", !h.forgotten)
}

// stopProbe ends a leaving worker's prober. Batcher goroutine.
func (r *Router) stopProbe(id uint64) {
	if h, ok := r.b.down[id]; ok {
		close(h.stop)
		h.stop = nil
		delete(r.b.down, id)
	}
}

// forgetDown drops the index entries of workers down longer than
// Config.ForgetAfter: a worker gone that long most likely restarted with an
// empty cache. Batcher goroutine, from tick.
func (r *Router) forgetDown(now time.Time) {
	for id, h := range r.b.down {
		if !h.forgotten && now.Sub(h.since) >= r.cfg.ForgetAfter {
			h.forgotten = true
			_, _ = r.ix.RemoveWorker(id)
			r.cfg.Logger.Warn("worker still down: its KV blocks are dropped from the index",
				"worker", id, "down_for", now.Sub(h.since).Round(time.Second))
		}
	}
}

// allowedExcept restricts p to the routable workers' ranks but the given
// worker's, within p's existing restriction (its model) if it has one; it
// reports whether any rank is left.
func (r *Router) allowedExcept(p *pending, worker uint64) bool {
	t := r.table.Load()
	if len(p.allowed) > 0 {
		// Already restricted (the request's model): keep that restriction,
		// less the failed worker and workers that went down since.
		kept := p.allowed[:0]
		for _, k := range p.allowed {
			if w := t.byID[k.Worker]; k.Worker != worker && w != nil && !w.health.down.Load() {
				kept = append(kept, k)
			}
		}
		p.allowed = kept
		return len(kept) > 0
	}
	for _, id := range t.ids {
		w := t.byID[id]
		if id == worker || w.health.down.Load() {
			continue
		}
		for _, rank := range w.Ranks {
			p.allowed = append(p.allowed, wire.WorkerKey{Worker: id, Dp: rank})
		}
	}
	return len(p.allowed) > 0
}
