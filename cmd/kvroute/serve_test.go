package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/router"
	"github.com/kvroute/kvroute/sched"
)

func TestServeConfigRejects(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--router-mode", "fastest"}, "--router-mode"},
		{[]string{"--queue-policy", "sjf"}, "--queue-policy"},
		{[]string{"--block-size", "0"}, "--block-size"},
		{[]string{"--shards", "-1"}, "--shards"},
		{[]string{"--router-temperature", "-0.5"}, "--router-temperature"},
		{[]string{"--queue-depth", "-1"}, "--queue-depth"},
		{[]string{"--nats", "nats://x:4222", "--data-dir", "/tmp/x"}, "--data-dir"},
		{[]string{"--nats-creds", "/x.creds"}, "--nats-creds"},
		{[]string{"--nats", "nats://x:4222", "--nats-tls-cert", "c.pem"}, "--nats-tls-key"},
		{[]string{"--no-kv-events", "--zmq-worker", "1=tcp://127.0.0.1:5557"}, "--no-kv-events"},
		{[]string{"--zmq-worker", "x=tcp://127.0.0.1:5557"}, "--zmq-worker"},
		{[]string{"--worker", "1"}, "--worker"},
		{[]string{"--worker", "1=localhost:8000"}, "http://"},
		{[]string{"--worker", "1=http://a:1", "--worker", "1=http://b:1"}, "given twice"},
		{[]string{"--worker", "1=http://a:1,model="}, "model= needs"},
		{[]string{"--worker", "1=http://a:1,gpu=1"}, "model=NAME"},
		{[]string{"--max-header-bytes", "100"}, "--max-header-bytes"},
		{[]string{"--max-header-bytes", "4194304"}, "--max-header-bytes"},
		{[]string{"--overlap-credit", "2"}, "--router-credit-cost"},
		{[]string{"--demo-transport", "carrier-pigeon"}, "--demo-transport"},
		{[]string{"--demo-speedup", "0"}, "--demo-speedup"},
		{[]string{"--namespace", "a.b"}, "--namespace"},
		{[]string{"--tokenizer", "tiktoken"}, "--tokenizer"},
		{[]string{"extra"}, "unexpected argument"},
		{[]string{"--events-max-age", "0s"}, "--events-max-age"},
		{[]string{"--events-max-bytes", "0"}, "--events-max-bytes"},
		{[]string{"--events-max-bytes", "lots"}, "events-max-bytes"},
		{[]string{"--events-replicas", "0"}, "--events-replicas"},
		{[]string{"--events-replicas", "3"}, "--events-replicas 3 needs a NATS cluster"},
		{[]string{"--snapshot-bucket", "S"}, "--snapshot-bucket needs --events-jetstream"},
		{[]string{"--snapshot-bucket", "S", "--events-jetstream", "--no-kv-events"}, "--no-kv-events"},
		{[]string{"--snapshot-bucket", "S", "--events-jetstream", "--snapshot-interval", "0s"}, "--snapshot-interval"},
		{[]string{"--snapshot-bucket", "S", "--events-jetstream", "--snapshot-events", "0"}, "--snapshot-events"},
		{[]string{"--snapshot-interval", "5s"}, "--snapshot-interval needs --snapshot-bucket"},
		{[]string{"--snapshot-events", "5"}, "--snapshot-events needs --snapshot-bucket"},
		{[]string{"--worker-first-byte-timeout", "-1s"}, "--worker-first-byte-timeout"},
		{[]string{"--worker-eject-failures", "0"}, "--worker-eject-failures"},
		{[]string{"--worker-probe-interval", "0s"}, "--worker-probe-interval"},
		{[]string{"--worker-probe-interval", "10s", "--worker-probe-max-interval", "5s"}, "--worker-probe-max-interval"},
		{[]string{"--shutdown-ready-delay", "10s"}, "--shutdown-ready-delay"},
		{[]string{"--shutdown-ready-delay", "-1s"}, "--shutdown-ready-delay"},
		{[]string{"--shutdown-ready-delay", "soon"}, "shutdown-ready-delay"},
		{[]string{"--max-conns", "0"}, "--max-conns"},
		{[]string{"--worker", "1=http://a:1,ranks=0-999"}, "--max-dp-ranks"},
		{[]string{"--max-workers", "0"}, "--max-workers"},
		{[]string{"--max-dp-ranks", "70000"}, "--max-dp-ranks"},
		{[]string{"--max-prompt-tokens", "-1"}, "--max-prompt-tokens"},
		{[]string{"--max-inflight-body-bytes", "1MiB"}, "--max-inflight-body-bytes"},
		{[]string{"--max-event-bytes", "10"}, "--max-event-bytes"},
		{[]string{"--unknown-worker-grace", "0s"}, "--unknown-worker-grace"},
		{[]string{"--index-cap-factor", "0"}, "--index-cap-factor"},
		{[]string{"--router-peers", "a,,b"}, "--router-peers"},
		{[]string{"--router-sync-expiry", "2s"}, "--router-sync-expiry needs --router-replica-sync"},
		{[]string{"--router-replica-sync", "--router-sync-interval", "0s"}, "--router-sync-interval"},
		{[]string{"--router-replica-sync", "--router-sync-expiry", "-1s"}, "--router-sync-expiry"},
		{[]string{"--nats-auth"}, "--nats-auth-file"},
		{[]string{"--nats-auth", "--nats", "nats://x:4222"}, "--nats-auth"},
		{[]string{"--nats-auth-file", "/tmp/x"}, "--nats-auth-file needs --nats-auth"},
		{[]string{"--max-queue-wait", "-1s"}, "--max-queue-wait"},
		{[]string{"--verify-repair-interval", "0s"}, "--verify-repair-interval"},
		{[]string{"--decision-ring", "0"}, "--decision-ring"},
		{[]string{"--decision-sample", "0"}, "--decision-sample"},
	}
	for _, c := range cases {
		_, _, err := serveConfig(c.args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v, want one naming %q", c.args, err, c.want)
		}
	}
}

// The control-plane and HTTP bounds map onto the configuration, from flags
// and from their KVROUTE_* variables.
func TestServeConfigMapsBounds(t *testing.T) {
	t.Setenv("KVROUTE_MAX_WORKERS", "77")
	t.Setenv("KVROUTE_MAX_EVENT_BYTES", "2MiB")
	t.Setenv("KVROUTE_ROUTER_REPLICA_SYNC", "true")
	t.Setenv("KVROUTE_MAX_QUEUE_WAIT", "750ms")
	cfg, _, err := serveConfig([]string{"--max-dp-ranks", "8", "--max-prompt-tokens", "4096", "--router-peers", "r1, r2",
		"--max-conns", "99", "--max-inflight-body-bytes", "64MiB", "--unknown-worker-grace", "3s", "--index-cap-factor", "2",
		"--nats-auth", "--data-dir", "/tmp/kv", "--router-sync-expiry", "2s"})
	if err != nil {
		t.Fatal(err)
	}
	r, n := cfg.Router, cfg.Node
	if r.Sched.MaxQueueWait != 750*time.Millisecond {
		t.Fatalf("KVROUTE_MAX_QUEUE_WAIT: %v", r.Sched.MaxQueueWait)
	}
	if !r.Sync || r.SyncExpiry != 2*time.Second || r.SyncInterval != router.DefaultSyncInterval {
		t.Fatalf("replica sync: %v %v %v", r.Sync, r.SyncExpiry, r.SyncInterval)
	}
	if r.MaxWorkers != 77 || r.MaxDpRanks != 8 || r.MaxPromptTokens != 4096 || strings.Join(r.Peers, "|") != "r1|r2" ||
		r.MaxConns != 99 || r.MaxInflightBodyBytes != 64<<20 || n.MaxEventBytes != 2<<20 || n.Fleet.Grace != 3*time.Second ||
		n.Fleet.CapFactor != 2 || !n.NATSAuth || n.NATSAuthFile != "/tmp/kv/nats-worker.url" {
		t.Fatalf("router %+v\nnode %+v", r, n)
	}
}

func TestServeConfigMapsFlags(t *testing.T) {
	t.Setenv("KVROUTE_ROUTER_MODE", "least-loaded")
	t.Setenv("KVROUTE_MAX_HEADER_BYTES", "32768")
	t.Setenv("KVROUTE_EVENTS_MAX_BYTES", "512MiB")
	cfg, o, err := serveConfig([]string{
		"--block-size", "64", "--kv-overlap-score-weight", "2.5", "--queue-policy", "wspt", "--queue-depth", "7",
		"--rejection-window", "2s", "--worker", "5=http://10.0.0.5:8000/,ranks=0-1,model=llama", "--worker-kv-blocks", "1000",
		"--zmq-worker", "9:1=tcp://10.0.0.9:5557,model=m", "--no-kv-events=false", "--demo-fleet", "3",
		"--shards", "2", "--pprof", "--admin-addr", "127.0.0.1:0",
		"--worker-first-byte-timeout", "3s", "--worker-eject-failures", "2", "--worker-probe-interval", "500ms",
		"--worker-probe-max-interval", "1m", "--shutdown-ready-delay", "2s",
		"--nats", "nats://10.0.0.1:4222", "--events-jetstream", "--events-max-age", "10m", "--events-replicas", "3",
	})
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Router.Sched
	if s.MaxQueueWait != 2*time.Second {
		t.Errorf("--max-queue-wait default %v, want 2s", s.MaxQueueWait)
	}
	if s.BlockSize != 64 || s.Weight != 2.5 || s.QueuePolicy != sched.QueueWSPT || s.QueueDepth != 7 ||
		s.RejectionWindow != 2*time.Second || s.Policy != sched.PolicyLeastLoaded {
		t.Errorf("sched config %+v", s)
	}
	if len(cfg.Router.Workers) != 1 || cfg.Router.Workers[0].URL != "http://10.0.0.5:8000" ||
		len(cfg.Router.Workers[0].DpRanks) != 2 || cfg.Router.Workers[0].Capacity.TotalBlocks != 1000 || cfg.Router.Workers[0].Model != "llama" {
		t.Errorf("static workers %+v", cfg.Router.Workers)
	}
	if len(cfg.Node.ZMQWorkers) != 1 || cfg.Node.ZMQWorkers[0].Worker != 9 || cfg.Node.ZMQWorkers[0].DpRank != 1 {
		t.Errorf("zmq workers %+v", cfg.Node.ZMQWorkers)
	}
	r := cfg.Router
	if r.Proxy.FirstByteTimeout != 3*time.Second || r.EjectAfter != 2 || r.ProbeInterval != 500*time.Millisecond ||
		r.ProbeMaxInterval != time.Minute || cfg.ShutdownReadyDelay != 2*time.Second {
		t.Errorf("health config: first byte %v, eject %d, probe %v..%v, ready delay %v",
			r.Proxy.FirstByteTimeout, r.EjectAfter, r.ProbeInterval, r.ProbeMaxInterval, cfg.ShutdownReadyDelay)
	}
	if c, _, err := serveConfig([]string{"--shutdown-ready-delay", "0"}); err != nil || c.ShutdownReadyDelay >= 0 {
		t.Errorf("--shutdown-ready-delay 0: %v, %v; want a negative (none)", c.ShutdownReadyDelay, err)
	}
	if c, _, err := serveConfig(nil); err != nil || c.ShutdownReadyDelay != 0 || c.Router.Proxy.FirstByteTimeout != 10*time.Second {
		t.Errorf("defaults: ready delay %v (want 0: auto), first byte %v, %v", c.ShutdownReadyDelay, c.Router.Proxy.FirstByteTimeout, err)
	}
	if n := cfg.Node; !n.JetStream || n.Stream.MaxAge != 10*time.Minute || n.Stream.MaxBytes != 512<<20 || n.Stream.Replicas != 3 {
		t.Errorf("events on JetStream: %v, stream %+v", n.JetStream, n.Stream)
	}
	t.Setenv("KVROUTE_SNAPSHOT_BUCKET", "SNAPS")
	c, _, err := serveConfig([]string{"--events-jetstream", "--snapshot-interval", "30s", "--snapshot-events", "5000"})
	if sn := c.Node.Snapshot; err != nil || sn.Bucket != "SNAPS" || sn.Interval != 30*time.Second || sn.Events != 5000 {
		t.Errorf("snapshot flags: %+v, %v", sn, err)
	}
	t.Setenv("KVROUTE_SNAPSHOT_BUCKET", "")
	if c, _, err := serveConfig([]string{"--events-jetstream"}); err != nil || !c.Node.JetStream {
		t.Errorf("--events-jetstream: JetStream %v, %v", c.Node.JetStream, err)
	}
	if cfg.Router.MaxHeaderBytes != 32768 {
		t.Errorf("KVROUTE_MAX_HEADER_BYTES: MaxHeaderBytes %d", cfg.Router.MaxHeaderBytes)
	}
	if o.demoFleet != 3 || cfg.Node.Index.Shards != 2 || !cfg.Pprof {
		t.Errorf("options %+v, index %+v, pprof %v", o, cfg.Node.Index, cfg.Pprof)
	}
}

// KV events go through JetStream by default, kept 1 h or 1 GiB, one replica.
func TestServeEventsDefaults(t *testing.T) {
	c, _, err := serveConfig(nil)
	if err != nil || c.Node.JetStream || c.Node.Stream.MaxAge != time.Hour || c.Node.Stream.MaxBytes != 1<<30 || c.Node.Stream.Replicas != 1 {
		t.Errorf("event defaults: JetStream %v, stream %+v, %v", c.Node.JetStream, c.Node.Stream, err)
	}
}

// What `make run` does: the router with an embedded NATS server and an
// in-process demo fleet answers a completion, routes the repeat to the
// worker that cached it, and shuts down cleanly.
func TestServeDemoFleet(t *testing.T) { testServeDemoFleet(t) }

// With --nats-auth the demo fleet connects as the worker user: its
// registrations and KV events pass the subject permissions.
func TestServeDemoFleetNATSAuth(t *testing.T) { testServeDemoFleet(t, "--nats-auth") }

func testServeDemoFleet(t *testing.T, extra ...string) {
	cfg, o, err := serveConfig(append([]string{"--http-addr", "127.0.0.1:0", "--demo-fleet", "2", "--demo-speedup", "20",
		"--data-dir", t.TempDir(), "--log-level", "error", "--pprof", "--admin-addr", "127.0.0.1:0",
		"--shutdown-ready-delay", "100ms"}, extra...))
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
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if code, _ := get("/ready"); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("never ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	prompt := `{"prompt":"` + strings.Repeat("kv cache ", 20) + `","max_tokens":4}`
	post := func() (string, string) {
		resp, err := http.Post("http://"+addr+"/v1/completions", "application/json", strings.NewReader(prompt))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct {
			Choices []struct{ Text string } `json:"choices"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != 200 || len(body.Choices) != 1 {
			t.Fatalf("completion: %d %v %+v", resp.StatusCode, err, body)
		}
		return resp.Header.Get("X-Kvroute-Worker"), resp.Header.Get("X-Kvroute-Cached-Blocks")
	}
	w1, _ := post()
	var w2, cached string
	for time.Now().Before(deadline) {
		if w2, cached = post(); cached != "0" {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if w2 != w1 || cached == "0" {
		t.Errorf("repeat went to %s with %s cached blocks; first went to %s", w2, cached, w1)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "kvroute_decisions_total") || !strings.Contains(body, "kvroute_ingest_") {
		t.Errorf("/metrics: %d %.300s", code, body)
	}
	close(stop)
	if err := <-errc; err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

// TestServeTokenizerFlags: --tokenizer and --model-tokenizer take a
// tokenizer.json file or its directory, from flags or KVROUTE_* variables;
// bad values and files that fail to load are errors naming the flag.
func TestServeTokenizerFlags(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	bad := filepath.Join(dir, "bad")
	for path, body := range map[string]string{
		good: `{"model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":[]}}`,
		bad:  `{"model":{"type":"Unigram","vocab":[]}}`,
	} {
		if err := os.MkdirAll(path, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(path, "tokenizer.json"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--tokenizer", filepath.Join(dir, "missing")}, "--tokenizer"},
		{[]string{"--tokenizer", bad}, `--tokenizer: ` + filepath.Join(bad, "tokenizer.json") + `: unsupported model type "Unigram"`},
		{[]string{"--model-tokenizer", "m"}, "--model-tokenizer \"m\": want MODEL=PATH"},
		{[]string{"--model-tokenizer", "=x"}, "--model-tokenizer"},
		{[]string{"--model-tokenizer", "m=" + bad}, `--model-tokenizer m: ` + filepath.Join(bad, "tokenizer.json") + `: unsupported model type`},
		{[]string{"--model-tokenizer", "m=" + good + ",m=" + good}, "given twice"},
	} {
		_, _, err := serveConfig(c.args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v, want one containing %q", c.args, err, c.want)
		}
	}

	t.Setenv("KVROUTE_MODEL_TOKENIZER", "qwen="+good+", llama="+filepath.Join(good, "tokenizer.json"))
	t.Setenv("KVROUTE_FORWARD_TOKEN_IDS", "true")
	cfg, _, err := serveConfig([]string{"--tokenizer", filepath.Join(good, "tokenizer.json")})
	if err != nil {
		t.Fatal(err)
	}
	rc := cfg.Router
	if rc.Tokenizer.Name() != filepath.Join(good, "tokenizer.json") || !rc.ForwardTokenIDs {
		t.Errorf("tokenizer %q forward %v", rc.Tokenizer.Name(), rc.ForwardTokenIDs)
	}
	if len(rc.ModelTokenizers) != 2 || rc.ModelTokenizers["qwen"].Name() != good || rc.ModelTokenizers["llama"] != rc.Tokenizer {
		t.Errorf("model tokenizers %v (llama's path is --tokenizer's: loaded once)", rc.ModelTokenizers)
	}
	if got := rc.ModelTokenizers["qwen"].Encode(nil, []byte("ab")); len(got) != 2 || got[0] != 0 || got[1] != 1 {
		t.Errorf("qwen tokenizer encodes ab as %v", got)
	}
	if cfg, _, err := serveConfig(nil); err != nil || cfg.Router.Tokenizer.Name() != "bytes" || cfg.Router.ForwardTokenIDs != true {
		t.Errorf("defaults: %v %v (forward from the environment)", err, cfg.Router.Tokenizer)
	}
}

// TestMockTokenizerFlag: kvroute mock --tokenizer is checked before anything
// starts, the error naming the flag.
func TestMockTokenizerFlag(t *testing.T) {
	err := runMock([]string{"--tokenizer", filepath.Join(t.TempDir(), "none")})
	if err == nil || !strings.Contains(err.Error(), "--tokenizer") {
		t.Fatalf("err %v, want one naming --tokenizer", err)
	}
}

// --worker-response-timeout defaults to 60 s, takes its KVROUTE_*
// equivalent, and a negative value is refused naming the flag.
func TestWorkerResponseTimeoutFlag(t *testing.T) {
	if c, _, err := serveConfig(nil); err != nil || c.Router.Proxy.ResponseTimeout != time.Minute {
		t.Errorf("default: %v, %v; want 1m0s", c.Router.Proxy.ResponseTimeout, err)
	}
	if c, _, err := serveConfig([]string{"--worker-response-timeout", "0"}); err != nil || c.Router.Proxy.ResponseTimeout != 0 {
		t.Errorf("--worker-response-timeout 0: %v, %v; want 0 (off)", c.Router.Proxy.ResponseTimeout, err)
	}
	if _, _, err := serveConfig([]string{"--worker-response-timeout", "-1s"}); err == nil || !strings.Contains(err.Error(), "--worker-response-timeout") {
		t.Errorf("--worker-response-timeout -1s: %v; want an error naming the flag", err)
	}
	t.Setenv("KVROUTE_WORKER_RESPONSE_TIMEOUT", "5s")
	if c, _, err := serveConfig(nil); err != nil || c.Router.Proxy.ResponseTimeout != 5*time.Second {
		t.Errorf("KVROUTE_WORKER_RESPONSE_TIMEOUT=5s: %v, %v", c.Router.Proxy.ResponseTimeout, err)
	}
}
