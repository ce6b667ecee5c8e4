package mock

import (
	"errors"
	"fmt"

	"github.com/valyala/fasthttp"
)

// Fault switches that only a comparison of the engine's cached-token
// reports with the router's index can find (package verify): events cut
// off while the worker serves from its cache, a cache cleared without
// events, and a registration announcing another block size
// (WorkerConfig.AnnounceBlockSize). Tests flip them with CutEvents and
// ClearCacheSilently; `kvroute mock` users through the worker's own HTTP
// port:
//
//	POST /mock/fault/events?cut=true|false
//	POST /mock/fault/clear-cache
const (
	FaultEventsPath     = "/mock/fault/events"
	FaultClearCachePath = "/mock/fault/clear-cache"
)

// ErrBusy is ClearCacheSilently's answer while a rank has requests.
var ErrBusy = errors.New("mock: the worker has requests in flight; a cache is cleared only while idle (as vLLM's reset_prefix_cache)")

// CutEvents stops (true) or resumes (false) the publishing of every rank's
// KV events from the next step on. The engine goes on serving from its
// cache and numbering its events; the ones produced while cut are never
// sent (they stay in the recovery ring, so a recovery request still gets
// them, or a dump).
func (w *Worker) CutEvents(cut bool) {
	for _, rw := range w.all() {
		rw.mu.Lock()
		rw.mu.cut = cut
		rw.mu.Unlock()
	}
}

// ClearCacheSilently empties every rank's KV cache, as an engine restart
// or vLLM's reset_prefix_cache does, but announces nothing and uses no
// event id: the router's index keeps blocks the engine no longer has. It
// fails with ErrBusy unless every rank is idle.
func (w *Worker) ClearCacheSilently() error {
	ranks := w.all()
	for _, rw := range ranks {
		rw.mu.Lock()
	}
	defer func() {
		for _, rw := range ranks {
			rw.mu.Unlock()
		}
	}()
	for _, rw := range ranks {
		if !rw.mu.eng.Idle() || len(rw.mu.calls) != 0 {
			return ErrBusy
		}
	}
	for _, rw := range ranks {
		rw.mu.eng.KV().ClearSilently()
	}
	return nil
}

func (w *Worker) announcedBlockSize() int {
	if w.cfg.AnnounceBlockSize > 0 {
		return w.cfg.AnnounceBlockSize
	}
	return w.cfg.BlockSize
}

// serveFault answers the fault switches' endpoints.
func (w *Worker) serveFault(ctx *fasthttp.RequestCtx, path string) {
	if !ctx.IsPost() {
		w.fail(ctx, fasthttp.StatusMethodNotAllowed, "use POST", "invalid_request_error")
		return
	}
	switch path {
	case FaultEventsPath:
		v := string(ctx.QueryArgs().Peek("cut"))
		if v != "true" && v != "false" {
			w.badRequest(ctx, fmt.Sprintf("cut must be true or false, got %q", v), "cut")
			return
		}
		w.CutEvents(v == "true")
	case FaultClearCachePath:
		if err := w.ClearCacheSilently(); err != nil {
			w.fail(ctx, fasthttp.StatusConflict, err.Error(), "conflict")
			return
		}
	}
	ctx.SetContentType("application/json")
	ctx.SetBodyString(`{"status":"ok"}` + "\n")
}
