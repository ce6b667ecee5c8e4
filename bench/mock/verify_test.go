package mock

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvroute/kvroute/internal/natstest"
	"github.com/kvroute/kvroute/wire/openai"
	"github.com/kvroute/kvroute/wire/plane"
)

// A stream that asks stream_options.include_usage ends, as vLLM's does,
// with a chunk without choices carrying the usage; one that does not keeps
// the usage on its last token's chunk.
func TestStreamUsageChunk(t *testing.T) {
	s := natstest.Server(t)
	w := startFleet(t, Config{Workers: 1, Speedup: 1000, Transport: plane.TransportNone}, natstest.Connect(t, s)).Workers()[0]
	prompt := tokens(3, 40)
	for _, include := range []bool{true, false} {
		body := map[string]any{"model": "m", "prompt": prompt, "max_tokens": 3, "stream": true}
		if include {
			body["stream_options"] = map[string]any{"include_usage": true}
		}
		code, out := post(t, w.URL(), "/v1/completions", body)
		if code != 200 {
			t.Fatalf("status %d: %s", code, out)
		}
		events := strings.Split(strings.TrimSuffix(string(out), "\n\n"), "\n\n")
		want := 4 // three tokens, [DONE]
		if include {
			want = 5 // and the usage chunk
		}
		if len(events) != want || events[want-1] != "data: [DONE]" {
			t.Fatalf("include_usage=%v: events %q", include, events)
		}
		last, lastTok := []byte(strings.TrimPrefix(events[want-2], "data: ")), []byte(strings.TrimPrefix(events[want-3], "data: "))
		if include {
			if !openai.IsUsageChunk(last) {
				t.Errorf("last event %s is not a usage chunk", last)
			}
			if _, ok := openai.CachedTokens(lastTok); ok || !strings.Contains(string(lastTok), `"finish_reason":"length"`) {
				t.Errorf("last token's chunk %s", lastTok)
			}
		} else if _, ok := openai.CachedTokens(last); !ok || openai.IsUsageChunk(last) {
			t.Errorf("without include_usage the last chunk %s carries the usage and a choice", last)
		}
	}
}

// CutEvents stops the events while the worker serves from its cache;
// ClearCacheSilently empties the cache without an event or an event id;
// both answer over the worker's HTTP port too. AnnounceBlockSize changes
// only the registration.
func TestFaultSwitchesForVerification(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Connect(t, s)
	sub := natstest.Connect(t, s)
	subj, _ := plane.SubjectsFor("kvroute", "backend")
	var msgs atomic.Int64
	if _, err := sub.Subscribe(subj.KVEvents, func(*nats.Msg) { msgs.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Workers: 1, BlockSize: 16, AnnounceBlockSize: 32, Speedup: 1000, Transport: plane.TransportDynamo}
	w := startFleet(t, cfg, nc).Workers()[0]
	if r := w.Registration(); r.BlockSize != 32 || w.Config().BlockSize != 16 {
		t.Fatalf("registration block size %d, engine %d", r.BlockSize, w.Config().BlockSize)
	}
	if code, body := post(t, w.URL(), FaultEventsPath+"?cut=maybe", nil); code != 400 || !strings.Contains(string(body), `"param":"cut"`) {
		t.Fatalf("bad switch: %d %s", code, body)
	}
	if code, _ := post(t, w.URL(), FaultEventsPath+"?cut=true", nil); code != 200 {
		t.Fatalf("cut: %d", code)
	}
	prompt := tokens(5, 100)
	complete(t, w.URL(), prompt, 2)
	if c := complete(t, w.URL(), prompt, 2); c.Usage.PromptTokensDetails.CachedTokens != 96 {
		t.Fatalf("served from cache: %d cached tokens, want 96", c.Usage.PromptTokensDetails.CachedTokens)
	}
	time.Sleep(50 * time.Millisecond) // a message published would have arrived
	if n := msgs.Load(); n != 0 {
		t.Fatalf("%d event messages while cut", n)
	}
	w.CutEvents(false)
	complete(t, w.URL(), tokens(6, 40), 2)
	waitFor(t, "events after the cut", func() bool { return msgs.Load() > 0 })

	next := func() uint64 {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.mu.eng.KV().NextEventID()
	}
	waitFor(t, "an idle worker", w.Idle)
	before, sent := next(), msgs.Load()
	resp, err := http.Post(w.URL()+FaultClearCachePath, "application/json", nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("clear: %v %v", resp, err)
	}
	resp.Body.Close()
	if c := complete(t, w.URL(), prompt, 2); c.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Fatalf("after the clear: %d cached tokens", c.Usage.PromptTokensDetails.CachedTokens)
	}
	// The request stored blocks (events from the old next id on), the
	// clear itself announced nothing.
	waitFor(t, "the request's events", func() bool { return msgs.Load() > sent })
	if after := next(); after <= before {
		t.Fatalf("next event id %d, was %d", after, before)
	}
}
