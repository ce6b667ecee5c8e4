package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// benchOutput writes six runs of a benchmark in go test's output format,
// k times the work of k = 1 (1 µs per op, a deterministic ±2% spread), and
// allocating 64 bytes per op when k > 1, and returns the file. The gate is
// judged on fixed numbers, not on timings taken on a busy machine.
func benchOutput(t *testing.T, k int) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("goos: linux\ngoarch: amd64\npkg: slowbench\n")
	bytes, allocs := 0, 0
	if k > 1 {
		bytes, allocs = 64, 1
	}
	for i := range 6 {
		ns := float64(1000*k) * (1 + 0.02*float64(i%3-1))
		fmt.Fprintf(&b, "BenchmarkWork-2 \t%d\t%.1f ns/op\t%d B/op\t%d allocs/op\n", 100000/k, ns, bytes, allocs)
	}
	b.WriteString("PASS\nok  \tslowbench\t1.000s\n")
	f := filepath.Join(t.TempDir(), fmt.Sprintf("bench-%d.txt", k))
	if err := os.WriteFile(f, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// gate runs perf/bench-gate.sh --files old new and returns its exit code
// and output.
func gate(t *testing.T, old, new string) (int, string) {
	t.Helper()
	cmd := exec.Command("bash", "../bench-gate.sh", "--files", old, new, "0.10")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatalf("bench-gate.sh: %v\n%s", err, out)
	}
	return 0, string(out)
}

// TestGateCatchesASlowdown: a benchmark 10× slower, and allocating
// where it allocated nothing, fails the gate (exit 1) with both metrics
// named; the same change the other way (a speed-up, fewer allocations)
// passes it.
func TestGateCatchesASlowdown(t *testing.T) {
	fast, slow := benchOutput(t, 1), benchOutput(t, 10)
	code, out := gate(t, fast, slow)
	if code != 1 {
		t.Fatalf("10× slowdown: bench-gate exit %d, want 1:\n%s", code, out)
	}
	for _, want := range []string{"REGRESSION Work", "sec/op", "allocs/op: 0 -> 1 (from 0"} {
		if !strings.Contains(out, want) {
			t.Errorf("gate output lacks %q:\n%s", want, out)
		}
	}
	if code, out := gate(t, slow, fast); code != 0 || !strings.Contains(out, "no regression") {
		t.Errorf("speed-up: bench-gate exit %d, want 0:\n%s", code, out)
	}
}

// TestRegressions covers the verdict rules on a fixed comparison: time
// worse beyond the margin and significant, a rate that fell, an allocation
// from zero; not: a change within the margin, one with p above alpha, an
// improvement, an ungated unit.
func TestRegressions(t *testing.T) {
	in := `goos: linux
pkg: x
,old,,new,,,
,sec/op,CI,sec/op,CI,vs base,P
Slower-2,1e-06,1%,1.5e-06,2%,+50.00%,p=0.002 n=6
Within-2,1e-06,1%,1.04e-06,2%,+4.00%,p=0.002 n=6
Noisy-2,1e-06,1%,2e-06,90%,~,p=0.240 n=6
Faster-2,1e-06,1%,5e-07,2%,-50.00%,p=0.002 n=6
geomean,1e-06,,1.2e-06,,+20.00%,

,old,,new,,,
,allocs/op,CI,allocs/op,CI,vs base,P
Slower-2,0,0%,3,0%,?,p=0.002 n=6
geomean,,,,,?,

,old,,new,,,
,events/s,CI,events/s,CI,vs base,P
Ingest-2,400000,3%,300000,3%,-25.00%,p=0.002 n=6

,old,,new,,,
,entries,CI,entries,CI,vs base,P
Size-2,10,0%,20,0%,+100.00%,p=0.002 n=6
F12: all samples are equal
`
	regs, compared, err := Regressions([]byte(in), 0.05, 0.05)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range regs {
		got = append(got, r.Name+" "+r.Unit)
	}
	want := []string{"Slower-2 sec/op", "Slower-2 allocs/op", "Ingest-2 events/s"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("regressions %q, want %q", got, want)
	}
	if compared != 6 {
		t.Errorf("compared %d gated metrics, want 6", compared)
	}
}
