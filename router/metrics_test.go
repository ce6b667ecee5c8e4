package router

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/ingest"
	"github.com/kvroute/kvroute/ingest/recovery"
	"github.com/kvroute/kvroute/internal/promtext"
	"github.com/kvroute/kvroute/internal/promtext/promtexttest"
	"github.com/kvroute/kvroute/node"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire/plane"
)

// TestMetricsExposition scrapes a real router (ZMQ ingest from a simulated
// fleet, so the per-worker, per-shard, ingest and ZMQ families all have
// samples) after routing and proxying a few requests, and checks /metrics:
//   - format: promtext.Check (one HELP and TYPE per family, families
//     contiguous, histogram buckets sane, every family declared), every
//     declared router, shard, ingest, node and recovery family present, latencies as le
//     histograms, Go and process metrics present;
//   - promtool: `promtool check metrics` (skipped without promtool unless CI
//     is set);
//   - dashboard: docs/grafana-kvroute.json is valid JSON whose queries use
//     only metric names this exposition has.
func TestMetricsExposition(t *testing.T) {
	e := startEnv(t, envOptions{workers: 2, transport: plane.TransportZMQ})
	toks := tokens(7, 0, 64, 0)
	e.complete(toks, 1)
	e.indexed(toks, 4)
	e.complete(tokens(7, 1, 64, 8), 2)
	code, body, _ := e.do("POST", "/v1/completions", `{"prompt":[1,2,3],"max_tokens":2,"stream":true}`)
	if code != 200 || !strings.Contains(string(body), "[DONE]") {
		t.Fatalf("streamed completion: %d %s", code, body)
	}
	if code, body, _ = e.do("POST", "/route", `{"token_ids":[5,6,7],"request_id":"m1"}`); code != 200 {
		t.Fatalf("/route: %d %s", code, body)
	}
	if code, _, _ = e.do("GET", "/no-such-endpoint", ""); code != 404 {
		t.Fatalf("unknown endpoint: %d", code)
	}
	e.do("GET", "/metrics", "") // so the metrics endpoint has a latency sample too
	_, expo, _ := e.do("GET", "/metrics", "")
	text := string(expo)

	t.Run("format", func(t *testing.T) {
		promtexttest.Check(t, "the router's /metrics", expo)
		for _, fams := range [][]promtext.Family{routerFamilies, shard.MetricFamilies, ingest.MetricFamilies, node.MetricFamilies, recovery.MetricFamilies} {
			for _, f := range fams {
				if !strings.Contains(text, "\n# TYPE "+f.Name+" "+string(f.Type)+"\n") {
					t.Errorf("family %s (%s) missing from /metrics", f.Name, f.Type)
				}
			}
		}
		for _, want := range []string{
			`kvroute_http_requests_total{endpoint="completions",code="200"} 3`,
			`kvroute_http_requests_total{endpoint="other",code="404"} 1`,
			`kvroute_proxy_ttft_seconds_bucket{le="+Inf"} 3`,
			`kvroute_proxy_duration_seconds_count 3`,
			`kvroute_decision_overlap_blocks_bucket{le="0"} `,
			`kvroute_http_request_duration_seconds_bucket{endpoint="route",le="0.0001"} `,
			`kvroute_shard_event_queue_depth{shard="0"} `,
			`kvroute_shard_lookup_waits_total{shard="0"} `,
			`kvroute_ingest_zmq_connected{worker=`,
			`kvroute_worker_active_blocks{worker=`,
			"\ngo_goroutines ", "\nprocess_resident_memory_bytes ",
		} {
			if !strings.Contains(text, want) {
				t.Errorf("/metrics lacks %q", want)
			}
		}
		if strings.Contains(text, "vmrange") {
			t.Error("/metrics still has VictoriaMetrics vmrange histograms")
		}
		if t.Failed() {
			t.Logf("/metrics:\n%s", text)
		}
	})
	t.Run("promtool", func(t *testing.T) {
		promtexttest.Promtool(t, "the router's /metrics", expo)
	})
	t.Run("dashboard", func(t *testing.T) {
		checkDashboard(t, "../docs/grafana-kvroute.json", text)
	})
}

// checkDashboard: the Grafana dashboard is valid JSON whose panels all have
// queries, and every kvroute_* name in it (queries, variables, descriptions)
// is a family or a sample name of the exposition.
func checkDashboard(t *testing.T, path, exposition string) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string `json:"title"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if d.Title == "" || len(d.Panels) < 10 {
		t.Fatalf("%s: title %q, %d panels", path, d.Title, len(d.Panels))
	}
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q has an empty query", p.Title)
			}
		}
	}
	known := map[string]bool{}
	for l := range strings.Lines(exposition) {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			known[f[2]] = true
		} else if l != "" && l[0] != '#' {
			known[l[:strings.IndexAny(l, "{ ")]] = true
		}
	}
	used := regexp.MustCompile(`kvroute_[a-z_]+`).FindAllString(string(b), -1)
	slices.Sort(used)
	used = slices.Compact(used)
	for _, n := range used {
		if !known[n] {
			t.Errorf("%s uses %s, which the router's /metrics does not have", path, n)
		}
	}
	t.Logf("the dashboard uses %d metric names, all exposed: %v", len(used), used)
	var exprs []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, strings.NewReplacer("$__rate_interval", "5m", "$instance", ".*").Replace(tg.Expr))
		}
	}
	t.Run("promql", func(t *testing.T) { promtexttest.PromtoolQueries(t, path, exprs) })
}
