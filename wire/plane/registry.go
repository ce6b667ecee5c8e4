package plane

import (
	"sort"
	"time"
)

// ExpiryFactor is how many heartbeat intervals a worker may miss before it is
// considered gone.
const ExpiryFactor = 3

// Change is what a Registry reports about one worker.
type Change struct {
	Kind ChangeKind
	Reg  Registration
}

// ChangeKind says whether a worker joined, changed its registration, or left.
type ChangeKind uint8

// Change kinds.
const (
	Joined ChangeKind = iota + 1
	Updated
	Left    // withdrew itself
	Expired // stopped heartbeating
)

func (k ChangeKind) String() string {
	return [...]string{"", "joined", "updated", "left", "expired"}[k]
}

// Registry tracks live workers from heartbeats. Time is an argument. It is
// not goroutine-safe; the zero value is not usable, call NewRegistry.
type Registry struct {
	workers map[uint64]*entry
}

type entry struct {
	reg      Registration
	deadline time.Time
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{workers: map[uint64]*entry{}} }

// Heartbeat records a registration seen at now and appends a change if the
// worker is new or its registration changed.
func (r *Registry) Heartbeat(reg Registration, now time.Time, out []Change) []Change {
	dl := now.Add(time.Duration(ExpiryFactor*reg.HeartbeatMillis) * time.Millisecond)
	e, ok := r.workers[reg.WorkerID]
	if !ok {
		r.workers[reg.WorkerID] = &entry{reg: reg, deadline: dl}
		return append(out, Change{Joined, reg})
	}
	e.deadline = dl
	if !sameRegistration(e.reg, reg) {
		e.reg = reg
		out = append(out, Change{Updated, reg})
	}
	return out
}

// Leave removes a worker that withdrew.
func (r *Registry) Leave(id uint64, out []Change) []Change {
	if e, ok := r.workers[id]; ok {
		delete(r.workers, id)
		out = append(out, Change{Left, e.reg})
	}
	return out
}

// Tick expires workers whose heartbeat deadline passed, in worker-id order.
func (r *Registry) Tick(now time.Time, out []Change) []Change {
	var gone []uint64
	for id, e := range r.workers {
		if now.After(e.deadline) {
			gone = append(gone, id)
		}
	}
	sort.Slice(gone, func(i, j int) bool { return gone[i] < gone[j] })
	for _, id := range gone {
		out = append(out, Change{Expired, r.workers[id].reg})
		delete(r.workers, id)
	}
	return out
}

// Get returns a live worker's registration.
func (r *Registry) Get(id uint64) (Registration, bool) {
	e, ok := r.workers[id]
	if !ok {
		return Registration{}, false
	}
	return e.reg, true
}

// Len is the number of live workers.
func (r *Registry) Len() int { return len(r.workers) }

func sameRegistration(a, b Registration) bool {
	if len(a.DpRanks) != len(b.DpRanks) {
		return false
	}
	for i := range a.DpRanks {
		if a.DpRanks[i] != b.DpRanks[i] {
			return false
		}
	}
	return a.WorkerID == b.WorkerID && a.URL == b.URL && a.Model == b.Model && a.BlockSize == b.BlockSize &&
		a.KVBlocks == b.KVBlocks && a.MaxBatchedTokens == b.MaxBatchedTokens && a.EventTransport == b.EventTransport &&
		a.ZMQEndpoint == b.ZMQEndpoint && a.ZMQReplay == b.ZMQReplay && a.HeartbeatMillis == b.HeartbeatMillis
}
