package node

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// The test binary run with serveChildEnv set is a serving index process
// (BenchmarkRemoteLookup): it serves benchIndex on the subject
// serveChildSubjectEnv of the NATS server at serveChildEnv, prints "ready"
// and serves until its standard input closes. In its own process its CPU
// time is the serving instance's alone, apart from the requesters' and the
// nats-server's. Set in the benchmark's environment,
// KVROUTE_BENCH_SERVE_CPUPROFILE=file makes it write its CPU profile there,
// KVROUTE_BENCH_SERVE_HANDLERS=n serve with n handlers
// (IndexServerConfig.Handlers) and KVROUTE_BENCH_SERVE_GOMAXPROCS=n run
// with GOMAXPROCS n.
const (
	serveChildHandlersEnv = "KVROUTE_BENCH_SERVE_HANDLERS"
	serveChildProcsEnv    = "KVROUTE_BENCH_SERVE_GOMAXPROCS"

	serveChildEnv        = "KVROUTE_BENCH_SERVE_NATS"
	serveChildSubjectEnv = "KVROUTE_BENCH_SERVE_SUBJECT"
	serveChildProfileEnv = "KVROUTE_BENCH_SERVE_CPUPROFILE"
)

func TestMain(m *testing.M) {
	if url := os.Getenv(serveChildEnv); url != "" {
		if err := serveChild(url, os.Getenv(serveChildSubjectEnv)); err != nil {
			fmt.Fprintln(os.Stderr, "serving index process:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func serveChild(url, subject string) error {
	if path := os.Getenv(serveChildProfileEnv); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if n, err := strconv.Atoi(os.Getenv(serveChildProcsEnv)); err == nil && n > 0 {
		runtime.GOMAXPROCS(n)
	}
	handlers, _ := strconv.Atoi(os.Getenv(serveChildHandlersEnv))
	ix, _, err := benchIndex()
	if err != nil {
		return err
	}
	defer ix.Close()
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	srv, err := ServeIndex(nc, ix, IndexServerConfig{Subject: subject, ID: "child", Handlers: handlers})
	if err != nil {
		return err
	}
	defer srv.Close()
	fmt.Println("ready")
	_, err = io.Copy(io.Discard, os.Stdin)
	return err
}

// startServeChild starts the test binary as a serving index process on
// subject of the NATS server at url, waits until it serves, and stops it
// when the benchmark ends. It returns the process id.
func startServeChild(tb testing.TB, url, subject string) int {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serveChildEnv+"="+url, serveChildSubjectEnv+"="+subject)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("serving index process said %q", line)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			tb.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		tb.Fatal("serving index process not ready within 30 s")
	}
	return cmd.Process.Pid
}

// procCPU returns the CPU time (user + system) process pid used so far, from
// /proc (Linux; 0 elsewhere or on error). The kernel counts it in ticks of
// 10 ms (USER_HZ is 100 in the /proc ABI).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command name (in parentheses, which may hold
	// spaces): state is field 3, utime 14 and stime 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(u+s) * 10 * time.Millisecond
}
