package router

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvroute/kvroute/sched"
)

// --max-queue-wait against a live router: once the queue's drain rate is
// measured, a request whose predicted wait is over the bound gets 429 with
// an OpenAI-style JSON error and Retry-After, counted in
// kvroute_refused_total{reason="queue_wait"}, without opening the
// all-workers-busy window or publishing the event; the request already
// waiting is served when the worker frees. The drain rate is made 0 (the
// only worker held for more than a sample of queue-busy time), so every
// request beyond the first waiter is shed whatever the machine's speed.
func TestMaxQueueWaitSheds(t *testing.T) {
	e := startEnv(t, envOptions{workers: 1, sched: func(c *sched.Config) {
		c.BusyPrefillTokens = 100
		c.MaxQueueWait = time.Second
	}, health: func(c *Config) { c.QueueTimeout = 30 * time.Second }})
	busy := make(chan *nats.Msg, 16)
	sub, err := e.nc.ChanSubscribe(e.subj.AllBusy, busy)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	_ = e.nc.Flush()
	if v := e.metric("kvroute_queue_drain_rate"); v != 0 {
		t.Fatalf("drain rate %v before any queueing", v)
	}
	// Hold the only worker: its booked prefill keeps it busy.
	hold := fmt.Sprintf(`{"token_ids":%s,"request_id":"hold"}`, promptJSON(tokens(1, 0, 400, 0)))
	if code, b, _ := e.do("POST", "/route", hold); code != 200 {
		t.Fatalf("/route: %d %s", code, b)
	}
	// The first waiter is never shed.
	first := make(chan int, 1)
	go func() {
		code, _, _ := e.do("POST", "/v1/completions", `{"prompt":"first waiter","max_tokens":1}`)
		first <- code
	}()
	waitFor(t, "the first request queued", func() bool { return e.metric("kvroute_queue_depth") == 1 })
	// No admission in a whole sample (2 s of queue-busy time): rate 0,
	// the predicted wait unbounded.
	waitFor(t, "the drain rate measured", func() bool { return e.metric("kvroute_queue_wait_predicted_seconds") > 1 })
	const n = 5
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, body, h := e.do("POST", "/v1/completions", fmt.Sprintf(`{"prompt":"shed %d","max_tokens":1}`, i))
			var doc struct {
				Error struct {
					Message, Type, Code string
				}
			}
			if err := json.Unmarshal(body, &doc); code != 429 || err != nil || doc.Error.Code != "rate_limit_exceeded" ||
				!strings.Contains(doc.Error.Message, "--max-queue-wait") || h.Get("Retry-After") != "1" {
				t.Errorf("request %d: %d %s (Retry-After %q), want 429 rate_limit_exceeded naming --max-queue-wait, Retry-After 1",
					i, code, body, h.Get("Retry-After"))
			}
		}()
	}
	wg.Wait()
	if v := e.refused("queue_wait"); v != n {
		t.Errorf(`kvroute_refused_total{reason="queue_wait"} = %v, want %d`, v, n)
	}
	if v := e.metric(`kvroute_refused_total{reason=""}`); v != -1 {
		t.Errorf(`kvroute_refused_total{reason=""} exposed (%v): every refusal needs its reason's name`, v)
	}
	if v := e.metric(`kvroute_requests_rejected_total{reason="queue_wait"}`); v != n {
		t.Errorf(`kvroute_requests_rejected_total{reason="queue_wait"} = %v, want %d`, v, n)
	}
	if th, ab := e.metric("kvroute_throttled"), e.metric("kvroute_all_workers_busy_total"); th != 0 || ab != 0 {
		t.Errorf("shedding opened the all-workers-busy window: throttled %v, events %v", th, ab)
	}
	if q := e.metric("kvroute_queue_depth"); q != 1 {
		t.Errorf("queue depth %v, want the first waiter only", q)
	}
	e.do("POST", "/route/hold/free", "")
	select {
	case code := <-first:
		if code != 200 {
			t.Errorf("the first waiter got %d after the worker freed", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first waiter was not served within 10 s of the worker freeing")
	}
	select {
	case m := <-busy:
		t.Errorf("all-workers-busy published while shedding: %s", m.Data)
	default:
	}
}
