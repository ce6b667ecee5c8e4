// Command loadgen drives an OpenAI-style completion endpoint with
// closed-loop clients (bench/loadgen) and prints one line: req/s, p50, p99,
// max, answered and failed requests. perf/bench-proxy.sh builds and runs it.
package main

import (
	"flag"
	"fmt"
	"os"

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
	flag.Parse()
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
