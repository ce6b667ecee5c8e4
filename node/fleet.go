package node

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire/plane"
)

// FleetConfig bounds what workers that never registered can put in the
// index, and what registered workers can. Unbounded, 20,000 unregistered
// ids × 100 blocks took 424 MB, and one worker's tree grew to 2,005,456
// blocks against its declared 16,384.
type FleetConfig struct {
	// Filter turns the unknown-worker filter on (router.StartService does
	// outside approximate mode): KV events on NATS from a worker that is
	// neither registered (WorkerJoined) nor in Known are applied for Grace
	// after its first event, waiting for its registration; if none comes,
	// the worker's blocks are removed and its events dropped and counted
	// (kvroute_refused_total{reason="unknown_worker_events"}) until it
	// registers. At most MaxPending unknown workers are in their grace at
	// once; beyond, their events are dropped from the first. ZMQ events
	// are not filtered (their subscriptions exist only for known workers).
	Filter bool
	// Grace (--unknown-worker-grace): how long an unknown worker's events
	// are applied before its registration. Default DefaultUnknownGrace:
	// several heartbeat intervals, so a router that starts (or replays a
	// JetStream stream) before the workers' next heartbeats keeps them.
	Grace time.Duration
	// MaxPending bounds the unknown workers in their grace. Default 64.
	MaxPending int
	// PendingCap is the per-rank block cap of an unknown worker in its
	// grace. Default 16,384 (64 × 16,384 blocks ≈ 100 MB at most).
	PendingCap uint32
	// Known are workers that do not register (static --worker ids).
	Known []uint64
	// CapFactor (--index-cap-factor): a registered worker's index entries
	// per dp rank are capped at CapFactor × its kv_blocks (when it declares
	// them); beyond, Stored events are refused, counted
	// (reason="worker_over_capacity") and a dump is asked for (the index
	// may have missed removals). Default 4: room for blocks the engine
	// keeps in a host tier besides its GPU blocks.
	CapFactor int
}

// Defaults of FleetConfig.
const (
	DefaultUnknownGrace = 10 * time.Second
	DefaultCapFactor    = 4
)

// maxExpired bounds the memory of unknown workers whose grace ended.
const maxExpired = 4096

// fleet is the unknown-worker filter. admit is ingest's Config.Admit: a
// lock-free map read for known workers, a mutex for the rest.
type fleet struct {
	cfg     FleetConfig
	ix      *shard.Index
	known   atomic.Pointer[map[uint64]struct{}] // copy on write
	evicted atomic.Uint64                       // unknown workers whose blocks were removed
	mu      struct {
		sync.Mutex
		pending map[uint64]time.Time // grace deadline of an unknown worker
		expired map[uint64]struct{}  // grace ended: dropped until it registers
	}
}

func newFleet(cfg FleetConfig, ix *shard.Index) *fleet {
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultUnknownGrace
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = 64
	}
	if cfg.PendingCap == 0 {
		cfg.PendingCap = 16384
	}
	f := &fleet{cfg: cfg, ix: ix}
	known := make(map[uint64]struct{}, len(cfg.Known))
	for _, id := range cfg.Known {
		known[id] = struct{}{}
	}
	f.known.Store(&known)
	f.mu.pending = map[uint64]time.Time{}
	f.mu.expired = map[uint64]struct{}{}
	return f
}

func (f *fleet) admit(worker uint64) bool {
	if _, ok := (*f.known.Load())[worker]; ok {
		return true
	}
	return f.admitSlow(worker)
}

func (f *fleet) admitSlow(worker uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.mu.pending[worker]; ok {
		return true
	}
	if _, ok := f.mu.expired[worker]; ok || len(f.mu.pending) >= f.cfg.MaxPending {
		return false
	}
	if _, ok := (*f.known.Load())[worker]; ok { // joined meanwhile
		return true
	}
	f.mu.pending[worker] = time.Now().Add(f.cfg.Grace)
	_ = f.ix.SetCap(worker, f.cfg.PendingCap) // before its first event is applied
	return true
}

// join makes worker known (registered), with its cap.
func (f *fleet) join(reg plane.Registration) {
	if reg.KVBlocks > 0 {
		factor := f.cfg.CapFactor
		if factor <= 0 {
			factor = DefaultCapFactor
		}
		_ = f.ix.SetCap(reg.WorkerID, uint32(min(uint64(reg.KVBlocks)*uint64(factor), 1<<32-1)))
	} else {
		_ = f.ix.SetCap(reg.WorkerID, 0)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.mu.pending, reg.WorkerID)
	delete(f.mu.expired, reg.WorkerID)
	old := *f.known.Load()
	if _, ok := old[reg.WorkerID]; ok {
		return
	}
	known := make(map[uint64]struct{}, len(old)+1)
	for id := range old {
		known[id] = struct{}{}
	}
	known[reg.WorkerID] = struct{}{}
	f.known.Store(&known)
}

// leave forgets a registered worker (static ones stay known).
func (f *fleet) leave(worker uint64) {
	for _, id := range f.cfg.Known {
		if id == worker {
			return
		}
	}
	_ = f.ix.SetCap(worker, 0)
	f.mu.Lock()
	defer f.mu.Unlock()
	old := *f.known.Load()
	if _, ok := old[worker]; !ok {
		return
	}
	known := make(map[uint64]struct{}, len(old))
	for id := range old {
		if id != worker {
			known[id] = struct{}{}
		}
	}
	f.known.Store(&known)
}

// sweep ends the graces that passed at now and returns the workers whose
// blocks must go.
func (f *fleet) sweep(now time.Time, out []uint64) []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, dl := range f.mu.pending {
		if now.Before(dl) {
			continue
		}
		delete(f.mu.pending, id)
		if _, ok := (*f.known.Load())[id]; ok {
			continue
		}
		if len(f.mu.expired) < maxExpired {
			f.mu.expired[id] = struct{}{}
		}
		out = append(out, id)
	}
	return out
}

func (f *fleet) pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.mu.pending)
}

// logLimit lets one line through per interval and counts the rest.
type logLimit struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

func (l *logLimit) log(lg *slog.Logger, level slog.Level, msg string, args ...any) {
	l.mu.Lock()
	now := time.Now()
	if !l.last.IsZero() && now.Sub(l.last) < 10*time.Second {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	sup := l.suppressed
	l.last, l.suppressed = now, 0
	l.mu.Unlock()
	lg.Log(context.Background(), level, msg, append(args, "suppressed_since_last_log", sup)...)
}
