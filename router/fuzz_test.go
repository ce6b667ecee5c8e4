package router

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire/plane"
)

// FuzzRouteBody: any POST /route body (fields, overrides, model, ids) and
// any POST /route/{id}/{action} path get an answer among the statuses the
// README lists, with a JSON body, and never a panic; a routed booking is
// freed by the id it was given.
func FuzzRouteBody(f *testing.F) {
	ix, err := shard.NewIndex(shard.Config{Shards: 1})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = ix.Close() })
	subj, _ := plane.SubjectsFor("fuzz", "backend")
	sc := sched.DefaultConfig()
	sc.BlockSize = testBlockSize
	sc.Expiry = time.Second // a booking whose free the fuzzer mangled does not stay
	cfg := Config{Sched: sc, Subjects: subj, Logger: quietLogger(), MaxPromptTokens: 4096, QueueTimeout: 50 * time.Millisecond}
	for w := range 4 {
		cfg.Workers = append(cfg.Workers, StaticWorker{ID: uint64(w + 1), URL: fmt.Sprintf("http://127.0.0.1:%d", 9000+w),
			DpRanks: []uint32{0, 1}, Model: []string{"a", "b", "", "a"}[w], Capacity: sched.Capacity{TotalBlocks: uint64(64 << w)}})
	}
	r, err := New(cfg, ix, Hooks{})
	if err != nil {
		f.Fatal(err)
	}
	r.Start()
	f.Cleanup(func() { _ = r.Close() })
	for _, s := range []string{
		`{"token_ids":[1,2,3]}`,
		`{"prompt":"hello world","model":"a","request_id":"x1","explain":true}`,
		`{"token_ids":[1,2,3],"overrides":{"worker_id":2,"dp_rank":1,"overlap_score_weight":0.5,"router_temperature":0}}`,
		`{"token_ids":[1],"overrides":{"allowed_workers":[1,3]},"lora_name":"l"}`,
		`{"prompt":"` + string(make([]byte, 2000)) + `"}`,
		`{"token_ids":[1,2],"overrides":{"dp_rank":70000}}`,
		`[]`, `{`, `{"request_id":"a/b"}`,
	} {
		f.Add([]byte(s), "free")
	}
	f.Fuzz(func(t *testing.T, body []byte, action string) {
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.SetMethod("POST")
		ctx.Request.SetRequestURI("/route")
		ctx.Request.SetBody(body)
		r.Handler(&ctx)
		code := ctx.Response.StatusCode()
		switch code {
		case 200, 400, 404, 409, 429, 503:
		default:
			t.Fatalf("/route %q: status %d %s", body, code, ctx.Response.Body())
		}
		if b := ctx.Response.Body(); len(b) == 0 || b[0] != '{' {
			t.Fatalf("/route %q: body %q", body, b)
		}
		if code != 200 {
			return
		}
		var v struct{ id string }
		if p, err := routeParsers.Get().ParseBytes(ctx.Response.Body()); err == nil {
			v.id = string(p.GetStringBytes("request_id"))
		}
		var op fasthttp.RequestCtx
		op.Request.Header.SetMethod("POST")
		op.Request.SetRequestURI("/route/" + url.PathEscape(v.id) + "/" + url.PathEscape(action))
		r.Handler(&op)
		switch c := op.Response.StatusCode(); c {
		case 200, 404:
		default:
			t.Fatalf("/route/%s/%s: status %d", v.id, action, c)
		}
		if action != "free" {
			var fr fasthttp.RequestCtx
			fr.Request.Header.SetMethod("POST")
			fr.Request.SetRequestURI("/route/" + url.PathEscape(v.id) + "/free")
			r.Handler(&fr)
		}
	})
}
