package router

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/plane"
	"github.com/kvroute/kvroute/wire/zmq"
)

// Engine fidelity through serve: fake engines register on the control plane
// and publish KV events encoded as the upstream publishers encode them on
// the real transports (ZMQ PUB with replay for vLLM and SGLang, NATS for
// Dynamo); POST /route with explain must then show each worker's true
// overlap. The wire tests (wire/fidelity_test.go) name the upstream file
// each shape follows.

// fakeEngine is a registered worker whose events the test publishes.
type fakeEngine struct {
	id  uint64
	pub *zmq.Publisher // ZMQ transport; nil for Dynamo
}

const fidModel = "fid"

func (e *env) fakeEngine(id uint64, transport string) *fakeEngine {
	e.t.Helper()
	fe := &fakeEngine{id: id}
	reg := plane.Registration{WorkerID: id, URL: fmt.Sprintf("http://127.0.0.1:%d", 1), Model: fidModel, DpRanks: []uint32{0},
		BlockSize: testBlockSize, KVBlocks: 4096, EventTransport: transport, HeartbeatMillis: 60_000}
	if transport == plane.TransportZMQ {
		pub, err := zmq.NewPublisher(zmq.PublisherConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0",
			Topic: fmt.Sprintf("kv@%d@%s", id, fidModel)})
		if err != nil {
			e.t.Fatal(err)
		}
		e.t.Cleanup(func() { _ = pub.Close() })
		fe.pub = pub
		reg.ZMQEndpoint, reg.ZMQReplay = "tcp://"+pub.Addr(), "tcp://"+pub.ReplayAddr()
	}
	if err := e.nc.Publish(e.subj.Heartbeat, plane.Encode(reg)); err != nil {
		e.t.Fatal(err)
	}
	return fe
}

// publish sends one vLLM/SGLang batch payload.
func (fe *fakeEngine) publish(t *testing.T, payload []byte) {
	t.Helper()
	if _, err := fe.pub.Publish(payload); err != nil {
		t.Fatal(err)
	}
}

// waitIndexed waits until worker holds the first n of local in the index. A
// ZMQ engine publishes an empty batch at every poll, so that a batch the SUB
// socket missed shows as a sequence gap and is replayed.
func (e *env) waitIndexed(fe *fakeEngine, local []wire.BlockHash, n int) {
	e.t.Helper()
	empty := wire.AppendVLLMBatch(nil, &wire.VLLMBatch{}, wire.VLLMEncoding{})
	waitFor(e.t, fmt.Sprintf("worker %d holding %d blocks", fe.id, n), func() bool {
		if fe.pub != nil {
			fe.publish(e.t, empty)
		}
		ovs, err := e.svc.Index.Match(nil, local)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, o := range ovs {
			if o.Worker.Worker == fe.id && int(o.Blocks) >= n {
				return true
			}
		}
		return false
	})
}

// explain routes body (a /route request without request_id) with explain
// and returns each candidate's overlap, then frees the decision.
func (e *env) explain(body string) map[uint64]int {
	e.t.Helper()
	id := fmt.Sprintf("fid-%d", time.Now().UnixNano())
	body = strings.Replace(body, "{", fmt.Sprintf(`{"request_id":%q,"explain":true,`, id), 1)
	code, out, _ := e.do("POST", "/route", body)
	if code != 200 {
		e.t.Fatalf("/route %s: %d %s", body, code, out)
	}
	var d struct {
		Candidates []struct {
			WorkerID uint64 `json:"worker_id"`
			Overlap  int    `json:"overlap_blocks"`
		} `json:"candidates"`
	}
	if err := json.Unmarshal(out, &d); err != nil {
		e.t.Fatalf("%v: %s", err, out)
	}
	if c, b, _ := e.do("POST", "/route/"+id+"/free", ""); c != 200 {
		e.t.Fatalf("free: %d %s", c, b)
	}
	got := map[uint64]int{}
	for _, c := range d.Candidates {
		got[c.WorkerID] = c.Overlap
	}
	return got
}

func (e *env) waitZMQ(fe *fakeEngine) {
	e.t.Helper()
	name := fmt.Sprintf(`kvroute_ingest_zmq_connected{worker="%d",dp_rank="0"}`, fe.id)
	waitFor(e.t, name, func() bool { return e.metric(name) == 1 })
}

func TestEngineFidelityThroughRoute(t *testing.T) {
	e := startEnv(t, envOptions{noFleet: true})
	vllm := e.fakeEngine(101, plane.TransportZMQ)   // vLLM: hybrid model, multimodal
	sglang := e.fakeEngine(102, plane.TransportZMQ) // SGLang: EAGLE, cache salts
	dynamo := e.fakeEngine(103, plane.TransportDynamo)
	e.waitWorkers(3)
	e.waitZMQ(vllm)
	e.waitZMQ(sglang)

	const bs = testBlockSize
	prompt := tokens(40, 0, 4*bs, 0)
	plain := wire.LocalHashes(nil, prompt, bs, wire.Seed)
	route := func(extra string) map[uint64]int {
		return e.explain(fmt.Sprintf(`{"token_ids":%s%s}`, promptJSON(prompt), extra))
	}
	hashes := func(base wire.EngineHash, n int) []wire.EngineHash {
		out := make([]wire.EngineHash, n)
		for i := range out {
			out[i] = base + wire.EngineHash(i)
		}
		return out
	}

	// A hybrid model's sliding-window group stores and then drops
	// the same block hashes as its full-attention group; the prefix stays.
	t.Run("hybrid groups", func(t *testing.T) {
		h := hashes(1000, 3)
		vllm.publish(t, wire.AppendVLLMBatch(nil, &wire.VLLMBatch{Events: []wire.VLLMEvent{
			{Kind: wire.KindStored, BlockHashes: h, Tokens: prompt[:3*bs], BlockSize: bs, Medium: "GPU", HasGroup: true, Group: 0, SpecKind: "full_attention"},
			{Kind: wire.KindStored, BlockHashes: h, Tokens: prompt[:3*bs], BlockSize: bs, Medium: "GPU", HasGroup: true, Group: 1, SpecKind: "sliding_window"},
			{Kind: wire.KindRemoved, BlockHashes: h, Medium: "GPU", HasGroup: true, Group: 1},
		}}, wire.VLLMEncoding{Map: true}))
		e.waitIndexed(vllm, plain, 3)
		waitFor(t, "the sliding-window events counted", func() bool {
			return e.metric(`kvroute_ingest_other_group_events_total{source="zmq"}`) >= 2
		})
		if got := route(""); got[101] != 3 {
			t.Fatalf("overlaps %v, want worker 101 at 3", got)
		}
		vllm.publish(t, wire.AppendVLLMBatch(nil, &wire.VLLMBatch{Events: []wire.VLLMEvent{{Kind: wire.KindCleared}}}, wire.VLLMEncoding{}))
		waitFor(t, "cleared", func() bool { return route("")[101] == 0 })
	})

	// Blocks holding an image fold its hash in; the same
	// placeholder tokens with another image match only the text before it.
	t.Run("multimodal", func(t *testing.T) {
		const imageA = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"
		const imageB = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"
		vllm.publish(t, wire.AppendVLLMBatch(nil, &wire.VLLMBatch{Events: []wire.VLLMEvent{
			{Kind: wire.KindStored, BlockHashes: hashes(2000, 4), Tokens: prompt, BlockSize: bs, Medium: "GPU",
				ExtraKeys: [][]string{nil, {imageA}, {imageA}, nil}},
		}}, wire.VLLMEncoding{Map: true}))
		mm := func(id string) string {
			return fmt.Sprintf(`,"mm_hashes":[{"identifier":%q,"offset":%d,"length":%d}]`, id, bs+3, bs)
		}
		withA, _, _ := wire.LocalHashesMM(nil, prompt, bs, wire.Seed, []wire.MMRange{{Hash: 0xa1b2c3d4e5f60718, Offset: bs + 3, Length: bs}}, nil, nil)
		e.waitIndexed(vllm, withA, 4)
		for _, tc := range []struct {
			name, extra string
			want        int
		}{{"same image", mm(imageA), 4}, {"other image", mm(imageB), 1}, {"no image declared", "", 1}} {
			if got := route(tc.extra); got[101] != tc.want {
				t.Errorf("%s: overlaps %v, want worker 101 at %d", tc.name, got, tc.want)
			}
		}
	})

	// SGLang's EAGLE pages (bigram token_ids) are indexed, hashed
	// as plain pages.
	t.Run("eagle bigrams", func(t *testing.T) {
		sglang.publish(t, wire.AppendVLLMBatch(nil, &wire.VLLMBatch{Events: []wire.VLLMEvent{
			{Kind: wire.KindStored, BlockHashes: hashes(3000, 3), Tokens: prompt[:3*bs+1], BlockSize: bs, Medium: "GPU", Bigram: true},
		}}, wire.VLLMEncoding{Compact: true}))
		e.waitIndexed(sglang, plain, 3)
		if got := route(""); got[102] != 3 {
			t.Fatalf("overlaps %v, want worker 102 at 3", got)
		}
		// Plain hashing credits the third page even when the request's
		// token after it differs (SGLang would not reuse it): the page too
		// many that --eagle-windows removes (TestEagleWindowsThroughServe).
		other := slices.Clone(prompt)
		other[3*bs]++
		if got := e.explain(fmt.Sprintf(`{"token_ids":%s}`, promptJSON(other))); got[102] != 3 {
			t.Fatalf("another token after the pages: overlaps %v, want worker 102 at 3 (plain)", got)
		}
		sglang.publish(t, wire.AppendVLLMBatch(nil, &wire.VLLMBatch{Events: []wire.VLLMEvent{{Kind: wire.KindCleared}}}, wire.VLLMEncoding{}))
		waitFor(t, "cleared", func() bool { return route("")[102] == 0 })
	})

	// vLLM's offloading connector: the CPU copies of GPU blocks arrive by
	// hash with empty token_ids; once the GPU evicts them they are host
	// blocks (wire/offload_test.go names the upstream files).
	t.Run("offloaded CPU blocks", func(t *testing.T) {
		h := hashes(6000, 4)
		vllm.publish(t, wire.AppendVLLMBatch(nil, &wire.VLLMBatch{Events: []wire.VLLMEvent{
			{Kind: wire.KindCleared}, // the multimodal blocks
			{Kind: wire.KindStored, BlockHashes: h, Tokens: prompt, BlockSize: bs, Medium: "GPU"},
			{Kind: wire.KindStored, BlockHashes: h, Tokens: []uint32{}, BlockSize: bs, Medium: "CPU"},
			{Kind: wire.KindRemoved, BlockHashes: h[1:], Medium: "GPU"},
		}}, wire.VLLMEncoding{Map: true}))
		e.waitIndexed(vllm, plain, 1)
		waitFor(t, "1 device + 3 host blocks", func() bool {
			ovs, err := e.svc.Index.Match(nil, plain)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range ovs {
				if o.Worker.Worker == 101 {
					return o.Blocks == 1 && o.Host == 3
				}
			}
			return false
		})
		if got := route(""); got[101] != 1 {
			t.Fatalf("overlaps %v, want worker 101 at 1 device block", got)
		}
		vllm.publish(t, wire.AppendVLLMBatch(nil, &wire.VLLMBatch{Events: []wire.VLLMEvent{{Kind: wire.KindCleared}}}, wire.VLLMEncoding{}))
		waitFor(t, "cleared", func() bool { return route("")[101] == 0 })
	})

	// A salted SGLang event is one tenant's; a request with that
	// cache_salt matches it, other requests do not, and the unsalted copy on
	// another worker is not the tenant's.
	t.Run("cache salt", func(t *testing.T) {
		sglang.publish(t, wire.AppendVLLMBatch(nil, &wire.VLLMBatch{Events: []wire.VLLMEvent{
			{Kind: wire.KindStored, BlockHashes: hashes(4000, 4), Tokens: prompt, BlockSize: bs, Medium: "GPU", Salt: "tenant-a"},
		}}, wire.VLLMEncoding{Compact: true}))
		salted := wire.LocalHashes(nil, prompt, bs, wire.SaltSeed(nil, []byte("tenant-a")))
		e.waitIndexed(sglang, salted, 4)
		// And alongside: Dynamo's legacy JSON RouterEvent on
		// ...kv_events, the unsalted copy.
		ev := wire.Event{Worker: wire.WorkerKey{Worker: 103}, ID: 1, Kind: wire.KindStored}
		for i, l := range plain {
			ev.Blocks = append(ev.Blocks, wire.Block{Engine: wire.EngineHash(5000 + i), Local: l})
		}
		if err := e.nc.Publish(e.subj.KVEventsLegacy, wire.AppendDynamoJSON(nil, &ev)); err != nil {
			t.Fatal(err)
		}
		e.waitIndexed(dynamo, plain, 4)
		if got := route(`,"cache_salt":"tenant-a"`); got[102] != 4 || got[103] != 0 {
			t.Errorf("tenant a: overlaps %v, want 102 at 4, 103 at 0", got)
		}
		if got := route(`,"cache_salt":"tenant-b"`); got[102] != 0 || got[103] != 0 {
			t.Errorf("tenant b: overlaps %v, want none", got)
		}
		if got := route(""); got[102] != 0 || got[103] != 4 {
			t.Errorf("unsalted: overlaps %v, want 102 at 0, 103 at 4", got)
		}
		// Dynamo's JSON on the event plane subject decodes too.
		ev2 := wire.Event{Worker: wire.WorkerKey{Worker: 103}, ID: 2, Kind: wire.KindCleared}
		if err := e.nc.Publish(e.subj.KVEvents, wire.AppendDynamoJSON(nil, &ev2)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "dynamo JSON cleared", func() bool { return route("")[103] == 0 })
	})

	// Bad cache fields are 400s naming the field.
	for body, param := range map[string]string{
		`{"token_ids":[1,2],"cache_salt":""}`:                                         "cache_salt",
		`{"token_ids":[1,2],"cache_salt":5}`:                                          "cache_salt",
		`{"token_ids":[1,2],"mm_hashes":{}}`:                                          "mm_hashes",
		`{"token_ids":[1,2],"mm_hashes":[{"identifier":"","offset":0,"length":1}]}`:   "mm_hashes[0].identifier",
		`{"token_ids":[1,2],"mm_hashes":[{"identifier":"x","offset":-1,"length":1}]}`: "mm_hashes[0].offset",
		`{"token_ids":[1,2],"mm_hashes":[{"identifier":"x","offset":0}]}`:             "mm_hashes[0].length",
	} {
		for _, path := range []string{"/route", "/v1/completions"} {
			code, out, _ := e.do("POST", path, body)
			if code != 400 || !strings.Contains(string(out), `"param":"`+param+`"`) {
				t.Errorf("%s %s: %d %s, want 400 naming %s", path, body, code, out, param)
			}
		}
	}
}

// Chat requests with media parts through the simulated fleet: the router and
// the engine fold each part's identifier (its uuid, else its URL) into the
// blocks its placeholder overlaps, so the same text with another image
// reuses only the blocks before the image, and a salted request only its
// tenant's blocks.
func TestMultimodalAndSaltedChat(t *testing.T) {
	e := startEnv(t, envOptions{workers: 2})
	chat := func(image, salt string) (uint64, int) {
		t.Helper()
		extra := ""
		if salt != "" {
			extra = fmt.Sprintf(`,"cache_salt":%q`, salt)
		}
		// "<|im_start|>user\n" (17 bytes) + 40 bytes of text: the
		// placeholder starts at token 57, in block 3.
		body := fmt.Sprintf(`{"messages":[{"role":"user","content":[{"type":"text","text":%q},{"type":"image_url","image_url":{"url":%q}},{"type":"text","text":%q}]}],"max_tokens":1%s}`,
			strings.Repeat("a", 40), image, strings.Repeat("b", 60), extra)
		code, out, h := e.do("POST", "/v1/chat/completions", body)
		if code != 200 {
			t.Fatalf("chat: %d %s", code, out)
		}
		var w uint64
		var cached int
		fmt.Sscan(h.Get(HeaderWorker), &w)
		fmt.Sscan(h.Get(HeaderCachedBlocks), &cached)
		return w, cached
	}
	// 17 + 40 + 9 ("<|media|>") + 60 + 11 + 22 = 159 tokens: 9 full blocks.
	const full, beforeImage = 9, 3
	// The repeats may land on the other worker before the first one's
	// events are indexed, so either worker can hold the text: what must hold
	// is that another image reuses exactly the blocks before it.
	chat("http://img/cat.png", "")
	waitFor(t, "the first chat indexed", func() bool { _, c := chat("http://img/cat.png", ""); return c == full })
	if w2, c := chat("http://img/dog.png", ""); c != beforeImage {
		t.Errorf("another image: worker %d cached %d, want %d (the text before the image)", w2, c, beforeImage)
	}
	if _, c := chat("http://img/cat.png", "tenant-x"); c != 0 {
		t.Errorf("salted request: cached %d, want 0 (the blocks are not the tenant's)", c)
	}
}

// --eagle-windows through serve: an SGLang EAGLE worker's bigram pages and
// the requests are both hashed in windows of a page and the token after it
// (Dynamo's form), so a request matches a page only when its token after
// the page is the page's too. The plain hashing (TestEngineFidelityThroughRoute,
// "eagle bigrams") credits the third page in both cases below.
func TestEagleWindowsThroughServe(t *testing.T) {
	e := startEnv(t, envOptions{noFleet: true, eagle: true})
	sglang := e.fakeEngine(102, plane.TransportZMQ)
	e.waitWorkers(1)
	e.waitZMQ(sglang)

	const bs = testBlockSize
	prompt := tokens(41, 0, 4*bs, 0)
	hs := []wire.EngineHash{7000, 7001, 7002}
	// Three pages: token_ids as bigrams cover the 3 × bs tokens and the one after.
	sglang.publish(t, wire.AppendVLLMBatch(nil, &wire.VLLMBatch{Events: []wire.VLLMEvent{
		{Kind: wire.KindStored, BlockHashes: hs, Tokens: prompt[:3*bs+1], BlockSize: bs, Medium: "GPU", Bigram: true},
	}}, wire.VLLMEncoding{Compact: true}))
	windows := wire.LocalHashesEagle(nil, prompt, bs, wire.Seed)
	if len(windows) != 3 {
		t.Fatalf("%d windows of a %d-token prompt", len(windows), len(prompt))
	}
	e.waitIndexed(sglang, windows, 3)
	// The plain hashes of the same prompt are not in the index: the events
	// were hashed as windows.
	if ovs, err := e.svc.Index.Match(nil, wire.LocalHashes(nil, prompt, bs, wire.Seed)); err != nil || len(ovs) != 0 {
		t.Fatalf("plain hashes matched %v (%v)", ovs, err)
	}
	route := func(toks []uint32) int {
		return e.explain(fmt.Sprintf(`{"token_ids":%s}`, promptJSON(toks)))[102]
	}
	other := slices.Clone(prompt)
	other[3*bs]++ // the token after the third page differs
	for _, tc := range []struct {
		name string
		toks []uint32
		want int
	}{
		{"same token after the pages", prompt, 3},
		{"another token after the third page", other, 2},
		{"prompt ends with the third page", prompt[:3*bs], 2},
		{"prompt ends one token after it", prompt[:3*bs+1], 3},
	} {
		if got := route(tc.toks); got != tc.want {
			t.Errorf("%s: overlap %d, want %d", tc.name, got, tc.want)
		}
	}
}
