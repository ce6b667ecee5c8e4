package router

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/bench/mock"
	"github.com/kvroute/kvroute/node"
	"github.com/kvroute/kvroute/verify"
	"github.com/kvroute/kvroute/wire"
)

// The proofs of the engine-report check, end to end: a router service and
// the simulated fleet over real HTTP and a real in-process NATS server.

// noSweep turns recovery's periodic sweep off, so that only the
// cached-token reports can find what the faults hide.
func noSweep(c *node.Config) { c.Recovery.Interval = -1 }

// verifyStatsOf is worker's dp rank 0 verification state.
func (e *env) verifyStatsOf(worker uint64) verify.Stats {
	st, _ := e.svc.Router.verifyStats(wire.WorkerKey{Worker: worker})
	return st
}

// famPrompt is family f's prompt i: a prefix of 64+16·(f%5) tokens and
// 16 unique ones; i < 0 repeats the family's first prompt exactly.
func famPrompt(f, i int) []uint32 {
	if i < 0 {
		i = 0
	}
	return tokens(f, 1000*f+i, 64+16*(f%5), 16)
}

// A streamed answer reaches a client that did not ask for usage without
// the usage chunk the router asked for, and one that asked gets it; both
// are verified, and the decision ring shows the reported value.
func TestVerifyStreamsAndDecisionRing(t *testing.T) {
	e := startEnv(t, envOptions{workers: 2, pprof: true})
	p := famPrompt(1, 0)
	for round := range 2 {
		for _, include := range []bool{false, true} {
			body := fmt.Sprintf(`{"prompt":%s,"max_tokens":4,"stream":true}`, promptJSON(p))
			if include {
				body = fmt.Sprintf(`{"prompt":%s,"max_tokens":4,"stream":true,"stream_options":{"include_usage":true}}`, promptJSON(p))
			}
			code, out, _ := e.do("POST", "/v1/completions", body)
			if code != 200 {
				t.Fatalf("status %d: %s", code, out)
			}
			events := strings.Split(strings.TrimSuffix(string(out), "\n\n"), "\n\n")
			want := 5 // four token chunks and [DONE]
			if include {
				want = 6
			}
			if len(events) != want || events[want-1] != "data: [DONE]" || strings.Contains(string(out), "cached_tokens") != include {
				t.Fatalf("round %d include_usage=%v: %q", round, include, events)
			}
		}
		if round == 0 {
			e.indexed(p, len(p)/testBlockSize)
		}
	}
	var verified, agreed uint64
	for _, w := range e.fleet.Workers() {
		st := e.verifyStatsOf(w.ID())
		verified += st.Requests - st.Unverified
		agreed += st.Agreed
	}
	if verified != 4 || agreed != 4 {
		t.Fatalf("%d verified, %d agreed, want 4 and 4", verified, agreed)
	}
	resp, err := http.Get("http://" + e.svc.AdminAddr() + "/debug/decisions?n=2")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var doc struct {
		Decisions []struct {
			Rule     string `json:"rule"`
			Worker   uint64 `json:"worker_id"`
			Overlap  int    `json:"overlap_blocks"`
			Reported *int   `json:"reported_cached_tokens"`
			Cands    []struct {
				Overlap int  `json:"overlap_blocks"`
				Chosen  bool `json:"chosen"`
			} `json:"candidates"`
		} `json:"decisions"`
	}
	if err := json.Unmarshal(b, &doc); err != nil || len(doc.Decisions) != 2 {
		t.Fatalf("/debug/decisions: %v %s", err, b)
	}
	d := doc.Decisions[0]
	if d.Rule != "cost" || d.Overlap != len(p)/testBlockSize || d.Reported == nil || *d.Reported != (len(p)-1)/testBlockSize*testBlockSize ||
		len(d.Cands) == 0 || !d.Cands[0].Chosen {
		t.Fatalf("newest decision %s", b)
	}
	if resp, _ := http.Get("http://" + e.svc.AdminAddr() + "/debug/decisions?n=x"); resp.StatusCode != 400 {
		t.Fatalf("n=x: %d", resp.StatusCode)
	}
	// /workers shows the agreement.
	code, wb, _ := e.do("GET", "/workers", "")
	if code != 200 || !strings.Contains(string(wb), `"agreement":1.000`) || !strings.Contains(string(wb), `"diagnosis":"none"`) {
		t.Fatalf("/workers: %s", wb)
	}
	// /route's explain gives each candidate's last report.
	code, rb, _ := e.do("POST", "/route", fmt.Sprintf(`{"token_ids":%s,"explain":true}`, promptJSON(p)))
	if code != 200 || !strings.Contains(string(rb), `"last_reported_cached_tokens":`+fmt.Sprint((len(p)-1)/testBlockSize*testBlockSize)) {
		t.Fatalf("/route explain: %d %s", code, rb)
	}
	for _, m := range []string{`kvroute_verify_requests_total{worker="`, `kvroute_verify_error_blocks_bucket{worker="`, `kvroute_verify_agreement{worker="`} {
		_, mb, _ := e.do("GET", "/metrics", "")
		if !strings.Contains(string(mb), m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
}

// A fleet whose engines use 32-token blocks while the router hashes 16
// (their registrations announce 16) is named a block-size mismatch within
// 100 requests, and nothing is repaired.
func TestVerifyNamesBlockSizeMismatch(t *testing.T) {
	e := startEnv(t, envOptions{noFleet: true, node: noSweep})
	f, err := mock.Start(mock.Config{Workers: 2, BlockSize: 32, AnnounceBlockSize: testBlockSize, KVBlocks: 4096, Speedup: 20,
		Namespace: "test", Component: "backend", Heartbeat: time.Second, LoadInterval: 10 * time.Millisecond, Logger: quietLogger()}, e.nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	e.waitWorkers(2)
	named := 0
	for i := 0; i < 100 && named == 0; i++ {
		e.complete(famPrompt(i%6, -1), 2)
		for _, w := range f.Workers() {
			if st := e.verifyStatsOf(w.ID()); st.Cause == verify.CauseBlockSize {
				if st.EngineBlock != 32 {
					t.Fatalf("engine block size %d, want 32", st.EngineBlock)
				}
				named = i + 1
			}
		}
	}
	if named == 0 {
		t.Fatal("no block-size mismatch named in 100 requests")
	}
	t.Logf("block-size mismatch named after %d requests", named)
	if v := e.metric(`kvroute_verify_engine_block_size{worker="1",dp_rank="0"}`) + e.metric(`kvroute_verify_engine_block_size{worker="2",dp_rank="0"}`); v < 32 {
		t.Fatalf("kvroute_verify_engine_block_size sums to %v", v)
	}
	for _, w := range f.Workers() {
		if st := e.verifyStatsOf(w.ID()); st.Repairs != 0 {
			t.Fatalf("worker %d repaired %d times for a block-size mismatch", w.ID(), st.Repairs)
		}
	}
}

// faultRun drives the repair proofs on a one-worker fleet: warm families
// into the index, break it with fault, send requests until a repair is
// asked, then measure agreement over the first 100 requests after the
// worker's dump was applied.
func faultRun(t *testing.T, want verify.Cause, fams int, fault func(e *env, w *mock.Worker), during func(e *env, i int) []uint32, after func(i int) []uint32) {
	e := startEnv(t, envOptions{workers: 1, node: noSweep, health: func(c *Config) { c.VerifyRepairInterval = time.Second }})
	w := e.fleet.Workers()[0]
	for f := range fams {
		p := famPrompt(f, -1)
		e.complete(p, 2)
		e.indexed(p, len(p)/testBlockSize)
		e.complete(p, 2) // a hit: the rank's hashes match the engine's
	}
	fault(e, w)
	start := time.Now()
	dumps := func() uint64 { return e.svc.Node.Recovery.Stats().Dumps }
	dumps0 := dumps()
	var n int
	for n = 0; e.verifyStatsOf(w.ID()).Repairs == 0; n++ {
		if n == 200 {
			t.Fatalf("no repair after 200 requests: %+v", e.verifyStatsOf(w.ID()))
		}
		e.complete(during(e, n), 2)
	}
	detected := time.Since(start)
	st := e.verifyStatsOf(w.ID())
	waitFor(t, "the dump applied", func() bool { return dumps() > dumps0 })
	before := st
	for i := range 100 {
		e.complete(after(i), 2)
	}
	back := time.Since(start) - detected
	st = e.verifyStatsOf(w.ID())
	agreed, total := st.Agreed-before.Agreed, (st.Requests-st.Unverified)-(before.Requests-before.Unverified)
	share := float64(agreed) / float64(total)
	t.Logf("detected after %d requests in %v (cause %v); agreement %.3f (%d of %d) over the 100 requests after the dump, done %v after detection",
		n, detected.Round(time.Millisecond), before.LastCause, share, agreed, total, back.Round(time.Millisecond))
	if before.LastCause != want {
		t.Errorf("cause %v, want %v", before.LastCause, want)
	}
	// How long the repair took is logged above, not asserted: a loaded
	// machine stretches it (docs/benchmarks.md has the measured times).
	if share < 0.99 {
		t.Fatalf("agreement %.3f after the repair, want ≥ 0.99", share)
	}
}

// A worker whose events are cut off while it keeps serving from its cache
// is found (its reports exceed the index), repaired by a dump through
// recovery, and agrees again.
func TestVerifyRepairsCutEvents(t *testing.T) {
	faultRun(t, verify.CauseMissing, 8, func(_ *env, w *mock.Worker) { w.CutEvents(true) },
		func(_ *env, i int) []uint32 { return famPrompt(8+i/2%8, -1) }, // new families, each twice: cached unbeknownst to the index
		func(i int) []uint32 { return famPrompt(i%16, -1) })
}

// A worker whose cache is cleared without events is found (the index
// promises blocks the engine lost), repaired by a dump, and agrees again.
// (A prefix requested again after the clear is stored and announced anew,
// which heals its own entries: the window sees the index wrong for as many
// requests as there are prefixes it lost, 24 here.)
func TestVerifyRepairsSilentClear(t *testing.T) {
	faultRun(t, verify.CauseStale, 24, func(e *env, w *mock.Worker) {
		waitFor(t, "an idle worker", w.Idle)
		if err := w.ClearCacheSilently(); err != nil {
			t.Fatal(err)
		}
	}, func(_ *env, i int) []uint32 { return famPrompt(i%24, 1+i) }, // the warm prefixes, new suffixes
		func(i int) []uint32 { return famPrompt(i%24, 1000+i) })
}
