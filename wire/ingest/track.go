package ingest

import "github.com/kvroute/kvroute/wire"

// verdict is what the tracker decided about one event id.
type verdict uint8

const (
	vApply     verdict = iota // in order (or untracked, or first sight): apply
	vGap                      // ids were skipped: apply, count the missing ones
	vRestart                  // the worker started over at id 1: tracking reset, apply
	vDuplicate                // id at or below the last seen: drop
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
type tracker struct {
	last map[wire.WorkerKey]uint64
}

func newTracker() tracker { return tracker{last: make(map[wire.WorkerKey]uint64)} }

// check classifies event id of kind for key k and records it; missing is the
// number of skipped ids for vGap.
func (t *tracker) check(k wire.WorkerKey, id uint64, kind wire.Kind) (v verdict, missing uint64) {
	if id == 0 {
		return vApply, 0
	}
	last, seen := t.last[k]
	switch {
	case !seen:
		t.last[k] = id
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

// lastID returns the last id recorded for k (0: none).
func (t *tracker) lastID(k wire.WorkerKey) uint64 { return t.last[k] }

// forget drops the state of every dp rank of worker, so that its next event
// is taken as a first sighting.
func (t *tracker) forget(worker uint64) {
	for k := range t.last {
		if k.Worker == worker {
			delete(t.last, k)
		}
	}
}

// reset drops every key.
func (t *tracker) reset() { clear(t.last) }

// len is the number of tracked keys.
func (t *tracker) len() int { return len(t.last) }
