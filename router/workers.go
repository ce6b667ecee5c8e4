package router

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/openai"
	"github.com/kvroute/kvroute/wire/plane"
	"github.com/kvroute/kvroute/wire/proxy"
)

// workerInfo is what the router knows of a worker besides its load. Values
// in a published table are never modified.
type workerInfo struct {
	ID  uint64
	URL string
	// Models the worker serves; empty when it declares none (it is then a
	// candidate for every model).
	Models    []string
	Ranks     []uint32
	Capacity  sched.Capacity
	Static    bool
	Transport string
	// MaxModelLen is the registration's max_model_len (0: not declared).
	MaxModelLen int
	Joined      time.Time
	health      *workerHealth // shared by every snapshot of the worker
	// Disaggregated serving: Capacity.Role is the role routed by (both
	// once pd.incapable is set), Protocol and BootstrapPort as declared.
	Protocol      string
	BootstrapPort int
	pd            *pdState // shared by every snapshot of the worker
	// Source is what set a static worker besides --worker (Router.SetEndpoints).
	Source string
}

// workerTable is an immutable snapshot of the workers, read by handlers.
type workerTable struct {
	byID map[uint64]*workerInfo
	ids  []uint64 // sorted
	// models maps each model some worker declares to the dp ranks that may
	// serve it: its workers' and those of workers declaring no model. Nil
	// when no worker declares a model (requests are not restricted).
	models map[string]modelRanks
	// anyModel are the ranks of workers that declare no model: the only
	// candidates for a model no worker declares.
	anyModel []wire.WorkerKey
	list     []openai.Model // GET /v1/models, sorted by id
	// maxPrompt is the longest prompt accepted, in tokens: the largest
	// of the workers' prompt limits (promptLimit), bounded by the largest
	// declared KV capacity. Prompts are tokenized up to it.
	maxPrompt int
	// promptLimit is each worker's longest prompt: --max-prompt-tokens or
	// DefaultMaxPromptTokens, lowered (with the flag) or replaced (without
	// it) by the max_model_len it declares. A longer prompt goes only to
	// workers it fits (fitPrompt): a worker declaring a huge context raises
	// the limit for the requests routed to it, not for everyone.
	promptLimit map[uint64]int
	minPrompt   int // the smallest promptLimit
	// minCap is the smallest declared per-rank KV capacity, in blocks (0:
	// none declared): a longer prompt goes only to ranks it fits
	// (fitCapacity).
	minCap uint64
	// byAddr and addrOf map "host:port" to worker ids and back (indexAddrs).
	byAddr map[string]uint64
	addrOf map[uint64]string
}

// fitCapacity keeps a prompt of more blocks than some rank's declared
// capacity away from that rank, so that no booking exceeds a rank's
// capacity in the scheduler's accounting (unbounded, 983,040 blocks were
// booked on workers of 16,384, marking the fleet busy). The fast path
// (a prompt within every rank's capacity) does nothing.
func (t *workerTable) fitCapacity(p *pending) error {
	n := uint64(len(p.seq))
	if t.minCap == 0 || n <= t.minCap {
		return nil
	}
	return t.fitCapacitySlow(p, n)
}

func (t *workerTable) fitCapacitySlow(p *pending, n uint64) error {
	fits := func(id uint64) bool {
		w := t.byID[id]
		return w == nil || w.Capacity.TotalBlocks == 0 || n <= w.Capacity.TotalBlocks
	}
	if p.override.PinnedSet {
		if !fits(p.override.Pinned.Worker) {
			return fieldErr("overrides.worker_id", "worker %d has %d KV blocks per rank, fewer than the prompt's %d",
				p.override.Pinned.Worker, t.byID[p.override.Pinned.Worker].Capacity.TotalBlocks, n)
		}
		return nil
	}
	if len(p.allowed) > 0 {
		p.allowed = slices.DeleteFunc(p.allowed, func(k wire.WorkerKey) bool { return !fits(k.Worker) })
	} else {
		for _, id := range t.ids {
			if fits(id) {
				for _, rank := range t.byID[id].Ranks {
					p.allowed = append(p.allowed, wire.WorkerKey{Worker: id, Dp: rank})
				}
			}
		}
	}
	if len(p.allowed) == 0 {
		return fieldErr("prompt", "a prompt of %d blocks fits no allowed worker's KV cache", n)
	}
	return nil
}

// fitPrompt keeps a prompt of n tokens away from the workers whose prompt
// limit it exceeds (within p's restriction, if any); it reports false, with
// the largest limit among the workers considered, when none is left. The
// fast path (a prompt within every worker's limit) does nothing.
func (t *workerTable) fitPrompt(p *pending, n int) (bool, int) {
	if n <= t.minPrompt {
		return true, 0
	}
	return t.fitPromptSlow(p, n)
}

func (t *workerTable) fitPromptSlow(p *pending, n int) (bool, int) {
	largest := 0
	fits := func(id uint64) bool {
		l, ok := t.promptLimit[id]
		if !ok {
			return true // left since: the decision will not pick it
		}
		largest = max(largest, l)
		return n <= l
	}
	if p.override.PinnedSet {
		return fits(p.override.Pinned.Worker), largest
	}
	if len(p.allowed) > 0 {
		p.allowed = slices.DeleteFunc(p.allowed, func(k wire.WorkerKey) bool { return !fits(k.Worker) })
	} else {
		for _, id := range t.ids {
			if fits(id) {
				for _, rank := range t.byID[id].Ranks {
					p.allowed = append(p.allowed, wire.WorkerKey{Worker: id, Dp: rank})
				}
			}
		}
	}
	return len(p.allowed) > 0, largest
}

// modelRanks are the ranks that may serve one model.
type modelRanks struct {
	ranks []wire.WorkerKey
	all   bool // every rank of the fleet: no restriction needed
}

// ranksFor returns the ranks a request for model may go to: restrict is
// false when any rank may (no model named, no worker declaring models, or
// every worker serving it); ok is false when no worker serves model.
func (t *workerTable) ranksFor(model []byte) (ranks []wire.WorkerKey, restrict, ok bool) {
	if len(model) == 0 || t.models == nil {
		return nil, false, true
	}
	if m, found := t.models[string(model)]; found {
		return m.ranks, !m.all, true
	}
	return t.anyModel, true, len(t.anyModel) > 0
}

// publishTable publishes a snapshot of the batcher's worker map.
func (r *Router) publishTable() {
	t := &workerTable{byID: make(map[uint64]*workerInfo, len(r.b.workers))}
	for id, w := range r.b.workers {
		t.byID[id] = w
		t.ids = append(t.ids, id)
	}
	slices.Sort(t.ids)
	created := map[string]int64{}
	nranks := 0
	for _, id := range t.ids {
		w := t.byID[id]
		nranks += len(w.Ranks)
		if len(w.Models) == 0 {
			for _, rank := range w.Ranks {
				t.anyModel = append(t.anyModel, wire.WorkerKey{Worker: id, Dp: rank})
			}
		}
		for _, m := range w.Models {
			if c, ok := created[m]; !ok || w.Joined.Unix() < c {
				created[m] = w.Joined.Unix()
			}
		}
	}
	if len(created) > 0 {
		t.models = make(map[string]modelRanks, len(created))
		for m, c := range created {
			var ranks []wire.WorkerKey
			for _, id := range t.ids {
				w := t.byID[id]
				if len(w.Models) == 0 || slices.Contains(w.Models, m) {
					for _, rank := range w.Ranks {
						ranks = append(ranks, wire.WorkerKey{Worker: id, Dp: rank})
					}
				}
			}
			t.models[m] = modelRanks{ranks: ranks, all: len(ranks) == nranks}
			t.list = append(t.list, openai.Model{ID: m, Created: c, OwnedBy: "kvroute"})
		}
		slices.SortFunc(t.list, func(a, b openai.Model) int { return strings.Compare(a.ID, b.ID) })
	}
	base := r.cfg.MaxPromptTokens
	if base == 0 {
		base = DefaultMaxPromptTokens
	}
	t.promptLimit = make(map[uint64]int, len(t.byID))
	t.maxPrompt, t.minPrompt = 0, 0
	for i, id := range t.ids {
		l := base
		if d := t.byID[id].MaxModelLen; d > 0 && (r.cfg.MaxPromptTokens == 0 || d < l) {
			l = d
		}
		t.promptLimit[id] = l
		t.maxPrompt = max(t.maxPrompt, l)
		if i == 0 || l < t.minPrompt {
			t.minPrompt = l
		}
	}
	if len(t.ids) == 0 {
		t.maxPrompt, t.minPrompt = base, base
	}
	// A prompt needing more blocks than the largest rank's KV cache can
	// never be served, and its booking would mark every worker busy for
	// the request's lifetime: bound it by the largest declared
	// capacity when every worker declares one.
	var largest uint64
	for _, w := range t.byID {
		if c := w.Capacity.TotalBlocks; c > 0 && (t.minCap == 0 || c < t.minCap) {
			t.minCap = c
		}
	}
	for _, w := range t.byID {
		if w.Capacity.TotalBlocks == 0 {
			largest = 0
			break
		}
		largest = max(largest, w.Capacity.TotalBlocks)
	}
	if bs := uint64(r.cfg.Sched.BlockSize); largest > 0 && largest*bs < uint64(t.maxPrompt) {
		t.maxPrompt = int(largest * bs)
	}
	t.indexAddrs()
	r.table.Store(t)
	r.nworkers.Store(int32(r.s.Workers()))
}

func (r *Router) addStatic(w StaticWorker) {
	ranks := w.DpRanks
	if len(ranks) == 0 {
		ranks = []uint32{0}
	}
	info := &workerInfo{ID: w.ID, URL: w.URL, Ranks: slices.Clone(ranks), Capacity: w.Capacity, Static: true, Joined: time.Now(), health: new(workerHealth),
		Protocol: protocolOrDefault(w.PDProtocol), BootstrapPort: w.BootstrapPort, pd: new(pdState)}
	if w.Model != "" {
		info.Models = []string{w.Model}
	}
	r.b.workers[w.ID] = info
	for _, rank := range ranks {
		r.s.AddWorker(wire.WorkerKey{Worker: w.ID, Dp: rank}, w.Capacity)
	}
}

// SubscribeNATS subscribes to the control plane: worker registrations and
// withdrawals, load metrics, and other replicas' AllWorkersBusy messages.
// The subscriptions end when nc is closed or drained.
func (r *Router) SubscribeNATS(nc *nats.Conn) error {
	subs := []struct {
		subject string
		h       nats.MsgHandler
	}{
		{r.cfg.Subjects.Heartbeat, r.onHeartbeat},
		{r.cfg.Subjects.Leave, r.onLeave},
		{r.cfg.Subjects.Load, r.onLoad},
		{r.cfg.Subjects.AllBusy, r.onAllBusy},
	}
	for _, s := range subs {
		if _, err := nc.Subscribe(s.subject, s.h); err != nil {
			return fmt.Errorf("subscribe %s: %w", s.subject, err)
		}
	}
	if r.cfg.Sync {
		if err := r.startSync(nc); err != nil {
			return fmt.Errorf("--router-replica-sync: %w", err)
		}
	}
	return nc.Flush()
}

func (r *Router) onHeartbeat(m *nats.Msg) {
	var reg plane.Registration
	if err := plane.Decode(m.Data, &reg); err != nil {
		r.m.controlErrors.Inc()
		r.cfg.Logger.Warn("bad worker registration", "err", err)
		return
	}
	if err := reg.ValidateRanks(r.cfg.MaxDpRanks); err != nil {
		r.refuse(refRegInvalid, "worker registration refused", "worker", reg.WorkerID, "err", err)
		return
	}
	r.post(func() {
		if w, ok := r.b.workers[reg.WorkerID]; ok && w.Static {
			if w.URL != reg.URL {
				r.refuse(refRegConflict, "worker registration refused: the id is a static worker's (--worker)",
					"worker", reg.WorkerID, "url", reg.URL, "static_url", w.URL)
			}
			return // a static worker is configured, not registered
		}
		if err := r.b.registry.Check(&reg); err != nil {
			why := refRegConflict
			if errors.Is(err, plane.ErrFull) {
				why = refTooManyWorkers
			}
			r.refuse(why, "worker registration refused", "worker", reg.WorkerID, "url", reg.URL, "instance", reg.Instance, "err", err)
			return
		}
		if reg.BlockSize != r.cfg.Sched.BlockSize {
			r.m.sizeMismatch.Inc()
			r.m.refused[refRegBlockSize].Inc()
			r.cfg.Logger.Error("worker registration rejected: block size mismatch",
				"worker", reg.WorkerID, "worker_block_size", reg.BlockSize, "router_block_size", r.cfg.Sched.BlockSize,
				"fix", fmt.Sprintf("start the router with --block-size %d or the engine with block size %d", reg.BlockSize, r.cfg.Sched.BlockSize))
			if _, known := r.b.registry.Get(reg.WorkerID); known { // same URL (Check): the worker itself changed
				r.b.changes = r.b.registry.Remove(reg.WorkerID, r.b.changes[:0])
				r.applyChanges()
			}
			return
		}
		var err error
		r.b.changes, err = r.b.registry.Heartbeat(reg, time.Now(), r.b.changes[:0])
		if err != nil { // Check passed on this goroutine: unreachable
			r.refuse(refRegConflict, "worker registration refused", "worker", reg.WorkerID, "err", err)
			return
		}
		r.applyChanges()
	})
}

// onLeave removes a worker that withdrew, if the withdrawal names its live
// URL and instance id (plane.Registry.Leave): a forged one is refused.
func (r *Router) onLeave(m *nats.Msg) {
	var reg plane.Registration
	if err := plane.Decode(m.Data, &reg); err != nil {
		r.m.controlErrors.Inc()
		return
	}
	r.post(func() {
		var err error
		r.b.changes, err = r.b.registry.Leave(reg, r.b.changes[:0])
		if err != nil {
			r.refuse(refLeaveMismatch, "worker withdrawal refused", "worker", reg.WorkerID, "url", reg.URL, "instance", reg.Instance, "err", err)
			return
		}
		r.applyChanges()
	})
}

func (r *Router) onLoad(m *nats.Msg) {
	var l plane.Load
	if err := plane.Decode(m.Data, &l); err != nil {
		r.m.controlErrors.Inc()
		return
	}
	r.post(func() {
		key := wire.WorkerKey{Worker: l.WorkerID, Dp: l.DpRank}
		_ = r.s.ReportLoad(key, sched.Load{UsedBlocks: uint64(max(l.KVUsed, 0)), Waiting: uint64(max(l.Waiting, 0))}, r.now())
	})
}

// onAllBusy honours another replica's AllWorkersBusy if it comes from a
// peer (Config.Peers), for the message's window clamped to this router's
// (sched.Config.RejectionWindow) and counted from the message's time
// (clamped to [now - window, now]): forged or replayed messages cannot
// keep the window open longer than one window after a real overflow.
func (r *Router) onAllBusy(m *nats.Msg) {
	var b plane.AllWorkersBusy
	if err := plane.Decode(m.Data, &b); err != nil {
		r.m.controlErrors.Inc()
		return
	}
	if b.Router == r.cfg.ID {
		return
	}
	if !r.peer(b.Router) {
		r.refuse(refBusyUnknown, "all-workers-busy from a router that is not a peer ignored (--router-peers)", "router", b.Router)
		return
	}
	own := int64(r.cfg.Sched.RejectionWindow)
	win := own
	if b.WindowMillis > 0 {
		win = min(own, b.WindowMillis*int64(time.Millisecond))
	}
	age := time.Now().UnixNano() - b.AtUnixNano
	if b.AtUnixNano == 0 || age < 0 {
		age = 0 // unknown or ahead of this clock: from now
	}
	if age >= win {
		r.refuse(refBusyStale, "all-workers-busy whose window already ended ignored", "router", b.Router, "age", time.Duration(age))
		return
	}
	r.m.remoteBusy.Inc()
	r.post(func() {
		// sched opens [at, at+own): start it so that it ends at age+win from now.
		r.s.ObserveAllWorkersBusy(r.now() - age - (own - win))
	})
}

// peer reports whether id is a replica whose AllWorkersBusy is honoured.
func (r *Router) peer(id string) bool {
	for _, p := range r.cfg.Peers {
		if p == "*" || p == id {
			return true
		}
	}
	return false
}

// ObserveAllWorkersBusy opens the rejection window as if another replica
// had published an AllWorkersBusy message.
func (r *Router) ObserveAllWorkersBusy() {
	_ = r.call(func() { r.s.ObserveAllWorkersBusy(r.now()) }, 5*time.Second)
}

// applyChanges acts on the registry's changes in r.b.changes.
func (r *Router) applyChanges() {
	if len(r.b.changes) == 0 {
		return
	}
	now := r.now()
	for _, c := range r.b.changes {
		id := c.Reg.WorkerID
		switch c.Kind {
		case plane.Joined, plane.Updated, plane.Restarted:
			ranks := c.Reg.DpRanks
			if len(ranks) == 0 {
				ranks = []uint32{0}
			}
			capa := sched.Capacity{TotalBlocks: uint64(max(c.Reg.KVBlocks, 0)), MaxBatchedTokens: uint64(max(c.Reg.MaxBatchedTokens, 0))}
			capa.Role, _ = sched.ParseRole(c.Reg.Role) // Validate checked it
			health, pds := new(workerHealth), new(pdState)
			if old, ok := r.b.workers[id]; ok {
				health, pds = old.health, old.pd
				if c.Kind == plane.Restarted { // a new engine instance may have its KV connector now
					pds = new(pdState)
				}
				for _, rank := range old.Ranks {
					if !slices.Contains(ranks, rank) {
						r.s.RemoveRank(wire.WorkerKey{Worker: id, Dp: rank}, now)
						_, _ = r.ix.RemoveDpRank(wire.WorkerKey{Worker: id, Dp: rank})
					}
				}
			}
			if pds.incapable.Load() { // no KV connector: served aggregated (pd.go)
				capa.Role = sched.RoleBoth
			}
			if !health.down.Load() { // a down worker's heartbeats keep it known, not routable
				for _, rank := range ranks {
					r.s.AddWorker(wire.WorkerKey{Worker: id, Dp: rank}, capa)
				}
			}
			joined := time.Now()
			if old, ok := r.b.workers[id]; ok {
				joined = old.Joined
			}
			var models []string
			if c.Reg.Model != "" {
				models = []string{c.Reg.Model}
			}
			r.b.workers[id] = &workerInfo{ID: id, URL: c.Reg.URL, Models: models, Ranks: slices.Clone(ranks),
				Capacity: capa, Transport: c.Reg.EventTransport, MaxModelLen: c.Reg.MaxModelLen, Joined: joined, health: health,
				Protocol: c.Reg.ProtocolOrDefault(), BootstrapPort: c.Reg.BootstrapPort, pd: pds}
			switch c.Kind {
			case plane.Joined:
				r.m.joined.Inc()
				r.cfg.Logger.Info("worker joined", "worker", id, "url", c.Reg.URL, "ranks", ranks, "events", c.Reg.EventTransport, "instance", c.Reg.Instance)
			case plane.Restarted:
				r.cfg.Logger.Info("worker restarted (new instance id)", "worker", id, "url", c.Reg.URL, "instance", c.Reg.Instance)
			}
			if r.hooks.WorkerJoined != nil {
				r.hooks.WorkerJoined(c.Reg)
			}
		case plane.Left, plane.Expired:
			r.removeWorker(id, now)
			if c.Kind == plane.Expired {
				r.m.expiredWorkers.Inc()
			} else {
				r.m.left.Inc()
			}
			r.cfg.Logger.Info("worker removed", "worker", id, "why", c.Kind.String())
		}
	}
	r.publishTable()
}

// removeWorker drops a worker from the scheduler, the index and the table.
func (r *Router) removeWorker(id uint64, now int64) {
	r.s.RemoveWorker(id, now)
	_, _ = r.ix.RemoveWorker(id)
	delete(r.b.workers, id)
	r.stopProbe(id)
	r.forgetVerify(id)
	if r.hooks.WorkerLeft != nil {
		r.hooks.WorkerLeft(id)
	}
}

// workers answers GET /workers: every worker with its ranks, load and
// health, read from the batcher.
func (r *Router) workers(ctx *fasthttp.RequestCtx) {
	var loads []sched.WorkerLoad
	if err := r.call(func() { loads = r.s.AppendLoads(nil, nil, r.now()) }, 2*time.Second); err != nil {
		proxy.WriteError(ctx, fasthttp.StatusServiceUnavailable, err.Error())
		return
	}
	t := r.table.Load()
	byWorker := map[uint64][]sched.WorkerLoad{}
	for _, l := range loads {
		byWorker[l.Worker.Worker] = append(byWorker[l.Worker.Worker], l)
	}
	b := append([]byte(nil), `{"workers":[`...)
	for i, id := range t.ids {
		w := t.byID[id]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"worker_id":`...)
		b = strconv.AppendUint(b, id, 10)
		b = append(b, `,"url":`...)
		b = openai.AppendJSONString(b, w.URL)
		b = append(b, `,"model":`...)
		if len(w.Models) > 0 {
			b = openai.AppendJSONString(b, w.Models[0])
		} else {
			b = append(b, `""`...)
		}
		b = append(b, `,"models":[`...)
		for j, m := range w.Models {
			if j > 0 {
				b = append(b, ',')
			}
			b = openai.AppendJSONString(b, m)
		}
		b = append(b, ']')
		b = append(b, `,"static":`...)
		b = strconv.AppendBool(b, w.Static)
		b = appendWorkerPD(b, w)
		b = append(b, `,"event_transport":`...)
		b = openai.AppendJSONString(b, w.Transport)
		b = append(b, `,"uptime_seconds":`...)
		b = strconv.AppendFloat(b, time.Since(w.Joined).Round(time.Millisecond).Seconds(), 'f', 3, 64)
		health := "ok"
		ranks := byWorker[id]
		switch {
		case w.health.down.Load():
			health = "down"
		case len(ranks) > 0 && ranks[0].WorkerBusy:
			health = "busy"
		}
		b = append(b, `,"health":`...)
		b = openai.AppendJSONString(b, health)
		b = append(b, `,"ranks":[`...)
		for j, l := range ranks {
			if j > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"dp_rank":`...)
			b = strconv.AppendUint(b, uint64(l.Worker.Dp), 10)
			b = append(b, `,"requests":`...)
			b = strconv.AppendInt(b, int64(l.Requests), 10)
			b = append(b, `,"active_blocks":`...)
			b = strconv.AppendInt(b, l.ActiveBlocks, 10)
			b = append(b, `,"prefill_tokens":`...)
			b = strconv.AppendInt(b, l.PrefillTokens, 10)
			b = append(b, `,"kv_total_blocks":`...)
			b = strconv.AppendUint(b, l.TotalBlocks, 10)
			b = append(b, `,"kv_used_blocks":`...)
			b = strconv.AppendUint(b, l.Reported.UsedBlocks, 10)
			b = append(b, `,"waiting":`...)
			b = strconv.AppendUint(b, l.Reported.Waiting, 10)
			b = append(b, `,"tree_blocks":`...)
			b = strconv.AppendUint(b, uint64(l.TreeSize), 10)
			b = append(b, `,"decisions":`...)
			b = strconv.AppendUint(b, l.Decisions, 10)
			b = append(b, `,"busy":`...)
			b = strconv.AppendBool(b, l.Busy)
			b = r.appendAgreement(b, l.Worker)
			b = append(b, '}')
		}
		b = append(b, "]}"...)
	}
	b = append(b, ']')
	b = r.appendTenantShares(b)
	b = append(b, "}\n"...)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// models answers GET /v1/models: the union of the models the workers
// declare, in OpenAI's list shape.
func (r *Router) models(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("application/json")
	ctx.SetBody(openai.AppendModelList(nil, r.table.Load().list))
}

// askModels asks static workers that were given no model= which models they
// serve (GET URL/v1/models), until each answers once or the router closes.
// A worker is a candidate for every model until it has answered.
func (r *Router) askModels() {
	for _, w := range r.cfg.Workers {
		if w.Model == "" {
			go r.askModelsOf(w.ID, w.URL)
		}
	}
}

func (r *Router) askModelsOf(id uint64, url string) {
	wait := 500 * time.Millisecond
	for attempt := 0; ; attempt++ {
		models, err := r.proxy.Models(url, 5*time.Second)
		if err == nil {
			r.post(func() {
				w, ok := r.b.workers[id]
				if !ok {
					return
				}
				c := *w
				c.Models = models
				r.b.workers[id] = &c
				r.publishTable()
			})
			r.cfg.Logger.Info("static worker models", "worker", id, "url", url, "models", models)
			return
		}
		if attempt == 0 {
			r.cfg.Logger.Warn("static worker does not list its models yet; it takes requests for any model until it does (or set --worker ...,model=NAME)",
				"worker", id, "url", url, "err", err)
		}
		select {
		case <-r.stop:
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}
