package replay

import (
	"math"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/bench/trace"
	"github.com/kvroute/kvroute/sched"
)

// Classes and tenants are drawn in their ratios, the same for a request
// at every call.
func TestTenantMixRatios(t *testing.T) {
	m, err := ParseTenantMix([]byte("classes: {critical: 0.2, standard: 0.5, sheddable: 0.3}\ntenants:\n  - {name: a, share: 3}\n  - {name: b, share: 1, weight: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Tenants[0].Weight != 1 || m.Tenants[1].Weight != 2 {
		t.Fatalf("weights %+v", m.Tenants)
	}
	const n = 20000
	var classes [3]int
	var tenants [3]int
	for i := range n {
		classes[m.classOf(i).Rank()]++
		tenants[m.tenantOf(i)]++
		if m.classOf(i) != m.classOf(i) || m.tenantOf(i) != m.tenantOf(i) {
			t.Fatal("not deterministic")
		}
	}
	for k, want := range []float64{0.2, 0.5, 0.3} {
		if got := float64(classes[k]) / n; math.Abs(got-want) > 0.02 {
			t.Errorf("class %s: %.3f, want %.2f", sched.ClassOfRank(k), got, want)
		}
	}
	if tenants[0] != 0 || math.Abs(float64(tenants[1])/n-0.75) > 0.02 {
		t.Errorf("tenants %v, want 0 / 75%% / 25%%", tenants)
	}
	for _, bad := range []string{"classes: {critical: -1}", "tenants: [{share: 1}]", "tenants: [{name: a, weight: -2}]", "sesions: true"} {
		if _, err := ParseTenantMix([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// Jain's index: equal served tokens per weight give 1, one tenant served
// alone in a window leaves the window out.
func TestTenantMixJain(t *testing.T) {
	m := &TenantMix{Tenants: []MixTenant{{Name: "a", Share: 1, Weight: 1}, {Name: "b", Share: 1, Weight: 1}}}
	recs := make([]record, 400)
	for i := range recs {
		recs[i] = record{hasFirst: true, done: true, prompt: 100, first: 1e9 * 1}
	}
	g := m.groups(recs)
	var a, b int64
	for i := range recs {
		if m.tenantOf(i) == 1 {
			a++
		} else {
			b++
		}
	}
	want := float64((a+b)*(a+b)) / (2 * float64(a*a+b*b))
	if g.Windows != 1 || math.Abs(g.JainMin-want) > 1e-9 {
		t.Fatalf("jain %v over %d windows, want %v", g.JainMin, g.Windows, want)
	}
}

func FuzzParseTenantMix(f *testing.F) {
	f.Add([]byte("classes: {critical: 0.2}\ntenants: [{name: a, share: 1}]\nsessions: true\nwindow: 5s\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseTenantMix(b)
		if err != nil {
			return
		}
		for i := range 64 {
			_ = m.classOf(i)
			if k := m.tenantOf(i); int(k) > len(m.Tenants) {
				t.Fatalf("tenant %d of %d", k, len(m.Tenants))
			}
		}
	})
}

// With from_trace, a request's "tenant" and "priority" fields decide; the
// ratios decide for the others; a tenant the file does not list joins
// with weight 1.
func TestTenantMixFromTrace(t *testing.T) {
	tr, err := trace.Parse(strings.NewReader(`{"input_length": 10, "hash_ids": [1], "tenant": "x", "priority": "critical"}
{"input_length": 10, "hash_ids": [2], "tenant": "a"}
{"input_length": 10, "hash_ids": [3]}
`))
	if err != nil {
		t.Fatal(err)
	}
	m, err := ParseTenantMix([]byte("from_trace: true\nclasses: {sheddable: 1}\ntenants: [{name: a, share: 1, weight: 3}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := m.resolve(tr)
	if r.classOf(0) != sched.ClassCritical || r.classOf(1) != sched.ClassSheddable || r.classOf(2) != sched.ClassSheddable {
		t.Errorf("classes %v %v %v", r.classOf(0), r.classOf(1), r.classOf(2))
	}
	if r.tenantOf(0) != 2 || r.tenantOf(1) != 1 || r.tenantOf(2) != 1 || len(r.Tenants) != 2 || r.Tenants[1] != (MixTenant{Name: "x", Weight: 1}) {
		t.Errorf("tenants %d %d %d of %+v", r.tenantOf(0), r.tenantOf(1), r.tenantOf(2), r.Tenants)
	}
	if len(m.Tenants) != 1 {
		t.Error("resolve changed the mix it was given")
	}
	if _, err := trace.Parse(strings.NewReader(`{"input_length": 10, "hash_ids": [1], "priority": "urgent"}`)); err == nil {
		t.Error("a bad priority parsed")
	}
}
