// Package loadgen is a closed-loop HTTP load generator for OpenAI-style
// completion endpoints: a fixed number of clients each post a request, wait
// for the whole answer, and post the next, so throughput and latency are
// those of the system under test at that concurrency. Prompts are a fixed
// size and fall into prefix groups (a shared beginning per group and a
// unique end per request), the shape that prefix-aware routing sees from
// applications with shared system prompts. perf/bench-proxy.sh drives it
// against kvroute and nginx (cmd/loadgen).
//
// Run is goroutine-safe; a Config's zero value is not usable (URL is
// required); Default gives the bench-proxy settings.
package loadgen

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// Config configures Run.
type Config struct {
	URL         string        // e.g. http://127.0.0.1:8000/v1/completions
	Model       string        // the request's "model"
	Clients     int           // concurrent closed-loop clients
	Duration    time.Duration // measured time
	Warmup      time.Duration // time run before measuring, not counted
	PromptBytes int           // prompt length in bytes
	Groups      int           // prefix groups
	PrefixFrac  float64       // share of the prompt a group's requests have in common, in [0,1]
	Seed        uint64        // prompt contents
}

// Default returns the bench-proxy settings for url: 32 clients, 2 KB
// prompts in 64 prefix groups, 3/4 of each prompt shared within its group.
func Default(url string) Config {
	return Config{URL: url, Model: "m", Clients: 32, Duration: 5 * time.Second, Warmup: time.Second,
		PromptBytes: 2048, Groups: 64, PrefixFrac: 0.75, Seed: 1}
}

// Result is one run's outcome.
type Result struct {
	Requests int           // answered 200 within the measured time
	Errors   int           // transport errors and non-200 answers within it
	Elapsed  time.Duration // measured time
	P50, P99 time.Duration // latency of the answered requests
	Max      time.Duration
}

// RPS is Requests per second of Elapsed.
func (r Result) RPS() float64 { return float64(r.Requests) / r.Elapsed.Seconds() }

// String formats r on one line.
func (r Result) String() string {
	return fmt.Sprintf("req/s %.0f p50 %s p99 %s max %s ok %d errors %d",
		r.RPS(), ms(r.P50), ms(r.P99), ms(r.Max), r.Requests, r.Errors)
}

func ms(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 2, 64) + "ms" }

// counterDigits is the width of the per-request counter that makes each
// prompt's end unique.
const counterDigits = 12

// Bodies returns one request body per group for cfg, and in each the offset
// of the counter digits a client overwrites to make the prompt unique.
func Bodies(cfg Config) ([][]byte, int, error) {
	if cfg.PromptBytes < counterDigits+1 || cfg.Groups < 1 || cfg.PrefixFrac < 0 || cfg.PrefixFrac > 1 {
		return nil, 0, fmt.Errorf("loadgen: prompt bytes must be > %d, groups >= 1, prefix fraction in [0,1] (got %d, %d, %g)",
			counterDigits, cfg.PromptBytes, cfg.Groups, cfg.PrefixFrac)
	}
	shared := int(float64(cfg.PromptBytes) * cfg.PrefixFrac)
	shared = min(shared, cfg.PromptBytes-counterDigits)
	r := rand.New(rand.NewPCG(cfg.Seed, 0))
	words := []string{"the", "router", "cache", "prefix", "block", "worker", "token", "model", "answer", "system", "prompt", "tool"}
	text := func(n int) []byte {
		b := make([]byte, 0, n+8)
		for len(b) < n {
			b = append(b, words[r.IntN(len(words))]...)
			b = append(b, ' ')
		}
		return b[:n]
	}
	head := `{"model":` + strconv.Quote(cfg.Model) + `,"max_tokens":16,"prompt":"`
	bodies := make([][]byte, cfg.Groups)
	for g := range bodies {
		b := append([]byte(head), text(shared)...)
		b = append(b, text(cfg.PromptBytes-shared-counterDigits)...)
		b = append(b, make([]byte, counterDigits)...)
		b = append(b, `"}`...)
		bodies[g] = b
	}
	return bodies, len(head) + cfg.PromptBytes - counterDigits, nil
}

// Run drives cfg.URL with cfg.Clients closed-loop clients for cfg.Warmup
// plus cfg.Duration and returns what the measured part saw.
func Run(cfg Config) (Result, error) {
	if cfg.URL == "" || cfg.Clients < 1 || cfg.Duration <= 0 {
		return Result{}, errors.New("loadgen: URL, clients >= 1 and duration > 0 are required")
	}
	bodies, at, err := Bodies(cfg)
	if err != nil {
		return Result{}, err
	}
	client := &fasthttp.Client{MaxConnsPerHost: cfg.Clients, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, NoDefaultUserAgentHeader: true}
	start := time.Now()
	from, until := start.Add(cfg.Warmup), start.Add(cfg.Warmup+cfg.Duration)
	type tally struct {
		lat    []time.Duration
		errors int
	}
	tallies := make([]tally, cfg.Clients)
	var wg sync.WaitGroup
	for c := range cfg.Clients {
		wg.Go(func() {
			t := &tallies[c]
			t.lat = make([]time.Duration, 0, 1<<16)
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.SetRequestURI(cfg.URL)
			req.Header.SetMethod(fasthttp.MethodPost)
			req.Header.SetContentType("application/json")
			body := make([]byte, 0, len(bodies[0])+16)
			for n := uint64(c) << 40; ; n++ {
				g := int(n % uint64(len(bodies)))
				body = append(body[:0], bodies[g]...)
				digits(body[at:at+counterDigits], n)
				req.SetBodyRaw(body)
				t0 := time.Now()
				err := client.Do(req, resp)
				t1 := time.Now()
				if t1.After(until) {
					return
				}
				if t0.Before(from) {
					continue
				}
				if err != nil || resp.StatusCode() != fasthttp.StatusOK {
					t.errors++
					if err != nil {
						time.Sleep(time.Millisecond) // a refused connection must not spin
					}
					continue
				}
				t.lat = append(t.lat, t1.Sub(t0))
			}
		})
	}
	wg.Wait()
	var all []time.Duration
	res := Result{Elapsed: cfg.Duration}
	for _, t := range tallies {
		all = append(all, t.lat...)
		res.Errors += t.errors
	}
	res.Requests = len(all)
	if len(all) > 0 {
		slices.Sort(all)
		res.P50, res.P99, res.Max = quantile(all, 0.50), quantile(all, 0.99), all[len(all)-1]
	}
	return res, nil
}

// quantile of sorted s (nearest rank).
func quantile(s []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(s))+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

// digits writes n's last len(b) decimal digits into b, zero-padded.
func digits(b []byte, n uint64) {
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = byte('0' + n%10)
		n /= 10
	}
}
