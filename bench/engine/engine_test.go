package engine

import (
	"errors"
	"flag"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/kvroute/kvroute/bench/kvcache/kvmodel"
	"github.com/kvroute/kvroute/radix"
	"github.com/kvroute/kvroute/wire"
)

var seedFlag = flag.Uint64("seed", 0, "seed for randomized tests (0: time-based, logged)")

// prompt returns local hashes for a prompt of n full blocks whose first
// shared blocks come from family (so prompts of one family share them).
func prompt(family, id uint64, n, shared int) []wire.BlockHash {
	out := make([]wire.BlockHash, n)
	for i := range out {
		if i < shared {
			out[i] = wire.BlockHash(mix(family<<20 | uint64(i)))
		} else {
			out[i] = wire.BlockHash(mix(id<<40 | 1<<39 | uint64(i)))
		}
	}
	return out
}

type arrival struct {
	at time.Duration
	r  Request
}

type step struct {
	StepInfo
	effects []Effect
}

// checker replays an engine's events into a strict model and a radix tree
// and checks both against the blocks the engine's manager holds.
type checker struct {
	model kvmodel.Model
	tree  *radix.Tree
}

func (c *checker) check(t *testing.T, e *Engine) {
	t.Helper()
	if c.tree == nil {
		c.tree = radix.New()
	}
	for _, ev := range e.Events() {
		if err := c.model.Apply(&ev); err != nil {
			t.Fatal(err)
		}
		if res, err := c.tree.Apply(&ev); err != nil || res.Unknown != 0 || res.Conflicts != 0 {
			t.Fatalf("radix apply %v: %+v %v", ev.Kind, res, err)
		}
	}
	held := e.KV().Held(nil)
	want := make([]kvmodel.Block, len(held))
	for i, b := range held {
		want[i] = kvmodel.Block{Engine: b.Engine, Local: b.Local, Parent: b.Parent, HasParent: b.HasParent}
	}
	k := e.Config().Worker
	if err := c.model.Check(k, want); err != nil {
		t.Fatal(err)
	}
	if got := c.tree.TreeSize(k); int(got) != len(held) {
		t.Fatalf("tree holds %d blocks, engine %d", got, len(held))
	}
	if err := e.KV().CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// simulate is a discrete-event driver: it submits arrivals when due, steps
// the engine, advances the virtual clock by each step's duration, and
// checks the KV events after every step, until all requests finished.
func simulate(t *testing.T, e *Engine, c *checker, arrivals []arrival) []step {
	t.Helper()
	var steps []step
	now, next := time.Duration(0), 0
	for guard := 0; ; guard++ {
		if guard > 1e6 {
			t.Fatal("simulation does not end")
		}
		for next < len(arrivals) && arrivals[next].at <= now {
			if err := e.Submit(arrivals[next].r, now); err != nil {
				t.Fatal(err)
			}
			next++
		}
		d := e.Step(now)
		c.check(t, e)
		if d > 0 {
			if e.LastStep().At != now || e.LastStep().Duration != d {
				t.Fatalf("last step %+v at %v, %v", e.LastStep(), now, d)
			}
			steps = append(steps, step{StepInfo: e.LastStep(), effects: slices.Clone(e.Effects())})
		} else if len(e.Effects()) != 0 {
			t.Fatal("effects from an empty step")
		}
		e.Reset()
		switch {
		case d > 0:
			now += d
		case next < len(arrivals):
			now = max(now, arrivals[next].at)
		case e.Idle():
			return steps
		default:
			w, r := e.Load()
			t.Fatalf("stuck at %v with %d waiting, %d running", now, w, r)
		}
	}
}

func effectsOf(steps []step, kind EffectKind) map[uint64]Effect {
	out := map[uint64]Effect{}
	for _, s := range steps {
		for _, ef := range s.effects {
			if ef.Kind == kind {
				out[ef.Request] = ef
			}
		}
	}
	return out
}

func TestPerfMonotone(t *testing.T) {
	for tk := 1; tk < 200000; tk += 97 {
		if PrefillPoly(tk+1) <= PrefillPoly(tk) && PrefillPoly(tk+97) <= PrefillPoly(tk) {
			t.Fatalf("prefill not increasing at %d", tk)
		}
	}
	// 4.209989e-07*8192² + 1.518344e-02*8192 + 16.50142 = 169.137 ms
	if got := PrefillPoly(8192); PrefillPoly(0) != 0 || got < 169136*time.Microsecond || got > 169138*time.Microsecond {
		t.Fatalf("prefill(0)=%v prefill(8192)=%v", PrefillPoly(0), PrefillPoly(8192))
	}
	for u := 0.0; u < 1; u += 0.01 {
		if DecodePoly(u+0.01) <= DecodePoly(u) {
			t.Fatalf("decode not increasing at %.2f", u)
		}
	}
	if DecodePoly(-1) != DecodePoly(0) || DecodePoly(2) != DecodePoly(1) {
		t.Fatal("decode usage not clamped")
	}
}

// TestPrefillTimeFollowsUncachedTokens: a longer prompt takes a longer first
// step; the same prompt again, fully cached, a much shorter one, reporting
// its cached tokens (all but the last block, which vLLM recomputes).
func TestPrefillTimeFollowsUncachedTokens(t *testing.T) {
	const bs = 16
	var c checker
	first := func(e *Engine, r Request) (time.Duration, Effect) {
		steps := simulate(t, e, &c, []arrival{{0, r}})
		return steps[0].Duration, effectsOf(steps, FirstToken)[r.ID]
	}
	e := New(Config{Capacity: 1000, BlockSize: bs})
	short, _ := first(e, Request{ID: 1, Prompt: prompt(1, 1, 100, 0), PromptTokens: 100 * bs, MaxTokens: 1})
	long, ef := first(e, Request{ID: 2, Prompt: prompt(2, 2, 400, 0), PromptTokens: 400 * bs, MaxTokens: 1})
	if !(short < long) || ef.CachedTokens != 0 {
		t.Fatalf("prefill of 1600 tokens %v, 6400 tokens %v (cached %d)", short, long, ef.CachedTokens)
	}
	again, ef := first(e, Request{ID: 3, Prompt: prompt(2, 2, 400, 0), PromptTokens: 400 * bs, MaxTokens: 1})
	if ef.CachedTokens != 399*bs || !(again < short) {
		t.Fatalf("cached rerun: %v, cached %d tokens", again, ef.CachedTokens)
	}
	if want := PrefillPoly(bs); again != want {
		t.Fatalf("cached rerun took %v, want prefill(%d) = %v", again, bs, want)
	}
	c = checker{}
	e2 := New(Config{Capacity: 1000, BlockSize: bs, Speedup: 4})
	fast, _ := first(e2, Request{ID: 2, Prompt: prompt(2, 2, 400, 0), PromptTokens: 400 * bs, MaxTokens: 1})
	if fast != long/4 && fast != long/4+1 && fast != long/4-1 {
		t.Fatalf("speedup 4: %v, want %v", fast, long/4)
	}
}

// TestCachedTokensFollowSharedPrefix: requests sharing k leading blocks with
// a finished one report k blocks of cached tokens.
func TestCachedTokensFollowSharedPrefix(t *testing.T) {
	const bs = 16
	e := New(Config{Capacity: 4000, BlockSize: bs})
	arr := []arrival{{0, Request{ID: 100, Prompt: prompt(7, 100, 50, 50), PromptTokens: 50*bs + 5, MaxTokens: 3}}}
	for k := range 11 { // 0..40 shared blocks of 40
		id := uint64(k + 1)
		arr = append(arr, arrival{time.Hour, Request{ID: id, Prompt: prompt(7, id, 40, k*4), PromptTokens: 40*bs + 3, MaxTokens: 2}})
	}
	steps := simulate(t, e, &checker{}, arr)
	first := effectsOf(steps, FirstToken)
	for k := range 11 {
		if got := first[uint64(k+1)].CachedTokens; got != k*4*bs {
			t.Errorf("request sharing %d blocks: cached %d tokens, want %d", k*4, got, k*4*bs)
		}
	}
	fin := effectsOf(steps, Finished)
	if len(fin) != 12 || fin[100].OutputTokens != 3 || fin[1].OutputTokens != 2 {
		t.Fatalf("finished %v", fin)
	}
}

// TestChunkedPrefill: a prompt larger than the token budget is prefilled in
// budget-sized chunks; its first token comes after the last chunk, and its
// blocks are announced as each chunk is scheduled.
func TestChunkedPrefill(t *testing.T) {
	const bs = 16
	e := New(Config{Capacity: 2000, BlockSize: bs, MaxBatchedTokens: 8192})
	p := 20000
	steps := simulate(t, e, &checker{}, []arrival{{0, Request{ID: 1, Prompt: prompt(1, 1, p/bs, 0), PromptTokens: p, MaxTokens: 4}}})
	if len(steps) != 3+3 {
		t.Fatalf("%d steps, want 3 prefill chunks and 3 decodes", len(steps))
	}
	for i, want := range []int{8192, 8192, 20000 - 2*8192} {
		if steps[i].PrefillTokens != want || steps[i].DecodeTokens != 0 {
			t.Fatalf("step %d: prefill %d decode %d, want %d", i, steps[i].PrefillTokens, steps[i].DecodeTokens, want)
		}
	}
	if len(steps[0].effects)+len(steps[1].effects) != 0 || steps[2].effects[0].Kind != FirstToken {
		t.Fatalf("first token effects: %v %v %v", steps[0].effects, steps[1].effects, steps[2].effects)
	}
	if steps[2].effects[0].At != steps[2].At+steps[2].Duration {
		t.Fatal("first token not stamped at the end of its step")
	}
	for _, s := range steps[3:] {
		if s.DecodeTokens != 1 || s.PrefillTokens != 0 || s.Duration != DecodePoly(s.Usage) {
			t.Fatalf("decode step %+v", s)
		}
	}
}

// TestDecodeTimeGrowsWithLoad: decode-only steps get longer as the KV cache
// fills.
func TestDecodeTimeGrowsWithLoad(t *testing.T) {
	const bs = 4
	e := New(Config{Capacity: 400, BlockSize: bs})
	var arr []arrival
	for i := range 10 {
		arr = append(arr, arrival{0, Request{ID: uint64(i), Prompt: prompt(0, uint64(i), 2, 0), PromptTokens: 8, MaxTokens: 150}})
	}
	steps := simulate(t, e, &checker{}, arr)
	var prev step
	n := 0
	for _, s := range steps {
		if s.PrefillTokens != 0 || s.DecodeTokens == 0 {
			continue
		}
		if n > 0 && (s.Usage < prev.Usage) != (s.Duration < prev.Duration) && s.Usage != prev.Usage {
			t.Fatalf("usage %.3f -> %.3f but decode %v -> %v", prev.Usage, s.Usage, prev.Duration, s.Duration)
		}
		prev = s
		n++
	}
	if n < 100 || steps[len(steps)-1].Duration <= steps[1].Duration {
		t.Fatalf("%d decode steps; first %v last %v", n, steps[1].Duration, steps[len(steps)-1].Duration)
	}
}

// TestPreemptionRecomputes: two requests decode until the cache is full; the
// later one is preempted (its blocks freed at once), recomputed from its
// cached blocks when space returns, and both finish with all their tokens.
func TestPreemptionRecomputes(t *testing.T) {
	const bs = 4
	e := New(Config{Capacity: 20, BlockSize: bs})
	arr := []arrival{
		{0, Request{ID: 1, Prompt: prompt(1, 1, 4, 0), PromptTokens: 16, MaxTokens: 30}},
		{0, Request{ID: 2, Prompt: prompt(2, 2, 4, 0), PromptTokens: 16, MaxTokens: 40}},
	}
	var c checker
	now := time.Duration(0)
	for _, a := range arr {
		if err := e.Submit(a.r, now); err != nil {
			t.Fatal(err)
		}
	}
	var pre *Effect
	var usedBefore int
	finished := map[uint64]Effect{}
	for !e.Idle() {
		usedBefore, _ = e.KV().Usage()
		d := e.Step(now)
		c.check(t, e)
		for _, ef := range e.Effects() {
			switch ef.Kind {
			case Preempted:
				if pre == nil {
					ef := ef
					pre = &ef
					used, _ := e.KV().Usage()
					if ef.Request != 2 || used >= usedBefore {
						t.Fatalf("preempted %d; usage %d -> %d", ef.Request, usedBefore, used)
					}
					if _, ok := e.KV().Tokens(2); ok {
						t.Fatal("preempted request still holds blocks")
					}
				}
			case Finished:
				finished[ef.Request] = ef
			}
		}
		e.Reset()
		now += d
	}
	st := e.Stats()
	if pre == nil || st.Preemptions == 0 || len(finished) != 2 ||
		finished[1].OutputTokens != 30 || finished[2].OutputTokens != 40 {
		t.Fatalf("preemption %v, finished %v, stats %+v", pre, finished, st)
	}
	// Request 2 was recomputed: prompt and the outputs it had, less what was
	// still cached when it came back; everything else is decode.
	recompute := uint64(16+pre.OutputTokens) - st.RecomputeCachedTokens
	if st.PrefillTokens != 32+recompute || st.RecomputeCachedTokens == 0 {
		t.Fatalf("prefill %d tokens, want 32 + %d recomputed (stats %+v, preempted %+v)", st.PrefillTokens, recompute, st, *pre)
	}
	// Each request's first token comes from prefill, and so does the token
	// after request 2's recomputation: the rest are decoded one per step.
	if st.Preemptions != 1 || st.DecodeTokens != 29+39-1 {
		t.Fatalf("%d preemptions, decode %d tokens, want 1 and %d", st.Preemptions, st.DecodeTokens, 29+39-1)
	}
}

// TestMaxNumSeqs: at most MaxNumSeqs requests run at once.
func TestMaxNumSeqs(t *testing.T) {
	e := New(Config{Capacity: 10000, BlockSize: 16})
	for i := range 300 {
		if err := e.Submit(Request{ID: uint64(i), Prompt: prompt(0, uint64(i), 1, 0), PromptTokens: 20, MaxTokens: 5}, 0); err != nil {
			t.Fatal(err)
		}
	}
	e.Step(0)
	if w, r := e.Load(); r != 256 || w != 44 {
		t.Fatalf("waiting %d running %d", w, r)
	}
}

func TestSubmitErrors(t *testing.T) {
	e := New(Config{Capacity: 10, BlockSize: 4})
	ok := Request{ID: 1, Prompt: prompt(0, 1, 2, 0), PromptTokens: 9, MaxTokens: 1}
	if err := e.Submit(ok, 0); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		r   Request
		err error
	}{
		{ok, ErrDuplicate},
		{Request{ID: 2, Prompt: prompt(0, 2, 1, 0), PromptTokens: 9, MaxTokens: 1}, ErrBadRequest},
		{Request{ID: 2, PromptTokens: 0, MaxTokens: 1}, ErrBadRequest},
		{Request{ID: 2, Prompt: prompt(0, 2, 2, 0), PromptTokens: 8, MaxTokens: 0}, ErrBadRequest},
		{Request{ID: 2, Prompt: prompt(0, 2, 9, 0), PromptTokens: 36, MaxTokens: 5}, ErrTooLong},
	} {
		if err := e.Submit(c.r, 0); !errors.Is(err, c.err) {
			t.Errorf("%+v: %v, want %v", c.r, err, c.err)
		}
	}
}

// TestRandomWorkload runs a random mixed workload (shared prefixes, chunked
// prefills, decode growth, preemptions) through the discrete-event driver;
// after every step the engine's KV events, replayed into a strict model and
// a radix.Tree, reproduce exactly the blocks it holds. Every request
// finishes with its full output, and first tokens precede finishes.
func TestRandomWorkload(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -seed %d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	const bs = 8
	e := New(Config{Capacity: 300, BlockSize: bs, MaxNumSeqs: 16, MaxBatchedTokens: 512, Worker: wire.WorkerKey{Worker: 9}})
	var arr []arrival
	at := time.Duration(0)
	want := map[uint64]int{}
	for i := range 150 {
		n := 1 + rng.IntN(40)
		id := uint64(i + 1)
		r := Request{ID: id, Prompt: prompt(uint64(rng.IntN(4)), id, n, rng.IntN(n+1)), PromptTokens: n*bs + rng.IntN(bs), MaxTokens: 1 + rng.IntN(60)}
		arr = append(arr, arrival{at, r})
		want[id] = r.MaxTokens
		at += time.Duration(rng.IntN(80)) * time.Millisecond
	}
	steps := simulate(t, e, &checker{}, arr)
	first, fin := effectsOf(steps, FirstToken), effectsOf(steps, Finished)
	for id, n := range want {
		if fin[id].OutputTokens != n || first[id].At > fin[id].At || first[id].At == 0 {
			t.Fatalf("request %d: first %+v finished %+v, want %d tokens", id, first[id], fin[id], n)
		}
	}
	st := e.Stats()
	if st.Finished != 150 || st.CachedTokens == 0 || st.Preemptions == 0 {
		t.Fatalf("the workload missed a path: %+v", st)
	}
	if used, _ := e.KV().Usage(); used != 0 {
		t.Fatalf("%d blocks still in use when idle", used)
	}
}

// TestAbort: an aborted request leaves the running or waiting queue, its
// blocks are freed without an event (full blocks stay cached), no effect
// names it afterwards, and the engine carries on with the others.
func TestAbort(t *testing.T) {
	const bs = 4
	e := New(Config{Capacity: 64, BlockSize: bs, MaxNumSeqs: 1})
	var c checker
	run := Request{ID: 1, Prompt: prompt(1, 1, 4, 0), PromptTokens: 18, MaxTokens: 100}
	wait := Request{ID: 2, Prompt: prompt(2, 2, 2, 0), PromptTokens: 8, MaxTokens: 3}
	for _, r := range []Request{run, wait} {
		if err := e.Submit(r, 0); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Duration(0)
	for range 10 { // request 1 prefills and decodes; request 2 waits (MaxNumSeqs 1)
		now += e.Step(now)
		c.check(t, e)
		e.Reset()
	}
	if w, r := e.Load(); w != 1 || r != 1 {
		t.Fatalf("waiting %d running %d, want 1 and 1", w, r)
	}
	if e.Abort(2) != true || e.Abort(2) != false || e.Abort(99) != false {
		t.Fatal("Abort of a waiting request, again, and of an unknown one")
	}
	if w, r := e.Load(); w != 0 || r != 1 {
		t.Fatalf("after aborting the waiting request: waiting %d running %d", w, r)
	}
	toks, _ := e.KV().Tokens(1)
	if !e.Abort(1) || !e.Idle() {
		t.Fatal("Abort of the running request")
	}
	if used, _ := e.KV().Usage(); used != 0 || e.KV().Cached() != toks/bs {
		t.Fatalf("after abort: %d blocks used, %d cached; want 0 used and the %d full blocks cached", used, e.KV().Cached(), toks/bs)
	}
	if len(e.Events()) != 0 || len(e.Effects()) != 0 {
		t.Fatalf("abort announced %v / %v", e.Events(), e.Effects())
	}
	c.check(t, e)
	if e.Step(now) != 0 {
		t.Fatal("an idle engine stepped")
	}
	// The slots are reused; a new request runs to the end.
	steps := simulate(t, e, &c, []arrival{{now, Request{ID: 1, Prompt: prompt(1, 1, 4, 0), PromptTokens: 18, MaxTokens: 3}}})
	fin := effectsOf(steps, Finished)
	if st := e.Stats(); st.Aborted != 2 || st.Finished != 1 || fin[1].OutputTokens != 3 || fin[1].CachedTokens != 16 {
		t.Fatalf("stats %+v, finished %+v", st, fin)
	}
}

// TestOutputHashes: requests that name their output blocks (Request.Output)
// store the same blocks when they are identical, and a follow-up whose prompt
// repeats prompt and output finds every computed block cached; without
// Output, identical requests store distinct output blocks.
func TestOutputHashes(t *testing.T) {
	const bs, p, m = 4, 10, 13 // 23 tokens: 5 full blocks, 2 of them the prompt's
	full := prompt(7, 7, (p+m)/bs, 0)
	for _, named := range []bool{true, false} {
		e := New(Config{Capacity: 64, BlockSize: bs})
		var c checker
		var arr []arrival
		for id := range uint64(2) {
			r := Request{ID: id + 1, Prompt: full[:p/bs], PromptTokens: p, MaxTokens: m}
			if named {
				r.Output = full[p/bs:]
			}
			arr = append(arr, arrival{time.Duration(id) * time.Second, r})
		}
		simulate(t, e, &c, arr)
		// The last generated token's KV is never computed: 22 tokens, 5 blocks.
		want := (p + m - 1) / bs
		if !named {
			want = p/bs + 2*(want-p/bs)
		}
		if got := e.KV().Cached(); got != want {
			t.Fatalf("named %v: %d blocks cached, want %d", named, got, want)
		}
		if !named {
			continue
		}
		if got := e.KV().Match(full); got != (p+m-1)/bs {
			t.Fatalf("the output's blocks are not cached under their names: %d of %d match", got, len(full))
		}
		steps := simulate(t, e, &c, []arrival{{10 * time.Second, Request{ID: 3, Prompt: full, PromptTokens: len(full)*bs + 2, MaxTokens: 1}}})
		if got := effectsOf(steps, FirstToken)[3].CachedTokens; got != (p+m-1)/bs*bs {
			t.Fatalf("follow-up cached %d tokens, want %d", got, (p+m-1)/bs*bs)
		}
	}
	e := New(Config{Capacity: 64, BlockSize: bs})
	if err := e.Submit(Request{ID: 1, Prompt: full[:2], PromptTokens: p, MaxTokens: m, Output: full[2:4]}, 0); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("short Output: %v", err)
	}
}

// TestHostTierOnload: with a host tier, a prompt evicted from the device is
// onloaded from the host on its return (HostTokens, an onload time per
// block in its step) instead of recomputed; without one it is recomputed.
// Every event applies cleanly to a radix tree, whose host overlap for the
// prompt before its return equals what the engine onloads.
func TestHostTierOnload(t *testing.T) {
	const bs, n = 16, 30
	run := func(hostBlocks int) (Effect, StepInfo, radix.Overlap) {
		e := New(Config{Capacity: 40, BlockSize: bs, HostCapacity: hostBlocks, HostBlockTime: time.Millisecond})
		tree := radix.New()
		now := time.Duration(0)
		var first Effect
		var firstStep StepInfo
		var before radix.Overlap
		for i, id := range []uint64{1, 2, 3, 4} {
			fam := id
			if id == 4 {
				fam = 1 // the first prompt again
				for _, o := range tree.Match(nil, prompt(1, 1, n, n)) {
					before = o
				}
			}
			if err := e.Submit(Request{ID: id, Prompt: prompt(fam, id, n, n), PromptTokens: n*bs + 1, MaxTokens: 2}, now); err != nil {
				t.Fatal(err)
			}
			for !e.Idle() {
				d := e.Step(now)
				for _, ev := range e.Events() {
					if res, err := tree.Apply(&ev); err != nil || res.Unknown != 0 || res.Conflicts != 0 {
						t.Fatalf("request %d: radix apply %v %v: %+v %v", i, ev.Tier, ev.Kind, res, err)
					}
				}
				for _, ef := range e.Effects() {
					if ef.Kind == FirstToken && ef.Request == 4 {
						first, firstStep = ef, e.LastStep()
					}
				}
				e.Reset()
				now += d
			}
		}
		return first, firstStep, before
	}
	ef, st, ov := run(200)
	if ef.HostTokens < (n-2)*bs || ef.CachedTokens != ef.HostTokens {
		t.Errorf("with a host tier: cached %d tokens, %d from the host; want ≥ %d, all from the host", ef.CachedTokens, ef.HostTokens, (n-2)*bs)
	}
	if int(ov.Host)*bs != ef.HostTokens || ov.Blocks != 0 {
		t.Errorf("index before the return: %+v, engine onloaded %d tokens", ov, ef.HostTokens)
	}
	if want := PrefillPoly(n*bs+1-ef.CachedTokens) + time.Duration(ef.HostTokens/bs)*time.Millisecond; st.Duration != want {
		t.Errorf("onload step took %v, want prefill + 1 ms per onloaded block = %v", st.Duration, want)
	}
	ef, _, ov = run(0)
	if ef.CachedTokens != 0 || ef.HostTokens != 0 || ov.Host != 0 {
		t.Errorf("without a host tier: cached %d, host %d, index %+v; want 0", ef.CachedTokens, ef.HostTokens, ov)
	}
}
