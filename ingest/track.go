package ingest

import "github.com/kvroute/kvroute/wire"

// verdict is what the tracker decided about one event id.
type verdict uint8

const (
	vApply      verdict = iota // in order (or untracked, or first sight): apply
	vGap                       // ids were skipped: apply, count the missing ones
	vRestart                   // the worker started over at id 1: tracking reset, apply
	vDuplicate                 // id at or below the last seen: drop
	vRestartGap                // suspect key: restarted during a loss, ids 1..id-1 missing: apply
	vFirst                     // first sight of a key at an id above 1 (not a Cleared): apply, earlier ids unseen
)

// tracker checks the event ids of one source per WorkerKey. It is the
// deterministic core of gap tracking: no clock, no locks, no logging; the
// caller owns it from one goroutine (or under a lock).
//
// Rules (see the package doc): id 0 is not tracked; the first id seen for a
// key is accepted whatever it is (the router may join a running fleet);
// last+1 is in order; a larger id is a gap of id-last-1 missing events; id 1
// is a restart (tracking starts over) unless the last id was 1 too and the
// event is not a Cleared, which is a duplicate of event 1; any other id <= last
// is a duplicate.
//
// A key marked suspect (markSuspect, after the transport lost messages)
// has its next event checked differently: last+1 is in order and a larger
// id a gap, as always, but an id at or below last is not a duplicate (no
// transport redelivers across the loss): the worker restarted while events
// were lost, so it is a restart, and above 1 also a gap of the ids 1..id-1.
type tracker struct {
	last    map[wire.WorkerKey]uint64
	suspect map[wire.WorkerKey]struct{}
}

func newTracker() tracker {
	return tracker{last: make(map[wire.WorkerKey]uint64), suspect: make(map[wire.WorkerKey]struct{})}
}

// markSuspect marks every tracked key suspect and returns how many there are.
func (t *tracker) markSuspect() int {
	for k := range t.last {
		t.suspect[k] = struct{}{}
	}
	return len(t.last)
}

// check classifies event id of kind for key k and records it; missing is the
// number of skipped ids for vGap.
func (t *tracker) check(k wire.WorkerKey, id uint64, kind wire.Kind) (v verdict, missing uint64) {
	if id == 0 {
		return vApply, 0
	}
	if len(t.suspect) > 0 {
		if v, missing, ok := t.checkSuspect(k, id); ok {
			return v, missing
		}
	}
	last, seen := t.last[k]
	switch {
	case !seen:
		t.last[k] = id
		if id > 1 && kind != wire.KindCleared {
			return vFirst, 0
		}
		return vApply, 0
	case id == last+1:
		t.last[k] = id
		return vApply, 0
	case id > last+1:
		t.last[k] = id
		return vGap, id - last - 1
	case id == 1 && (last != 1 || kind == wire.KindCleared):
		t.last[k] = 1
		return vRestart, 0
	}
	return vDuplicate, 0
}

// checkSuspect checks a suspect key's event (ok false: k is not suspect).
func (t *tracker) checkSuspect(k wire.WorkerKey, id uint64) (v verdict, missing uint64, ok bool) {
	if _, ok := t.suspect[k]; !ok {
		return 0, 0, false
	}
	delete(t.suspect, k)
	last := t.last[k]
	t.last[k] = id
	switch {
	case id == last+1:
		return vApply, 0, true
	case id > last+1:
		return vGap, id - last - 1, true
	case id == 1:
		return vRestart, 0, true
	}
	return vRestartGap, id - 1, true
}

// drop forgets k: its next event is taken as a first sighting.
func (t *tracker) drop(k wire.WorkerKey) {
	delete(t.last, k)
	delete(t.suspect, k)
}

// lastID returns the last id recorded for k (0: none).
func (t *tracker) lastID(k wire.WorkerKey) uint64 { return t.last[k] }

// forget drops the state of every dp rank of worker, so that its next event
// is taken as a first sighting.
func (t *tracker) forget(worker uint64) {
	for k := range t.last {
		if k.Worker == worker {
			delete(t.last, k)
			delete(t.suspect, k)
		}
	}
}

// advance records that the index is consistent with k's events up to id
// (recovery applied them): later events at or below it are duplicates.
func (t *tracker) advance(k wire.WorkerKey, id uint64) {
	t.last[k] = id
	delete(t.suspect, k)
}

// reset drops every key.
func (t *tracker) reset() { clear(t.last); clear(t.suspect) }

// len is the number of tracked keys.
func (t *tracker) len() int { return len(t.last) }
