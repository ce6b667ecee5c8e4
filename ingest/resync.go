package ingest

import "github.com/kvroute/kvroute/wire"

// SetLostHook installs fn, called when the index may lack events of a
// worker key on the NATS sources: after a gap (after = the last id before
// it), a restart during a connection loss (after = 0) and the first sight of
// a key at an id above 1 (after = 0: the router joined a running worker).
// fn runs on the receiving goroutine while it holds its pipe: it must not
// block (wire/recover's Requester queues the request). nil removes it.
func (in *Ingest) SetLostHook(fn func(k wire.WorkerKey, after uint64)) {
	if fn == nil {
		in.lost.Store(nil)
		return
	}
	in.lost.Store(&fn)
}

func (in *Ingest) lostAfter(k wire.WorkerKey, after uint64) {
	if fn := in.lost.Load(); fn != nil {
		(*fn)(k, after)
	}
}

// Resync runs fn while no NATS event is being handed to the sink (it holds
// every NATS pipe), so that a recovery answer is applied in order with the
// live events: fn gets the last event id tracked for k (0: none) and
// returns the id the index is now consistent at for k with set true, or
// set false to change nothing. That id becomes k's last (even when lower: a
// dump of a restarted worker) on the NATS sources: live events at or below
// it that arrive later (published before the answer, delivered after it)
// are dropped as duplicates. Id 0 (a worker that has published nothing
// since it started) drops k's tracking, so that its next event, id 1, is
// applied. fn must be short: it delays every NATS event (queue the index
// work and return).
func (in *Ingest) Resync(k wire.WorkerKey, fn func(last uint64) (at uint64, set bool)) {
	pipes, unlock := in.holdNATSPipes()
	defer unlock()
	var last uint64
	for _, p := range pipes {
		if p != nil {
			last = max(last, p.tr.lastID(k))
		}
	}
	at, set := fn(last)
	if set && at == 0 {
		for _, p := range pipes {
			if p != nil {
				p.tr.drop(k)
			}
		}
	} else if set {
		tracked := false
		for _, p := range pipes {
			if p != nil && p.tr.lastID(k) != 0 {
				p.tr.advance(k, at)
				tracked = true
			}
		}
		for _, p := range pipes {
			if p != nil && !tracked {
				p.tr.advance(k, at) // not seen yet: whichever source it comes on
			}
		}
	}
}

// holdNATSPipes locks every NATS pipe (so no NATS event is being handed to
// the sink until unlock) and returns them; an entry is nil when that source
// is not subscribed.
func (in *Ingest) holdNATSPipes() (pipes [2]*pipe, unlock func()) {
	in.mu.Lock()
	pipes = [...]*pipe{in.mu.dynPipe, in.mu.natPipe}
	in.mu.Unlock()
	for _, p := range pipes {
		if p != nil {
			p.lock()
		}
	}
	return pipes, func() {
		for _, p := range pipes {
			if p != nil {
				p.mu.Unlock()
			}
		}
	}
}

// Tracked appends to dst every worker key the NATS sources track, with the
// last event id seen for it, and returns dst.
func (in *Ingest) Tracked(dst []TrackedKey) []TrackedKey {
	in.mu.Lock()
	pipes := [...]*pipe{in.mu.dynPipe, in.mu.natPipe}
	in.mu.Unlock()
	for _, p := range pipes {
		if p == nil {
			continue
		}
		p.lock()
		for k, id := range p.tr.last {
			dst = append(dst, TrackedKey{Worker: k, Last: id})
		}
		p.mu.Unlock()
	}
	return dst
}

// TrackedKey is a worker key and the last event id seen for it.
type TrackedKey struct {
	Worker wire.WorkerKey
	Last   uint64
}
