package mock

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvroute/kvroute/bench/engine"
	"github.com/kvroute/kvroute/internal/natstest"
	"github.com/kvroute/kvroute/internal/promtext/promtexttest"
	"github.com/kvroute/kvroute/radix"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/openai"
	"github.com/kvroute/kvroute/wire/plane"
	"github.com/kvroute/kvroute/wire/zmq"
)

// startFleet starts a fleet on random ports, closed when the test ends.
func startFleet(t testing.TB, cfg Config, nc *nats.Conn) *Fleet {
	t.Helper()
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	f, err := Start(cfg, nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	})
	return f
}

var client = &http.Client{Timeout: 30 * time.Second}

// completion is the part of a response the tests read.
type completion struct {
	Choices []struct {
		Text    string `json:"text"`
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
		Code    string `json:"code"`
	} `json:"error"`
}

func post(t testing.TB, url, path string, body any) (int, []byte) {
	t.Helper()
	return postWith(t, url, path, body, nil)
}

// postWith is post with extra request headers.
func postWith(t testing.TB, url, path string, body any, hdr http.Header) (int, []byte) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, err := http.NewRequest(http.MethodPost, url+path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

// complete sends a non-streaming completion of prompt token ids and returns
// the parsed response.
func complete(t testing.TB, url string, prompt []uint32, maxTokens int) completion {
	t.Helper()
	code, body := post(t, url, "/v1/completions", map[string]any{"model": "m", "prompt": prompt, "max_tokens": maxTokens})
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	var c completion
	if err := json.Unmarshal(body, &c); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if c.Usage == nil || len(c.Choices) != 1 {
		t.Fatalf("malformed response %s", body)
	}
	return c
}

// generated is the text a worker generates for a prompt of token ids (base
// model): n tokens, a pure function of the prompt and the position.
func generated(prompt []uint32, n int) string {
	return string(appendText(nil, promptDigest(prompt, wire.Seed), 0, n))
}

func tokens(seed, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(seed*100003 + i)
	}
	return out
}

// TestCachedTokensFollowSharedPrefix: a request's cached_tokens is the
// prefix it shares with earlier requests on that worker, in full blocks,
// at most prompt-1 tokens (vLLM recomputes the last prompt token).
func TestCachedTokensFollowSharedPrefix(t *testing.T) {
	f := startFleet(t, Config{Workers: 2, BlockSize: 16, KVBlocks: 256, Speedup: 1000, Transport: plane.TransportNone}, nil)
	w1, w2 := f.Workers()[0].URL(), f.Workers()[1].URL()
	a := tokens(1, 64)
	aSuffix := append(append([]uint32(nil), a...), tokens(2, 20)...)
	for _, c := range []struct {
		name   string
		url    string
		prompt []uint32
		cached int
	}{
		{"A cold", w1, a, 0},
		{"A+suffix: A's 4 blocks", w1, aSuffix, 64},
		{"A again: 3 blocks (last token recomputed)", w1, a, 48},
		{"A+suffix on the other worker: cold", w2, aSuffix, 0},
		{"unrelated prompt", w1, tokens(3, 64), 0},
		{"A's first 40 tokens: 2 blocks", w1, a[:40], 32},
	} {
		r := complete(t, c.url, c.prompt, 4)
		if got := r.Usage.PromptTokensDetails.CachedTokens; got != c.cached {
			t.Errorf("%s: cached_tokens %d, want %d", c.name, got, c.cached)
		}
		if r.Usage.PromptTokens != len(c.prompt) || r.Usage.CompletionTokens != 4 || r.Choices[0].Text != generated(c.prompt, 4) {
			t.Errorf("%s: usage %+v text %q", c.name, *r.Usage, r.Choices[0].Text)
		}
	}
}

// triple is a held block as the tests compare it.
type triple struct {
	engine, parent wire.EngineHash
	hasParent      bool
	local          wire.BlockHash
}

// mirror applies received KV events to a radix.Tree and checks event ids.
type mirror struct {
	mu       sync.Mutex
	tree     *radix.Tree
	last     map[wire.WorkerKey]uint64
	events   int
	err      error
	checkIDs bool
}

func newMirror(checkIDs bool) *mirror {
	return &mirror{tree: radix.New(), last: map[wire.WorkerKey]uint64{}, checkIDs: checkIDs}
}

func (m *mirror) apply(evs []wire.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range evs {
		ev := &evs[i]
		m.events++
		if m.checkIDs && m.err == nil {
			want := m.last[ev.Worker] + 1
			if ev.Kind == wire.KindCleared && ev.ID == 1 {
				want = 1 // a restarted engine numbers from 1 again
			}
			if ev.ID != want {
				m.err = fmt.Errorf("worker %v: event id %d, want %d", ev.Worker, ev.ID, want)
			}
		}
		m.last[ev.Worker] = ev.ID
		if res, err := m.tree.Apply(ev); (err != nil || res.Unknown != 0 || res.Conflicts != 0) && m.err == nil {
			m.err = fmt.Errorf("apply %v event %d: %+v %v", ev.Kind, ev.ID, res, err)
		}
	}
}

func (m *mirror) fail(err error) {
	m.mu.Lock()
	if m.err == nil {
		m.err = err
	}
	m.mu.Unlock()
}

// blocks returns worker k's blocks in the tree.
func (m *mirror) blocks(k wire.WorkerKey) map[triple]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[triple]bool{}
	for _, ev := range m.tree.Dump(nil) {
		if ev.Worker != k {
			continue
		}
		p, hp := ev.Parent, ev.HasParent
		for _, b := range ev.Blocks {
			out[triple{engine: b.Engine, parent: p, hasParent: hp, local: b.Local}] = true
			p, hp = b.Engine, true
		}
	}
	return out
}

// held returns w's blocks.
func held(w *Worker) map[triple]bool {
	out := map[triple]bool{}
	for _, b := range w.Held(nil) {
		out[triple{engine: b.Engine, parent: b.Parent, hasParent: b.HasParent, local: b.Local}] = true
	}
	return out
}

// waitReproduced polls until the mirror's view of w equals the blocks w
// holds (w must be idle, so its cache no longer changes).
func waitReproduced(t *testing.T, m *mirror, w *Worker) int {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	k := wire.WorkerKey{Worker: w.ID(), Dp: w.rank}
	for {
		want := held(w)
		got := m.blocks(k)
		m.mu.Lock()
		err := m.err
		m.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		if mapsEqual(got, want) && w.Idle() {
			return len(want)
		}
		if time.Now().After(deadline) {
			missing, extra := 0, 0
			for b := range want {
				if !got[b] {
					missing++
				}
			}
			for b := range got {
				if !want[b] {
					extra++
				}
			}
			t.Fatalf("worker %d: tree has %d blocks, engine %d: %d missing, %d extra", w.ID(), len(got), len(want), missing, extra)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func mapsEqual(a, b map[triple]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// workload sends n concurrent requests with shared prefixes (4 families)
// and long outputs to a small cache, so that blocks are reused, evicted and
// preempted. It returns the prompts' local hashes.
func workload(t *testing.T, url string, seed uint64, n, bs int) map[wire.BlockHash]bool {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	prompts := make([][]uint32, n)
	outs := make([]int, n)
	local := map[wire.BlockHash]bool{}
	for i := range prompts {
		fam := tokens(100+rng.IntN(4), 48)
		p := append(fam[:rng.IntN(49)], tokens(1000+i, 1+rng.IntN(24))...)
		prompts[i], outs[i] = p, 1+rng.IntN(40)
		for _, h := range wire.LocalHashes(nil, p, bs, wire.Seed) {
			local[h] = true
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range prompts {
		wg.Go(func() {
			b, _ := json.Marshal(map[string]any{"prompt": prompts[i], "max_tokens": outs[i], "stream": i%2 == 0})
			resp, err := client.Post(url+"/v1/completions", "application/json", bytes.NewReader(b))
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				errs <- fmt.Errorf("request %d: %d %s", i, resp.StatusCode, body)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return local
}

// smallCache is a fleet configuration under cache pressure.
func smallCache(transport string) Config {
	return Config{Workers: 1, BlockSize: 4, KVBlocks: 48, MaxNumSeqs: 8, MaxBatchedTokens: 64, Speedup: 2000, Transport: transport}
}

// checkPressure asserts that the workload evicted and preempted.
func checkPressure(t *testing.T, w *Worker) {
	t.Helper()
	w.mu.Lock()
	st, kst := w.mu.eng.Stats(), w.mu.eng.KV().Stats()
	w.mu.Unlock()
	if st.Preemptions == 0 || kst.RemovedBlocks == 0 || st.CachedTokens == 0 {
		t.Fatalf("workload missed a path: engine %+v kv %+v", st, kst)
	}
}

// mirrorNATS mirrors the KV events published on sub's server in transport
// tr (Dynamo or native), from the subscription's first message on.
func mirrorNATS(t *testing.T, sub *nats.Conn, tr string) *mirror {
	t.Helper()
	subj, _ := plane.SubjectsFor("kvroute", "backend")
	m := newMirror(true)
	var batch wire.Batch
	subject := subj.KVEvents
	if tr == plane.TransportNative {
		subject = subj.KVEventsNative
	}
	if _, err := sub.Subscribe(subject, func(msg *nats.Msg) {
		batch.Reset()
		var err error
		if tr == plane.TransportDynamo {
			_, err = wire.DecodeDynamo(&batch, msg.Data)
		} else {
			err = wire.DecodeNative(&batch, msg.Data)
		}
		if err != nil {
			m.fail(err)
			return
		}
		m.apply(batch.Events)
	}); err != nil {
		t.Fatal(err)
	}
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestEventsReproduceCacheOverNATS: the Dynamo and native events a worker
// publishes over NATS, applied to an empty radix.Tree, reproduce exactly the
// blocks its block manager holds, with contiguous event ids, after
// eviction and preemption, and after a Restart (Cleared).
func TestEventsReproduceCacheOverNATS(t *testing.T) {
	for _, tr := range []string{plane.TransportDynamo, plane.TransportNative} {
		t.Run(tr, func(t *testing.T) {
			s := natstest.Server(t)
			nc := natstest.Connect(t, s)
			sub := natstest.Connect(t, s)
			cfg := smallCache(tr)
			m := mirrorNATS(t, sub, tr)
			w := startFleet(t, cfg, nc).Workers()[0]
			workload(t, w.URL(), 1, 40, cfg.BlockSize)
			checkPressure(t, w)
			n := waitReproduced(t, m, w)
			if n == 0 {
				t.Fatal("the cache is empty")
			}

			w.Restart()
			deadline := time.Now().Add(10 * time.Second)
			for len(w.Held(nil)) != 0 {
				if time.Now().After(deadline) {
					t.Fatal("restart did not empty the cache")
				}
				time.Sleep(time.Millisecond)
			}
			waitReproduced(t, m, w)
			workload(t, w.URL(), 2, 20, cfg.BlockSize)
			waitReproduced(t, m, w)
			m.mu.Lock()
			defer m.mu.Unlock()
			if m.tree.Stats().Entries == 0 {
				t.Fatal("nothing stored after the restart")
			}
		})
	}
}

// subscribeZMQ mirrors w's ZMQ events and waits until the subscription is
// live (probing with empty batches, which PUB/SUB may drop).
func subscribeZMQ(t *testing.T, w *Worker, m *mirror) *zmq.Subscriber {
	t.Helper()
	dec := wire.NewVLLMDecoder(wire.VLLMConfig{Worker: w.ID(), BlockSize: w.Config().BlockSize})
	var batch wire.Batch
	got := make(chan struct{}, 1)
	s := zmq.Subscribe(zmq.SubscriberConfig{
		Endpoint: w.ZMQEndpoint(), ReplayEndpoint: w.ZMQReplay(), Topic: "kv@", RetryInterval: 20 * time.Millisecond,
	}, func(seq uint64, payload []byte, replayed bool) {
		batch.Reset()
		if err := dec.Decode(&batch, seq, payload); err != nil || batch.Rejected != 0 {
			m.fail(fmt.Errorf("decode seq %d: %v %v", seq, err, batch.Err))
			return
		}
		m.apply(batch.Events)
		select {
		case got <- struct{}{}:
		default:
		}
	})
	t.Cleanup(s.Close)
	probe := wire.AppendVLLMBatch(nil, &wire.VLLMBatch{HasDPRank: true}, wire.VLLMEncoding{})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := w.pub.Publish(probe); err != nil {
			t.Fatal(err)
		}
		select {
		case <-got:
			return s
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the ZMQ subscriber never received a probe")
		}
	}
}

// TestEventsReproduceCacheOverZMQ: the vLLM-format batches a worker
// publishes on its ZMQ PUB socket, decoded and applied to an empty
// radix.Tree, reproduce its blocks after eviction, preemption and Restart,
// under the same local hashes: blocks holding generated tokens carry the
// tokens the worker generated. With half the batches dropped on the live
// socket, the subscriber recovers them from the replay socket and the tree
// is still exact.
func TestEventsReproduceCacheOverZMQ(t *testing.T) {
	cfg := smallCache(plane.TransportZMQ)
	w := startFleet(t, cfg, nil).Workers()[0]
	m := newMirror(false)
	s := subscribeZMQ(t, w, m)
	workload(t, w.URL(), 3, 40, cfg.BlockSize)
	checkPressure(t, w)
	waitReproduced(t, m, w)

	w.SetFaults(0.5, 0)
	workload(t, w.URL(), 4, 30, cfg.BlockSize)
	w.Restart()
	workload(t, w.URL(), 5, 20, cfg.BlockSize)
	w.SetFaults(0, 0)
	// One more request: its live batches reveal any gap at the tail.
	workload(t, w.URL(), 6, 1, cfg.BlockSize)
	waitReproduced(t, m, w)
	st := s.Stats()
	if st.Gaps == 0 || st.Replayed == 0 || st.Lost != 0 {
		t.Fatalf("subscriber stats %+v: want gaps filled by replay and nothing lost", st)
	}
}

// TestStreaming: SSE chunks leave as the engine produces them (one per
// token, each made by its own decode step), then a final chunk with usage
// and [DONE]; chat requests stream deltas. The timing is read on the
// engine's clock (the worker's call trace), not on the client's: a client
// descheduled for a while reads several chunks at once.
func TestStreaming(t *testing.T) {
	const speedup = 1
	f := startFleet(t, Config{Workers: 1, BlockSize: 16, KVBlocks: 256, Speedup: speedup, Transport: plane.TransportNone}, nil)
	w := f.Workers()[0]
	url := w.URL()
	complete(t, url, tokens(9, 40), 1) // warm the cache: 2 blocks
	w.traceCalls()
	const n = 24
	b, _ := json.Marshal(map[string]any{"prompt": tokens(9, 40), "max_tokens": n, "stream": true})
	resp, err := client.Post(url+"/v1/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content type %q", ct)
	}
	var (
		chunks int
		text   string
		last   completion
		done   bool
	)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("not an SSE data line: %q", line)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		if done {
			t.Fatal("data after [DONE]")
		}
		var c completion
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatal(err)
		}
		chunks++
		text += c.Choices[0].Text
		last = c
	}
	if !done || chunks != n || text != generated(tokens(9, 40), n) {
		t.Fatalf("%d chunks %q done %v, want %d chunks", chunks, text, done, n)
	}
	if last.Usage == nil || last.Usage.CompletionTokens != n || last.Usage.PromptTokens != 40 ||
		last.Usage.PromptTokensDetails.CachedTokens != 32 || *last.Choices[0].FinishReason != "length" {
		t.Fatalf("final chunk %+v", last)
	}
	traces := w.tracedCalls()
	if len(traces) != 1 || len(traces[0].made) != n || len(traces[0].sent) != n {
		t.Fatalf("traces %+v, want one call with %d tokens made and sent", traces, n)
	}
	made, sent := traces[0].made, traces[0].sent
	// Each token after the first is made by a decode step of its own, at
	// least DecodePoly(0) / speedup (5.74 ms) after the one before.
	step := time.Duration(float64(engine.DecodePoly(0)) / speedup)
	for i := 1; i < n; i++ {
		if made[i]-made[i-1] < step {
			t.Fatalf("token %d made %v after token %d, want a decode step of at least %v: made %v", i, made[i]-made[i-1], i-1, step, made)
		}
	}
	// A chunk never leaves before its token is made, and the first one
	// leaves while the engine is still generating: the n-1 decode steps
	// after it (over 130 ms) are the writer's margin.
	for i := range n {
		if sent[i] < made[i] {
			t.Fatalf("chunk %d sent at %v, before its token was made at %v", i, sent[i], made[i])
		}
	}
	if sent[0] >= made[n-1] {
		t.Fatalf("the first chunk left at %v, once the last token was made (%v): chunks held back until the end\nmade %v\nsent %v", sent[0], made[n-1], made, sent)
	}

	// Chat: deltas, the same accounting.
	body, _ := json.Marshal(map[string]any{"messages": []map[string]string{{"role": "user", "content": "hi"}}, "max_tokens": 3, "stream": true})
	resp2, err := client.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	all, _ := io.ReadAll(resp2.Body)
	resp2.Body.Close()
	if got := strings.Count(string(all), `"delta":{"role":"assistant","content":`); got != 3 || !strings.HasSuffix(string(all), "data: [DONE]\n\n") {
		t.Fatalf("chat stream: %d deltas: %s", got, all)
	}
}

// TestNonStreamingChat: a chat request renders the ChatML template,
// tokenized as bytes; prompt_tokens counts its bytes.
func TestNonStreamingChat(t *testing.T) {
	f := startFleet(t, Config{Workers: 1, Speedup: 1000, KVBlocks: 64, Transport: plane.TransportNone}, nil)
	code, body := post(t, f.Workers()[0].URL(), "/v1/chat/completions", map[string]any{
		"messages": []map[string]string{{"role": "user", "content": "hello"}},
	})
	var c completion
	if err := json.Unmarshal(body, &c); err != nil || code != 200 {
		t.Fatalf("%d %v %s", code, err, body)
	}
	want := len("<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n")
	if c.Usage.PromptTokens != want || c.Usage.CompletionTokens != DefaultMaxTokens || len(c.Choices[0].Message.Content) != DefaultMaxTokens {
		t.Fatalf("usage %+v content %q, want %d prompt tokens", *c.Usage, c.Choices[0].Message.Content, want)
	}
}

// TestBadRequests: malformed requests, wrongly typed or out-of-range
// sampling fields (validated as vLLM validates them) and n > 1 (one choice
// per request) get 4xx OpenAI-style JSON errors naming the field, and count
// as bad requests, never reaching the engine; valid sampling fields pass.
func TestBadRequests(t *testing.T) {
	f := startFleet(t, Config{Workers: 1, Speedup: 1000, BlockSize: 16, KVBlocks: 8, Transport: plane.TransportNone}, nil)
	url := f.Workers()[0].URL()
	for _, c := range []struct {
		path, body string
		code       int
		msg        string
	}{
		{"/v1/completions", `{"prompt":`, 400, "not valid JSON"},
		{"/v1/completions", `{"max_tokens":3}`, 400, "prompt"},
		{"/v1/completions", `{"prompt":""}`, 400, "empty"},
		{"/v1/completions", `{"prompt":[1,"x"]}`, 400, "prompt[1]"},
		{"/v1/completions", `{"prompt":"x","max_tokens":-1}`, 400, "max_tokens"},
		{"/v1/completions", `{"prompt":"x","stream":"yes"}`, 400, `stream must be a boolean, got "yes"`},
		{"/v1/completions", `{"prompt":"x","max_tokens":0}`, 400, "max_tokens must be an integer in [1, 16777216], got 0"},
		{"/v1/completions", `{"prompt":"x","max_tokens":"3"}`, 400, "max_tokens must be"},
		{"/v1/completions", `{"prompt":"x","temperature":"hot"}`, 400, `temperature must be a number ≥ 0, got "hot"`},
		{"/v1/completions", `{"prompt":"x","temperature":-1}`, 400, "temperature must be"},
		{"/v1/completions", `{"prompt":"x","top_p":[]}`, 400, "top_p must be a number in (0, 1], got []"},
		{"/v1/completions", `{"prompt":"x","top_p":0}`, 400, "top_p must be"},
		{"/v1/completions", `{"prompt":"x","top_k":"5"}`, 400, "top_k must be"},
		{"/v1/completions", `{"prompt":"x","n":"2"}`, 400, `n must be an integer ≥ 1, got "2"`},
		{"/v1/completions", `{"prompt":"x","n":0}`, 400, "n must be"},
		{"/v1/completions", `{"prompt":"x","n":2}`, 400, "n > 1 is not supported"},
		{"/v1/completions", `{"prompt":"x","seed":1.5}`, 400, "seed must be an integer"},
		{"/v1/completions", `{"prompt":"x","presence_penalty":{}}`, 400, "presence_penalty must be"},
		{"/v1/completions", `{"prompt":"x","stop":[1]}`, 400, "stop[0] must be a string"},
		{"/v1/completions", `{"prompt":"x","min_tokens":5,"max_tokens":2}`, 400, "min_tokens must be ≤ max_tokens"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"logprobs":3}`, 400, "logprobs must be a boolean"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"n":2,"stream":true}`, 400, "n > 1"},
		{"/v1/chat/completions", `{"messages":[]}`, 400, "messages"},
		{"/v1/completions", `{"prompt":"` + strings.Repeat("x", 200) + `"}`, 400, "exceeds the KV cache"},
		{"/v1/nothing", `{}`, 404, "no route"},
	} {
		resp, err := client.Post(url+c.path, "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var r completion
		if err := json.Unmarshal(body, &r); err != nil || resp.StatusCode != c.code || r.Error == nil ||
			r.Error.Code != openai.StatusError(c.code, "").Code || !strings.Contains(r.Error.Message, c.msg) {
			t.Errorf("%s %s: %d %s, want %d mentioning %q", c.path, c.body, resp.StatusCode, body, c.code, c.msg)
		}
	}
	if st := f.Workers()[0].Stats(); st.Steps != 0 {
		t.Fatalf("bad requests reached the engine: %+v", st)
	}
	code, body := post(t, url, "/v1/completions", map[string]any{"prompt": "x", "n": 1, "temperature": 0.7, "top_p": 0.9,
		"top_k": 20, "seed": 3, "stop": []string{"\n"}, "max_tokens": 2, "min_tokens": 1, "presence_penalty": 0.5})
	if code != http.StatusOK {
		t.Fatalf("valid sampling fields: %d %s", code, body)
	}
	resp, err := client.Get(url + "/v1/completions")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/completions: %d", resp.StatusCode)
	}
}

// TestHealthAndMetrics: /health answers, /metrics counts requests and tokens
// and is valid Prometheus text (pure-Go check, and promtool when present).
func TestHealthAndMetrics(t *testing.T) {
	f := startFleet(t, Config{Workers: 1, Speedup: 1000, BlockSize: 16, KVBlocks: 64, Transport: plane.TransportNone}, nil)
	url := f.Workers()[0].URL()
	complete(t, url, tokens(1, 32), 2)
	complete(t, url, tokens(1, 40), 2)
	resp, err := client.Get(url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("health: %d", resp.StatusCode)
	}
	// GET /v1/models lists the worker's model, as vLLM does.
	resp, err = client.Get(url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ids, err := openai.ParseModelIDs(nil, body); err != nil || len(ids) != 1 || ids[0] != "mock" {
		t.Errorf("/v1/models: %q %v: %s", ids, err, body)
	}
	resp, err = client.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`mock_requests_total{worker="1"} 2`, `mock_prompt_tokens_total{worker="1"} 72`,
		`mock_completion_tokens_total{worker="1"} 4`, `mock_cached_tokens_total{worker="1"} 32`,
		`mock_kv_total_blocks{worker="1"} 64`, `mock_requests_running{worker="1"} 0`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
	promtexttest.Check(t, "the mock worker's /metrics", body)
	t.Run("promtool", func(t *testing.T) { promtexttest.Promtool(t, "the mock worker's /metrics", body) })
}

// TestFirstTokenSoonerWithCachedPrefix: in live mode, a request whose long
// prefix is cached costs the engine less prefill time than a same-size cold
// one, and the worker really waits out the modeled time. The comparison is
// on the engine's model time (Stats.Busy), which a loaded machine cannot
// change; wall time is only checked as a lower bound.
func TestFirstTokenSoonerWithCachedPrefix(t *testing.T) {
	const speedup = 4
	f := startFleet(t, Config{Workers: 1, BlockSize: 16, KVBlocks: 4096, Speedup: speedup, Transport: plane.TransportNone}, nil)
	w := f.Workers()[0]
	a := tokens(1, 8000)
	complete(t, w.URL(), a, 1)
	timed := func(p []uint32) (wall, busy time.Duration, cached int) {
		before := w.Stats().Busy
		start := time.Now()
		r := complete(t, w.URL(), p, 1)
		return time.Since(start), w.Stats().Busy - before, r.Usage.PromptTokensDetails.CachedTokens
	}
	// Uncached 8016 tokens: one prefill step of ≈ (27 + 122 + 16.5) ms / 4
	// ≈ 41 ms; cached: 16 uncached tokens ≈ 4 ms.
	_, warm, cached := timed(append(append([]uint32(nil), a...), tokens(2, 16)...))
	coldWall, cold, none := timed(tokens(3, 8016))
	if cached != 8000 || none != 0 {
		t.Fatalf("cached tokens %d and %d, want 8000 and 0", cached, none)
	}
	if want := time.Duration(float64(engine.PrefillPoly(8016)) / speedup); cold != want {
		t.Fatalf("cold prompt: %v of engine time, want one prefill step of %v", cold, want)
	}
	if want := time.Duration(float64(engine.PrefillPoly(16)) / speedup); warm != want {
		t.Fatalf("cached prefix: %v of engine time, want one prefill step of its 16 uncached tokens, %v", warm, want)
	}
	if coldWall < cold {
		t.Fatalf("the cold request answered after %v, before its %v of modeled prefill", coldWall, cold)
	}
}

// TestControlPlane: registration at start and as heartbeat, load metrics on
// change, and a leave message at Close; Pause stops heartbeats and the
// engine, Resume restarts both.
func TestControlPlane(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Connect(t, s)
	sub := natstest.Connect(t, s)
	subj, _ := plane.SubjectsFor("ns", "comp")
	regs := make(chan plane.Registration, 100)
	leaves := make(chan plane.Registration, 10)
	loads := make(chan plane.Load, 1000)
	for subject, f := range map[string]func([]byte){
		subj.Heartbeat: func(d []byte) {
			var r plane.Registration
			if plane.Decode(d, &r) == nil {
				regs <- r
			}
		},
		subj.Leave: func(d []byte) {
			var r plane.Registration
			if plane.Decode(d, &r) == nil {
				leaves <- r
			}
		},
		subj.Load: func(d []byte) {
			var l plane.Load
			if plane.Decode(d, &l) == nil {
				loads <- l
			}
		},
	} {
		if _, err := sub.Subscribe(subject, func(m *nats.Msg) { f(m.Data) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	f, err := Start(Config{Workers: 2, WorkerIDs: []uint64{7, 9}, Host: "127.0.0.1", Namespace: "ns", Component: "comp",
		KVBlocks: 128, Speedup: 100, Heartbeat: 20 * time.Millisecond, LoadInterval: time.Millisecond}, nc)
	if err != nil {
		t.Fatal(err)
	}
	timeout := time.After(10 * time.Second)
	seen := map[uint64]int{}
	for seen[7] < 2 || seen[9] < 2 {
		select {
		case r := <-regs:
			if err := r.Validate(); err != nil || r.KVBlocks != 128 || r.EventTransport != plane.TransportDynamo {
				t.Fatalf("registration %+v: %v", r, err)
			}
			if r.URL != f.Worker(r.WorkerID).URL() {
				t.Fatalf("registration url %s", r.URL)
			}
			seen[r.WorkerID]++
		case <-timeout:
			t.Fatalf("heartbeats %v", seen)
		}
	}
	w := f.Worker(7)
	complete(t, w.URL(), tokens(1, 64), 100)
	for busy, idle := false, false; !busy || !idle; {
		select {
		case l := <-loads:
			if l.KVTotal != 128 {
				t.Fatalf("load %+v", l)
			}
			if l.WorkerID != 7 {
				continue
			}
			busy = busy || l.KVUsed > 0
			idle = busy && l.KVUsed == 0 && l.Running == 0
		case <-timeout:
			t.Fatal("no busy and idle load messages")
		}
	}

	// Pause: requests queue and no heartbeat comes from 7. Heartbeats sent
	// before the pause are drained up to a marker published on the same
	// connection after it (NATS keeps one connection's messages in order).
	w.Pause()
	const marker = 424242
	if err := nc.Publish(subj.Heartbeat, plane.Encode(&plane.Registration{WorkerID: marker})); err != nil {
		t.Fatal(err)
	}
	done := make(chan completion, 1)
	go func() { done <- complete(t, w.URL(), tokens(2, 20), 2) }()
	for drained := false; !drained; {
		select {
		case r := <-regs: // heartbeats in flight before the pause
			drained = r.WorkerID == marker
		case <-timeout:
			t.Fatal("the marker never came")
		}
	}
	quiet := time.After(100 * time.Millisecond) // any heartbeat from 7 in this window fails
	for waiting := true; waiting; {
		select {
		case r := <-regs:
			if r.WorkerID == 7 {
				t.Fatal("a paused worker sent a heartbeat")
			}
		case <-done:
			t.Fatal("a paused worker answered")
		case <-quiet:
			waiting = false
		}
	}
	w.Resume()
	select {
	case r := <-done:
		if r.Usage.CompletionTokens != 2 {
			t.Fatalf("after resume: %+v", r.Usage)
		}
	case <-timeout:
		t.Fatal("the request never finished after Resume")
	}

	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	left := map[uint64]bool{}
	for len(left) < 2 {
		select {
		case r := <-leaves:
			left[r.WorkerID] = true
		case <-timeout:
			t.Fatalf("leave messages from %v", left)
		}
	}
}

// TestRestartFailsInFlight: Restart answers in-flight requests with 503 and
// the worker serves again with a cold cache.
func TestRestartFailsInFlight(t *testing.T) {
	f := startFleet(t, Config{Workers: 1, BlockSize: 16, KVBlocks: 256, Speedup: 1000, Transport: plane.TransportNone}, nil)
	w := f.Workers()[0]
	complete(t, w.URL(), tokens(1, 64), 1)
	w.Pause()
	codes := make(chan int, 1)
	go func() {
		code, _ := post(t, w.URL(), "/v1/completions", map[string]any{"prompt": tokens(2, 10), "max_tokens": 5})
		codes <- code
	}()
	deadline := time.Now().Add(10 * time.Second)
	for w.Idle() {
		if time.Now().After(deadline) {
			t.Fatal("request never arrived")
		}
		time.Sleep(time.Millisecond)
	}
	w.Restart()
	if code := <-codes; code != http.StatusServiceUnavailable {
		t.Fatalf("in-flight request got %d, want 503", code)
	}
	if r := complete(t, w.URL(), tokens(1, 64), 1); r.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Fatalf("cache survived the restart: %+v", *r.Usage)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "--workers"},
		{Config{Workers: 2, WorkerIDs: []uint64{1}}, "--worker-ids"},
		{Config{Workers: 2, WorkerIDs: []uint64{3, 3}}, "repeated"},
		{Config{Workers: 1, Transport: "kafka"}, "--event-transport"},
		{Config{Workers: 1, DropFraction: 2}, "--drop-events"},
		{Config{Workers: 1, Namespace: "a.b"}, "--namespace"},
		{Config{Workers: 1, Port: 65535, WorkerIDs: nil}, ""},
		{Config{Workers: 2, Port: 65535}, "--port"},
		{Config{Workers: 1, KVBlocks: -1}, "--kv-blocks"},
		{Config{Workers: 1, Role: "prefil"}, "--role"},
		{Config{Workers: 1, PDProtocol: "nixl"}, "--pd-protocol"},
		{Config{Workers: 1, TransferGBps: -1}, "--transfer-gbps"},
		{Config{Workers: 1, TransferTimeout: -1}, "--transfer-timeout"},
		{Config{Workers: 1, BootstrapTimeout: -1}, "--bootstrap-timeout"},
		{Config{Workers: 1, Role: RoleDecode, PDProtocol: ProtocolSGLang}, ""},
	} {
		err := c.cfg.Validate()
		if c.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", c.cfg, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %s", c.cfg, err, c.want)
		}
	}
}

// TestFaultSwitchesOverNATS: with the duplicate switch on, every Dynamo
// event arrives twice (same id) and a consumer that skips ids it has seen
// still reproduces the cache; with the drop switch on, the consumer sees
// gaps in the event ids.
func TestFaultSwitchesOverNATS(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Connect(t, s)
	sub := natstest.Connect(t, s)
	subj, _ := plane.SubjectsFor("kvroute", "backend")
	var (
		mu         sync.Mutex
		seen       = map[uint64]int{}
		last       uint64
		gaps, dups int
	)
	m := newMirror(false)
	var batch wire.Batch
	if _, err := sub.Subscribe(subj.KVEvents, func(msg *nats.Msg) {
		batch.Reset()
		if _, err := wire.DecodeDynamo(&batch, msg.Data); err != nil {
			m.fail(err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, ev := range batch.Events {
			seen[ev.ID]++
			switch {
			case ev.ID <= last:
				dups++
				continue
			case ev.ID > last+1:
				gaps++
			}
			last = ev.ID
			m.apply([]wire.Event{ev})
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	cfg := smallCache(plane.TransportDynamo)
	cfg.DupFraction = 1
	w := startFleet(t, cfg, nc).Workers()[0]
	workload(t, w.URL(), 7, 20, cfg.BlockSize)
	waitReproduced(t, m, w)
	// The copy of the last message may still be on its way once the first
	// has reproduced the cache: wait (bounded) until every event came twice.
	twice := func() bool {
		for _, n := range seen {
			if n != 2 {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		mu.Lock()
		ok := twice()
		mu.Unlock()
		if ok || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	for id, n := range seen {
		if n != 2 {
			t.Errorf("event %d arrived %d times, want 2", id, n)
		}
	}
	if dups == 0 || gaps != 0 {
		t.Fatalf("%d duplicates, %d gaps", dups, gaps)
	}
	mu.Unlock()

	w.SetFaults(0.3, 0)
	workload(t, w.URL(), 8, 20, cfg.BlockSize)
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		g := gaps
		mu.Unlock()
		if g > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("dropping 30% of the events left no gap in the ids")
		}
		time.Sleep(time.Millisecond)
	}
}
