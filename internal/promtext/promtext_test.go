package promtext_test

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"

	"github.com/kvroute/kvroute/internal/promhist"
	"github.com/kvroute/kvroute/internal/promtext"
	"github.com/kvroute/kvroute/internal/promtext/promtexttest"
)

var testFamilies = []promtext.Family{
	{Name: "t_requests_total", Type: promtext.Counter, Help: "Requests"},
	{Name: "t_depth", Type: promtext.Gauge, Help: "Queue depth"},
	{Name: "t_latency_seconds", Type: promtext.Histogram, Help: "Latency"},
	{Name: "t_calls_total", Alias: "t_calls_count", Type: promtext.Counter, Help: "Calls"},
}

// TestWriteGroupsFamilies: samples of one family written by several
// writers, interleaved with other families and with VictoriaMetrics' own
// metadata, come out contiguous under one HELP and one TYPE line, in order
// of first appearance; an alias is renamed.
func TestWriteGroupsFamilies(t *testing.T) {
	reg := promtext.NewRegistry(testFamilies)
	set := metrics.NewSet()
	h := promhist.New(set, `t_latency_seconds{op="a"}`, []float64{0.1, 1})
	h.Update(0.05)
	h.Update(5)
	var out bytes.Buffer
	reg.Write(&out, func(w io.Writer) {
		metrics.WriteCounterUint64(w, `t_requests_total{code="200"}`, 3)
		metrics.WriteGaugeUint64(w, `t_depth`, 7)
		io.WriteString(w, "# TYPE t_requests_total counter\n")
		metrics.WriteCounterUint64(w, `t_requests_total{code="500"}`, 1)
	}, set.WritePrometheus, func(w io.Writer) {
		metrics.WriteCounterUint64(w, `t_calls_count`, 2)
		io.WriteString(w, `t_requests_total{code="404"} 4`) // no final newline
	})
	want := `# HELP t_requests_total Requests
# TYPE t_requests_total counter
t_requests_total{code="200"} 3
t_requests_total{code="500"} 1
t_requests_total{code="404"} 4
# HELP t_depth Queue depth
# TYPE t_depth gauge
t_depth 7
# HELP t_latency_seconds Latency
# TYPE t_latency_seconds histogram
t_latency_seconds_bucket{op="a",le="0.1"} 1
t_latency_seconds_bucket{op="a",le="1"} 1
t_latency_seconds_bucket{op="a",le="+Inf"} 2
t_latency_seconds_sum{op="a"} 5.05
t_latency_seconds_count{op="a"} 2
# HELP t_calls_total Calls
# TYPE t_calls_total counter
t_calls_total 2
`
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}
	promtexttest.Check(t, "the grouped exposition", out.Bytes())
	t.Run("promtool", func(t *testing.T) { promtexttest.Promtool(t, "the grouped exposition", out.Bytes()) })
	// The pooled buffers are reused: a second scrape gives the same text.
	var again bytes.Buffer
	reg.Write(&again, set.WritePrometheus)
	if !strings.HasPrefix(again.String(), "# HELP t_latency_seconds Latency\n") {
		t.Errorf("second scrape:\n%s", again.String())
	}
}

// TestUnregisteredFamily: a sample nobody declared is still exposed, and
// Check says where to declare it.
func TestUnregisteredFamily(t *testing.T) {
	reg := promtext.NewRegistry(testFamilies)
	set := metrics.NewSet()
	set.NewCounter("t_new_total").Inc()
	var out bytes.Buffer
	reg.Write(&out, set.WritePrometheus)
	if !strings.Contains(out.String(), "# TYPE t_new_total counter\nt_new_total 1\n") {
		t.Fatalf("unregistered counter not exposed:\n%s", out.String())
	}
	err := promtext.Check(out.Bytes())
	if err == nil || !strings.Contains(err.Error(), "t_new_total has no HELP text") || !strings.Contains(err.Error(), "router/metrics.go") {
		t.Fatalf("Check: %v", err)
	}
}

// TestCheckFindsProblems: each broken exposition is rejected with the
// problem named.
func TestCheckFindsProblems(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"a_total 1\n", "no # HELP and # TYPE"},
		{"# TYPE a_total counter\na_total 1\n", "0 HELP and 1 TYPE"},
		{"# HELP a_total x\n# HELP a_total y\n# TYPE a_total counter\na_total 1\n", "second # HELP"},
		{"# HELP a_total \n# TYPE a_total counter\na_total 1\n", "empty HELP"},
		{"# HELP a x\n# TYPE a counter\na 1\n", "must end in _total"},
		{"# HELP a_total x\n# TYPE a_total gauge\na_total 1\n", "only counters may end in _total"},
		{"# HELP a_count x\n# TYPE a_count gauge\na_count 1\n", "only histograms and summaries may end in _count"},
		{"# HELP a x\n# TYPE a gauge\na 1\n# HELP b x\n# TYPE b gauge\nb 1\na{x=\"1\"} 2\n", "no # HELP and # TYPE right before"},
		{"# HELP a x\n# TYPE a gauge\na 1\n# HELP b x\n# TYPE b gauge\nb 1\n# HELP a x\n", "not contiguous"},
		{"# HELP a x\n# TYPE a gauge\na{x=\"1\"} 1\na{x=\"1\"} 2\n", "appears twice"},
		{"# HELP a x\n# TYPE a gauge\na one\n", "not a number"},
		{"# HELP a x\n# TYPE a gauge\na{x=1} 1\n", "malformed label"},
		{"# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"2\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_count 2\n", "must be cumulative"},
		{"# HELP h x\n# TYPE h histogram\nh_bucket{le=\"2\"} 1\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\n", "bounds must increase"},
		{"# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_count 1\n", "want +Inf"},
		{"# HELP h x\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_count 3\n", "_count 3 differs"},
		{"# HELP h x\n# TYPE h histogram\nh_sum 3\nh_count 3\n", "no buckets"},
		{"# HELP h x\n# TYPE h histogram\nh 3\n", "no # HELP and # TYPE right before"},
		{"# HELP s x\n# TYPE s summary\ns 3\n", "lacks a quantile"},
		{fmt.Sprintf("# HELP u %s\n# TYPE u untyped\nu 1\n", promtext.UnregisteredHelp), "u has no HELP text"},
	} {
		err := promtext.Check([]byte(tc.text))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Check(%q) = %v, want an error with %q", tc.text, err, tc.want)
		}
	}
	good := "# HELP h x\n# TYPE h histogram\nh_bucket{a=\"1\",le=\"1\"} 1\nh_bucket{a=\"1\",le=\"+Inf\"} 2\nh_sum{a=\"1\"} 3\nh_count{a=\"1\"} 2\n" +
		"h_bucket{a=\"2\",le=\"1\"} 0\nh_bucket{a=\"2\",le=\"+Inf\"} 0\nh_sum{a=\"2\"} 0\nh_count{a=\"2\"} 0\n" +
		"# HELP s x\n# TYPE s summary\ns{quantile=\"0.5\"} 1\ns_sum 3\ns_count 2\n" +
		"# HELP i x\n# TYPE i gauge\ni{a=\"q\\\"\\\\\\n\", b=\"\"} NaN 1700000000\n"
	if err := promtext.Check([]byte(good)); err != nil {
		t.Errorf("Check(good): %v", err)
	}
}

// TestNewRegistryRejects: declarations that could not pass promtool panic.
func TestNewRegistryRejects(t *testing.T) {
	for _, f := range []promtext.Family{
		{Name: "a_total", Type: promtext.Counter},
		{Name: "a_total", Type: promtext.Counter, Help: "two\nlines"},
		{Name: "a-b", Type: promtext.Gauge, Help: "x"},
		{Name: "a", Type: "meter", Help: "x"},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewRegistry accepted %+v", f)
				}
			}()
			promtext.NewRegistry([]promtext.Family{f})
		}()
	}
	defer func() {
		if recover() == nil {
			t.Error("NewRegistry accepted a duplicate")
		}
	}()
	promtext.NewRegistry(testFamilies, testFamilies[:1])
}

// TestProcessMetrics: the Go runtime and process metrics pass both checks,
// every sample is declared, and the renamed families appear under their
// new names.
func TestProcessMetrics(t *testing.T) {
	reg := promtext.NewRegistry(promtext.ProcessFamilies)
	var out bytes.Buffer
	reg.Write(&out, promtext.WriteProcess)
	promtexttest.Check(t, "the process metrics", out.Bytes())
	t.Run("promtool", func(t *testing.T) { promtexttest.Promtool(t, "the process metrics", out.Bytes()) })
	for _, want := range []string{"\ngo_goroutines ", "\ngo_cgo_calls_total ", "\ngo_cpus ", "\ngo_gc_forced_total ", "\nprocess_resident_memory_bytes "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("process metrics lack %q", strings.TrimSpace(want))
		}
	}
}

// BenchmarkWrite: the cost of grouping a router-sized scrape.
func BenchmarkWrite(b *testing.B) {
	reg := promtext.NewRegistry(testFamilies)
	var src bytes.Buffer
	for i := range 2000 {
		metrics.WriteCounterUint64(&src, fmt.Sprintf(`t_requests_total{code="%d"}`, i), uint64(i))
		metrics.WriteGaugeUint64(&src, fmt.Sprintf(`t_depth{shard="%d"}`, i), uint64(i))
	}
	b.SetBytes(int64(src.Len()))
	b.ReportAllocs()
	for b.Loop() {
		reg.Write(io.Discard, func(w io.Writer) { w.Write(src.Bytes()) })
	}
}
