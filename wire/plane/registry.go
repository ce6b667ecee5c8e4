package plane

import (
	"errors"
	"fmt"
	"sort"
	"time"
)

// ExpiryFactor is how many heartbeat intervals a worker may miss before it is
// considered gone.
const ExpiryFactor = 3

// ReconnectGrace is the least grace Registry.Renew is given after the
// owner's control-plane connection came back: the workers reconnect on
// their own schedule (nats.go tries every 2 s by default, and a restarted
// server sees every client at once), so their next heartbeat may come
// several seconds after the owner's reconnection.
const ReconnectGrace = 10 * time.Second

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
	Left      // withdrew itself
	Expired   // stopped heartbeating
	Restarted // registered again from the same URL with a new instance id
)

func (k ChangeKind) String() string {
	return [...]string{"", "joined", "updated", "left", "expired", "restarted"}[k]
}

// Errors of Heartbeat and Leave: the message is refused and the registry
// unchanged.
var (
	// ErrConflict: the worker id is held by a live registration from
	// another URL, or (both naming one) another instance at another URL.
	// A worker does not move while it is live: it leaves (or expires) first.
	ErrConflict = errors.New("worker id held by a live registration from another URL")
	// ErrFull: the registry holds MaxWorkers workers already.
	ErrFull = errors.New("too many registered workers")
	// ErrLeaveMismatch: a withdrawal whose URL or instance id differs from
	// the live registration's.
	ErrLeaveMismatch = errors.New("withdrawal does not match the live registration (url or instance_id)")
)

// Registry tracks live workers from heartbeats. Time is an argument. It is
// not goroutine-safe; the zero value is not usable, call NewRegistry.
//
// Identity: a worker id belongs to its live registration's URL. A heartbeat
// for a live id from another URL is a conflict (ErrConflict), never a
// takeover; from the same URL with another instance id it is a restart
// (Restarted). A withdrawal must name the live URL and, when the live
// registration has one, its instance id. Registrations without an instance
// id (older workers) are recognised by URL alone.
type Registry struct {
	// MaxWorkers bounds the live workers (--max-workers); a new worker
	// beyond it is refused with ErrFull. 0: unbounded.
	MaxWorkers int
	workers    map[uint64]*entry
}

type entry struct {
	reg      Registration
	deadline time.Time
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{workers: map[uint64]*entry{}} }

// Check reports whether Heartbeat would accept reg (nil, ErrConflict or
// ErrFull) without changing anything.
func (r *Registry) Check(reg *Registration) error {
	e, ok := r.workers[reg.WorkerID]
	switch {
	case !ok && r.MaxWorkers > 0 && len(r.workers) >= r.MaxWorkers:
		return fmt.Errorf("%w: %d live (--max-workers)", ErrFull, len(r.workers))
	case ok && e.reg.URL != reg.URL:
		return fmt.Errorf("%w: worker %d is live at %s", ErrConflict, reg.WorkerID, e.reg.URL)
	}
	return nil
}

// Heartbeat records a registration seen at now and appends a change if the
// worker is new, restarted or its registration changed. A registration
// Check refuses is not recorded and its error returned.
func (r *Registry) Heartbeat(reg Registration, now time.Time, out []Change) ([]Change, error) {
	if err := r.Check(&reg); err != nil {
		return out, err
	}
	dl := now.Add(time.Duration(ExpiryFactor*reg.HeartbeatMillis) * time.Millisecond)
	e, ok := r.workers[reg.WorkerID]
	if !ok {
		r.workers[reg.WorkerID] = &entry{reg: reg, deadline: dl}
		return append(out, Change{Joined, reg}), nil
	}
	e.deadline = dl
	switch {
	case e.reg.Instance != reg.Instance && (e.reg.Instance != "" || reg.Instance != ""):
		e.reg = reg
		out = append(out, Change{Restarted, reg})
	case !sameRegistration(e.reg, reg):
		e.reg = reg
		out = append(out, Change{Updated, reg})
	}
	return out, nil
}

// Leave removes a worker that withdrew with reg (its id, URL and instance
// id). An unknown id is ignored; a reg whose URL, or instance id when the
// live registration has one, differs is refused with ErrLeaveMismatch.
func (r *Registry) Leave(reg Registration, out []Change) ([]Change, error) {
	e, ok := r.workers[reg.WorkerID]
	if !ok {
		return out, nil
	}
	if e.reg.URL != reg.URL || (e.reg.Instance != "" && e.reg.Instance != reg.Instance) {
		return out, fmt.Errorf("%w: worker %d", ErrLeaveMismatch, reg.WorkerID)
	}
	return r.Remove(reg.WorkerID, out), nil
}

// Remove removes a live worker unconditionally (reported as Left): the
// owner of the registry decided it must go.
func (r *Registry) Remove(id uint64, out []Change) []Change {
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

// Renew gives every live worker a fresh grace: its deadline becomes now
// plus ExpiryFactor of its heartbeat intervals, or plus atLeast if that is
// longer, as if a heartbeat arrived at now. The owner calls it when
// heartbeats could not arrive for a while through no fault of the workers
// (its own control-plane connection was down, during which it did not
// Tick), so that none expires before its next heartbeat had a chance to
// arrive: atLeast covers the workers' own reconnection (ReconnectGrace).
func (r *Registry) Renew(now time.Time, atLeast time.Duration) {
	for _, e := range r.workers {
		e.deadline = now.Add(max(time.Duration(ExpiryFactor*e.reg.HeartbeatMillis)*time.Millisecond, atLeast))
	}
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
	return a.WorkerID == b.WorkerID && a.Instance == b.Instance && a.MaxModelLen == b.MaxModelLen && a.URL == b.URL && a.Model == b.Model && a.BlockSize == b.BlockSize &&
		a.KVBlocks == b.KVBlocks && a.MaxBatchedTokens == b.MaxBatchedTokens && a.EventTransport == b.EventTransport &&
		a.ZMQEndpoint == b.ZMQEndpoint && a.ZMQReplay == b.ZMQReplay && a.HeartbeatMillis == b.HeartbeatMillis &&
		a.Role == b.Role && a.PDProtocol == b.PDProtocol && a.BootstrapPort == b.BootstrapPort
}
