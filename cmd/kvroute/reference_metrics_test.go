package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/bench/mock"
	"github.com/kvroute/kvroute/indexer"
	"github.com/kvroute/kvroute/internal/natstest"
	"github.com/kvroute/kvroute/internal/promtext"
	"github.com/kvroute/kvroute/router"
	"github.com/kvroute/kvroute/wire/plane"
)

// unexercised are the declared families the reference run does not make
// any process write, and why; the reference says so instead of listing
// their labels. TestReferenceDocs fails on any other family without a
// sample, and on one of these that has samples.
var unexercised = map[string]string{}

// scrape is one /metrics answer: its families' types and HELP texts and
// the label names their samples carry (le and quantile left out).
type scrape struct {
	typ, help map[string]string
	labels    map[string][]string
}

func parseScrape(t *testing.T, what, text string) scrape {
	t.Helper()
	s := scrape{typ: map[string]string{}, help: map[string]string{}, labels: map[string][]string{}}
	cur := ""
	for l := range strings.Lines(text) {
		l = strings.TrimRight(l, "\n")
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "#" {
			cur = f[2]
			switch f[1] {
			case "HELP":
				s.help[cur] = strings.TrimSpace(strings.SplitN(l, cur, 2)[1])
			case "TYPE":
				s.typ[cur] = f[len(f)-1]
			}
			continue
		}
		if l == "" || l[0] == '#' {
			continue
		}
		if cur == "" {
			t.Fatalf("%s: sample before any # TYPE: %q", what, l)
		}
		names, err := labelNames(l)
		if err != nil {
			t.Fatalf("%s: %v: %q", what, err, l)
		}
		if _, ok := s.labels[cur]; !ok {
			s.labels[cur] = []string{}
		}
		for _, n := range names {
			if n != "le" && n != "quantile" && !slices.Contains(s.labels[cur], n) {
				s.labels[cur] = append(s.labels[cur], n)
			}
		}
	}
	for _, ls := range s.labels {
		slices.Sort(ls)
	}
	return s
}

// labelNames returns the label names of a sample line.
func labelNames(line string) ([]string, error) {
	i := strings.IndexAny(line, "{ ")
	if i < 0 || line[i] == ' ' {
		return nil, nil
	}
	var names []string
	for i++; i < len(line) && line[i] != '}'; {
		eq := strings.IndexByte(line[i:], '=')
		if eq < 0 || i+eq+1 >= len(line) || line[i+eq+1] != '"' {
			return nil, fmt.Errorf("malformed label at %d", i)
		}
		names = append(names, strings.TrimSpace(line[i:i+eq]))
		j := i + eq + 2
		for ; j < len(line) && line[j] != '"'; j++ {
			if line[j] == '\\' {
				j++
			}
		}
		if j >= len(line) {
			return nil, fmt.Errorf("unterminated label value")
		}
		i = j + 1
		if i < len(line) && line[i] == ',' {
			i++
		}
	}
	return names, nil
}

// httpGet returns url's status and body.
func httpGet(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("reference run: timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startServe runs `kvroute serve args...` in the process until the test
// ends and returns its API address.
func startServe(t *testing.T, args ...string) string {
	t.Helper()
	cfg, o, err := serveConfig(append([]string{"--http-addr", "127.0.0.1:0", "--log-level", "error", "--shutdown-ready-delay", "0"}, args...))
	if err != nil {
		t.Fatal(err)
	}
	stop, addrc, errc := make(chan struct{}), make(chan string, 1), make(chan error, 1)
	go func() { errc <- serve(cfg, o, stop, func(a string) { addrc <- a }) }()
	select {
	case a := <-addrc:
		t.Cleanup(func() {
			close(stop)
			if err := <-errc; err != nil {
				t.Errorf("kvroute serve %v: shutdown: %v", args, err)
			}
		})
		return "http://" + a
	case err := <-errc:
		t.Fatalf("kvroute serve %v: %v", args, err)
	}
	return ""
}

// referenceRun runs a router with a simulated fleet (ZMQ events, JetStream,
// snapshots, serving its index, replica sync) and one more simulated worker
// that sends its events over NATS, a second router that uses the first as
// its remote index, and an indexer, all on one NATS; sends each some
// traffic and returns their /metrics and a simulated worker's.
func referenceRun(t *testing.T) (serve, remote, idx, worker scrape) {
	ns := natstest.Server(t)
	url := ns.ClientURL()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	api := startServe(t, "--nats", url, "--demo-fleet", "2", "--demo-transport", "zmq", "--demo-speedup", "50",
		"--events-jetstream", "--snapshot-bucket", "kvroute-reference", "--snapshot-interval", "50ms", "--serve-indexer", "--router-replica-sync")
	waitUntil(t, "the router to be ready", func() bool { c, _ := httpGet(t, "GET", api+"/ready", ""); return c == 200 })
	prompt := strings.Repeat("kv cache reference ", 12)
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/v1/completions", `{"prompt":"` + prompt + `","max_tokens":2}`},
		{"POST", "/v1/completions", `{"prompt":"` + prompt + `","max_tokens":2,"stream":true}`},
		{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"` + prompt + `"}],"max_tokens":2}`},
		{"POST", "/route", `{"prompt":"` + prompt + `","request_id":"reference"}`},
		{"POST", "/route/reference/prefill_done", ""},
		{"POST", "/route/reference/free", ""},
		{"GET", "/v1/models", ""}, {"GET", "/workers", ""}, {"GET", "/health", ""}, {"GET", "/no-such-endpoint", ""},
		{"GET", "/metrics", ""},
	} {
		if c, body := httpGet(t, r.method, api+r.path, r.body); c >= 500 {
			t.Fatalf("reference run: %s %s: %d %s", r.method, r.path, c, body)
		}
	}
	// A worker with its KV events on NATS, so that the event stream has
	// messages and the router snapshots its index.
	natsWorker, err := mock.Start(mock.Config{Workers: 1, WorkerIDs: []uint64{100}, BlockSize: 16, KVBlocks: 4096, Speedup: 50,
		Namespace: "kvroute", Component: "backend", Transport: plane.TransportDynamo, Heartbeat: time.Second, Logger: quiet},
		natstest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = natsWorker.Close() })
	if c, body := httpGet(t, "POST", natsWorker.Workers()[0].URL()+"/v1/completions", `{"prompt":"`+prompt+`","max_tokens":2}`); c != 200 {
		t.Fatalf("reference run: the NATS worker: %d %s", c, body)
	}
	waitUntil(t, "an index snapshot", func() bool {
		_, body := httpGet(t, "GET", api+"/metrics", "")
		return strings.Contains(body, "\nkvroute_snapshot_age_seconds ")
	})
	var ws struct {
		Workers []struct{ URL string } `json:"workers"`
	}
	_, body := httpGet(t, "GET", api+"/workers", "")
	if err := json.Unmarshal([]byte(body), &ws); err != nil || len(ws.Workers) == 0 {
		t.Fatalf("reference run: /workers: %v %s", err, body)
	}

	rem := startServe(t, "--nats", url, "--use-remote-indexer")
	waitUntil(t, "the remote-index router to know the workers", func() bool {
		_, body := httpGet(t, "GET", rem+"/workers", "")
		return strings.Count(body, `"worker_id"`) == len(ws.Workers)
	})
	for range 2 {
		if c, body := httpGet(t, "POST", rem+"/v1/completions", `{"prompt":"`+prompt+`","max_tokens":2}`); c != 200 {
			t.Fatalf("reference run: the remote-index router: %d %s", c, body)
		}
	}

	icfg, _, err := indexerConfig([]string{"--http-addr", "127.0.0.1:0", "--nats", url})
	if err != nil {
		t.Fatal(err)
	}
	icfg.Logger = quiet
	is, err := indexer.Start(icfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = is.Close() })
	ix := "http://" + is.Addr()
	waitUntil(t, "the indexer to be ready", func() bool { c, _ := httpGet(t, "GET", ix+"/health", ""); return c == 200 })
	httpGet(t, "GET", ix+"/workers", "")
	httpGet(t, "POST", ix+"/query", `{"token_ids":[1,2,3],"model_name":"mock"}`)

	get := func(what, u string) scrape {
		c, body := httpGet(t, "GET", u, "")
		if c != 200 {
			t.Fatalf("reference run: %s: %d %s", what, c, body)
		}
		return parseScrape(t, what, body)
	}
	return get("serve /metrics", api+"/metrics"), get("serve --use-remote-indexer /metrics", rem+"/metrics"),
		get("indexer /metrics", ix+"/metrics"), get("worker /metrics", ws.Workers[0].URL+"/metrics")
}

// metricsReference renders docs/reference/metrics.md: every family of the
// router's and the indexer's registries (type and HELP from the
// declarations, labels from the reference run) and the simulated worker's.
func metricsReference(t *testing.T) []byte {
	serveS, remoteS, idxS, workerS := referenceRun(t)
	process := map[string]bool{}
	for _, f := range promtext.ProcessFamilies {
		process[f.Name] = true
	}
	type fam struct {
		f              promtext.Family
		serve, indexer bool
		labels         []string
		observed       bool
		observedLabels map[string]bool
	}
	fams := map[string]*fam{}
	add := func(list []promtext.Family, isServe bool) {
		for _, f := range list {
			x := fams[f.Name]
			if x == nil {
				x = &fam{f: f, observedLabels: map[string]bool{}}
				fams[f.Name] = x
			} else if x.f != f {
				t.Errorf("family %s is declared differently by the router and the indexer", f.Name)
			}
			x.serve = x.serve || isServe
			x.indexer = x.indexer || !isServe
		}
	}
	add(router.MetricFamilies(), true)
	add(indexer.MetricFamilies(), false)
	for _, s := range []scrape{serveS, remoteS, idxS} {
		for name, ls := range s.labels {
			x := fams[name]
			if x == nil {
				t.Errorf("the reference run exposes %s, which no registry declares", name)
				continue
			}
			x.observed = true
			for _, l := range ls {
				x.observedLabels[l] = true
			}
		}
	}
	var b strings.Builder
	b.WriteString(generatedNote)
	b.WriteString("# Metrics reference\n\n")
	b.WriteString("Every metric family `kvroute serve` (the router), `kvroute indexer` and `kvroute mock` (the simulated\n" +
		"workers) export on `GET /metrics`, in Prometheus text format 0.0.4. Types and help texts are the families'\n" +
		"declarations; the labels are those their samples carry in a reference run (a router with simulated workers\n" +
		"sending KV events over ZMQ and NATS, with JetStream, snapshots and replica sync; a router using it as its\n" +
		"remote index; an indexer);\n" +
		"histograms add `le` to their `_bucket` samples, summaries `quantile`.\n\n" +
		"- [Router and indexer](#router-and-indexer)\n- [Go runtime and process](#go-runtime-and-process)\n" +
		"- [Simulated worker](#simulated-worker)\n")
	row := func(x *fam, withWho bool) {
		labels := "none"
		if reason, ok := unexercised[x.f.Name]; ok {
			labels = "not exercised: " + mdCell(reason)
			if x.observed {
				t.Errorf("family %s has samples in the reference run: take it out of unexercised", x.f.Name)
			}
		} else if !x.observed && !process[x.f.Name] {
			t.Errorf("family %s has no sample in the reference run: make the run write it, or add it to unexercised with the reason", x.f.Name)
		} else if len(x.observedLabels) > 0 {
			var ls []string
			for _, l := range sortedKeys(x.observedLabels) {
				ls = append(ls, mdCode(l))
			}
			labels = strings.Join(ls, ", ")
		}
		who := ""
		if withWho {
			switch {
			case x.serve && x.indexer:
				who = " serve, indexer |"
			case x.serve:
				who = " serve |"
			default:
				who = " indexer |"
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s |%s %s |\n", mdCode(x.f.Name), x.f.Type, labels, who, mdCell(x.f.Help))
	}
	b.WriteString("\n## Router and indexer\n\nIn the Exported by column, `serve` is `kvroute serve` and `indexer` is `kvroute indexer`.\n\n")
	b.WriteString("| Family | Type | Labels | Exported by | Help |\n|---|---|---|---|---|\n")
	for _, name := range sortedKeys(fams) {
		if !process[name] {
			row(fams[name], true)
		}
	}
	b.WriteString("\n## Go runtime and process\n\nExported by `kvroute serve` and `kvroute indexer` alike. Some `process_*` families exist only on Linux.\n\n")
	b.WriteString("| Family | Type | Labels | Help |\n|---|---|---|---|\n")
	for _, name := range sortedKeys(fams) {
		if process[name] {
			row(fams[name], false)
		}
	}
	b.WriteString("\n## Simulated worker\n\nExported by each `kvroute mock` worker (and `kvroute serve --demo-fleet`'s) on its own HTTP port.\n\n")
	b.WriteString("| Family | Type | Labels | Help |\n|---|---|---|---|\n")
	if len(workerS.typ) == 0 {
		t.Error("the worker's /metrics has no family")
	}
	for _, name := range sortedKeys(workerS.typ) {
		labels := "none"
		if ls := workerS.labels[name]; len(ls) > 0 {
			var cs []string
			for _, l := range ls {
				cs = append(cs, mdCode(l))
			}
			labels = strings.Join(cs, ", ")
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", mdCode(name), workerS.typ[name], labels, mdCell(workerS.help[name]))
	}
	return []byte(b.String())
}
