package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/png"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/bench/engine"
	"github.com/kvroute/kvroute/bench/trace"
	"github.com/kvroute/kvroute/sched"
)

const (
	famPrefixIDs = 4 // 2048-token shared prefix per family
	famRequests  = 24
)

// families builds the known-answer workload: two prompt families A and B,
// each a 2048-token shared prefix followed by a unique 512-token suffix,
// arriving A A B B A A B B ... two seconds apart (each request ends before
// the next arrives). With two workers, kv must put each family on its own
// worker and hit the shared prefix on every request but the first of each
// family, which is the achievable ratio; round-robin alternates workers, so
// each worker sees both families and, with caches too small to keep both
// prefixes, keeps evicting them.
func families(t testing.TB) *Workload {
	t.Helper()
	tr := &trace.Trace{}
	next := uint64(100)
	for i := range famRequests {
		fam := uint64((i / 2) % 2) // A A B B ...
		ids := make([]uint64, 0, famPrefixIDs+1)
		for j := range uint64(famPrefixIDs) {
			ids = append(ids, fam*10+j)
		}
		ids = append(ids, next)
		next++
		tr.Requests = append(tr.Requests, trace.Request{
			Time: time.Duration(i) * 2 * time.Second, HasTime: true,
			InputLength: (famPrefixIDs + 1) * trace.IDBlockSize, OutputLength: 16, HashIDs: ids,
		})
	}
	w, err := Prepare(tr, 16, "families")
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// familyConfig is two workers whose caches (200 blocks) hold one request
// (161 blocks with its output) and a little more: never both prefixes.
func familyConfig() Config {
	cfg := DefaultConfig()
	cfg.Fleet.Workers = 2
	cfg.Fleet.KVBlocks = 200
	return cfg
}

func mustPolicy(t testing.TB, name string) Policy {
	t.Helper()
	p, err := ParsePolicy(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// runSim runs one simulation and returns the sim for inspection.
func runSim(t testing.TB, w *Workload, cfg Config, p Policy) *sim {
	t.Helper()
	cfg = cfg.withDefaults()
	s, err := newSim(w, cfg, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.run(); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestFamiliesAchievable(t *testing.T) {
	w := families(t)
	// Every request but the first of each family hits its 2048-token
	// prefix; suffixes are unique.
	want := float64((famRequests-2)*famPrefixIDs) / float64(famRequests*(famPrefixIDs+1))
	if got := w.Achievable(); math.Abs(got-want) > 1e-12 {
		t.Fatalf("achievable %v, want %v", got, want)
	}
}

func TestFamiliesKV(t *testing.T) {
	w := families(t)
	for _, name := range []string{"kv", "kv-approx"} {
		t.Run(name, func(t *testing.T) {
			s := runSim(t, w, familyConfig(), mustPolicy(t, name))
			home := [2]int32{-1, -1}
			for i := range famRequests {
				fam := (i / 2) % 2
				if home[fam] < 0 {
					home[fam] = s.rank[i]
				}
				if s.rank[i] != home[fam] {
					t.Fatalf("request %d of family %d went to rank %d, family's rank is %d", i, fam, s.rank[i], home[fam])
				}
			}
			if home[0] == home[1] {
				t.Fatalf("both families on rank %d", home[0])
			}
			r := s.result()
			if math.Abs(r.HitRatio-w.Achievable()) > 1e-12 || math.Abs(r.HitOfAchievable-1) > 1e-12 {
				t.Fatalf("hit ratio %v (%v of achievable), want the achievable %v", r.HitRatio, r.HitOfAchievable, w.Achievable())
			}
			if r.MaxWorkerShare != 1 || r.Completed != famRequests || r.Rejected != 0 || r.Saturated {
				t.Fatalf("result %+v: want all %d completed on two equal shares, nothing saturated", r, famRequests)
			}
		})
	}
}

func TestFamiliesRoundRobin(t *testing.T) {
	w := families(t)
	s := runSim(t, w, familyConfig(), mustPolicy(t, "round-robin"))
	for i := range famRequests {
		if s.rank[i] != int32(i%2) {
			t.Fatalf("request %d on rank %d, round-robin gives %d", i, s.rank[i], i%2)
		}
	}
	r := s.result()
	if r.HitRatio > 0.5*w.Achievable() {
		t.Fatalf("round-robin hit ratio %v, want under half the achievable %v (caches hold one prefix)", r.HitRatio, w.Achievable())
	}
	kv := runSim(t, w, familyConfig(), mustPolicy(t, "kv")).result()
	if kv.TTFTMeanMs >= r.TTFTMeanMs {
		t.Fatalf("kv mean TTFT %v ≥ round-robin's %v: cache hits must shorten prefill", kv.TTFTMeanMs, r.TTFTMeanMs)
	}
}

// TestTTFTModel checks one request's latencies against the timing model:
// a 2560-token prompt prefills in one step, then 15 decode steps.
func TestTTFTModel(t *testing.T) {
	tr := families(t).Trace
	w, err := Prepare(&trace.Trace{Requests: tr.Requests[:1]}, 16, "one")
	if err != nil {
		t.Fatal(err)
	}
	cfg := familyConfig()
	cfg.Fleet.Workers = 1
	r := runSim(t, w, cfg, mustPolicy(t, "kv")).result()
	wantTTFT := ms(engine.PrefillPoly(2560))
	if math.Abs(r.TTFTMeanMs-wantTTFT) > 1e-6 {
		t.Fatalf("TTFT %v ms, want the prefill model's %v ms", r.TTFTMeanMs, wantTTFT)
	}
	if r.ITLMeanMs <= 0 || r.E2EMeanMs <= r.TTFTMeanMs+14*r.ITLMeanMs {
		t.Fatalf("ITL %v, E2E %v ms: want 15 decode steps after the first token", r.ITLMeanMs, r.E2EMeanMs)
	}
	if r.HitRatio != 0 {
		t.Fatalf("hit ratio %v on a cold cache", r.HitRatio)
	}
}

// skipUnderInvariants skips a test whose replays are too large for the
// O(size)-per-mutation checks of -tags invariants (the smaller tests cover
// that pass).
func skipUnderInvariants(t *testing.T) {
	if invariants {
		t.Skip("replays of trace size are too slow with -tags invariants")
	}
}

// sized returns n, or small under -tags invariants.
func sized(n, small int) int {
	if invariants {
		return small
	}
	return n
}

func TestDeterministic(t *testing.T) {
	w := head(t, sized(120, 30))
	cfg := DefaultConfig()
	cfg.Fleet.Workers = 4
	cfg.Fleet.KVBlocks = sized(16384, 4096)
	if invariants {
		cfg.LoadInterval = time.Second // every load report checks the scheduler's invariants
	}
	cfg.Speedup = 8 // enough load for queues, preemption and ties to matter
	for _, name := range []string{"kv", "random", "kv-approx"} {
		a, err := Simulate(w, cfg, mustPolicy(t, name))
		if err != nil {
			t.Fatal(err)
		}
		b, err := Simulate(w, cfg, mustPolicy(t, name))
		if err != nil {
			t.Fatal(err)
		}
		a.WallS, b.WallS = 0, 0
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: two runs differ:\n%+v\n%+v", name, a, b)
		}
	}
	sw := Sweep{Policies: []Policy{mustPolicy(t, "kv"), mustPolicy(t, "random")}, Speedups: []float64{8}}
	sw.Parallel = 1
	r1, err := Run(w, cfg, sw)
	if err != nil {
		t.Fatal(err)
	}
	sw.Parallel = 4
	r4, err := Run(w, cfg, sw)
	if err != nil {
		t.Fatal(err)
	}
	for i := range r1.Policies {
		r1.Policies[i].WallS, r4.Policies[i].WallS = 0, 0
	}
	if !reflect.DeepEqual(r1, r4) {
		t.Fatal("reports differ between 1 and 4 parallel runs")
	}
}

var headCache = map[int]*Workload{}

// head returns the first n requests of the 200-line testdata trace.
func head(t testing.TB, n int) *Workload {
	t.Helper()
	if w, ok := headCache[n]; ok {
		return w
	}
	tr, err := trace.ReadFile("../trace/testdata/mooncake_head200.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	tr.Requests = tr.Requests[:n]
	w, err := Prepare(tr, 16, "mooncake_head200.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	headCache[n] = w
	return w
}

func TestReportJSONShape(t *testing.T) {
	n := sized(60, 20)
	w := head(t, n)
	rep, err := Run(w, DefaultConfig(), Sweep{Policies: []Policy{mustPolicy(t, "kv"), mustPolicy(t, "round-robin")}, Speedups: []float64{1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"trace", "workers", "achievable_hit_ratio", "policies"} {
		if _, ok := m[k]; !ok {
			t.Errorf("top level lacks %q", k)
		}
	}
	if m["workers"] != float64(8) || m["trace"] != "mooncake_head200.jsonl" {
		t.Errorf("workers %v trace %v", m["workers"], m["trace"])
	}
	pols, ok := m["policies"].([]any)
	if !ok || len(pols) != 4 {
		t.Fatalf("policies %T len %d, want a list of 4", m["policies"], len(pols))
	}
	for _, p := range pols {
		obj := p.(map[string]any)
		for _, k := range []string{"policy", "requests", "ttft_mean_ms", "ttft_p50_ms", "ttft_p99_ms", "itl_mean_ms", "e2e_mean_ms", "hit_ratio", "max_worker_share", "rejected"} {
			if _, ok := obj[k]; !ok {
				t.Errorf("policy object lacks %q", k)
			}
		}
		if obj["requests"] != float64(n) {
			t.Errorf("requests %v, want %d", obj["requests"], n)
		}
	}
	if first := pols[0].(map[string]any); first["policy"] != "kv" || first["speedup"] != float64(1) {
		t.Errorf("first result %v at %v, want kv at 1", first["policy"], first["speedup"])
	}
	if rep.Saturation == nil {
		t.Fatal("report with kv has no saturation result")
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"achievable hit ratio", "round-robin"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	// The report states results; judging them is for tests.
	for _, judgement := range []string{"target", "MISSED", "met ", "goal"} {
		if strings.Contains(table.String(), judgement) || strings.Contains(buf.String(), judgement) {
			t.Errorf("report judges its results (%q):\n%s", judgement, table.String())
		}
	}
	var lines bytes.Buffer
	if err := rep.WriteBenchmarkLines(&lines); err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(lines.String()), "\n")
	if len(got) != 4 || !strings.HasPrefix(got[0], "BenchmarkReplay/policy=kv/speedup=1 \t1\t") || !strings.Contains(got[0], " ttft_mean_ms\t") {
		t.Fatalf("benchmark lines:\n%s", lines.String())
	}
}

func TestSaturation(t *testing.T) {
	skipUnderInvariants(t)
	w := head(t, 200)
	cfg := DefaultConfig()
	light, err := Simulate(w, cfg, mustPolicy(t, "kv"))
	if err != nil {
		t.Fatal(err)
	}
	if light.Saturated || light.Tracking < SaturationTracking {
		t.Fatalf("8 workers at 1x: saturated %v tracking %v", light.Saturated, light.Tracking)
	}
	cfg.Fleet.Workers, cfg.Speedup = 1, 20
	heavy, err := Simulate(w, cfg, mustPolicy(t, "kv"))
	if err != nil {
		t.Fatal(err)
	}
	if !heavy.Saturated || heavy.Tracking >= SaturationTracking {
		t.Fatalf("one worker at 20x: saturated %v tracking %v", heavy.Saturated, heavy.Tracking)
	}
	if heavy.TTFTMeanMs < 10*light.TTFTMeanMs {
		t.Fatalf("saturated TTFT %v not far above light %v", heavy.TTFTMeanMs, light.TTFTMeanMs)
	}
}

func TestAutoSweep(t *testing.T) {
	skipUnderInvariants(t)
	w := head(t, 120)
	cfg := DefaultConfig()
	cfg.Fleet.Workers = 4
	rep, err := Run(w, cfg, Sweep{Policies: []Policy{mustPolicy(t, "kv"), mustPolicy(t, "round-robin")}, Auto: true})
	if err != nil {
		t.Fatal(err)
	}
	tg := rep.Saturation
	if tg == nil || tg.KeepsUpTo <= 0 || tg.SaturatedAt <= tg.KeepsUpTo || tg.SaturatedAt/tg.KeepsUpTo > 1.15 {
		t.Fatalf("saturation %+v, speedups %v: want a bracket within 15%%", tg, rep.Speedups)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("kv keeps up to %gx and saturates at %gx\n", tg.KeepsUpTo, tg.SaturatedAt); !strings.Contains(table.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, table.String())
	}
	if kv := rep.Result("kv", tg.KeepsUpTo); kv == nil || kv.Saturated {
		t.Fatalf("kv at its saturation speedup: %+v", kv)
	}
	if kv := rep.Result("kv", tg.SaturatedAt); kv == nil || !kv.Saturated {
		t.Fatalf("kv where it saturates: %+v", kv)
	}
	for _, s := range rep.Speedups {
		if rep.Result("round-robin", s) == nil {
			t.Fatalf("round-robin missing at %g", s)
		}
	}
	if _, err := Run(w, cfg, Sweep{Policies: []Policy{mustPolicy(t, "random")}, Auto: true}); err == nil {
		t.Fatal("auto sweep without kv accepted")
	}
}

func TestSessions(t *testing.T) {
	// Two sessions of three turns; follow-up turns have no timestamp and
	// arrive their delay after the previous turn ended.
	tr := &trace.Trace{}
	id := uint64(0)
	for s := range 2 {
		var ids []uint64
		for turn := range 3 {
			ids = append(ids, id, id+1)
			id += 2
			r := trace.Request{
				InputLength: len(ids) * trace.IDBlockSize, OutputLength: 8,
				HashIDs: append([]uint64(nil), ids...), Session: string(rune('a' + s)),
			}
			if turn == 0 {
				r.Time, r.HasTime = time.Duration(s)*time.Second, true
			} else {
				r.Delay = 500 * time.Millisecond
			}
			tr.Requests = append(tr.Requests, r)
		}
	}
	w, err := Prepare(tr, 16, "sessions")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Speedup = 2
	s := runSim(t, w, cfg, mustPolicy(t, "kv"))
	for i := range tr.Requests {
		if tr.Requests[i].HasTime {
			continue
		}
		if want := s.finish[i-1] + 250*time.Millisecond; s.arrive[i] != want {
			t.Fatalf("turn %d arrived at %v, want previous end %v + delay/2", i, s.arrive[i], want)
		}
		if s.rank[i] != s.rank[i-1] {
			t.Fatalf("kv moved turn %d of a session off its worker", i)
		}
	}
	r := s.result()
	if r.Completed != 6 || math.Abs(r.HitOfAchievable-1) > 1e-9 {
		t.Fatalf("completed %d, hit %v of achievable", r.Completed, r.HitOfAchievable)
	}
}

func TestTooLong(t *testing.T) {
	w := families(t)
	cfg := familyConfig()
	cfg.Fleet.KVBlocks = 100 // a request needs 161
	r, err := Simulate(w, cfg, mustPolicy(t, "kv"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Rejected != famRequests || r.TooLong != famRequests || r.Completed != 0 || r.Saturated {
		t.Fatalf("rejected %d too long %d completed %d saturated %v", r.Rejected, r.TooLong, r.Completed, r.Saturated)
	}
}

func TestEventHeap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h eventHeap
	for i := range 2000 {
		h.push(event{at: time.Duration(rng.IntN(50)), seq: uint64(i), kind: uint8(1 + rng.IntN(2))})
	}
	prev := h.pop()
	for len(h) > 0 {
		e := h.pop()
		if e.less(&prev) {
			t.Fatalf("popped %+v after %+v", e, prev)
		}
		prev = e
	}
}

func TestParsePolicies(t *testing.T) {
	ps, err := ParsePolicies("kv, round-robin,random,least-loaded,kv-approx")
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 5 || !ps[4].Approx || ps[1].Sched != sched.PolicyRoundRobin || !ps[0].UsesIndex() || ps[3].UsesIndex() {
		t.Fatalf("parsed %+v", ps)
	}
	for _, bad := range []string{"", "kv,kv", "fastest", "kv,"} {
		if _, err := ParsePolicies(bad); err == nil {
			t.Errorf("ParsePolicies(%q) accepted", bad)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for name, mut := range map[string]func(*Config){
		"workers":     func(c *Config) { c.Fleet.Workers = -1 },
		"speedup":     func(c *Config) { c.Speedup = -2 },
		"event delay": func(c *Config) { c.EventDelay = -time.Millisecond },
		"engine":      func(c *Config) { c.Fleet.EngineSpeedup = -1 },
		"sched":       func(c *Config) { c.Sched.QueueDepth = -1 },
	} {
		c := DefaultConfig()
		mut(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: invalid config accepted", name)
		}
	}
	c := DefaultConfig()
	c.Fleet.BlockSize = 32
	if _, err := Simulate(head(t, 10), c, mustPolicy(t, "kv")); err == nil {
		t.Error("block size differing from the workload's accepted")
	}
	if _, err := Prepare(&trace.Trace{}, 16, "empty"); err == nil {
		t.Error("empty trace accepted")
	}
}

func TestPlot(t *testing.T) {
	w := head(t, sized(60, 20))
	rep, err := Run(w, DefaultConfig(), Sweep{Policies: []Policy{mustPolicy(t, "kv"), mustPolicy(t, "least-loaded")}, Speedups: []float64{1, 3}})
	if err != nil {
		t.Fatal(err)
	}
	var svg bytes.Buffer
	if err := Plot(&svg, rep, PlotSVG, nil); err != nil {
		t.Fatal(err)
	}
	s := svg.String()
	if !strings.HasPrefix(s, "<svg") || !strings.Contains(s, ">least-loaded</text>") || strings.Count(s, `stroke="#1f77b4"`) < 3 {
		t.Fatalf("svg lacks the kv series or the legend (%d bytes)", len(s))
	}
	var pngBuf bytes.Buffer
	if err := Plot(&pngBuf, rep, PlotPNG, []float64{1, 3}); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&pngBuf)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 1040 || b.Dy() != int(headHeight+2*rowHeight) {
		t.Fatalf("png %v", b)
	}
	if err := Plot(&svg, rep, "gif", nil); err == nil {
		t.Fatal("gif accepted")
	}
}

func TestPolyPerf(t *testing.T) {
	p := PolyPerf(DefaultPrefillPoly, DefaultDecodePoly)
	for _, n := range []int{0, 1, 16, 2560, 8192, 100000} {
		if got, want := p.Prefill(n), engine.PrefillPoly(n); got != want {
			t.Errorf("prefill(%d) = %v, engine's %v", n, got, want)
		}
	}
	for _, u := range []float64{-1, 0, 0.3, 1, 2} {
		if got, want := p.Decode(u), engine.DecodePoly(u); got != want {
			t.Errorf("decode(%v) = %v, engine's %v", u, got, want)
		}
	}
	if d := PolyPerf(Poly{0, 0, -5}, Poly{}).Prefill(10); d != 0 {
		t.Errorf("negative model time %v, want 0", d)
	}
	q, err := ParsePoly(DefaultDecodePoly.String())
	if err != nil || q != DefaultDecodePoly {
		t.Fatalf("round trip %v %v", q, err)
	}
	for _, bad := range []string{"", "1,2", "1,2,3,4", "1,NaN,2", "a,b,c"} {
		if _, err := ParsePoly(bad); err == nil {
			t.Errorf("ParsePoly(%q) accepted", bad)
		}
	}
}

// TestFamiliesHostTier: round-robin keeps evicting each worker's other
// family prefix from the GPU; with a host tier behind it the evicted prefix
// is onloaded instead of recomputed, so its hit ratio reaches kv's, the
// hits showing up as host hits, and the request's onload is cheaper than
// its prefill. The fleet-size LRU reference counts the host blocks.
func TestFamiliesHostTier(t *testing.T) {
	w := families(t)
	rr := runSim(t, w, familyConfig(), mustPolicy(t, "round-robin")).result()
	cfg := familyConfig()
	cfg.Fleet.HostKVBlocks = 400
	rrHost := runSim(t, w, cfg, mustPolicy(t, "round-robin")).result()
	if rrHost.HostCachedTokens == 0 || rrHost.HitRatio <= rr.HitRatio {
		t.Fatalf("round-robin with a host tier: hit %v (host %d tokens), without %v", rrHost.HitRatio, rrHost.HostCachedTokens, rr.HitRatio)
	}
	// Every request hits its prefix but a family's first on each worker.
	if want := float64((famRequests-4)*famPrefixIDs) / float64(famRequests*(famPrefixIDs+1)); math.Abs(rrHost.HitRatio-want) > 1e-12 {
		t.Errorf("round-robin with a host tier: hit %v, want %v", rrHost.HitRatio, want)
	}
	if rrHost.TTFTMeanMs >= rr.TTFTMeanMs {
		t.Errorf("onloading did not beat recomputing: TTFT %v vs %v ms", rrHost.TTFTMeanMs, rr.TTFTMeanMs)
	}
	kv := runSim(t, w, cfg, mustPolicy(t, "kv")).result()
	if kv.HostCachedTokens != 0 || math.Abs(kv.HitRatio-w.Achievable()) > 1e-12 {
		t.Errorf("kv with a host tier: hit %v, host %d tokens; want the achievable from the GPU", kv.HitRatio, kv.HostCachedTokens)
	}
	sw := Sweep{Policies: []Policy{mustPolicy(t, "kv"), mustPolicy(t, "round-robin")}, Speedups: []float64{1}}
	rep, err := Run(w, cfg, sw)
	if err != nil {
		t.Fatal(err)
	}
	if big, _ := w.PooledLRU(2 * 600); rep.HostKVBlocks != 400 || rep.FleetCacheHitRatio != big {
		t.Errorf("fleet LRU reference %v (host %d), want %v for device + host", rep.FleetCacheHitRatio, rep.HostKVBlocks, big)
	}
	if kvr := rep.Result("kv", 1); kvr == nil || kvr.HitOfFleetCache != kvr.HitRatio/rep.FleetCacheHitRatio {
		t.Errorf("kv's hit of the fleet cache: %+v", kvr)
	}
}
