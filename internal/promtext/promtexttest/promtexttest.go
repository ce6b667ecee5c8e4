// Package promtexttest provides test helpers for metrics expositions:
// Promtool runs `promtool check metrics` (Prometheus' parser and linter) on
// an exposition, PromtoolQueries `promtool check rules` on PromQL
// expressions, and Check runs promtext.Check, failing the test on a problem.
package promtexttest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/internal/promtext"
)

// Check fails t with every problem promtext.Check finds in exposition.
func Check(t testing.TB, what string, exposition []byte) {
	t.Helper()
	if err := promtext.Check(exposition); err != nil {
		t.Errorf("%s is not valid Prometheus text:\n%v", what, err)
	}
}

// Promtool runs `promtool check metrics` on exposition and fails t unless
// it passes (parse errors and lint problems both fail). Without promtool in
// PATH it fails when the environment variable CI is set (CI must run it;
// .ci/run installs Debian's prometheus package) and skips t otherwise.
func Promtool(t testing.TB, what string, exposition []byte) {
	t.Helper()
	path := lookPromtool(t)
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = bytes.NewReader(exposition)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("promtool check metrics on %s: %v\n%s", what, err, out)
		return
	}
	t.Logf("promtool check metrics on %s (%d bytes): passed%s", what, len(exposition), out)
}

// PromtoolQueries checks that each PromQL expression parses, with
// `promtool check rules` on a rules file recording them (Grafana variables
// must be substituted first). It skips or fails without promtool as Promtool
// does.
func PromtoolQueries(t testing.TB, what string, exprs []string) {
	t.Helper()
	path := lookPromtool(t)
	var b strings.Builder
	b.WriteString("groups:\n- name: check\n  rules:\n")
	for i, e := range exprs {
		q, _ := json.Marshal(e) // a JSON string is a YAML double-quoted scalar
		fmt.Fprintf(&b, "  - record: check:q%d\n    expr: %s\n", i, q)
	}
	file := filepath.Join(t.TempDir(), "rules.yml")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(path, "check", "rules", file).CombinedOutput()
	if err != nil {
		t.Errorf("promtool check rules on the queries of %s: %v\n%s", what, err, out)
		return
	}
	t.Logf("promtool check rules on the %d queries of %s: passed", len(exprs), what)
}

func lookPromtool(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("promtool is not in PATH and CI is set: install it (apt-get install prometheus, as .ci/run does)")
		}
		t.Skip("promtool is not in PATH (install Debian's prometheus package to run this check; with CI set this fails)")
	}
	return path
}
