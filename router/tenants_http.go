package router

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/internal/promtext"
	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/wire/proxy"
)

// tenantFamilies are the per-tenant and per-class families (routerFamilies
// lists them).
var tenantFamilies = []promtext.Family{
	{Name: "kvroute_tenant_requests_total", Type: promtext.Counter, Help: "Requests by tenant, priority class and outcome: routed (at once or from the queue), queued, shed (429 or 503 from the queue bounds, or evicted by a higher class), rate_limited (429 from the tenant's token bucket)"},
	{Name: "kvroute_tenant_prompt_tokens_total", Type: promtext.Counter, Help: "Prompt tokens routed, by tenant and priority class"},
	{Name: "kvroute_tenant_queue_wait_seconds_total", Type: promtext.Counter, Help: "Time routed requests spent from arrival to their decision, by tenant and priority class (÷ routed = mean wait)"},
	{Name: "kvroute_tenant_ttft_seconds_total", Type: promtext.Counter, Help: "Time from arrival to first token, summed over streamed and plain answers, by tenant and priority class (÷ routed = mean TTFT)"},
}

// tenantMetrics are the per-tenant, per-class counters, created on first
// use in a set of their own and cached by key, so counting allocates
// nothing after a tenant's first requests.
type tenantMetrics struct {
	set *metrics.Set
	mu  sync.Mutex
	c   map[tenantKey]*metrics.Counter
	f   map[tenantKey]*metrics.FloatCounter
}

type tenantKey struct {
	kind, outcome string
	tenant        uint32
	class         sched.Class
}

func (m *tenantMetrics) counter(kind string, who *identity, outcome string) *metrics.Counter {
	k := tenantKey{kind: kind, outcome: outcome, tenant: who.tenant, class: who.class}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c := m.c[k]; c != nil {
		return c
	}
	c := m.newCounter(kind, who, outcome)
	m.c[k] = c
	return c
}

func (m *tenantMetrics) newCounter(kind string, who *identity, outcome string) *metrics.Counter {
	name := who.name
	if name == "" {
		name = "default"
	}
	lbl := fmt.Sprintf(`{tenant=%q,class=%q`, name, who.class)
	if outcome != "" {
		lbl += fmt.Sprintf(`,outcome=%q`, outcome)
	}
	return m.set.GetOrCreateCounter(kind + lbl + "}")
}

func (m *tenantMetrics) seconds(kind string, who *identity) *metrics.FloatCounter {
	k := tenantKey{kind: kind, tenant: who.tenant, class: who.class}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c := m.f[k]; c != nil {
		return c
	}
	name := who.name
	if name == "" {
		name = "default"
	}
	c := m.set.GetOrCreateFloatCounter(fmt.Sprintf(`%s{tenant=%q,class=%q}`, kind, name, who.class))
	m.f[k] = c
	return c
}

// initTenants reads --tenants (errors name the line) and hands the weights
// to the scheduler (New: before the batcher runs).
func (r *Router) initTenants() error {
	t, err := newTenants(r.cfg.TenantsPath, r.epoch)
	if err != nil {
		return err
	}
	r.ten = t
	r.tm.set = metrics.NewSet()
	r.tm.c = map[tenantKey]*metrics.Counter{}
	r.tm.f = map[tenantKey]*metrics.FloatCounter{}
	for id, w := range t.weights() {
		if err := r.s.SetTenant(id, w); err != nil {
			return err
		}
	}
	return nil
}

// watchTenants re-reads --tenants every second while the router runs; a
// file that fails validation is logged and the last good one kept.
func (r *Router) watchTenants() {
	if r.cfg.TenantsPath == "" {
		return
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-tick.C:
		}
		changed, err := r.ten.reload(false)
		if err != nil {
			r.cfg.Logger.Warn("tenants file not reloaded; the last good one stays", "err", err)
			continue
		}
		if !changed {
			continue
		}
		if w := r.ten.weights(); w != nil {
			_ = r.call(func() {
				for id, x := range w {
					_ = r.s.SetTenant(id, x)
				}
			}, time.Second)
		}
		r.cfg.Logger.Info("tenants file reloaded", "path", r.cfg.TenantsPath)
	}
}

// critical reports whether the request is critical by its headers (its
// priority, or its tenant's class): such a request is not turned away by
// the all-workers-busy window (it goes ahead of every queued request of a
// lower class). Called only while the window is open.
// A request turned away is counted as shed for its tenant (by header or
// key; its model is not read yet).
func (r *Router) critical(ctx *fasthttp.RequestCtx) bool {
	who, err := r.ten.identify(&ctx.Request.Header, nil)
	if err == nil && who.class == sched.ClassCritical {
		return true
	}
	r.tm.counter("kvroute_tenant_requests_total", &who, "shed").Inc()
	return false
}

// identify fills p's identity and charges its prompt to the tenant's
// bucket; it answers (400 for a bad header, 429 over the rate) and returns
// false when the request goes no further.
func (r *Router) identify(ctx *fasthttp.RequestCtx, p *pending, model []byte, tokens int) bool {
	who, err := r.ten.identify(&ctx.Request.Header, model)
	if err != nil {
		badRequest(ctx, err)
		return false
	}
	p.who = who
	if ok, retry := r.ten.take(who.tenant, uint32(min(tokens, math.MaxUint32)), time.Now()); !ok {
		r.tm.counter("kvroute_tenant_requests_total", &who, "rate_limited").Inc()
		proxy.WriteError(ctx, fasthttp.StatusTooManyRequests, fmt.Sprintf(
			"tenant %q is over its rate limit of prompt tokens (--tenants); retry after %v", who.name, retry.Round(time.Millisecond)))
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(retry.Seconds())))))
		return false
	}
	return true
}

// counted records a decided request's outcome for its tenant and class.
func (r *Router) counted(p *pending, err error, arrived time.Time) {
	switch err {
	case nil:
		r.tm.counter("kvroute_tenant_requests_total", &p.who, "routed").Inc()
		r.tm.counter("kvroute_tenant_prompt_tokens_total", &p.who, "").Add(int(p.isl))
		r.tm.seconds("kvroute_tenant_queue_wait_seconds_total", &p.who).Add(time.Since(arrived).Seconds())
	case ErrAllBusy, ErrQueueWait, ErrQueueFull, ErrQueueTimeout, ErrEvicted:
		r.tm.counter("kvroute_tenant_requests_total", &p.who, "shed").Inc()
	}
}

// TenantsAnswer is GET /tenants.
type TenantsAnswer struct {
	Tenants []TenantInfo `json:"tenants"`
	// Running is the active requests per class.
	Running  map[string]int `json:"running"`
	Sessions int            `json:"sessions"`
}

// Tenants returns every tenant's weight, limits, waiting requests and
// share of the prompt tokens served, as the scheduler has them.
func (r *Router) Tenants() (TenantsAnswer, error) {
	var (
		shares []sched.TenantShare
		ans    = TenantsAnswer{Running: map[string]int{}}
	)
	err := r.call(func() {
		shares = r.s.AppendTenants(nil)
		for _, c := range []sched.Class{sched.ClassCritical, sched.ClassStandard, sched.ClassSheddable} {
			ans.Running[c.String()] = r.s.Running(c)
		}
		ans.Sessions = r.s.Sessions()
	}, 2*time.Second)
	if err != nil {
		return ans, err
	}
	ans.Tenants = r.ten.appendInfo(nil, shares, time.Now())
	for i := range ans.Tenants {
		if ans.Tenants[i].Name == "" {
			ans.Tenants[i].Name = "default"
		}
	}
	return ans, nil
}

// appendTenantShares appends /workers' "tenants" member: each tenant's
// name, waiting requests per class and share of the prompt tokens served.
func (r *Router) appendTenantShares(b []byte) []byte {
	ans, err := r.Tenants()
	if err != nil {
		return b
	}
	type share struct {
		Name    string  `json:"name"`
		Waiting [3]int  `json:"waiting"`
		Share   float64 `json:"share"`
	}
	out := make([]share, 0, len(ans.Tenants))
	for _, t := range ans.Tenants {
		out = append(out, share{Name: t.Name, Waiting: t.Waiting, Share: t.Share})
	}
	j, err := json.Marshal(out)
	if err != nil {
		return b
	}
	return append(append(b, `,"tenants":`...), j...)
}

func tenantsHandler(s *Service) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		ans, err := s.Router.Tenants()
		if err != nil {
			http.Error(w, `{"error":{"message":"the scheduler does not answer"}}`, http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(ans)
	}
}
