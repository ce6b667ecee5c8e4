package main

import (
	"bufio"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/syncbuf"
)

func TestWatchSignals(t *testing.T) {
	sig := make(chan os.Signal, 2)
	done := make(chan struct{})
	defer close(done)
	exited := make(chan struct{})
	var w syncbuf.Buffer
	stop := watchSignals(sig, done, "kvroute x", &w, func() { close(exited) })
	sig <- syscall.SIGINT
	<-stop
	select {
	case <-exited:
		t.Fatal("exited at the first signal")
	default:
	}
	sig <- syscall.SIGINT
	<-exited
	if out := w.String(); !strings.Contains(out, "interrupt again to exit at once") || !strings.Contains(out, "exiting at once") {
		t.Fatalf("messages: %q", out)
	}
}

// startServe runs `kvroute serve` in a child process with a demo fleet
// and a long ready delay; it returns the process and the API's base URL.
func startServeProcess(t *testing.T, stderr *syncbuf.Buffer) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "--", "serve", "--http-addr", "127.0.0.1:0", "--demo-fleet", "1",
		"--shutdown-grace", "60s", "--shutdown-ready-delay", "30s", "--log-level", "warn")
	cmd.Env = append(os.Environ(), "KVROUTE_TEST_MAIN=1", "TMPDIR="+t.TempDir())
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "kvroute serving on "); ok {
			go func() { // keep draining stdout
				for sc.Scan() {
				}
			}()
			return cmd, strings.Fields(rest)[0]
		}
	}
	t.Fatalf("serve did not start: %s", stderr.String())
	return nil, ""
}

// exitWithin waits for cmd's exit for at most d and returns its code.
func exitWithin(t *testing.T, cmd *exec.Cmd, d time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(d):
		t.Fatalf("still running %v after the signal", d)
	}
	return -1
}

// With nothing in flight, the first Ctrl-C exits without waiting out the
// ready delay (30s here).
func TestServeIdleInterruptExits(t *testing.T) {
	var stderr syncbuf.Buffer
	cmd, _ := startServeProcess(t, &stderr)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := exitWithin(t, cmd, 10*time.Second); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
}

// A second Ctrl-C exits at once while the first waits for a request in
// flight.
func TestServeSecondInterruptExits(t *testing.T) {
	var stderr syncbuf.Buffer
	cmd, base := startServeProcess(t, &stderr)
	var resp *http.Response
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) { // until the worker has joined
		var err error
		resp, err = http.Post(base+"/v1/completions", "application/json",
			strings.NewReader(`{"prompt":"a long answer, please","max_tokens":100000,"stream":true}`))
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusOK {
			break
		}
		resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatalf("no stream: %s", resp.Status)
		}
	}
	defer resp.Body.Close()
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil { // the stream is running
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(stderr.String(), "interrupt again") {
		if time.Now().After(deadline) {
			t.Fatalf("no shutdown message: %s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := exitWithin(t, cmd, 10*time.Second); code != 1 {
		t.Fatalf("exit %d after a second interrupt, want 1: %s", code, stderr.String())
	}
}
