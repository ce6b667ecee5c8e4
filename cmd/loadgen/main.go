// Command loadgen drives an OpenAI-style completion endpoint with
// closed-loop clients (bench/loadgen) and prints one line: req/s, p50, p99,
// max, answered and failed requests; with -bare-proxy it serves instead the
// floor of kvroute's proxying stack (loadgen.BareProxy). perf/bench-proxy.sh
// builds and runs it.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/kvroute/kvroute/bench/loadgen"
)

func main() {
	cfg := loadgen.Default("")
	flag.StringVar(&cfg.URL, "url", "", "endpoint to post to, e.g. http://127.0.0.1:8000/v1/completions (required)")
	flag.StringVar(&cfg.Model, "model", cfg.Model, "the requests' model")
	flag.IntVar(&cfg.Clients, "clients", cfg.Clients, "closed-loop clients")
	flag.DurationVar(&cfg.Duration, "duration", cfg.Duration, "measured time")
	flag.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "time run before measuring")
	flag.IntVar(&cfg.PromptBytes, "prompt-bytes", cfg.PromptBytes, "prompt length in bytes")
	flag.IntVar(&cfg.Groups, "groups", cfg.Groups, "prefix groups")
	flag.Float64Var(&cfg.PrefixFrac, "prefix-frac", cfg.PrefixFrac, "share of a prompt its group has in common")
	bare := flag.String("bare-proxy", "", "instead of driving load, serve loadgen.BareProxy on this address (host:port) over -workers")
	workers := flag.String("workers", "", "with -bare-proxy: the workers' base URLs, comma-separated")
	flag.Parse()
	if *bare != "" {
		if err := serveBare(*bare, *workers); err != nil {
			fmt.Fprintln(os.Stderr, "loadgen:", err)
			os.Exit(2)
		}
		return
	}
	res, err := loadgen.Run(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(2)
	}
	fmt.Println(res)
	if res.Requests == 0 {
		os.Exit(1)
	}
}

func serveBare(addr, workers string) error {
	if workers == "" {
		return fmt.Errorf("-bare-proxy needs -workers")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("-bare-proxy: %w", err)
	}
	b := loadgen.NewBareProxy(strings.Split(workers, ","))
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	go func() { <-sig; _ = b.Close() }()
	return b.Serve(ln)
}
