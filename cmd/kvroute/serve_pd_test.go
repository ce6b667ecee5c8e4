package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/sched"
)

// TestServePDFlagsRejected: bad disaggregation flags and --worker options
// are errors naming the flag or the option.
func TestServePDFlagsRejected(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--disagg-policy", "sometimes"}, "--disagg-policy"},
		{[]string{"--disagg-min-uncached-tokens", "-1"}, "--disagg-min-uncached-tokens"},
		{[]string{"--prefill-timeout", "0s"}, "--prefill-timeout"},
		{[]string{"--demo-fleet-pd", "2"}, "--demo-fleet-pd"},
		{[]string{"--demo-fleet-pd", "0,2"}, "--demo-fleet-pd"},
		{[]string{"--demo-fleet-pd", "1,2", "--demo-fleet", "2"}, "--demo-fleet-pd and --demo-fleet"},
		{[]string{"--demo-fleet-pd-protocol", "mooncake"}, "--demo-fleet-pd-protocol"},
		{[]string{"--worker", "1=http://a:1,role=encode"}, "role="},
		{[]string{"--worker", "1=http://a:1,pd_protocol=nccl"}, "pd_protocol="},
		{[]string{"--worker", "1=http://a:1,pd_protocol=sglang,bootstrap_port=70000"}, "bootstrap_port="},
		{[]string{"--worker", "1=http://a:1,bootstrap_port=8998"}, "bootstrap_port needs pd_protocol=sglang"},
		{[]string{"--zmq-worker", "1=tcp://127.0.0.1:5557,role=prefill"}, "role= needs --worker 1"},
		{[]string{"--zmq-worker", "1=tcp://127.0.0.1:5557,role=x", "--worker", "1=http://a:1"}, "--zmq-worker"},
	}
	for _, c := range cases {
		_, _, err := serveConfig(c.args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v, want one naming %q", c.args, err, c.want)
		}
	}
}

// TestServePDFlagsMap: the flags and the --worker options reach the
// router's configuration; KVROUTE_* variables work as the flags do.
func TestServePDFlagsMap(t *testing.T) {
	t.Setenv("KVROUTE_PREFILL_TIMEOUT", "7s")
	cfg, o, err := serveConfig([]string{"--disagg-policy", "isl-or-load", "--disagg-min-uncached-tokens", "256",
		"--worker", "1=http://p:1,role=prefill,pd_protocol=sglang,bootstrap_port=9000", "--worker", "2=http://d:1,pd_protocol=sglang",
		"--zmq-worker", "2=tcp://127.0.0.1:5557,role=decode", "--worker-kv-blocks", "100",
		"--demo-fleet-pd", "2,3", "--demo-fleet-pd-protocol", "sglang"})
	if err != nil {
		t.Fatal(err)
	}
	rc := cfg.Router
	if rc.Sched.DisaggPolicy != sched.DisaggISLOrLoad || rc.Sched.DisaggMinUncachedTokens != 256 || rc.PrefillTimeout != 7*time.Second {
		t.Errorf("policy %v min %d timeout %v", rc.Sched.DisaggPolicy, rc.Sched.DisaggMinUncachedTokens, rc.PrefillTimeout)
	}
	w1, w2 := rc.Workers[0], rc.Workers[1]
	if w1.Capacity.Role != sched.RolePrefill || w1.PDProtocol != "sglang" || w1.BootstrapPort != 9000 || w1.Capacity.TotalBlocks != 100 {
		t.Errorf("worker 1: %+v", w1)
	}
	if w2.Capacity.Role != sched.RoleDecode || w2.PDProtocol != "sglang" {
		t.Errorf("worker 2 (role from --zmq-worker): %+v", w2)
	}
	if o.demoPrefill != 2 || o.demoDecode != 3 || o.demoPDProtocol != "sglang" {
		t.Errorf("demo fleet: %d,%d %s", o.demoPrefill, o.demoDecode, o.demoPDProtocol)
	}
}

// TestServeDemoFleetPD runs `kvroute serve --demo-fleet-pd 1,2` for each
// protocol: the workers register with their roles and a completion runs
// both legs (X-Kvroute-Prefill-Worker).
func TestServeDemoFleetPD(t *testing.T) {
	for _, proto := range []string{"vllm-nixl", "sglang"} {
		t.Run(proto, func(t *testing.T) {
			cfg, o, err := serveConfig([]string{"--http-addr", "127.0.0.1:0", "--demo-fleet-pd", "1,2", "--demo-fleet-pd-protocol", proto,
				"--demo-speedup", "20", "--disagg-policy", "always", "--log-level", "error", "--shutdown-ready-delay", "0s"})
			if err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			addrc := make(chan string, 1)
			errc := make(chan error, 1)
			go func() { errc <- serve(cfg, o, stop, func(a string) { addrc <- a }) }()
			var addr string
			select {
			case addr = <-addrc:
			case err := <-errc:
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			var doc struct {
				Workers []struct {
					ID   uint64 `json:"worker_id"`
					Role string `json:"role"`
				} `json:"workers"`
			}
			for len(doc.Workers) < 3 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
				resp, err := http.Get("http://" + addr + "/workers")
				if err != nil {
					t.Fatal(err)
				}
				_ = json.NewDecoder(resp.Body).Decode(&doc)
				resp.Body.Close()
			}
			roles := map[uint64]string{1: "prefill", 2: "decode", 3: "decode"}
			for _, w := range doc.Workers {
				if roles[w.ID] != w.Role {
					t.Errorf("worker %d: role %q, want %q", w.ID, w.Role, roles[w.ID])
				}
			}
			resp, err := http.Post("http://"+addr+"/v1/completions", "application/json",
				strings.NewReader(`{"model":"mock","prompt":"`+strings.Repeat("disaggregated ", 10)+`","max_tokens":4}`))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || resp.Header.Get("X-Kvroute-Prefill-Worker") != "1" || !strings.Contains(string(b), `"completion_tokens":4`) {
				t.Errorf("completion: %d prefill worker %q: %s", resp.StatusCode, resp.Header.Get("X-Kvroute-Prefill-Worker"), b)
			}
			close(stop)
			if err := <-errc; err != nil {
				t.Errorf("shutdown: %v", err)
			}
		})
	}
}
