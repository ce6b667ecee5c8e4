package main

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain lets a test run the real main() in a child process: with
// KVROUTE_TEST_MAIN set, the test binary is kvroute (arguments after "--").
func TestMain(m *testing.M) {
	if os.Getenv("KVROUTE_TEST_MAIN") == "1" {
		for i, a := range os.Args {
			if a == "--" {
				os.Args = append([]string{"kvroute"}, os.Args[i+1:]...)
				break
			}
		}
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runMain runs `kvroute args...` in a child process with TMPDIR set to tmp.
func runMain(t *testing.T, tmp string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), "KVROUTE_TEST_MAIN=1", "TMPDIR="+tmp)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code = 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

// busyPort holds a loopback port open for the test's lifetime.
func busyPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// Every start-up failure of `kvroute serve` prints one line naming the flag
// and the cause, exits non-zero without a panic, and leaves no temporary
// NATS store behind.
func TestServeStartupErrors(t *testing.T) {
	busy := busyPort(t)
	_, busyPortNum, _ := net.SplitHostPort(busy)
	cases := []struct {
		name string
		args []string
		want []string // substrings of the one error line
	}{
		{"http port in use", []string{"--http-addr", busy}, []string{"--http-addr", "address already in use"}},
		{"bad http addr", []string{"--http-addr", "nowhere"}, []string{"--http-addr", "missing port"}},
		{"nats unreachable", []string{"--nats", "nats://127.0.0.1:1"}, []string{"--nats nats://127.0.0.1:1", "cannot connect"}},
		{"nats port in use", []string{"--nats-port", busyPortNum}, []string{"--nats-port " + busyPortNum, "address already in use"}},
		{"admin addr in use", []string{"--pprof", "--admin-addr", busy}, []string{"--admin-addr", "address already in use"}},
		{"bad flag value", []string{"--block-size", "0"}, []string{"--block-size"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tmp := t.TempDir()
			args := append([]string{"serve", "--log-level", "error"}, c.args...)
			if !contains(c.args, "--http-addr") {
				args = append(args, "--http-addr", "127.0.0.1:0")
			}
			stdout, stderr, code := runMain(t, tmp, args...)
			if code == 0 {
				t.Fatalf("exit code 0; stdout %q stderr %q", stdout, stderr)
			}
			if strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine ") {
				t.Fatalf("panicked:\n%s", stderr)
			}
			t.Log(strings.TrimSpace(stderr))
			lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
			if len(lines) != 1 {
				t.Fatalf("want one line on stderr, got %d:\n%s", len(lines), stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(lines[0], w) {
					t.Errorf("error line %q does not contain %q", lines[0], w)
				}
			}
			left, _ := filepath.Glob(filepath.Join(tmp, "kvroute-nats-*"))
			if len(left) > 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		stdout, stderr, code := runMain(t, t.TempDir(), args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		for _, w := range []string{"kvroute ", "module   github.com/kvroute/kvroute", "revision ", "go       go1."} {
			if !strings.Contains(stdout, w) {
				t.Errorf("%v: output lacks %q:\n%s", args, w, stdout)
			}
		}
	}
}
