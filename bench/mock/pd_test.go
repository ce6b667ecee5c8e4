package mock

import (
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/natstest"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/pd"
	"github.com/kvroute/kvroute/wire/plane"
)

// pdPair starts a prefill and a decode worker speaking protocol, publishing
// Dynamo events on one NATS server mirrored into m.
func pdPair(t *testing.T, protocol string, tweak func(p, d *WorkerConfig)) (p, d *Worker, m *mirror) {
	t.Helper()
	s := natstest.Server(t)
	nc := natstest.Connect(t, s)
	m = mirrorNATS(t, natstest.Connect(t, s), plane.TransportDynamo)
	subj, _ := plane.SubjectsFor("kvroute", "backend")
	pc := WorkerConfig{ID: 1, BlockSize: 16, KVBlocks: 256, Speedup: 50, Subjects: subj, Role: RolePrefill, PDProtocol: protocol}
	dc := pc
	dc.ID, dc.Role = 2, RoleDecode
	if tweak != nil {
		tweak(&pc, &dc)
	}
	for _, c := range []struct {
		cfg WorkerConfig
		w   **Worker
	}{{pc, &p}, {dc, &d}} {
		w, err := StartWorker(c.cfg, nc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		*c.w = w
	}
	return p, d, m
}

func (w *Worker) pinnedForTesting() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.eng.Pinned()
}

func port(t *testing.T, w *Worker) int {
	t.Helper()
	_, ps, _ := net.SplitHostPort(strings.TrimPrefix(w.URL(), "http://"))
	n, err := strconv.Atoi(ps)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// nixlPrefillBody is the prefill leg vLLM's disaggregation proxy sends.
func nixlPrefillBody(prompt []uint32) map[string]any {
	return map[string]any{
		"model": "m", "prompt": prompt, "max_tokens": 1, "stream": false,
		"kv_transfer_params": map[string]any{
			"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": nil,
			"remote_block_ids": nil, "remote_host": nil, "remote_port": nil,
		},
	}
}

// TestNIXLPrefillThenDecode: the two legs of vLLM's NIXL protocol over
// real HTTP, as a router sends them: the prefill worker answers the
// one-token leg with kv_transfer_params and keeps the blocks pinned; the
// decode worker, given those parameters unchanged, pulls the blocks from
// the prefill worker (which unpins them), prefills only the partial tail
// and generates the whole answer; both publish KV events for what they
// hold; the same parameters a second time name no pending transfer (400).
func TestNIXLPrefillThenDecode(t *testing.T) {
	p, d, m := pdPair(t, ProtocolNIXL, nil)
	prompt := tokens(1, 200) // 12 full blocks and an 8-token tail

	code, body := post(t, p.URL(), "/v1/completions", nixlPrefillBody(prompt))
	if code != http.StatusOK {
		t.Fatalf("prefill leg: %d %s", code, body)
	}
	var pre struct {
		completion
		KV map[string]any `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(body, &pre); err != nil {
		t.Fatal(err)
	}
	if len(pre.Choices) != 1 || pre.Choices[0].Text != generated(prompt, 1) || pre.Usage.CompletionTokens != 1 {
		t.Errorf("prefill answer: %s", body)
	}
	kv := pre.KV
	if kv["do_remote_prefill"] != true || kv["remote_host"] != "127.0.0.1" || kv["remote_port"] != float64(port(t, p)) ||
		kv["tp_size"] != float64(1) || kv["remote_request_id"] == nil || kv["remote_engine_id"] == nil {
		t.Errorf("kv_transfer_params %v", kv)
	}
	if ids, _ := kv["remote_block_ids"].([]any); len(ids) != 12 {
		t.Errorf("remote_block_ids %v, want 12", kv["remote_block_ids"])
	}
	if n := p.pinnedForTesting(); n != 1 {
		t.Errorf("%d pinned requests on the prefill worker, want 1", n)
	}

	decodeBody := map[string]any{"model": "m", "prompt": prompt, "max_tokens": 8, "kv_transfer_params": kv}
	code, body = post(t, d.URL(), "/v1/completions", decodeBody)
	if code != http.StatusOK {
		t.Fatalf("decode leg: %d %s", code, body)
	}
	var c completion
	if err := json.Unmarshal(body, &c); err != nil {
		t.Fatal(err)
	}
	if c.Choices[0].Text != generated(prompt, 8) || c.Usage.PromptTokens != 200 || c.Usage.CompletionTokens != 8 {
		t.Errorf("decode answer: %s", body)
	}
	st := d.Stats()
	if st.TransferredTokens != 192 || st.PrefillTokens != 8 {
		t.Errorf("decode worker: %d tokens transferred, %d prefilled; want 192 and the 8-token tail", st.TransferredTokens, st.PrefillTokens)
	}
	if n := p.pinnedForTesting(); n != 0 {
		t.Errorf("%d pinned requests on the prefill worker after the pull", n)
	}
	if _, _, used, _, _ := engineState(p); used != 0 {
		t.Errorf("prefill worker: %d blocks in use after the pull", used)
	}

	// KV events: each side's published blocks are what it holds; the
	// decode worker announces the blocks it received.
	if n := waitReproduced(t, m, p); n < 12 {
		t.Errorf("prefill worker announced %d blocks, want at least 12", n)
	}
	if n := waitReproduced(t, m, d); n < 12 {
		t.Errorf("decode worker announced %d blocks, want at least 12", n)
	}
	want := map[wire.BlockHash]bool{}
	for _, b := range p.Held(nil) {
		want[b.Local] = true
	}
	got := 0
	for _, b := range d.Held(nil) {
		if want[b.Local] {
			got++
		}
	}
	if got < 12 {
		t.Errorf("the decode worker holds %d of the prefill worker's blocks, want 12", got)
	}

	// Pulled once: the same parameters again, and made-up ones, are refused.
	for _, params := range []map[string]any{kv, {
		"do_remote_prefill": true, "remote_host": "127.0.0.1", "remote_port": port(t, p), "remote_request_id": "nope",
		"remote_engine_id": "x", "remote_block_ids": []int{0}, "tp_size": 1,
	}} {
		decodeBody["kv_transfer_params"] = params
		code, body = post(t, d.URL(), "/v1/completions", decodeBody)
		if code != http.StatusBadRequest || !strings.Contains(string(body), "no pending transfer") || !strings.Contains(string(body), `"param":"kv_transfer_params"`) {
			t.Errorf("decode leg naming no pending transfer: %d %s", code, body)
		}
	}
}

// TestNIXLTransferTimeout: blocks nobody pulls are unpinned after the
// transfer timeout, and a decode leg arriving after that is refused.
func TestNIXLTransferTimeout(t *testing.T) {
	p, d, _ := pdPair(t, ProtocolNIXL, func(pc, _ *WorkerConfig) { pc.TransferTimeout = 100 * time.Millisecond })
	prompt := tokens(2, 64)
	code, body := post(t, p.URL(), "/v1/completions", nixlPrefillBody(prompt))
	if code != http.StatusOK {
		t.Fatalf("prefill leg: %d %s", code, body)
	}
	var pre struct {
		KV map[string]any `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(body, &pre); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pin to expire", func() bool { return p.pinnedForTesting() == 0 })
	if _, _, used, _, _ := engineState(p); used != 0 {
		t.Errorf("%d blocks in use after the timeout", used)
	}
	code, body = post(t, d.URL(), "/v1/completions", map[string]any{"model": "m", "prompt": prompt, "max_tokens": 4, "kv_transfer_params": pre.KV})
	if code != http.StatusBadRequest {
		t.Errorf("decode leg after the timeout: %d %s", code, body)
	}
}

// TestTransferTimeModelled: a decode leg takes at least the modelled
// transfer time of its blocks (bytes over TransferGBps, before Speedup).
func TestTransferTimeModelled(t *testing.T) {
	w := &Worker{cfg: WorkerConfig{BlockSize: 16, TransferGBps: 50, Speedup: 1}}
	want := time.Duration(1000 * 16 * 128 << 10 * time.Second / 50e9) // 1000 blocks of 16 tokens at 128 KiB a token
	if got := w.transferTime(1000); got < want-time.Microsecond || got > want+time.Microsecond {
		t.Errorf("transferTime(1000) = %v, want %v", got, want)
	}
	// 12 blocks at this bandwidth take 300 ms.
	gbps := float64(12*16*128<<10) / 0.3 / 1e9
	p, d, _ := pdPair(t, ProtocolNIXL, func(_, dc *WorkerConfig) { dc.TransferGBps, dc.Speedup = gbps, 1 })
	prompt := tokens(3, 200)
	_, body := post(t, p.URL(), "/v1/completions", nixlPrefillBody(prompt))
	var pre struct {
		KV map[string]any `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(body, &pre); err != nil || pre.KV == nil {
		t.Fatalf("prefill answer %s: %v", body, err)
	}
	start := time.Now()
	code, body := post(t, d.URL(), "/v1/completions", map[string]any{"model": "m", "prompt": prompt, "max_tokens": 1, "kv_transfer_params": pre.KV})
	if code != http.StatusOK {
		t.Fatalf("decode leg: %d %s", code, body)
	}
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Errorf("decode leg took %v, less than the 300 ms transfer", el)
	}
}

// TestSGLangBootstrapRoom: SGLang's two legs carry the same body with
// bootstrap_host, bootstrap_port and bootstrap_room and start together; the
// decode worker (here sent first) waits for the prefill of its room, pulls
// its blocks and decodes; a decode leg whose prefill never arrives fails
// after the bootstrap timeout.
func TestSGLangBootstrapRoom(t *testing.T) {
	// The default bootstrap timeout: a loaded machine may take a while
	// between the decode leg's wait and the prefill leg's arrival.
	p, d, m := pdPair(t, ProtocolSGLang, nil)
	prompt := tokens(4, 200)
	body := map[string]any{
		"model": "m", "prompt": prompt, "max_tokens": 8,
		"bootstrap_host": "127.0.0.1", "bootstrap_port": p.BootstrapPort(), "bootstrap_room": uint64(1) << 62,
	}
	var wg sync.WaitGroup
	var dcode int
	var dbody []byte
	wg.Add(1)
	go func() {
		defer wg.Done()
		dcode, dbody = post(t, d.URL(), "/v1/completions", body)
	}()
	waitFor(t, "the decode leg to wait for its room", func() bool {
		p.pd.mu.Lock()
		defer p.pd.mu.Unlock()
		return len(p.pd.mu.waiters) == 1
	})
	pcode, pbody := post(t, p.URL(), "/v1/completions", body)
	wg.Wait()
	if pcode != http.StatusOK || dcode != http.StatusOK {
		t.Fatalf("prefill %d %s, decode %d %s", pcode, pbody, dcode, dbody)
	}
	var pc, dc completion
	if err := json.Unmarshal(pbody, &pc); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(dbody, &dc); err != nil {
		t.Fatal(err)
	}
	if pc.Usage.CompletionTokens != 1 || dc.Choices[0].Text != generated(prompt, 8) {
		t.Errorf("prefill answer %s, decode answer %s", pbody, dbody)
	}
	if st := d.Stats(); st.TransferredTokens != 192 {
		t.Errorf("decode worker: %d tokens transferred, want 192", st.TransferredTokens)
	}
	if n := waitReproduced(t, m, d); n < 12 {
		t.Errorf("decode worker announced %d blocks, want at least 12", n)
	}
	if n := waitReproduced(t, m, p); n < 12 {
		t.Errorf("prefill worker announced %d blocks, want at least 12", n)
	}

	// A decode worker whose prefill never comes fails after its bootstrap
	// timeout (a pair of its own, with 300 ms).
	_, d, _ = pdPair(t, ProtocolSGLang, func(_, dc *WorkerConfig) { dc.BootstrapTimeout = 300 * time.Millisecond })
	body["bootstrap_room"] = 7 // no prefill comes
	start := time.Now()
	code, out := post(t, d.URL(), "/v1/completions", body)
	if code != http.StatusInternalServerError || !strings.Contains(string(out), "bootstrap room 7") {
		t.Errorf("decode leg without a prefill: %d %s", code, out)
	}
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Errorf("failed after %v, before the 300 ms bootstrap timeout", el)
	}
	delete(body, "bootstrap_port")
	if code, out := post(t, d.URL(), "/v1/completions", body); code != http.StatusBadRequest || !strings.Contains(string(out), "bootstrap_port") {
		t.Errorf("decode leg without bootstrap_port: %d %s", code, out)
	}
}

// TestNoRoleIsAggregated: a worker with no role declared ignores P/D
// fields and serves as before (the requested tokens, no
// kv_transfer_params, nothing pinned); a decode worker given a body
// without them serves it aggregated; bad roles and protocols are refused
// at start, naming the setting.
func TestNoRoleIsAggregated(t *testing.T) {
	w, err := StartWorker(WorkerConfig{ID: 1, KVBlocks: 256, Speedup: 50, Transport: plane.TransportNone}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.Config().Role != RoleBoth || w.Config().PDProtocol != ProtocolNIXL {
		t.Errorf("defaults: role %q, protocol %q", w.Config().Role, w.Config().PDProtocol)
	}
	prompt := tokens(5, 100)
	b := nixlPrefillBody(prompt)
	b["max_tokens"] = 5
	code, body := post(t, w.URL(), "/v1/completions", b)
	if code != http.StatusOK || strings.Contains(string(body), "kv_transfer_params") {
		t.Errorf("aggregated worker: %d %s", code, body)
	}
	var c completion
	if err := json.Unmarshal(body, &c); err != nil || c.Choices[0].Text != generated(prompt, 5) {
		t.Errorf("aggregated answer %s (%v)", body, err)
	}
	if n := w.pinnedForTesting(); n != 0 {
		t.Errorf("%d pinned requests on an aggregated worker", n)
	}

	_, d, _ := pdPair(t, ProtocolNIXL, nil)
	if c := complete(t, d.URL(), prompt, 4); c.Choices[0].Text != generated(prompt, 4) {
		t.Errorf("decode worker serving aggregated: %q", c.Choices[0].Text)
	}

	for _, cfg := range []WorkerConfig{{ID: 3, Role: "prefil", Transport: plane.TransportNone}, {ID: 3, PDProtocol: "nixl", Transport: plane.TransportNone}} {
		if w, err := StartWorker(cfg, nil); err == nil {
			w.Close()
			t.Errorf("%+v accepted", cfg)
		} else if !strings.Contains(err.Error(), "role") && !strings.Contains(err.Error(), "pd protocol") {
			t.Errorf("error names no setting: %v", err)
		}
	}
}

// TestPDRegistration: prefill and decode workers announce role, protocol
// and (SGLang) bootstrap port in registrations that validate; an
// aggregated worker's registration has none of them.
func TestPDRegistration(t *testing.T) {
	p, d, _ := pdPair(t, ProtocolSGLang, nil)
	for _, w := range []*Worker{p, d} {
		r := w.Registration()
		if r.Role != w.Role() || r.PDProtocol != ProtocolSGLang || r.BootstrapPort != port(t, w) {
			t.Errorf("worker %d registration: role %q, protocol %q, bootstrap port %d", w.ID(), r.Role, r.PDProtocol, r.BootstrapPort)
		}
		if err := r.Validate(); err != nil {
			t.Error(err)
		}
	}
	n, _, _ := pdPair(t, ProtocolNIXL, nil)
	if r := n.Registration(); r.Role != RolePrefill || r.PDProtocol != ProtocolNIXL || r.BootstrapPort != 0 || r.Validate() != nil {
		t.Errorf("NIXL prefill registration %+v: %v", r, r.Validate())
	}
	w, err := StartWorker(WorkerConfig{ID: 9, Transport: plane.TransportNone}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if r := w.Registration(); r.Role != "" || r.PDProtocol != "" || r.BootstrapPort != 0 {
		t.Errorf("aggregated registration %+v", r)
	}
}

// TestLegsFromWirePD: the legs built by wire/pd from a client's body, as
// the router builds them, are served by the simulated workers: vLLM's
// prefill leg and then its decode leg with the prefill answer's
// kv_transfer_params, and SGLang's one body sent to both at once.
func TestLegsFromWirePD(t *testing.T) {
	prompt := tokens(6, 150)
	clientBody, _ := json.Marshal(map[string]any{"model": "m", "prompt": prompt, "max_tokens": 6, "stream_options": map[string]any{"include_usage": true}})
	postRaw := func(url string, body []byte) (int, []byte) {
		var v map[string]any
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatalf("leg body %s: %v", body, err)
		}
		return post(t, url, "/v1/completions", v)
	}
	text := func(body []byte) string {
		var c completion
		if err := json.Unmarshal(body, &c); err != nil || len(c.Choices) != 1 {
			t.Fatalf("answer %s: %v", body, err)
		}
		return c.Choices[0].Text
	}

	p, d, _ := pdPair(t, ProtocolNIXL, nil)
	leg, err := pd.AppendVLLMPrefill(nil, clientBody)
	if err != nil {
		t.Fatal(err)
	}
	code, answer := postRaw(p.URL(), leg)
	if code != http.StatusOK {
		t.Fatalf("prefill leg: %d %s", code, answer)
	}
	params, err := pd.TransferParams(answer)
	if err != nil {
		t.Fatal(err)
	}
	if leg, err = pd.AppendVLLMDecode(nil, clientBody, params); err != nil {
		t.Fatal(err)
	}
	if code, answer = postRaw(d.URL(), leg); code != http.StatusOK || text(answer) != generated(prompt, 6) {
		t.Errorf("decode leg: %d %s", code, answer)
	}
	if st := d.Stats(); st.TransferredTokens != 144 {
		t.Errorf("%d tokens transferred, want 144", st.TransferredTokens)
	}

	p, d, _ = pdPair(t, ProtocolSGLang, nil)
	leg, err = pd.AppendSGLang(nil, clientBody, pd.Bootstrap{Host: "127.0.0.1", Port: p.BootstrapPort(), Room: 42})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var pcode int
	wg.Add(1)
	go func() {
		defer wg.Done()
		pcode, _ = postRaw(p.URL(), leg)
	}()
	code, answer = postRaw(d.URL(), leg)
	wg.Wait()
	if pcode != http.StatusOK || code != http.StatusOK || text(answer) != generated(prompt, 6) {
		t.Errorf("SGLang legs: prefill %d, decode %d %s", pcode, code, answer)
	}
	if st := d.Stats(); st.TransferredTokens != 144 {
		t.Errorf("%d tokens transferred, want 144", st.TransferredTokens)
	}
}

// TestPDFleets: a P/D fleet is a prefill fleet and a decode fleet; their
// workers carry the fleet's role and protocol and serve the two legs.
func TestPDFleets(t *testing.T) {
	pre := startFleet(t, Config{Workers: 1, WorkerIDs: []uint64{1}, KVBlocks: 256, Speedup: 50, Transport: plane.TransportNone, Role: RolePrefill}, nil)
	dec := startFleet(t, Config{Workers: 1, WorkerIDs: []uint64{2}, KVBlocks: 256, Speedup: 50, Transport: plane.TransportNone, Role: RoleDecode}, nil)
	p, d := pre.Workers()[0], dec.Workers()[0]
	if p.Role() != RolePrefill || d.Role() != RoleDecode || d.Config().PDProtocol != ProtocolNIXL {
		t.Fatalf("roles %q, %q; protocol %q", p.Role(), d.Role(), d.Config().PDProtocol)
	}
	prompt := tokens(7, 48)
	_, body := post(t, p.URL(), "/v1/completions", nixlPrefillBody(prompt))
	var pre1 struct {
		KV map[string]any `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(body, &pre1); err != nil || pre1.KV == nil {
		t.Fatalf("prefill answer %s: %v", body, err)
	}
	code, body := post(t, d.URL(), "/v1/completions", map[string]any{"model": "m", "prompt": prompt, "max_tokens": 3, "kv_transfer_params": pre1.KV})
	if code != http.StatusOK || d.Stats().TransferredTokens != 32 {
		t.Errorf("decode leg: %d %s, %d tokens transferred", code, body, d.Stats().TransferredTokens)
	}
}
