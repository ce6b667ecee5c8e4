package router

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvroute/kvroute/bench/mock"
	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/wire/plane"
)

// legRecord is one request a recorder passed to its worker.
type legRecord struct {
	path, requestID string
	body, answer    []byte // answer: a non-streamed JSON answer
}

// recorder is a real HTTP reverse proxy in front of a simulated worker that
// keeps every POST it passed on, and the worker's JSON answers.
type recorder struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []legRecord
}

func newRecorder(t *testing.T, target string) *recorder {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	rp.ErrorLog = log.New(io.Discard, "", 0)
	rp.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.Method != http.MethodPost || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			return nil
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		resp.Body = io.NopCloser(bytes.NewReader(b))
		rec.mu.Lock()
		for i := len(rec.got) - 1; i >= 0; i-- {
			if rec.got[i].requestID == resp.Request.Header.Get(HeaderRequestID) && rec.got[i].answer == nil {
				rec.got[i].answer = b
				break
			}
		}
		rec.mu.Unlock()
		return nil
	}
	rec.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodPost {
			b, _ := io.ReadAll(req.Body)
			req.Body = io.NopCloser(bytes.NewReader(b))
			rec.mu.Lock()
			rec.got = append(rec.got, legRecord{path: req.URL.Path, requestID: req.Header.Get(HeaderRequestID), body: b})
			rec.mu.Unlock()
		}
		rp.ServeHTTP(w, req)
	}))
	t.Cleanup(rec.srv.Close)
	return rec
}

func (r *recorder) records() []legRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]legRecord(nil), r.got...)
}

// pdEnv is a router whose static workers are simulated prefill and decode
// workers, each behind a recorder.
type pdEnv struct {
	*env
	pre, dec       []*recorder
	pfleet, dfleet *mock.Fleet
	prefillIDs     []uint64
	decodeIDs      []uint64
}

type pdOptions struct {
	protocol  string
	prefill   int
	decode    int
	policy    sched.DisaggPolicy
	minTokens uint32
	// prefillRole is the simulated prefill workers' own role: mock.RoleBoth
	// makes prefill workers without a KV connector.
	prefillRole string
	// deadDecode adds a decode worker whose URL refuses connections.
	deadDecode bool
	// aggregated adds this many aggregated workers.
	aggregated int
	// hangPrefill puts a prefill worker first whose URL accepts requests and
	// never answers them.
	hangPrefill bool
	proxy       func(*Config)
}

func startPD(t *testing.T, o pdOptions) *pdEnv {
	t.Helper()
	if o.prefillRole == "" {
		o.prefillRole = mock.RolePrefill
	}
	fleet := func(n int, first uint64, role string) *mock.Fleet {
		if n == 0 {
			return nil
		}
		ids := make([]uint64, n)
		for i := range ids {
			ids[i] = first + uint64(i)
		}
		f, err := mock.Start(mock.Config{Workers: n, WorkerIDs: ids, BlockSize: testBlockSize, KVBlocks: 4096, Speedup: 20,
			Transport: plane.TransportNone, Role: role, PDProtocol: o.protocol, Logger: quietLogger()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		return f
	}
	pe := &pdEnv{}
	pe.pfleet = fleet(o.prefill, 1, o.prefillRole)
	pe.dfleet = fleet(o.decode, uint64(o.prefill)+1, mock.RoleDecode)
	var static []StaticWorker
	if o.hangPrefill {
		release := make(chan struct{})
		hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/completions" && r.URL.Path != "/v1/chat/completions" {
				// A decode worker's KV pull (SGLang's bootstrap): no
				// transfer, after a while.
				time.Sleep(time.Second)
				http.NotFound(w, r)
				return
			}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}))
		t.Cleanup(hang.Close)
		t.Cleanup(func() { close(release) })
		pe.prefillIDs = append(pe.prefillIDs, 50)
		sw := StaticWorker{ID: 50, URL: hang.URL, Model: "mock", PDProtocol: o.protocol,
			Capacity: sched.Capacity{TotalBlocks: 4096, Role: sched.RolePrefill}}
		if o.protocol == plane.ProtocolSGLang { // the decode worker's pull hangs there too
			u, _ := url.Parse(hang.URL)
			sw.BootstrapPort, _ = strconv.Atoi(u.Port())
		}
		static = append(static, sw)
	}
	add := func(f *mock.Fleet, role sched.Role, recs *[]*recorder, ids *[]uint64) {
		if f == nil {
			return
		}
		for _, w := range f.Workers() {
			rec := newRecorder(t, w.URL())
			*recs = append(*recs, rec)
			*ids = append(*ids, w.ID())
			sw := StaticWorker{ID: w.ID(), URL: rec.srv.URL, Model: "mock", PDProtocol: o.protocol,
				Capacity: sched.Capacity{TotalBlocks: 4096, Role: role}}
			if o.protocol == plane.ProtocolSGLang && role == sched.RolePrefill {
				sw.BootstrapPort = w.BootstrapPort()
			}
			static = append(static, sw)
		}
	}
	add(pe.pfleet, sched.RolePrefill, &pe.pre, &pe.prefillIDs)
	add(pe.dfleet, sched.RoleDecode, &pe.dec, &pe.decodeIDs)
	if o.deadDecode {
		dead := httptest.NewServer(http.NotFoundHandler())
		dead.Close()
		id := uint64(o.prefill + o.decode + 1)
		static = append(static, StaticWorker{ID: id, URL: dead.URL, Model: "mock", PDProtocol: o.protocol,
			Capacity: sched.Capacity{TotalBlocks: 4096, Role: sched.RoleDecode}})
	}
	var agg []*recorder
	var aggIDs []uint64
	add(fleet(o.aggregated, 100, mock.RoleBoth), sched.RoleBoth, &agg, &aggIDs)
	pe.dec = append(pe.dec, agg...)
	pe.decodeIDs = append(pe.decodeIDs, aggIDs...)
	pe.env = startEnv(t, envOptions{noFleet: true, static: static, health: o.proxy, sched: func(c *sched.Config) {
		c.DisaggPolicy, c.DisaggMinUncachedTokens = o.policy, o.minTokens
	}})
	pe.waitWorkers(len(static))
	return pe
}

// post sends a JSON body with headers and returns the answer.
func (e *env) postHdr(path, body string, hdr map[string]string) (int, []byte, http.Header) {
	e.t.Helper()
	req, err := http.NewRequest("POST", e.url+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("POST %s: read: %v", path, err)
	}
	return resp.StatusCode, b, resp.Header
}

func jsonMap(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		t.Fatalf("not a JSON object: %v: %s", err, b)
	}
	return m
}

// only returns the single POST of recs, failing otherwise.
func only(t *testing.T, what string, recs ...*recorder) legRecord {
	t.Helper()
	var all []legRecord
	for _, r := range recs {
		all = append(all, r.records()...)
	}
	if len(all) != 1 {
		t.Fatalf("%s: %d requests, want 1", what, len(all))
	}
	return all[0]
}

// usage reads a completion answer's usage (the last SSE chunk's for a
// stream) and its id.
func usageOf(t *testing.T, body []byte, stream bool) (id string, prompt, completion int) {
	t.Helper()
	type answer struct {
		ID    string `json:"id"`
		Usage *struct {
			Prompt     int `json:"prompt_tokens"`
			Completion int `json:"completion_tokens"`
		} `json:"usage"`
	}
	var a answer
	if !stream {
		if err := json.Unmarshal(body, &a); err != nil || a.Usage == nil {
			t.Fatalf("answer: %v: %s", err, body)
		}
		return a.ID, a.Usage.Prompt, a.Usage.Completion
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	done := false
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			done = true
			continue
		}
		var c answer
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatalf("chunk %q: %v", line, err)
		}
		id = c.ID
		if c.Usage != nil {
			prompt, completion = c.Usage.Prompt, c.Usage.Completion
		}
	}
	if !done {
		t.Fatalf("stream without [DONE]: %s", body)
	}
	return id, prompt, completion
}

// pdCases are the client bodies the leg tests send: completions and chat,
// streamed and not, with the members the prefill leg rewrites.
var pdCases = []struct {
	name, path, body string
	stream           bool
	prompt, maxToks  int
}{
	{"completion", "/v1/completions", `{"model":"mock","prompt":"` + strings.Repeat("abcdefgh", 12) + `","max_tokens":7,"min_tokens":2,"temperature":0,"seed":1234567890123,"user":"u-1"}`, false, 96, 7},
	{"completion-stream", "/v1/completions", `{"model":"mock","prompt":"` + strings.Repeat("ijklmnop", 12) + `","max_tokens":5,"stream":true,"stream_options":{"include_usage":true},"min_tokens":1}`, true, 96, 5},
	{"chat", "/v1/chat/completions", `{"model":"mock","messages":[{"role":"user","content":"` + strings.Repeat("qrstuvwx", 10) + `"}],"max_completion_tokens":6,"top_p":0.5}`, false, 0, 6},
	{"chat-stream", "/v1/chat/completions", `{"model":"mock","messages":[{"role":"user","content":"` + strings.Repeat("yzABCDEF", 10) + `"}],"max_tokens":4,"max_completion_tokens":4,"stream":true,"stream_options":{"include_usage":true}}`, true, 0, 4},
	{"chat-stream-plain", "/v1/chat/completions", `{"model":"mock","messages":[{"role":"user","content":"` + strings.Repeat("GHIJKLMN", 10) + `"}],"max_tokens":3,"stream":true}`, true, 0, 3},
}

// TestPDVLLMLegs checks each leg of the vLLM NIXL protocol field by field:
// the prefill leg is the client's body with kv_transfer_params
// {do_remote_decode: true, ...nulls}, stream false, max_tokens 1 (and
// max_completion_tokens 1 when sent), stream_options and min_tokens
// removed; the decode leg is the client's body plus the prefill answer's
// kv_transfer_params as is; both carry the same X-Request-Id; the client
// gets the decode worker's answer with its usage.
func TestPDVLLMLegs(t *testing.T) {
	e := startPD(t, pdOptions{protocol: plane.ProtocolVLLMNIXL, prefill: 1, decode: 1, policy: sched.DisaggAlways})
	for i, c := range pdCases {
		t.Run(c.name, func(t *testing.T) {
			rid := ""
			hdr := map[string]string{}
			if i%2 == 0 {
				rid = fmt.Sprintf("client-id-%d", i)
				hdr[HeaderRequestID] = rid
			}
			before := len(e.pre[0].records())
			code, body, h := e.postHdr(c.path, c.body, hdr)
			if code != 200 {
				t.Fatalf("%d %s", code, body)
			}
			if h.Get(HeaderPrefillWorker) != fmt.Sprint(e.prefillIDs[0]) || h.Get(HeaderWorker) != fmt.Sprint(e.decodeIDs[0]) {
				t.Errorf("headers: prefill %q decode %q", h.Get(HeaderPrefillWorker), h.Get(HeaderWorker))
			}
			pres, decs := e.pre[0].records(), e.dec[0].records()
			if len(pres) != before+1 || len(decs) != before+1 {
				t.Fatalf("legs: %d prefill, %d decode requests, want %d each", len(pres)-before, len(decs), before+1)
			}
			pre, dec := pres[len(pres)-1], decs[len(decs)-1]
			if pre.path != c.path || dec.path != c.path {
				t.Errorf("paths %q %q, want %q", pre.path, dec.path, c.path)
			}
			if pre.requestID == "" || pre.requestID != dec.requestID || (rid != "" && pre.requestID != rid) {
				t.Errorf("X-Request-Id: prefill %q decode %q (client's %q)", pre.requestID, dec.requestID, rid)
			}
			client := jsonMap(t, []byte(c.body))
			// The prefill leg.
			want := jsonMap(t, []byte(c.body))
			delete(want, "stream_options")
			delete(want, "min_tokens")
			want["stream"] = false
			want["max_tokens"] = json.Number("1")
			if _, ok := client["max_completion_tokens"]; ok {
				want["max_completion_tokens"] = json.Number("1")
			}
			want["kv_transfer_params"] = map[string]any{"do_remote_decode": true, "do_remote_prefill": false,
				"remote_engine_id": nil, "remote_block_ids": nil, "remote_host": nil, "remote_port": nil}
			if got := jsonMap(t, pre.body); !reflect.DeepEqual(got, want) {
				t.Errorf("prefill leg:\n got %v\nwant %v", got, want)
			}
			// The decode leg: the client's body plus the answer's params.
			params := jsonMap(t, pre.answer)["kv_transfer_params"]
			if m, ok := params.(map[string]any); !ok || m["remote_request_id"] == nil || m["remote_host"] == nil {
				t.Fatalf("prefill answer's kv_transfer_params: %v", params)
			}
			want = jsonMap(t, []byte(c.body))
			want["kv_transfer_params"] = params
			if got := jsonMap(t, dec.body); !reflect.DeepEqual(got, want) {
				t.Errorf("decode leg:\n got %v\nwant %v", got, want)
			}
			// The client's answer: the decode worker's, with its usage.
			id, prompt, completion := usageOf(t, body, c.stream)
			if !strings.HasPrefix(id, fmt.Sprintf("cmpl-mock-%d-", e.decodeIDs[0])) {
				t.Errorf("answer id %q is not the decode worker's", id)
			}
			if completion != c.maxToks || (c.prompt > 0 && prompt != c.prompt) || prompt == 0 {
				t.Errorf("usage: prompt %d completion %d, want %d and %d", prompt, completion, c.prompt, c.maxToks)
			}
		})
	}
	if v := e.metric(`kvroute_pd_legs_total{protocol="vllm-nixl"}`); v != float64(len(pdCases)) {
		t.Errorf("kvroute_pd_legs_total = %v, want %d", v, len(pdCases))
	}
	if v := e.metric("kvroute_pd_prefill_fallbacks_total"); v != 0 {
		t.Errorf("fallbacks = %v, want 0", v)
	}
	waitFor(t, "bookings freed", e.idle)
}

// TestPDSGLangLegs checks the SGLang PD protocol: the prefill and the decode
// worker get the same body, the client's plus bootstrap_host (the prefill
// worker's host), bootstrap_port (its registration's) and one random
// bootstrap_room; the client gets the decode worker's answer.
func TestPDSGLangLegs(t *testing.T) {
	e := startPD(t, pdOptions{protocol: plane.ProtocolSGLang, prefill: 1, decode: 1, policy: sched.DisaggAlways})
	rooms := map[string]bool{}
	for _, c := range pdCases {
		t.Run(c.name, func(t *testing.T) {
			before := len(e.dec[0].records())
			code, body, _ := e.postHdr(c.path, c.body, nil)
			if code != 200 {
				t.Fatalf("%d %s", code, body)
			}
			var pre legRecord
			waitFor(t, "the prefill leg", func() bool { return len(e.pre[0].records()) == before+1 })
			pre = e.pre[0].records()[before]
			dec := e.dec[0].records()[before]
			if !bytes.Equal(pre.body, dec.body) {
				t.Errorf("the legs differ:\nprefill %s\n decode %s", pre.body, dec.body)
			}
			if pre.requestID == "" || pre.requestID != dec.requestID {
				t.Errorf("X-Request-Id: %q %q", pre.requestID, dec.requestID)
			}
			got := jsonMap(t, dec.body)
			want := jsonMap(t, []byte(c.body))
			want["bootstrap_host"] = "127.0.0.1"
			want["bootstrap_port"] = json.Number(fmt.Sprint(e.pfleet.Workers()[0].BootstrapPort()))
			room, ok := got["bootstrap_room"].(json.Number)
			if !ok {
				t.Fatalf("bootstrap_room %v", got["bootstrap_room"])
			}
			if n, err := room.Int64(); err != nil || n < 0 {
				t.Errorf("bootstrap_room %v is not a non-negative 63-bit integer", room)
			}
			rooms[room.String()] = true
			want["bootstrap_room"] = room
			if !reflect.DeepEqual(got, want) {
				t.Errorf("legs:\n got %v\nwant %v", got, want)
			}
			id, prompt, completion := usageOf(t, body, c.stream)
			if !strings.HasPrefix(id, fmt.Sprintf("cmpl-mock-%d-", e.decodeIDs[0])) {
				t.Errorf("answer id %q is not the decode worker's", id)
			}
			if completion != c.maxToks || (c.prompt > 0 && prompt != c.prompt) || prompt == 0 {
				t.Errorf("usage: prompt %d completion %d, want %d and %d", prompt, completion, c.prompt, c.maxToks)
			}
		})
	}
	if len(rooms) != len(pdCases) {
		t.Errorf("%d distinct rooms for %d requests", len(rooms), len(pdCases))
	}
	if v := e.metric(`kvroute_pd_legs_total{protocol="sglang"}`); v != float64(len(pdCases)) {
		t.Errorf("kvroute_pd_legs_total = %v, want %d", v, len(pdCases))
	}
	waitFor(t, "bookings freed", e.idle)
}

// TestPDPrefillWorkerKilled closes the only prefill worker while requests
// run: none is lost (each is served aggregated on its decode worker), the
// fallbacks are counted, and once the worker is ejected requests are
// served aggregated from the start.
func TestPDPrefillWorkerKilled(t *testing.T) {
	for _, proto := range []string{plane.ProtocolVLLMNIXL, plane.ProtocolSGLang} {
		t.Run(proto, func(t *testing.T) {
			e := startPD(t, pdOptions{protocol: proto, prefill: 1, decode: 2, policy: sched.DisaggAlways})
			const clients, each = 4, 6
			var wg sync.WaitGroup
			errs := make(chan string, clients*each)
			killed := make(chan struct{})
			for c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range each {
						if c == 0 && i == 2 {
							_ = e.pfleet.Close()
							e.pre[0].srv.Close()
							close(killed)
						}
						stream := i%2 == 1
						body := fmt.Sprintf(`{"model":"mock","prompt":"%s %d %d","max_tokens":8,"stream":%v}`, strings.Repeat("k", 80), c, i, stream)
						req, _ := http.NewRequest("POST", e.url+"/v1/completions", strings.NewReader(body))
						resp, err := http.DefaultClient.Do(req)
						if err != nil {
							errs <- err.Error()
							continue
						}
						b, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						if resp.StatusCode != 200 || (stream && !bytes.Contains(b, []byte("data: [DONE]"))) || bytes.Contains(b, []byte(`"error"`)) {
							errs <- fmt.Sprintf("%d %s", resp.StatusCode, b)
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for e := range errs {
				t.Errorf("request lost: %s", e)
			}
			<-killed
			if v := e.metric("kvroute_pd_prefill_fallbacks_total"); v < 1 {
				t.Errorf("kvroute_pd_prefill_fallbacks_total = %v, want >= 1", v)
			}
			waitFor(t, "prefill worker down", func() bool {
				for _, w := range e.workers().Workers {
					if w.WorkerID == e.prefillIDs[0] {
						return w.Health == "down"
					}
				}
				return false
			})
			// Served aggregated from the start now: no prefill leg.
			code, body, h := e.postHdr("/v1/completions", `{"model":"mock","prompt":"after","max_tokens":3}`, nil)
			if code != 200 || h.Get(HeaderPrefillWorker) != "" {
				t.Errorf("after the kill: %d, prefill worker %q: %s", code, h.Get(HeaderPrefillWorker), body)
			}
			waitFor(t, "bookings freed", e.idle)
		})
	}
}

// TestPDDecodeRetry: a decode worker that refuses connections gets the
// decode leg once; the leg goes to another decode worker with the same
// transfer parameters (vLLM: the prefill answer's kv_transfer_params;
// SGLang: the same body, room included), and the client never sees the
// failure.
func TestPDDecodeRetry(t *testing.T) {
	for _, proto := range []string{plane.ProtocolVLLMNIXL, plane.ProtocolSGLang} {
		t.Run(proto, func(t *testing.T) {
			e := startPD(t, pdOptions{protocol: proto, prefill: 1, decode: 2, policy: sched.DisaggAlways, deadDecode: true})
			n := 0
			for ; n < 60 && e.metric("kvroute_pd_decode_retries_total") < 1; n++ {
				code, body, _ := e.postHdr("/v1/completions", fmt.Sprintf(`{"model":"mock","prompt":"%s %d","max_tokens":3}`, strings.Repeat("r", 70), n), nil)
				if code != 200 {
					t.Fatalf("request %d: %d %s", n, code, body)
				}
			}
			if v := e.metric("kvroute_pd_decode_retries_total"); v != 1 {
				t.Fatalf("kvroute_pd_decode_retries_total = %v after %d requests, want 1", v, n)
			}
			if v := e.metric("kvroute_pd_prefill_fallbacks_total"); v != 0 {
				t.Errorf("fallbacks = %v, want 0 (the retry reuses the transfer)", v)
			}
			// Every decode leg carried its own prefill's transfer (same
			// X-Request-Id), the retried one too.
			waitFor(t, "every prefill leg", func() bool { return len(e.pre[0].records()) == n })
			want := map[string]any{}
			for _, r := range e.pre[0].records() {
				if proto == plane.ProtocolSGLang {
					want[r.requestID] = string(r.body)
				} else {
					want[r.requestID] = jsonMap(t, r.answer)["kv_transfer_params"]
				}
			}
			legs := 0
			for _, d := range e.dec {
				for _, r := range d.records() {
					legs++
					var got any = string(r.body)
					if proto != plane.ProtocolSGLang {
						got = jsonMap(t, r.body)["kv_transfer_params"]
					}
					if !reflect.DeepEqual(got, want[r.requestID]) {
						t.Errorf("decode leg %s carried %v, its prefill %v", r.requestID, got, want[r.requestID])
					}
				}
			}
			if legs != n || len(want) != n {
				t.Errorf("%d decode legs and %d prefill legs for %d requests", legs, len(want), n)
			}
			waitFor(t, "bookings freed", e.idle)
		})
	}
}

// TestPDNoTransferParams: a prefill worker without a KV connector answers
// the prefill leg without kv_transfer_params: the client gets a 502 naming
// it, the worker is marked not P/D capable and served aggregated since.
func TestPDNoTransferParams(t *testing.T) {
	e := startPD(t, pdOptions{protocol: plane.ProtocolVLLMNIXL, prefill: 1, decode: 1, policy: sched.DisaggAlways, prefillRole: mock.RoleBoth})
	code, body, _ := e.postHdr("/v1/completions", `{"model":"mock","prompt":"`+strings.Repeat("n", 90)+`","max_tokens":3}`, nil)
	if code != 502 {
		t.Fatalf("%d %s, want 502", code, body)
	}
	var ae struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &ae); err != nil || !strings.Contains(ae.Error.Message, fmt.Sprintf("prefill worker %d", e.prefillIDs[0])) ||
		!strings.Contains(ae.Error.Message, "kv_transfer_params") {
		t.Errorf("error body %s does not name the worker and kv_transfer_params", body)
	}
	if v := e.metric("kvroute_pd_no_transfer_params_total"); v != 1 {
		t.Errorf("kvroute_pd_no_transfer_params_total = %v, want 1", v)
	}
	var doc struct {
		Workers []struct {
			WorkerID  uint64 `json:"worker_id"`
			Role      string `json:"role"`
			PDCapable bool   `json:"pd_capable"`
		} `json:"workers"`
	}
	waitFor(t, "the worker marked", func() bool {
		_, b, _ := e.do("GET", "/workers", "")
		_ = json.Unmarshal(b, &doc)
		for _, w := range doc.Workers {
			if w.WorkerID == e.prefillIDs[0] {
				return w.Role == "both" && !w.PDCapable
			}
		}
		return false
	})
	for i := range 4 {
		code, body, h := e.postHdr("/v1/completions", fmt.Sprintf(`{"model":"mock","prompt":"%s %d","max_tokens":3}`, strings.Repeat("n", 90), i), nil)
		if code != 200 || h.Get(HeaderPrefillWorker) != "" {
			t.Errorf("after marking: %d (prefill worker %q) %s", code, h.Get(HeaderPrefillWorker), body)
		}
	}
	waitFor(t, "bookings freed", e.idle)
}

// TestPDWithoutPrefillWorkersUnchanged: with no prefill-role worker (here
// aggregated and decode-role ones) a request is served exactly as before:
// the client's body reaches one worker byte for byte (a stream without
// stream_options gains include_usage, as in any aggregated fleet) with no
// request id added, /route answers today's fields only, and no P/D
// decision is made.
func TestPDWithoutPrefillWorkersUnchanged(t *testing.T) {
	e := startPD(t, pdOptions{protocol: plane.ProtocolVLLMNIXL, decode: 1, aggregated: 2, policy: sched.DisaggAlways})
	for i, c := range pdCases {
		before := 0
		for _, d := range e.dec {
			before += len(d.records())
		}
		code, body, h := e.postHdr(c.path, c.body, nil)
		if code != 200 || h.Get(HeaderPrefillWorker) != "" {
			t.Fatalf("%s: %d (prefill worker %q) %s", c.name, code, h.Get(HeaderPrefillWorker), body)
		}
		var got []legRecord
		for _, d := range e.dec {
			got = append(got, d.records()...)
		}
		if len(got) != before+1 {
			t.Fatalf("%s: %d worker requests, want 1", c.name, len(got)-before)
		}
		_ = i
	}
	for _, d := range e.dec {
		for _, r := range d.records() {
			if r.requestID != "" {
				t.Errorf("X-Request-Id %q added", r.requestID)
			}
			found := false
			for _, c := range pdCases {
				want := c.body
				if c.stream && !strings.Contains(want, "stream_options") {
					// The prediction check asks for the usage chunk (and strips it from the client's stream).
					want = strings.TrimSuffix(want, "}") + `,"stream_options":{"include_usage":true}}`
				}
				found = found || string(r.body) == want
			}
			if !found {
				t.Errorf("body changed: %s", r.body)
			}
		}
	}
	code, body, _ := e.postHdr("/route", `{"prompt":"`+strings.Repeat("z", 64)+`"}`, nil)
	if code != 200 {
		t.Fatalf("/route %d %s", code, body)
	}
	var keys []string
	for k := range jsonMap(t, body) {
		keys = append(keys, k)
	}
	want := []string{"dp_rank", "overlap_blocks", "prompt_blocks", "request_id", "url", "worker_id"}
	if fmt.Sprint(sortedStrings(keys)) != fmt.Sprint(want) {
		t.Errorf("/route fields %v, want %v", sortedStrings(keys), want)
	}
	if v := e.metric(`kvroute_pd_decisions_total{rule="remote"}`) + e.metric(`kvroute_pd_decisions_total{rule="short-prompt"}`); v != 0 {
		t.Errorf("P/D decisions %v, want 0", v)
	}
}

func sortedStrings(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// TestPDRoutePair: /route answers the pair; prefill_done ends the prefill
// booking only; free ends the rest; a short prompt under the isl policy is
// served on the decode worker alone (prefill null) and explain says why.
func TestPDRoutePair(t *testing.T) {
	e := startPD(t, pdOptions{protocol: plane.ProtocolVLLMNIXL, prefill: 1, decode: 1, policy: sched.DisaggISL, minTokens: 64})
	type leg struct {
		WorkerID uint64 `json:"worker_id"`
		URL      string `json:"url"`
	}
	var ans struct {
		RequestID string          `json:"request_id"`
		WorkerID  uint64          `json:"worker_id"`
		Prefill   *leg            `json:"prefill"`
		Decode    *leg            `json:"decode"`
		Rule      string          `json:"disagg_rule"`
		PCands    json.RawMessage `json:"prefill_candidates"`
	}
	code, body, _ := e.postHdr("/route", `{"prompt":"`+strings.Repeat("p", 160)+`","explain":true}`, nil)
	if code != 200 || json.Unmarshal(body, &ans) != nil {
		t.Fatalf("/route %d %s", code, body)
	}
	if !bytes.Contains(ans.PCands, []byte(`"role":"prefill"`)) || !bytes.Contains(body, []byte(`"role":"decode"`)) {
		t.Errorf("explain without the candidates' roles: %s", body)
	}
	if ans.Prefill == nil || ans.Prefill.WorkerID != e.prefillIDs[0] || ans.Prefill.URL != e.pre[0].srv.URL ||
		ans.Decode == nil || ans.Decode.WorkerID != e.decodeIDs[0] || ans.WorkerID != e.decodeIDs[0] || ans.Rule != "remote" || len(ans.PCands) < 3 {
		t.Fatalf("pair: %s", body)
	}
	load := func(id uint64) int {
		for _, w := range e.workers().Workers {
			if w.WorkerID == id {
				return w.Ranks[0].Requests
			}
		}
		return -1
	}
	if load(e.prefillIDs[0]) != 1 || load(e.decodeIDs[0]) != 1 {
		t.Fatalf("bookings: prefill %d decode %d, want 1 and 1", load(e.prefillIDs[0]), load(e.decodeIDs[0]))
	}
	if code, body, _ := e.postHdr("/route/"+ans.RequestID+"/prefill_done", "", nil); code != 200 {
		t.Fatalf("prefill_done %d %s", code, body)
	}
	waitFor(t, "the prefill booking ended", func() bool { return load(e.prefillIDs[0]) == 0 })
	if load(e.decodeIDs[0]) != 1 {
		t.Errorf("the decode booking ended with prefill_done")
	}
	if code, body, _ := e.postHdr("/route/"+ans.RequestID+"/free", "", nil); code != 200 {
		t.Fatalf("free %d %s", code, body)
	}
	waitFor(t, "freed", e.idle)
	// A short prompt: the isl rule serves it on the decode worker alone.
	ans.Prefill, ans.Rule = nil, ""
	code, body, _ = e.postHdr("/route", `{"prompt":"short"}`, nil)
	if code != 200 || json.Unmarshal(body, &ans) != nil || !bytes.Contains(body, []byte(`"prefill":null`)) || ans.Rule != "short-prompt" || ans.Decode == nil {
		t.Fatalf("short prompt: %d %s", code, body)
	}
}

// TestPDRolesFromRegistrations: a simulated P/D fleet that registers over
// NATS is routed by its declared roles: /workers and the per-worker metrics
// show them, and a completion runs both legs.
func TestPDRolesFromRegistrations(t *testing.T) {
	e := startEnv(t, envOptions{noFleet: true, sched: func(c *sched.Config) { c.DisaggPolicy = sched.DisaggAlways }})
	for _, part := range []struct {
		role string
		ids  []uint64
	}{{mock.RolePrefill, []uint64{1}}, {mock.RoleDecode, []uint64{2, 3}}} {
		f, err := mock.Start(mock.Config{Workers: len(part.ids), WorkerIDs: part.ids, BlockSize: testBlockSize, KVBlocks: 4096, Speedup: 20,
			Namespace: "test", Component: "backend", Transport: plane.TransportDynamo, Heartbeat: time.Second, LoadInterval: 10 * time.Millisecond,
			Role: part.role, PDProtocol: plane.ProtocolSGLang, Logger: quietLogger()}, e.nc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
	}
	e.waitWorkers(3)
	var doc struct {
		Workers []struct {
			WorkerID      uint64 `json:"worker_id"`
			Role          string `json:"role"`
			Protocol      string `json:"pd_protocol"`
			BootstrapPort int    `json:"bootstrap_port"`
		} `json:"workers"`
	}
	_, b, _ := e.do("GET", "/workers", "")
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	roles := map[uint64]string{1: "prefill", 2: "decode", 3: "decode"}
	for _, w := range doc.Workers {
		if w.Role != roles[w.WorkerID] || w.Protocol != "sglang" || (w.WorkerID == 1 && w.BootstrapPort == 0) {
			t.Errorf("worker %d: role %q protocol %q bootstrap_port %d", w.WorkerID, w.Role, w.Protocol, w.BootstrapPort)
		}
	}
	if v := e.metric(`kvroute_worker_requests{worker="1",dp_rank="0",role="prefill"}`); v != 0 {
		t.Errorf(`kvroute_worker_requests{worker="1",...,role="prefill"} = %v, want 0 (present)`, v)
	}
	if v := e.metric(`kvroute_worker_up{worker="2",role="decode"}`); v != 1 {
		t.Errorf(`kvroute_worker_up{worker="2",role="decode"} = %v, want 1`, v)
	}
	code, body, h := e.postHdr("/v1/chat/completions", `{"model":"mock","messages":[{"role":"user","content":"`+strings.Repeat("g", 100)+`"}],"max_tokens":4,"stream":true}`, nil)
	if code != 200 || h.Get(HeaderPrefillWorker) != "1" || (h.Get(HeaderWorker) != "2" && h.Get(HeaderWorker) != "3") {
		t.Fatalf("%d prefill %q decode %q: %s", code, h.Get(HeaderPrefillWorker), h.Get(HeaderWorker), body)
	}
	usageOf(t, body, true)
	waitFor(t, "bookings freed", e.idle)
}

// TestPDPrefillTimeout: a prefill worker that takes requests and never
// answers costs each request --prefill-timeout, after which it is served
// aggregated on its decode worker; the timeouts count against the worker's
// health, so it is ejected and requests are disaggregated without it.
func TestPDPrefillTimeout(t *testing.T) {
	for _, proto := range []string{plane.ProtocolVLLMNIXL, plane.ProtocolSGLang} {
		t.Run(proto, func(t *testing.T) {
			e := startPD(t, pdOptions{protocol: proto, decode: 1, policy: sched.DisaggAlways, hangPrefill: true,
				proxy: func(c *Config) { c.PrefillTimeout = 300 * time.Millisecond }})
			start := time.Now()
			code, body, h := e.postHdr("/v1/completions", `{"model":"mock","prompt":"`+strings.Repeat("t", 90)+`","max_tokens":3}`, nil)
			if code != 200 || h.Get(HeaderPrefillWorker) != "" || h.Get(HeaderWorker) != fmt.Sprint(e.decodeIDs[0]) {
				t.Fatalf("%d prefill %q decode %q: %s", code, h.Get(HeaderPrefillWorker), h.Get(HeaderWorker), body)
			}
			if d := time.Since(start); d < 300*time.Millisecond {
				t.Errorf("answered in %v, before --prefill-timeout", d)
			}
			if v := e.metric("kvroute_pd_prefill_fallbacks_total"); v != 1 {
				t.Errorf("kvroute_pd_prefill_fallbacks_total = %v, want 1", v)
			}
			waitFor(t, "the hung prefill worker ejected", func() bool {
				for _, w := range e.workers().Workers {
					if w.WorkerID == 50 {
						return w.Health == "down"
					}
				}
				return false
			})
			waitFor(t, "bookings freed", e.idle)
		})
	}
}
