// Package promtexttest provides test helpers for metrics expositions:
// Promtool runs `promtool check metrics` (Prometheus' parser and linter) on
// an exposition, and Check runs promtext.Check, failing the test on a
// problem.
package promtexttest

import (
	"bytes"
	"os"
	"os/exec"
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
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("promtool is not in PATH and CI is set: install it (apt-get install prometheus, as .ci/run does)")
		}
		t.Skip("promtool is not in PATH (install Debian's prometheus package to run this check; with CI set this fails)")
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = bytes.NewReader(exposition)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("promtool check metrics on %s: %v\n%s", what, err, out)
		return
	}
	t.Logf("promtool check metrics on %s (%d bytes): passed%s", what, len(exposition), out)
}
