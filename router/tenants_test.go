package router

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvroute/kvroute/sched"
)

// A --tenants file that fails validation is refused with the line and the
// field.
func TestParseTenantsErrors(t *testing.T) {
	key := HashAPIKey("sk-secret")
	for _, c := range []struct{ file, want string }{
		{"tenants:\n  - name: a\n    weight: -1\n", "line 3: tenants[0].weight"},
		{"tenants:\n  - name: a\n  - name: a\n", "line 3: tenants[1].name \"a\" appears twice"},
		{"tenants:\n  - weight: 2\n", "line 2: tenants[0].name is missing"},
		{"tenants:\n  - name: a\n    class: urgent\n", "line 3: tenants[0].class \"urgent\""},
		{"tenants:\n  - name: a\n    rate: 10\n    api_keys: [sk-secret]\n", "line 4: tenants[0].api_keys[0] must be a SHA-256 hash"},
		{"tenants:\n  - name: a\n    api_keys: [" + key + "]\n  - name: b\n    api_keys: [sha256:" + key + "]\n", "line 5: tenants[1].api_keys[0] is also tenant \"a\"'s"},
		{"default_class: low\n", "line 1: default_class"},
		{"tenants:\n  - name: a\n    wieght: 2\n", "line 3: field wieght not found"},
	} {
		_, err := ParseTenants([]byte(c.file))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.file, err, c.want)
		}
	}
	f, err := ParseTenants([]byte("tenants:\n  - name: a\n    rate: 100\n    api_keys: [sha256:" + strings.ToUpper(key) + "]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a := f.Tenants[0]; a.Weight != 1 || a.Burst != 100 || a.APIKeys[0] != key {
		t.Fatalf("defaults: %+v", a)
	}
}

// Through the service: a tenant over its token rate gets 429 with
// Retry-After and takes no queue space; a bearer key's hash names its
// tenant; a bad priority is a 400 naming the header; a flood of sheddable
// requests on a small fleet is shed while every critical request of the
// other tenant is served; /tenants shows both tenants' shares.
func TestTenantsThroughService(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tenants.yaml")
	file := fmt.Sprintf(`tenants:
  - name: batch
    class: sheddable
  - name: chat
    weight: 2
    class: critical
    api_keys: [%s]
  - name: tiny
    rate: 100
    burst: 200
`, HashAPIKey("sk-chat"))
	if err := os.WriteFile(path, []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	e := startEnv(t, envOptions{workers: 2, kvBlocks: 48, tenants: path, pprof: true, speedup: 4,
		sched: func(c *sched.Config) { c.MaxQueueWait = 300 * time.Millisecond; c.QueueDepth = 8 }})

	post := func(hdr map[string]string, toks []uint32) (int, string, http.Header) {
		req, _ := http.NewRequest("POST", e.url+"/v1/completions", strings.NewReader(fmt.Sprintf(`{"prompt":%s,"max_tokens":8}`, promptJSON(toks))))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("post: %v", err)
			return 0, "", nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}

	// Rate limit: 150 tokens pass from the full bucket of 200, the next
	// 150 wait for 100 more tokens: one second.
	if code, body, _ := post(map[string]string{HeaderTenant: "tiny"}, tokens(9, 1, 0, 150)); code != 200 {
		t.Fatalf("tiny's first request: %d %s", code, body)
	}
	code, body, h := post(map[string]string{HeaderTenant: "tiny"}, tokens(9, 2, 0, 150))
	if code != 429 || h.Get("Retry-After") != "1" || !strings.Contains(body, "rate limit") {
		t.Fatalf("tiny over its rate: %d %q Retry-After %q", code, body, h.Get("Retry-After"))
	}
	code, body, _ = post(map[string]string{HeaderPriority: "urgent"}, tokens(9, 3, 0, 40))
	if code != 400 || !strings.Contains(body, HeaderPriority) {
		t.Fatalf("bad priority: %d %s", code, body)
	}

	// The flood: 48 sheddable requests of tenant batch at once, 8
	// critical ones of tenant chat (by its key) among them.
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[string]map[int]int{"batch": {}, "chat": {}}
	for i := range 56 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			who, hdr := "batch", map[string]string{HeaderTenant: "batch"}
			if i%7 == 3 {
				who, hdr = "chat", map[string]string{"Authorization": "Bearer sk-chat"}
			}
			code, _, _ := post(hdr, tokens(i, i, 0, 300))
			mu.Lock()
			codes[who][code]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	t.Logf("codes: %v", codes)
	if codes["chat"][200] != 8 {
		t.Errorf("critical requests: %v, want all 8 served", codes["chat"])
	}
	if codes["batch"][200] == 48 {
		t.Errorf("no sheddable request was shed: %v", codes["batch"])
	}

	resp, err := http.Get("http://" + e.svc.AdminAddr() + "/tenants")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ans TenantsAnswer
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
		t.Fatal(err)
	}
	byName := map[string]TenantInfo{}
	for _, ti := range ans.Tenants {
		byName[ti.Name] = ti
	}
	if byName["chat"].Routed != 8 || byName["chat"].Weight != 2 || byName["tiny"].Rate != 100 || byName["batch"].Routed == 0 {
		t.Errorf("/tenants: %+v", ans)
	}
	code, wbody, _ := e.do("GET", "/workers", "")
	var wd struct {
		Tenants []struct {
			Name  string  `json:"name"`
			Share float64 `json:"share"`
		} `json:"tenants"`
	}
	if err := json.Unmarshal(wbody, &wd); code != 200 || err != nil || len(wd.Tenants) != len(ans.Tenants) {
		t.Errorf("/workers: %d %v %s", code, err, wbody)
	}
	for _, ti := range wd.Tenants {
		if ti.Name == "chat" && ti.Share != byName["chat"].Share {
			t.Errorf("/workers share of chat %v, /tenants %v", ti.Share, byName["chat"].Share)
		}
	}
	if m := e.metric(`kvroute_tenant_requests_total{tenant="tiny",class="standard",outcome="rate_limited"}`); m != 1 {
		t.Errorf("rate-limited counter %v, want 1", m)
	}
	if m := e.metric(`kvroute_tenant_requests_total{tenant="batch",class="sheddable",outcome="shed"}`); m != float64(48-codes["batch"][200]) {
		t.Errorf("shed counter %v, want %d", m, 48-codes["batch"][200])
	}
	if m := e.metric(`kvroute_tenant_requests_total{tenant="chat",class="critical",outcome="routed"}`); m != 8 {
		t.Errorf("routed counter %v, want 8", m)
	}
}

// FuzzParseTenants: any bytes parse or fail with an error; what parses
// has names, positive weights and 64-digit key hashes.
func FuzzParseTenants(f *testing.F) {
	f.Add([]byte("tenants:\n  - name: a\n    weight: 2\n    rate: 10\n    class: critical\n    api_keys: [sha256:" + HashAPIKey("k") + "]\ndefault_class: sheddable\n"))
	f.Add([]byte("tenants: [{name: x}, {name: y, burst: 5}]\n"))
	f.Add([]byte("tenants:\n  - name: a\n    weight: -1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		tf, err := ParseTenants(b)
		if err != nil {
			return
		}
		for _, s := range tf.Tenants {
			if s.Name == "" || !(s.Weight > 0) || s.Rate < 0 || s.Burst < 0 {
				t.Fatalf("accepted %+v", s)
			}
			for _, k := range s.APIKeys {
				if len(k) != 64 {
					t.Fatalf("accepted key hash %q", k)
				}
			}
		}
	})
}

// The file is re-read when it changes; an edit that fails validation
// leaves the last good table, and a tenant keeps its id across reloads.
func TestTenantsReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.yaml")
	write := func(s string, age time.Duration) {
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		at := time.Now().Add(-age)
		if err := os.Chtimes(path, at, at); err != nil {
			t.Fatal(err)
		}
	}
	write("tenants:\n  - name: a\n    weight: 2\n", time.Hour)
	tn, err := newTenants(path, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if w := tn.weights(); w[1] != 2 {
		t.Fatalf("weights %v", w)
	}
	if changed, err := tn.reload(false); changed || err != nil {
		t.Fatalf("unchanged file reloaded: %v %v", changed, err)
	}
	write("tenants:\n  - name: b\n  - name: a\n    weight: 5\n", time.Minute)
	if changed, err := tn.reload(false); !changed || err != nil {
		t.Fatalf("changed file: %v %v", changed, err)
	}
	if w := tn.weights(); w[1] != 5 || w[2] != 1 {
		t.Fatalf("after the reload: weights %v (a keeps id 1, b is 2)", w)
	}
	write("tenants:\n  - name: a\n    weight: -5\n", 0)
	if _, err := tn.reload(false); err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("bad edit: %v", err)
	}
	if tn.mu.spec["a"].Weight != 5 {
		t.Fatal("a bad edit replaced the table")
	}
	if changed, err := tn.reload(false); changed || err != nil {
		t.Fatalf("the same bad file again: %v %v (reported once)", changed, err)
	}
}
