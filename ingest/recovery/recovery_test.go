package recovery

import (
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvroute/kvroute/ingest"
	"github.com/kvroute/kvroute/internal/natstest"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/plane"
)

// request is one recovery request a scripted worker received.
type request struct {
	plane.RecoverRequest
	reply string
	at    time.Time // when it was received, before any answer
}

// rig is a Requester wired to a real ingest and index on a real
// nats-server, and a scripted worker side: a second connection that
// publishes live native events and receives the recovery requests of the
// workers it is asked to serve, answered by the test.
type rig struct {
	subj plane.Subjects
	ix   *shard.Index
	in   *ingest.Ingest
	r    *Requester
	wnc  *nats.Conn // the workers' connection
	reqs chan request
}

func startRig(t *testing.T, cfg Config, workers ...uint64) *rig {
	t.Helper()
	s := natstest.Server(t)
	subj, err := plane.SubjectsFor("kvroute", "backend")
	if err != nil {
		t.Fatal(err)
	}
	rg := &rig{subj: subj, wnc: natstest.Connect(t, s), reqs: make(chan request, 64)}
	if rg.ix, err = shard.NewIndex(shard.Config{Shards: 1}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rg.ix.Close() })
	log := slog.New(slog.DiscardHandler)
	if rg.in, err = ingest.New(ingest.Config{BlockSize: 4, Subjects: subj, Logger: log}, rg.ix); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rg.in.Close() })
	nc := natstest.Connect(t, s)
	cfg.Subjects, cfg.Logger = subj, log
	if rg.r, err = Start(cfg, nc, rg.ix, rg.in); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rg.r.Close)
	rg.in.SetLostHook(rg.r.Lost)
	if err := rg.in.SubscribeNATS(nc); err != nil {
		t.Fatal(err)
	}
	for _, id := range workers {
		if _, err := rg.wnc.Subscribe(subj.RecoverSubject(id), func(m *nats.Msg) {
			req, err := plane.DecodeRecoverRequest(m.Data)
			if err != nil {
				t.Errorf("request: %v", err)
				return
			}
			rg.reqs <- request{req, m.Reply, time.Now()}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := rg.wnc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return rg
}

// next waits (10 s at most) for the next recovery request.
func (rg *rig) next(t *testing.T) request {
	t.Helper()
	select {
	case q := <-rg.reqs:
		return q
	case <-time.After(10 * time.Second):
		t.Fatal("no recovery request within 10 s")
		return request{}
	}
}

// none checks that no request arrives within d: a request that must not be
// sent would arrive within microseconds, so d only bounds the test.
func (rg *rig) none(t *testing.T, d time.Duration, why string) {
	t.Helper()
	select {
	case q := <-rg.reqs:
		t.Fatalf("%s: unexpected request %+v", why, q.RecoverRequest)
	case <-time.After(d):
	}
}

// answer sends a one-chunk answer of kind at id at with evs.
func (rg *rig) answer(t *testing.T, q request, kind uint8, at uint64, evs []wire.Event) {
	t.Helper()
	h := plane.RecoverReply{Kind: kind, Last: true, Worker: q.Worker, At: at, Epoch: 1}
	body := []byte("scripted failure")
	if kind != plane.RecoverError {
		body = wire.AppendNative(nil, evs)
	}
	if err := rg.wnc.Publish(q.reply, plane.AppendRecoverReply(nil, h, body)); err != nil {
		t.Fatal(err)
	}
}

// live publishes evs as one native message, as a worker's step does.
func (rg *rig) live(t *testing.T, evs ...wire.Event) {
	t.Helper()
	if err := rg.wnc.Publish(rg.subj.KVEventsNative, wire.AppendNative(nil, evs)); err != nil {
		t.Fatal(err)
	}
}

// tracked waits until ingest has handed k's events up to id last to the
// index (its tracker records an id in the same critical section).
func (rg *rig) tracked(t *testing.T, k wire.WorkerKey, last uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, tk := range rg.in.Tracked(nil) {
			if tk.Worker == k && tk.Last == last {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("ingest did not track %+v at %d: %+v", k, last, rg.in.Tracked(nil))
		}
		time.Sleep(time.Millisecond) // polling: ingest announces nothing
	}
}

// settled waits until no recovery is queued or in flight.
func (rg *rig) settled(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for rg.r.Pending() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d keys still pending", rg.r.Pending())
		}
		time.Sleep(time.Millisecond) // polling: the requester announces nothing
	}
}

// held returns the engine hashes the index holds for k, sorted.
func (rg *rig) held(t *testing.T, k wire.WorkerKey) []uint64 {
	t.Helper()
	evs, err := rg.ix.Dump(nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, ev := range evs {
		if ev.Worker == k {
			for _, b := range ev.Blocks {
				out = append(out, uint64(b.Engine))
			}
		}
	}
	slices.Sort(out)
	return out
}

func stored(k wire.WorkerKey, id uint64, parent uint64, engines ...uint64) wire.Event {
	ev := wire.Event{Worker: k, ID: id, Kind: wire.KindStored, HasParent: parent != 0, Parent: wire.EngineHash(parent)}
	for _, e := range engines {
		ev.Blocks = append(ev.Blocks, wire.Block{Engine: wire.EngineHash(e), Local: wire.BlockHash(1000 + e)})
	}
	return ev
}

func removed(k wire.WorkerKey, id uint64, engines ...uint64) wire.Event {
	ev := wire.Event{Worker: k, ID: id, Kind: wire.KindRemoved}
	for _, e := range engines {
		ev.Blocks = append(ev.Blocks, wire.Block{Engine: wire.EngineHash(e)})
	}
	return ev
}

// A dump that live events overtook (the worker answered at id 3, events 4
// and 5 were published after the answer but applied before it) replaces
// their effects: the requester then asks for the events after the dump's
// id, even though a request queued meanwhile named a later id, and the
// index ends equal to the worker's cache. (This was the cause of the rare
// disagreement in node's TestRecoveryUnderDropsAndDuplicates.)
func TestDumpOvertakenAsksForTheEventsAfterIt(t *testing.T) {
	rg := startRig(t, Config{Interval: -1, MinBackoff: time.Millisecond}, 7)
	k := wire.WorkerKey{Worker: 7}
	rg.live(t, stored(k, 1, 0, 1)) // A
	// Event 2 (B under A) is lost; 3 (C under B) shows the gap.
	rg.live(t, stored(k, 3, 2, 3))
	q := rg.next(t)
	if q.After != 1 {
		t.Fatalf("first request after %d, want 1", q.After)
	}
	// Before the worker's answer arrives: 4 removes C, 5 stores D under B,
	// and 6 is lost while 7 (E under D) shows a second gap (a request
	// after 5 is queued behind the one in flight).
	rg.live(t, removed(k, 4, 3), stored(k, 5, 2, 4))
	rg.live(t, stored(k, 7, 5, 5))
	rg.tracked(t, k, 7)
	// The worker answered with a dump at 3 (its ring could not serve 1):
	// A, B, C.
	rg.answer(t, q, plane.RecoverDump, 3, []wire.Event{stored(k, 3, 0, 1, 2, 3)})
	q = rg.next(t)
	if q.After != 3 {
		t.Fatalf("after the overtaken dump at 3 the request is after %d, want 3", q.After)
	}
	// Events 4..7 (6: F, a new root); the worker's cache at 7: A, B, D, E, F.
	rg.answer(t, q, plane.RecoverEvents, 7, []wire.Event{removed(k, 4, 3), stored(k, 5, 2, 4), stored(k, 6, 0, 6), stored(k, 7, 4, 5)})
	rg.settled(t)
	if got, want := rg.held(t, k), []uint64{1, 2, 4, 5, 6}; !slices.Equal(got, want) {
		t.Fatalf("index holds %v, the worker %v", got, want)
	}
	rg.none(t, 100*time.Millisecond, "after the index agreed")
}

// A dump at id 0 below the tracked id (a worker that restarted and has
// published nothing since, or tracking restored from a snapshot of an
// earlier run of the fleet) empties the worker's blocks and drops its
// tracking, so the follow-up ask is answered and the requester stops; its
// next event, id 1, is applied. Before, the tracking stayed at the old id,
// every answer at 0 was overtaken again, and the requester asked without
// pause (an operator saw 1,600 requests a second).
func TestDumpAtZeroBelowTracked(t *testing.T) {
	rg := startRig(t, Config{Interval: -1, MinBackoff: time.Millisecond}, 7)
	k := wire.WorkerKey{Worker: 7}
	rg.live(t, stored(k, 1, 0, 1), stored(k, 2, 1, 2))
	rg.tracked(t, k, 2)
	rg.r.Lost(k, DumpAll)
	q := rg.next(t)
	rg.answer(t, q, plane.RecoverDump, 0, nil)
	for n := 0; ; n++ { // at most one more ask (after 0), answered "nothing missing"
		select {
		case q = <-rg.reqs:
		case <-time.After(200 * time.Millisecond):
			n = -1
		}
		if n < 0 {
			break
		}
		if n >= 1 {
			t.Fatalf("request %d after the dump at 0 (after %d): the requester loops", n+2, q.After)
		}
		rg.answer(t, q, plane.RecoverEvents, 0, nil)
	}
	rg.settled(t)
	if got := rg.held(t, k); len(got) != 0 {
		t.Fatalf("index holds %v after the empty dump", got)
	}
	rg.live(t, stored(k, 1, 0, 9))
	rg.tracked(t, k, 1)
	if got := rg.held(t, k); !slices.Equal(got, []uint64{9}) {
		t.Fatalf("index holds %v, want the restarted worker's event 1 (block 9)", got)
	}
}

// Asks for one worker key while its request is in flight are merged into
// one queued request for the smallest id asked.
func TestLostDeduplicatesPerKey(t *testing.T) {
	rg := startRig(t, Config{Interval: -1}, 3)
	k := wire.WorkerKey{Worker: 3}
	rg.r.Lost(k, 50)
	q := rg.next(t)
	if q.After != 50 {
		t.Fatalf("first request after %d, want 50", q.After)
	}
	for _, after := range []uint64{40, 30, 45, 35} {
		rg.r.Lost(k, after)
	}
	rg.none(t, 100*time.Millisecond, "while the first is in flight")
	rg.answer(t, q, plane.RecoverEvents, 50, nil)
	q = rg.next(t)
	if q.After != 30 {
		t.Fatalf("merged request after %d, want 30 (the smallest asked)", q.After)
	}
	rg.answer(t, q, plane.RecoverEvents, 50, nil)
	rg.settled(t)
	rg.none(t, 100*time.Millisecond, "after both answers")
	if st := rg.r.Stats(); st.Requests != 2 || st.Nothing != 2 {
		t.Fatalf("stats %+v, want 2 requests answered with nothing", st)
	}
}

// A failing worker is asked again after MinBackoff, doubling per failure,
// until Attempts failures give the key up (until the next sweep).
func TestBackoffAndGivingUp(t *testing.T) {
	const minBackoff = 40 * time.Millisecond
	rg := startRig(t, Config{Interval: -1, MinBackoff: minBackoff, MaxBackoff: time.Second, Attempts: 3}, 9)
	k := wire.WorkerKey{Worker: 9}
	rg.r.Lost(k, 0)
	var at []time.Time
	for range 3 {
		q := rg.next(t)
		at = append(at, q.at)
		rg.answer(t, q, plane.RecoverError, 0, nil)
	}
	// The answer to request i left after it was received, and request i+1
	// was not sent before the backoff after that answer: the gaps are
	// lower bounds whatever the machine's load.
	for i, want := range []time.Duration{2 * minBackoff, 4 * minBackoff} {
		if gap := at[i+1].Sub(at[i]); gap < want {
			t.Errorf("request %d came %v after request %d, want at least %v", i+2, gap, i+1, want)
		}
	}
	rg.settled(t)
	rg.none(t, 8*minBackoff, "after giving up (no sweep)")
	if st := rg.r.Stats(); st.Requests != 3 || st.Errors != 3 || st.GaveUp != 1 {
		t.Fatalf("stats %+v, want 3 requests, 3 errors, 1 given up", st)
	}
}

// At most Config.Concurrency requests are in flight, over all keys; the
// others wait and are all served.
func TestBoundedConcurrency(t *testing.T) {
	workers := []uint64{1, 2, 3, 4, 5}
	rg := startRig(t, Config{Interval: -1, Concurrency: 2}, workers...)
	for _, id := range workers {
		rg.r.Lost(wire.WorkerKey{Worker: id}, 10)
	}
	var open []request
	served := map[uint64]bool{}
	for len(served) < len(workers) {
		for len(open) < 2 && len(served)+len(open) < len(workers) {
			open = append(open, rg.next(t))
		}
		if len(served)+len(open) < len(workers) {
			rg.none(t, 50*time.Millisecond, fmt.Sprintf("with %d requests in flight", len(open)))
		}
		q := open[0]
		open = open[1:]
		if served[q.Worker.Worker] {
			t.Fatalf("worker %d asked twice", q.Worker.Worker)
		}
		served[q.Worker.Worker] = true
		rg.answer(t, q, plane.RecoverEvents, 10, nil)
	}
	rg.settled(t)
	if st := rg.r.Stats(); st.Requests != uint64(len(workers)) {
		t.Fatalf("stats %+v, want %d requests", st, len(workers))
	}
}
