package router

import (
	"fmt"
	"slices"
	"strconv"
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
	ID        uint64
	URL       string
	Model     string
	Ranks     []uint32
	Capacity  sched.Capacity
	Static    bool
	Transport string
	Joined    time.Time
	health    *workerHealth // shared by every snapshot of the worker
}

// workerTable is an immutable snapshot of the workers, read by handlers.
type workerTable struct {
	byID map[uint64]*workerInfo
	ids  []uint64 // sorted
}

// publishTable publishes a snapshot of the batcher's worker map.
func (r *Router) publishTable() {
	t := &workerTable{byID: make(map[uint64]*workerInfo, len(r.b.workers))}
	for id, w := range r.b.workers {
		t.byID[id] = w
		t.ids = append(t.ids, id)
	}
	slices.Sort(t.ids)
	r.table.Store(t)
	r.nworkers.Store(int32(r.s.Workers()))
}

func (r *Router) addStatic(w StaticWorker) {
	ranks := w.DpRanks
	if len(ranks) == 0 {
		ranks = []uint32{0}
	}
	info := &workerInfo{ID: w.ID, URL: w.URL, Ranks: slices.Clone(ranks), Capacity: w.Capacity, Static: true, Joined: time.Now(), health: new(workerHealth)}
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
	return nc.Flush()
}

func (r *Router) onHeartbeat(m *nats.Msg) {
	var reg plane.Registration
	if err := plane.Decode(m.Data, &reg); err != nil {
		r.m.controlErrors.Inc()
		r.cfg.Logger.Warn("bad worker registration", "err", err)
		return
	}
	r.post(func() {
		if w, ok := r.b.workers[reg.WorkerID]; ok && w.Static {
			return // a static worker is configured, not registered
		}
		if reg.BlockSize != r.cfg.Sched.BlockSize {
			r.m.sizeMismatch.Inc()
			r.cfg.Logger.Error("worker registration rejected: block size mismatch",
				"worker", reg.WorkerID, "worker_block_size", reg.BlockSize, "router_block_size", r.cfg.Sched.BlockSize,
				"fix", fmt.Sprintf("start the router with --block-size %d or the engine with block size %d", reg.BlockSize, r.cfg.Sched.BlockSize))
			if _, known := r.b.registry.Get(reg.WorkerID); known {
				r.b.changes = r.b.registry.Leave(reg.WorkerID, r.b.changes[:0])
				r.applyChanges()
			}
			return
		}
		r.b.changes = r.b.registry.Heartbeat(reg, time.Now(), r.b.changes[:0])
		r.applyChanges()
	})
}

func (r *Router) onLeave(m *nats.Msg) {
	var reg plane.Registration
	if err := plane.Decode(m.Data, &reg); err != nil {
		r.m.controlErrors.Inc()
		return
	}
	r.post(func() {
		r.b.changes = r.b.registry.Leave(reg.WorkerID, r.b.changes[:0])
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

func (r *Router) onAllBusy(m *nats.Msg) {
	var b plane.AllWorkersBusy
	if err := plane.Decode(m.Data, &b); err != nil {
		r.m.controlErrors.Inc()
		return
	}
	if b.Router == r.cfg.ID {
		return
	}
	r.m.remoteBusy.Inc()
	r.post(func() { r.s.ObserveAllWorkersBusy(r.now()) })
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
		case plane.Joined, plane.Updated:
			ranks := c.Reg.DpRanks
			if len(ranks) == 0 {
				ranks = []uint32{0}
			}
			capa := sched.Capacity{TotalBlocks: uint64(max(c.Reg.KVBlocks, 0)), MaxBatchedTokens: uint64(max(c.Reg.MaxBatchedTokens, 0))}
			health := new(workerHealth)
			if old, ok := r.b.workers[id]; ok {
				health = old.health
				for _, rank := range old.Ranks {
					if !slices.Contains(ranks, rank) {
						r.s.RemoveRank(wire.WorkerKey{Worker: id, Dp: rank}, now)
						_, _ = r.ix.RemoveDpRank(wire.WorkerKey{Worker: id, Dp: rank})
					}
				}
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
			r.b.workers[id] = &workerInfo{ID: id, URL: c.Reg.URL, Model: c.Reg.Model, Ranks: slices.Clone(ranks),
				Capacity: capa, Transport: c.Reg.EventTransport, Joined: joined, health: health}
			if c.Kind == plane.Joined {
				r.m.joined.Inc()
				r.cfg.Logger.Info("worker joined", "worker", id, "url", c.Reg.URL, "ranks", ranks, "events", c.Reg.EventTransport)
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
		b = openai.AppendJSONString(b, w.Model)
		b = append(b, `,"static":`...)
		b = strconv.AppendBool(b, w.Static)
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
			b = append(b, '}')
		}
		b = append(b, "]}"...)
	}
	b = append(b, "]}\n"...)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}
