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

	natsserver "github.com/nats-io/nats-server/v2/test"
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
// (IndexServerConfig.Handlers), KVROUTE_BENCH_SERVE_GOMAXPROCS=n run with
// GOMAXPROCS n and KVROUTE_BENCH_SERVE_GODEBUG=s run with GODEBUG=s.
// KVROUTE_BENCH_NATS_PROC=1 runs the nats-server in a process of its own
// too (the test binary with natsChildEnv set; KVROUTE_BENCH_NATS_GODEBUG
// and KVROUTE_BENCH_NATS_GOMAXPROCS set its GODEBUG and GOMAXPROCS), so
// that each of the three parties' CPU is measured apart.
const (
	serveChildHandlersEnv = "KVROUTE_BENCH_SERVE_HANDLERS"
	serveChildProcsEnv    = "KVROUTE_BENCH_SERVE_GOMAXPROCS"
	serveChildGODEBUGEnv  = "KVROUTE_BENCH_SERVE_GODEBUG"
	natsProcEnv           = "KVROUTE_BENCH_NATS_PROC"
	natsChildGODEBUGEnv   = "KVROUTE_BENCH_NATS_GODEBUG"
	natsChildProcsEnv     = "KVROUTE_BENCH_NATS_GOMAXPROCS"

	serveChildEnv        = "KVROUTE_BENCH_SERVE_NATS"
	serveChildSubjectEnv = "KVROUTE_BENCH_SERVE_SUBJECT"
	serveChildProfileEnv = "KVROUTE_BENCH_SERVE_CPUPROFILE"
	natsChildEnv         = "KVROUTE_BENCH_NATS_CHILD"
)

func TestMain(m *testing.M) {
	if os.Getenv(natsChildEnv) != "" {
		if err := natsChild(); err != nil {
			fmt.Fprintln(os.Stderr, "nats-server process:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if url := os.Getenv(serveChildEnv); url != "" {
		if err := serveChild(url, os.Getenv(serveChildSubjectEnv)); err != nil {
			fmt.Fprintln(os.Stderr, "serving index process:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// natsChild runs a nats-server on loopback (a random port, no JetStream:
// queries need none), prints its client URL and serves until its standard
// input closes. It logs nothing unless NATS_LOGGING is set in the
// environment (nats-server's test package: any value logs notices and
// warnings, such as a slow consumer cut off; debug or trace more).
func natsChild() error {
	opts := natsserver.DefaultTestOptions
	opts.Port = -1
	s := natsserver.RunServer(&opts)
	defer s.Shutdown()
	fmt.Println(s.ClientURL())
	_, err := io.Copy(io.Discard, os.Stdin)
	return err
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
	env := []string{serveChildEnv + "=" + url, serveChildSubjectEnv + "=" + subject}
	if g, ok := os.LookupEnv(serveChildGODEBUGEnv); ok {
		env = append(env, "GODEBUG="+g)
	}
	pid, line := startChild(tb, env)
	if line != "ready" {
		tb.Fatalf("serving index process said %q", line)
	}
	return pid
}

// startNATSChild starts the test binary as a nats-server process on
// loopback (a random port), stopped when the benchmark ends. It returns the
// process id and the server's client URL.
func startNATSChild(tb testing.TB) (int, string) {
	tb.Helper()
	env := []string{natsChildEnv + "=1"}
	if g, ok := os.LookupEnv(natsChildGODEBUGEnv); ok {
		env = append(env, "GODEBUG="+g)
	}
	if n, ok := os.LookupEnv(natsChildProcsEnv); ok {
		env = append(env, "GOMAXPROCS="+n)
	}
	pid, url := startChild(tb, env)
	if !strings.HasPrefix(url, "nats://") {
		tb.Fatalf("nats-server process said %q", url)
	}
	return pid, url
}

// startChild starts the test binary with env added to this process's,
// waits for the first line it prints and returns its process id and that
// line. The child runs until its standard input closes, when the
// benchmark ends.
func startChild(tb testing.TB, env []string) (int, string) {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
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
	type result struct {
		line string
		err  error
	}
	first := make(chan result, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		first <- result{strings.TrimSuffix(line, "\n"), err}
	}()
	select {
	case r := <-first:
		if r.err != nil {
			tb.Fatal(r.err)
		}
		return cmd.Process.Pid, r.line
	case <-time.After(30 * time.Second):
		tb.Fatal("child process not ready within 30 s")
	}
	return 0, ""
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

// procSched returns how many times the threads of process pid (this
// process when pid is 0) went to sleep so far, and how long they waited on
// a run queue, runnable but not running: the voluntary context switches
// and the schedstat wait times summed over its threads, from /proc (Linux;
// zero elsewhere or on error). Each sleep is a thread that blocked (a futex
// wait, epoll_wait, a read) and was woken again, so per request it counts
// the wake-ups a round trip costs that process; the wait is what the
// machine's other load (or this process's other threads) adds to them.
func procSched(pid int) (sleeps int64, wait time.Duration) {
	dir := "/proc/self/task"
	if pid != 0 {
		dir = "/proc/" + strconv.Itoa(pid) + "/task"
	}
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0
	}
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/status")
		if err != nil {
			continue // the thread exited
		}
		const key = "\nvoluntary_ctxt_switches:"
		if i := bytes.Index(b, []byte(key)); i >= 0 {
			line := b[i+len(key):]
			if j := bytes.IndexByte(line, '\n'); j >= 0 {
				line = line[:j]
			}
			if v, err := strconv.ParseInt(strings.TrimSpace(string(line)), 10, 64); err == nil {
				sleeps += v
			}
		}
		// schedstat: time on a CPU, time waiting on a run queue (ns),
		// time slices.
		if b, err = os.ReadFile(dir + "/" + t.Name() + "/schedstat"); err == nil {
			if f := strings.Fields(string(b)); len(f) >= 2 {
				if v, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					wait += time.Duration(v)
				}
			}
		}
	}
	return sleeps, wait
}
