package ingest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/wire"
)

// TestTracker runs id sequences through the tracker and checks every verdict.
func TestTracker(t *testing.T) {
	names := map[verdict]string{vApply: "apply", vGap: "gap", vRestart: "restart", vDuplicate: "dup", vFirst: "first"}
	S, C := wire.KindStored, wire.KindCleared
	type step struct {
		id   uint64
		kind wire.Kind
		want string // verdict, "gap N" with the missing count
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"in order from 1", []step{{1, S, "apply"}, {2, S, "apply"}, {3, S, "apply"}}},
		{"joins mid-stream", []step{{500, S, "first"}, {501, S, "apply"}}},
		{"gap", []step{{1, S, "apply"}, {2, S, "apply"}, {6, S, "gap 3"}, {7, S, "apply"}}},
		{"duplicates", []step{{1, S, "apply"}, {2, S, "apply"}, {2, S, "dup"}, {3, S, "apply"}, {2, S, "dup"}}},
		{"late event after gap is a duplicate", []step{{1, S, "apply"}, {4, S, "gap 2"}, {3, S, "dup"}, {5, S, "apply"}}},
		{"restart at 1", []step{{1, S, "apply"}, {2, S, "apply"}, {3, S, "apply"}, {1, C, "restart"}, {2, S, "apply"}}},
		{"restart with a Stored 1", []step{{5, S, "first"}, {1, S, "restart"}, {2, S, "apply"}}},
		{"duplicate of event 1", []step{{1, S, "apply"}, {1, S, "dup"}, {2, S, "apply"}}},
		{"Cleared 1 right after 1 restarts", []step{{1, S, "apply"}, {1, C, "restart"}, {2, S, "apply"}}},
		{"id 0 untracked", []step{{0, S, "apply"}, {3, S, "first"}, {0, S, "apply"}, {0, S, "apply"}, {4, S, "apply"}}},
		// After a reconnect the next event is checked against the last id
		// seen before: nothing can have been redelivered, so an id at or
		// below it is a restart during the loss, not a duplicate.
		{"reconnect, in order", []step{{1, S, "apply"}, {2, S, "apply"}, {want: "mark"}, {3, S, "apply"}, {3, S, "dup"}}},
		{"reconnect, gap", []step{{1, S, "apply"}, {2, S, "apply"}, {want: "mark"}, {5, S, "gap 2"}, {6, S, "apply"}}},
		{"reconnect, restarted", []step{{1, S, "apply"}, {5, S, "gap 3"}, {want: "mark"}, {3, S, "restart+gap 2"}, {4, S, "apply"}, {4, S, "dup"}}},
		{"reconnect, restarted at 1", []step{{4, S, "first"}, {want: "mark"}, {1, S, "restart"}, {2, S, "apply"}}},
		{"reconnect before any event", []step{{want: "mark"}, {7, S, "first"}, {7, S, "dup"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := newTracker()
			k := wire.WorkerKey{Worker: 1, Dp: 2}
			for i, s := range c.steps {
				if s.want == "mark" { // a reconnect
					tr.markSuspect()
					continue
				}
				v, missing := tr.check(k, s.id, s.kind)
				got := names[v]
				switch v {
				case vGap:
					got = fmt.Sprintf("gap %d", missing)
				case vRestartGap:
					got = fmt.Sprintf("restart+gap %d", missing)
				}
				if got != s.want {
					t.Fatalf("step %d (id %d): %s, want %s", i, s.id, got, s.want)
				}
			}
		})
	}
}

// TestTrackerKeysAndForget: keys are independent; forget drops every rank of
// one worker only.
func TestTrackerFirstSightAndAdvance(t *testing.T) {
	tr := newTracker()
	k := wire.WorkerKey{Worker: 1}
	if v, _ := tr.check(k, 1, wire.KindStored); v != vApply {
		t.Errorf("first sight at id 1: %v, want vApply", v)
	}
	k2 := wire.WorkerKey{Worker: 2}
	if v, _ := tr.check(k2, 7, wire.KindCleared); v != vApply {
		t.Errorf("first sight of a Cleared: %v, want vApply", v)
	}
	tr.advance(k, 20)
	if v, _ := tr.check(k, 15, wire.KindStored); v != vDuplicate {
		t.Errorf("id below the advanced last: %v, want vDuplicate", v)
	}
	if v, _ := tr.check(k, 21, wire.KindStored); v != vApply {
		t.Errorf("next id after advance: %v, want vApply", v)
	}
}

func TestTrackerKeysAndForget(t *testing.T) {
	tr := newTracker()
	a0, a1, b0 := wire.WorkerKey{Worker: 1}, wire.WorkerKey{Worker: 1, Dp: 1}, wire.WorkerKey{Worker: 2}
	for _, k := range []wire.WorkerKey{a0, a1, b0} {
		tr.check(k, 10, wire.KindStored)
	}
	if v, _ := tr.check(a1, 11, wire.KindStored); v != vApply {
		t.Fatal("ranks are not independent")
	}
	tr.forget(1)
	if tr.len() != 1 {
		t.Fatalf("%d keys after forget, want 1", tr.len())
	}
	if v, _ := tr.check(a0, 50, wire.KindStored); v != vFirst {
		t.Error("forgotten key: not a first sighting")
	}
	if v, m := tr.check(b0, 13, wire.KindStored); v != vGap || m != 2 {
		t.Error("other worker's state lost")
	}
	tr.reset()
	if tr.len() != 0 {
		t.Error("reset kept keys")
	}
}

// TestLimiter: one line per key per interval; the suppressed ones are
// counted and reported with the next line; the table stays bounded.
func TestLimiter(t *testing.T) {
	var l limiter
	l.init(1 << 62) // never expires within the test
	k := wire.WorkerKey{Worker: 1}
	if _, ok := l.allow(probGap, SourceZMQ, k); !ok {
		t.Fatal("first line suppressed")
	}
	for range 3 {
		if _, ok := l.allow(probGap, SourceZMQ, k); ok {
			t.Fatal("second line within the interval allowed")
		}
	}
	if _, ok := l.allow(probGap, SourceNATSDynamo, k); !ok {
		t.Error("another source shares the limit")
	}
	if _, ok := l.allow(probDuplicate, SourceZMQ, k); !ok {
		t.Error("another problem shares the limit")
	}
	l.every = 0 // expire everything
	if sup, ok := l.allow(probGap, SourceZMQ, k); !ok || sup != 3 {
		t.Errorf("after the interval: ok %v suppressed %d, want true 3", ok, sup)
	}
	l.every = 1 << 62
	for i := range maxLimiterKeys + 10 {
		l.allow(probGap, SourceZMQ, wire.WorkerKey{Worker: uint64(i + 100)})
	}
	if len(l.m) > maxLimiterKeys {
		t.Errorf("limiter table %d > %d", len(l.m), maxLimiterKeys)
	}
	if s := SourceZMQ.String() + Source(9).String(); !strings.Contains(s, "zmq") || !strings.Contains(s, "source(9)") {
		t.Errorf("source names %q", s)
	}
}
