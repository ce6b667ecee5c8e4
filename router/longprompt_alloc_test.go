//go:build !race

package router

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// A 4 MiB prompt over the limit is refused before it costs memory: the
// handler allocates almost nothing for it (tokenizing it whole would cost
// 16 MiB of token ids and their growth, parsing it a copy of the body).
func TestLongPromptRefusedWithoutAllocating(t *testing.T) {
	r := handlerRouter(t, 100_000)
	body := fmt.Sprintf(`{"prompt":%q,"max_tokens":4}`, strings.Repeat("x", 4<<20))
	for _, path := range []string{"/v1/completions", "/route"} {
		call(r, path, body) // warm the pools
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.SetMethod("POST")
		ctx.Request.SetRequestURI(path)
		ctx.Request.SetBodyString(body)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		r.Handler(&ctx)
		runtime.ReadMemStats(&after)
		if code, answer := ctx.Response.StatusCode(), ctx.Response.Body(); code != 400 || !strings.Contains(string(answer), "context_length_exceeded") {
			t.Fatalf("%s: %d %s", path, code, answer)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > 64<<10 {
			t.Errorf("%s: refusing a 4 MiB prompt allocated %d bytes; want under 64 KiB", path, got)
		}
	}
}
