package router

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire/plane"
)

// handlerRouter is a started Router over two static workers (ids 1 and 2,
// round-robin) that are never sent to, for calling Handler directly;
// declared are the workers' max_model_len.
func handlerRouter(t testing.TB, maxPrompt int, declared ...int) *Router {
	t.Helper()
	ix, err := shard.NewIndex(shard.Config{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ix.Close() })
	subj, _ := plane.SubjectsFor("longprompt", "backend")
	sc := sched.DefaultConfig()
	sc.BlockSize = testBlockSize
	sc.Policy = sched.PolicyRoundRobin
	cfg := Config{Sched: sc, Subjects: subj, Logger: quietLogger(), MaxPromptTokens: maxPrompt, QueueTimeout: time.Second}
	for w := range 2 {
		cfg.Workers = append(cfg.Workers, StaticWorker{ID: uint64(w + 1), URL: fmt.Sprintf("http://127.0.0.1:%d", 9000+w)})
	}
	r, err := New(cfg, ix, Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range declared { // as a registration's max_model_len would
		r.b.workers[uint64(i+1)].MaxModelLen = l
	}
	r.publishTable()
	r.Start()
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// call runs Handler on a request and returns its status and body.
func call(r *Router, path, body string) (int, string) {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod("POST")
	ctx.Request.SetRequestURI(path)
	ctx.Request.SetBodyString(body)
	r.Handler(&ctx)
	return ctx.Response.StatusCode(), string(ctx.Response.Body())
}

// A worker declaring a long context (max_model_len) raises the prompt
// limit only for the requests routed to it: a prompt longer than another
// worker's declared context never goes to that worker, and one longer
// than every worker's is refused.
func TestDeclaredContextRaisesOnlyItsWorkersLimit(t *testing.T) {
	r := handlerRouter(t, 0, 1000, 4000)
	long := fmt.Sprintf(`{"token_ids":%s}`, promptJSON(tokens(1, 0, 2000, 0)))
	for i := range 6 { // round-robin: worker 1 would get every other one
		code, body := call(r, "/route", long)
		if code != 200 || !strings.Contains(body, `"worker_id":2,`) {
			t.Fatalf("2,000-token prompt %d (worker 1 declares 1,000): %d %s", i, code, body)
		}
	}
	served := map[string]bool{}
	for i := range 6 {
		code, body := call(r, "/route", fmt.Sprintf(`{"token_ids":%s}`, promptJSON(tokens(2, i, 500, 0))))
		if code != 200 {
			t.Fatalf("500-token prompt: %d %s", code, body)
		}
		served[body[strings.Index(body, `"worker_id":`):][:len(`"worker_id":1`)]] = true
	}
	if len(served) != 2 {
		t.Errorf("500-token prompts went to %v; want both workers", served)
	}
	for _, path := range []string{"/route", "/v1/completions"} {
		code, body := call(r, path, fmt.Sprintf(`{"prompt":%q}`, strings.Repeat("x", 5000)))
		if code != 400 || !strings.Contains(body, "context_length_exceeded") || !strings.Contains(body, "4000 allowed") {
			t.Errorf("%s with a 5,000-token prompt: %d %s", path, code, body)
		}
	}
}

// --max-prompt-tokens caps every worker, whatever it declares.
func TestMaxPromptTokensCapsDeclaredContext(t *testing.T) {
	r := handlerRouter(t, 3000, 1000, 1<<30)
	if code, body := call(r, "/route", fmt.Sprintf(`{"token_ids":%s}`, promptJSON(tokens(1, 0, 2000, 0)))); code != 200 || !strings.Contains(body, `"worker_id":2,`) {
		t.Errorf("2,000 tokens: %d %s", code, body)
	}
	if code, body := call(r, "/route", fmt.Sprintf(`{"token_ids":%s}`, promptJSON(tokens(1, 0, 3001, 0)))); code != 400 || !strings.Contains(body, "3000 allowed") {
		t.Errorf("3,001 tokens over --max-prompt-tokens 3000: %d %s", code, body)
	}
}
