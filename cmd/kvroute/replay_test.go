package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/bench/mock"
	"github.com/kvroute/kvroute/bench/replay"
	"github.com/kvroute/kvroute/bench/trace"
	"github.com/kvroute/kvroute/wire/plane"
)

const headTrace = "../../bench/trace/testdata/mooncake_head200.jsonl"

func TestReplayFlagsDefaults(t *testing.T) {
	o, err := parseReplayFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !o.auto || len(o.policies) != 4 || o.policies[0].Name != "kv" || o.policies[3].Name != "least-loaded" {
		t.Fatalf("auto %v policies %+v", o.auto, o.policies)
	}
	f := o.offline.Fleet
	if f.Workers != 8 || f.KVBlocks != 16384 || f.BlockSize != 16 || f.MaxNumSeqs != 256 || f.MaxBatchedTokens != 8192 || f.EngineSpeedup != 1 || f.DPRanks != 1 {
		t.Fatalf("fleet %+v: want kvroute mock's defaults and 8 workers", f)
	}
	if o.offline.EventDelay != time.Millisecond || o.offline.Sched.QueueDepth != 1024 || !o.benchLines || len(o.online.URLs) != 0 {
		t.Fatalf("options %+v", o)
	}
}

func TestReplayFlagsValues(t *testing.T) {
	t.Setenv("KVROUTE_SPEEDUP", "1,2.5")
	t.Setenv("KVROUTE_KV_BLOCKS", "4096")
	o, err := parseReplayFlags([]string{"--workers", "4", "--dp-ranks", "2", "--compare", "kv-approx,random", "--engine-speedup", "3",
		"--kv-overlap-score-weight", "2", "--queue-policy", "wspt", "--event-delay", "5ms", "--prefill-poly", "0,0.02,10",
		"--routers", "3", "--sync-delay", "2ms"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.offline.Routers != 3 || o.offline.SyncDelay != 2*time.Millisecond {
		t.Fatalf("replicas: routers %d sync delay %v", o.offline.Routers, o.offline.SyncDelay)
	}
	if o.auto || len(o.speedups) != 2 || o.speedups[1] != 2.5 || o.offline.Fleet.KVBlocks != 4096 {
		t.Fatalf("env not applied: auto %v speedups %v kv-blocks %d", o.auto, o.speedups, o.offline.Fleet.KVBlocks)
	}
	c := o.offline
	if c.Fleet.Workers != 4 || c.Fleet.DPRanks != 2 || c.Fleet.EngineSpeedup != 3 || c.Sched.Weight != 2 || c.Sched.QueuePolicy.String() != "wspt" || c.EventDelay != 5*time.Millisecond {
		t.Fatalf("config %+v", c)
	}
	if c.Fleet.PrefillPoly != (replay.Poly{0, 0.02, 10}) || c.Fleet.DecodePoly != replay.DefaultDecodePoly {
		t.Fatalf("timing %v / %v", c.Fleet.PrefillPoly, c.Fleet.DecodePoly)
	}
	if len(o.policies) != 2 || !o.policies[0].Approx {
		t.Fatalf("policies %+v", o.policies)
	}
	on, err := parseReplayFlags([]string{"--url", "http://127.0.0.1:8000", "--url", "http://127.0.0.1:8001", "--speedup", "4", "--concurrency", "8"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(on.online.URLs) != 2 || on.online.Speedup != 4 || on.online.Concurrency != 8 || on.online.WorkerHeader != "X-Kvroute-Worker" {
		t.Fatalf("online %+v", on.online)
	}
	t.Setenv("KVROUTE_SPEEDUP", "")
	os.Unsetenv("KVROUTE_SPEEDUP")
	on, err = parseReplayFlags([]string{"--url", "http://127.0.0.1:8000"}, io.Discard)
	if err != nil || on.auto || len(on.speedups) != 1 || on.speedups[0] != 1 {
		t.Fatalf("online default speedup: %v %+v", err, on)
	}
}

func TestReplayFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--compare", "kv,fastest"}, "--compare"},
		{[]string{"--compare", "random"}, "--speedup auto"},
		{[]string{"--speedup", "1,0"}, "--speedup"},
		{[]string{"--speedup", "fast"}, "--speedup"},
		{[]string{"--url", "http://x", "--speedup", "auto"}, "--speedup auto"},
		{[]string{"--url", "http://x", "--speedup", "1,2"}, "--speedup"},
		{[]string{"--url", "localhost:8000"}, "--url"},
		{[]string{"--url", "http://x", "--concurrency", "-1"}, "--concurrency"},
		{[]string{"--workers", "0"}, "--workers"},
		{[]string{"--kv-blocks", "-5"}, "--kv-blocks"},
		{[]string{"--block-size", "0"}, "--block-size"},
		{[]string{"--engine-speedup", "0"}, "--engine-speedup"},
		{[]string{"--event-delay", "-1ms"}, "--event-delay"},
		{[]string{"--routers", "0"}, "--routers"},
		{[]string{"--sync-delay", "1ms"}, "--sync-delay needs --routers"},
		{[]string{"--url", "http://x", "--routers", "3"}, "--routers"},
		{[]string{"--prefill-poly", "1,2"}, "--prefill-poly"},
		{[]string{"--decode-poly", "1,x,3"}, "--decode-poly"},
		{[]string{"--queue-policy", "random"}, "--queue-policy"},
		{[]string{"--trace-block-size", "256"}, "--trace-block-size"},
		{[]string{"--plot", "out.jpg"}, "--plot"},
		{[]string{"--plot-speedups", "x"}, "--plot-speedups"},
		{[]string{"--progress", "maybe"}, "--progress"},
		{[]string{"--synth", "--synth-prompt", "gamma:3"}, "--synth-prompt"},
		{[]string{"--synth", "--synth-requests", "0"}, "--synth"},
		{[]string{"--synth-out", "x.jsonl"}, "--synth-out"},
		{[]string{"--requests", "-1"}, "--requests"},
		{[]string{"stray"}, "unexpected"},
		{[]string{"--no-such-flag"}, "no-such-flag"},
	} {
		_, err := parseReplayFlags(c.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one naming %q", c.args, err, c.want)
		}
	}
}

func TestReplayMainOffline(t *testing.T) {
	dir := t.TempDir()
	o, err := parseReplayFlags([]string{"--trace", headTrace, "--requests", "50", "--speedup", "1,2",
		"--json", filepath.Join(dir, "r.json"), "--plot", filepath.Join(dir, "r.svg"), "--progress", "on"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if err := replayMain(context.Background(), o, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	out := stdout.String()
	for _, want := range []string{"trace " + headTrace + ": 50 requests", "achievable hit ratio", "least-loaded",
		"kv keeps up to 1x and saturates at 2x", "BenchmarkReplay/policy=kv/speedup=1 ", "BenchmarkReplay/policy=least-loaded/speedup=2 "} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	for _, judgement := range []string{"target", "MISSED", "goal"} {
		if strings.Contains(out, judgement) {
			t.Errorf("the report judges its results (%q):\n%s", judgement, out)
		}
	}
	if !strings.Contains(stderr.String(), "400/400 requests") {
		t.Errorf("progress bar: %q", stderr.String())
	}
	var rep struct {
		Workers  int `json:"workers"`
		Policies []struct {
			Policy   string `json:"policy"`
			Requests int    `json:"requests"`
		} `json:"policies"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "r.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Workers != 8 || len(rep.Policies) != 8 || rep.Policies[0].Requests != 50 {
		t.Fatalf("json report: %+v", rep)
	}
	svg, err := os.ReadFile(filepath.Join(dir, "r.svg"))
	if err != nil || !bytes.HasPrefix(svg, []byte("<svg")) {
		t.Fatalf("plot: %v, %.40q", err, svg)
	}
}

func TestReplayMainSynth(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "synth.jsonl")
	o, err := parseReplayFlags([]string{"--synth", "--synth-requests", "40", "--synth-out", out, "--compare", "kv,kv-approx",
		"--speedup", "1", "--json", "-", "--plot", filepath.Join(dir, "s.png"), "--progress", "off"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	if err := replayMain(context.Background(), o, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Trace    string `json:"trace"`
		Policies []struct {
			Policy   string  `json:"policy"`
			HitRatio float64 `json:"hit_ratio"`
		} `json:"policies"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("--json - must print only JSON: %v", err)
	}
	if !strings.HasPrefix(rep.Trace, "synthetic(") || len(rep.Policies) != 2 || rep.Policies[1].Policy != "kv-approx" || rep.Policies[0].HitRatio <= 0 {
		t.Fatalf("report %+v", rep)
	}
	tr, err := trace.ReadFile(out)
	if err != nil || len(tr.Requests) != 40 {
		t.Fatalf("--synth-out: %v, %d requests", err, len(tr.Requests))
	}
	if st, err := os.Stat(filepath.Join(dir, "s.png")); err != nil || st.Size() == 0 {
		t.Fatalf("png plot: %v", err)
	}
}

func TestReplayMainOnline(t *testing.T) {
	f, err := mock.Start(mock.Config{Workers: 1, Transport: plane.TransportNone, Speedup: 20}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	o, err := parseReplayFlags([]string{"--synth", "--synth-requests", "12", "--url", f.Workers()[0].URL(), "--speedup", "20",
		"--label", "mock-direct", "--progress", "off"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	if err := replayMain(context.Background(), o, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"online mode", "mock-direct", "BenchmarkReplay/policy=mock-direct/speedup=20 "} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
		}
	}
}

// The default --trace of replay and bench index is the trace shipped in the
// repository: it exists from the repository's root, reads, and a run from
// elsewhere is told where the default is looked for.
func TestReplayDefaultTraceShipped(t *testing.T) {
	o, err := parseReplayFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.tracePath != defaultTrace {
		t.Fatalf("--trace default %q, want %q", o.tracePath, defaultTrace)
	}
	tr, err := readTrace(filepath.Join("..", "..", o.tracePath))
	if err != nil {
		t.Fatalf("the default trace from the repository's root: %v", err)
	}
	if len(tr.Requests) != 3993 {
		t.Fatalf("%d requests in the default trace, want 3993", len(tr.Requests))
	}
	// From this directory the relative default does not resolve.
	if _, err := readTrace(o.tracePath); err == nil || !strings.Contains(err.Error(), "repository's root") {
		t.Fatalf("missing default trace: %v", err)
	}
}

// `make replay` reads a trace inside the repository, so a fresh clone can
// run it.
func TestMakeReplayTraceInRepository(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, line := range strings.Split(string(mk), "\n") {
		if !strings.Contains(line, "kvroute replay") {
			continue
		}
		f := strings.Fields(line)
		for i := range f[:len(f)-1] {
			if f[i] != "--trace" {
				continue
			}
			found = true
			p := filepath.Clean(filepath.Join("..", "..", f[i+1]))
			if strings.HasPrefix(p, "../../..") || filepath.IsAbs(f[i+1]) {
				t.Errorf("make replay reads %s, outside the repository", f[i+1])
			} else if _, err := os.Stat(p); err != nil {
				t.Errorf("make replay reads %s: %v", f[i+1], err)
			}
		}
	}
	if !found {
		t.Fatal("no `kvroute replay --trace` in the Makefile")
	}
}
