package loadgen

import (
	"bytes"
	"encoding/json"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

func TestBodiesHaveTheConfiguredShape(t *testing.T) {
	cfg := Default("http://x")
	bodies, at, err := Bodies(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(bodies) != cfg.Groups {
		t.Fatalf("%d bodies, want %d", len(bodies), cfg.Groups)
	}
	shared := int(float64(cfg.PromptBytes) * cfg.PrefixFrac)
	for g, b := range bodies {
		b = bytes.Clone(b)
		digits(b[at:at+counterDigits], 123)
		var req struct {
			Model  string `json:"model"`
			Prompt string `json:"prompt"`
		}
		if err := json.Unmarshal(b, &req); err != nil {
			t.Fatalf("group %d: %v", g, err)
		}
		if len(req.Prompt) != cfg.PromptBytes || req.Model != cfg.Model {
			t.Fatalf("group %d: prompt of %d bytes, model %q; want %d, %q", g, len(req.Prompt), req.Model, cfg.PromptBytes, cfg.Model)
		}
		if want := "000000000123"; req.Prompt[len(req.Prompt)-counterDigits:] != want {
			t.Fatalf("group %d: prompt ends %q, want the counter %q", g, req.Prompt[len(req.Prompt)-counterDigits:], want)
		}
		if g > 0 && req.Prompt[:shared] == string(bodies[0][at-cfg.PromptBytes+counterDigits:][:shared]) {
			t.Fatalf("group %d shares group 0's prefix", g)
		}
	}
	if _, _, err := Bodies(Config{PromptBytes: 4, Groups: 1}); err == nil {
		t.Fatal("a prompt shorter than the counter was accepted")
	}
}

func listen(t *testing.T, h fasthttp.RequestHandler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &fasthttp.Server{Handler: h}
	go s.Serve(ln) //nolint:errcheck
	t.Cleanup(func() { _ = s.Shutdown() })
	return "http://" + ln.Addr().String()
}

// Run through BareProxy to two workers: every request is answered, both
// workers get requests, and the counts agree.
func TestRunThroughBareProxy(t *testing.T) {
	var hits [2]atomic.Int64
	workers := make([]string, 2)
	for i := range workers {
		workers[i] = listen(t, func(ctx *fasthttp.RequestCtx) {
			hits[i].Add(1)
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"choices":[]}`)
		})
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := NewBareProxy(workers)
	go b.Serve(ln) //nolint:errcheck
	defer b.Close()
	cfg := Default("http://" + ln.Addr().String() + "/v1/completions")
	cfg.Clients, cfg.Duration, cfg.Warmup = 1, 200*time.Millisecond, 0
	res, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests == 0 || res.Errors != 0 || res.P50 <= 0 || res.P99 < res.P50 {
		t.Fatalf("result %v: want answered requests, no errors, p99 >= p50 > 0", res)
	}
	if hits[0].Load() == 0 || hits[1].Load() == 0 {
		t.Fatalf("worker hits %d, %d: round robin must reach both", hits[0].Load(), hits[1].Load())
	}
}
