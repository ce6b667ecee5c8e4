package router

import (
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/internal/httpref/httpreftest"
	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire/plane"
)

// TestRoutesServed: every route of the table is served by Handler with its
// method (another method gets 405 naming it in Allow), and a path outside
// the table gets 404.
func TestRoutesServed(t *testing.T) {
	ix, err := shard.NewIndex(shard.Config{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	subj, _ := plane.SubjectsFor("routes", "backend")
	sc := sched.DefaultConfig()
	sc.BlockSize = testBlockSize
	cfg := Config{Sched: sc, Subjects: subj, Logger: quietLogger(), QueueTimeout: time.Second,
		Workers: []StaticWorker{{ID: 1, URL: "http://127.0.0.1:1", Model: "m"}}}
	r, err := New(cfg, ix, Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	r.Start()
	defer r.Close()
	do := func(method, path, body string) *fasthttp.Response {
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.SetMethod(method)
		ctx.Request.SetRequestURI(path)
		ctx.Request.SetBodyString(body)
		r.Handler(&ctx)
		var resp fasthttp.Response
		ctx.Response.CopyTo(&resp)
		return &resp
	}
	if len(Routes()) != len(routes) || len(Routes()) == 0 {
		t.Fatalf("Routes() has %d routes, the table %d", len(Routes()), len(routes))
	}
	seen := map[endpoint]bool{}
	for _, rt := range routes {
		if seen[rt.ep] {
			t.Errorf("%s %s: endpoint %s listed twice", rt.Method, rt.Path, endpointNames[rt.ep])
		}
		seen[rt.ep] = true
		path := strings.NewReplacer("{request_id}", "kvr-none", "{action}", "free").Replace(rt.Path)
		if ep := endpointOf([]byte(path)); ep != rt.ep {
			t.Errorf("%s: endpointOf = %s, want %s", path, endpointNames[ep], endpointNames[rt.ep])
		}
		resp := do(rt.Method, path, "")
		if c := resp.StatusCode(); c == 405 || c == 404 && strings.Contains(string(resp.Body()), "no such endpoint") {
			t.Errorf("%s %s: %d %s", rt.Method, path, c, resp.Body())
		}
		other := "GET"
		if rt.Method == "GET" {
			other = "POST"
		}
		resp = do(other, path, "")
		if c, allow := resp.StatusCode(), string(resp.Header.Peek("Allow")); c != 405 || allow != rt.Method {
			t.Errorf("%s %s: %d with Allow %q, want 405 with Allow %q", other, path, c, allow, rt.Method)
		}
	}
	for _, p := range []string{"/", "/v1", "/v1/completions/x", "/routes", "/metrics/"} {
		if resp := do("GET", p, ""); resp.StatusCode() != 404 {
			t.Errorf("GET %s: %d, want 404", p, resp.StatusCode())
		}
	}
}

// TestErrorTable: the error table lists every HTTP error status and every
// error code the router's code writes (its files and wire/proxy's, which
// writes its 502s and stream errors), and nothing it never writes.
func TestErrorTable(t *testing.T) {
	httpreftest.CheckErrorTable(t, errorTable, "../wire/openai/response.go",
		append(httpreftest.GoFiles(t, ".", "api.go"), httpreftest.GoFiles(t, "../wire/proxy")...)...)
}
