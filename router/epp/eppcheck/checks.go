package eppcheck

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Config says what to check and against which EPP.
type Config struct {
	// Target is the EPP's gRPC address (host:port).
	Target string
	// Model is the model the requests name ("" names none).
	Model string
	// Streams is how many concurrent streams the concurrency check opens.
	// Default 100.
	Streams int
	// BigBody is the large body's size in bytes. Default 5 MB.
	BigBody int
	// Overload, when > 0, is how many streams at most the 429 check holds
	// open (each picked, its response never sent) waiting for a 429; 0
	// skips the check.
	Overload int
	// Timeout bounds each check. Default 30 s.
	Timeout time.Duration
}

// Result is one check's outcome.
type Result struct {
	Name    string
	OK      bool
	Skipped bool
	Detail  string
}

func (r Result) String() string {
	s := "ok  "
	switch {
	case r.Skipped:
		s = "skip"
	case !r.OK:
		s = "FAIL"
	}
	return fmt.Sprintf("%s %-22s %s", s, r.Name, r.Detail)
}

// Checker runs the checks against one EPP.
type Checker struct {
	cfg  Config
	conn *grpc.ClientConn
	c    extprocv3.ExternalProcessorClient
	// endpoints seen in answers, for the subset checks.
	seen []string
}

// Dial connects to cfg.Target (plaintext gRPC).
func Dial(cfg Config) (*Checker, error) {
	if cfg.Streams <= 0 {
		cfg.Streams = 100
	}
	if cfg.BigBody <= 0 {
		cfg.BigBody = 5 << 20
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	conn, err := grpc.NewClient(cfg.Target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		return nil, fmt.Errorf("--target %s: %w", cfg.Target, err)
	}
	return &Checker{cfg: cfg, conn: conn, c: extprocv3.NewExternalProcessorClient(conn)}, nil
}

// Close closes the connection.
func (k *Checker) Close() error { return k.conn.Close() }

// Run runs every check in order and returns their results.
func (k *Checker) Run(ctx context.Context) []Result {
	checks := []struct {
		name string
		f    func(ctx context.Context) (string, error)
	}{
		{"health", k.health},
		{"completion", func(ctx context.Context) (string, error) {
			return k.roundTrip(ctx, "/v1/completions", k.completion("kvroute conformance"), nil)
		}},
		{"chat", func(ctx context.Context) (string, error) {
			return k.roundTrip(ctx, "/v1/chat/completions", k.chat("kvroute conformance chat"), nil)
		}},
		{"response-path", k.responsePath},
		{"bodyless-get", k.bodyless},
		{"body-5mb", k.bigBody},
		{"subset-empty-503", k.emptySubset},
		{"subset", k.subset},
		{"bad-body-400", k.badBody},
		{"cancel-mid-body", k.cancelMidBody},
		{"concurrent-streams", k.concurrent},
		{"overload-429", k.overload},
	}
	var out []Result
	for _, c := range checks {
		cctx, cancel := context.WithTimeout(ctx, k.cfg.Timeout)
		detail, err := c.f(cctx)
		cancel()
		r := Result{Name: c.name, OK: err == nil, Detail: detail}
		if err == errSkip {
			r.OK, r.Skipped = true, true
		} else if err != nil {
			r.Detail = err.Error()
		}
		out = append(out, r)
	}
	return out
}

var errSkip = fmt.Errorf("skipped")

func (k *Checker) health(ctx context.Context) (string, error) {
	hc := healthpb.NewHealthClient(k.conn)
	var parts []string
	for _, svc := range []string{"liveness", "readiness", "envoy.service.ext_proc.v3.ExternalProcessor"} {
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			return "", fmt.Errorf("grpc.health.v1 %q: %v", svc, err)
		}
		if r.Status != healthpb.HealthCheckResponse_SERVING {
			return "", fmt.Errorf("grpc.health.v1 %q: %v", svc, r.Status)
		}
		parts = append(parts, svc+"=SERVING")
	}
	return strings.Join(parts, " "), nil
}

func (k *Checker) completion(prompt string) []byte {
	b, _ := json.Marshal(map[string]any{"model": k.cfg.Model, "prompt": prompt, "max_tokens": 4})
	if k.cfg.Model == "" {
		b, _ = json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 4})
	}
	return b
}

func (k *Checker) chat(text string) []byte {
	m := map[string]any{"messages": []map[string]string{{"role": "user", "content": text}}, "max_tokens": 4}
	if k.cfg.Model != "" {
		m["model"] = k.cfg.Model
	}
	b, _ := json.Marshal(m)
	return b
}

// checkPicked checks the rules of a routed answer against the body sent.
func (k *Checker) checkPicked(p *Picked, body []byte) error {
	if p.Immediate != nil {
		return fmt.Errorf("answered itself: %d %s", p.Immediate.GetStatus().GetCode(), p.Immediate.GetBody())
	}
	if p.Header == "" {
		return fmt.Errorf("no %s header set", HeaderDestination)
	}
	if p.Header != p.Metadata {
		return fmt.Errorf("header %q and %s/%s metadata %q differ", p.Header, MetadataNamespace, HeaderDestination, p.Metadata)
	}
	if !p.ClearRouteCache {
		return fmt.Errorf("clear_route_cache not set")
	}
	eps := p.Endpoints()
	seen := map[string]bool{}
	for _, e := range eps {
		if _, _, err := net.SplitHostPort(e); err != nil {
			return fmt.Errorf("endpoint %q is not ip:port", e)
		}
		if seen[e] {
			return fmt.Errorf("endpoint %q listed twice in %q", e, p.Header)
		}
		seen[e] = true
		if !containsStr(k.seen, e) {
			k.seen = append(k.seen, e)
		}
	}
	if !bytes.Equal(p.Body, body) {
		return fmt.Errorf("body streamed back differs: %d bytes sent, %d back", len(body), len(p.Body))
	}
	for i, n := range p.Chunks {
		if n > MaxChunk {
			return fmt.Errorf("chunk %d is %d bytes, over %d", i, n, MaxChunk)
		}
	}
	if !p.EOS {
		return fmt.Errorf("no end of stream on the last body chunk")
	}
	return nil
}

// roundTrip sends one request, checks the answer and plays the response
// path with the chosen endpoint as served.
func (k *Checker) roundTrip(ctx context.Context, path string, body []byte, subset []string) (string, error) {
	x, p, err := Start(ctx, k.c, &Request{Path: path, Body: body, Subset: subset})
	if err != nil {
		return "", err
	}
	defer x.Close()
	if err := k.checkPicked(p, body); err != nil {
		return "", err
	}
	resp := [][]byte{[]byte(`{"id":"x","choices":[{"text":"ok"}]}`)}
	if _, err := x.Respond(200, p.Endpoints()[0], resp); err != nil {
		return "", fmt.Errorf("response path: %w", err)
	}
	return fmt.Sprintf("%s=%s, %d body bytes echoed in %d chunks", HeaderDestination, p.Header, len(p.Body), len(p.Chunks)), nil
}

func (k *Checker) responsePath(ctx context.Context) (string, error) {
	body := k.completion("kvroute conformance response path")
	x, p, err := Start(ctx, k.c, &Request{Path: "/v1/completions", Body: body})
	if err != nil {
		return "", err
	}
	defer x.Close()
	if err := k.checkPicked(p, body); err != nil {
		return "", err
	}
	var chunks [][]byte
	var want []byte
	for i := range 5 {
		c := fmt.Appendf(nil, "data: {\"choices\":[{\"text\":\"%d\"}]}\n\n", i)
		chunks = append(chunks, c)
		want = append(want, c...)
	}
	served := p.Endpoints()[len(p.Endpoints())-1] // a fallback, when there is one
	got, err := x.Respond(200, served, chunks)
	if err != nil {
		return "", err
	}
	if !bytes.Equal(got, want) {
		return "", fmt.Errorf("response body streamed back differs: %q", got)
	}
	_ = x.Stream.CloseSend()
	if err := drain(x.Stream); err != nil {
		return "", fmt.Errorf("stream did not end cleanly: %v", err)
	}
	return fmt.Sprintf("served by %s: 5 SSE chunks echoed, stream closed cleanly", served), nil
}

// bodyless sends GET /v1/models (headers with end of stream): the EPP
// must answer the headers alone, with a destination or an immediate 200.
func (k *Checker) bodyless(ctx context.Context) (string, error) {
	x, p, err := Start(ctx, k.c, &Request{Method: "GET", Path: "/v1/models"})
	if err != nil {
		return "", err
	}
	defer x.Close()
	if im := p.Immediate; im != nil {
		if im.GetStatus().GetCode() != 200 {
			return "", fmt.Errorf("GET /v1/models answered %d: %s", im.GetStatus().GetCode(), im.GetBody())
		}
		return fmt.Sprintf("answered by the EPP: %s", im.GetBody()), nil
	}
	if p.Header == "" || p.Header != p.Metadata || !p.ClearRouteCache {
		return "", fmt.Errorf("GET /v1/models: header %q, metadata %q, clear_route_cache %v", p.Header, p.Metadata, p.ClearRouteCache)
	}
	return fmt.Sprintf("%s=%s", HeaderDestination, p.Header), nil
}

func (k *Checker) bigBody(ctx context.Context) (string, error) {
	pad := strings.Repeat("x", k.cfg.BigBody)
	m := map[string]any{"prompt": "kvroute conformance big body", "max_tokens": 1, "metadata": map[string]string{"pad": pad}}
	if k.cfg.Model != "" {
		m["model"] = k.cfg.Model
	}
	body, _ := json.Marshal(m)
	return k.roundTrip(ctx, "/v1/completions", body, nil)
}

func (k *Checker) subset(ctx context.Context) (string, error) {
	if len(k.seen) == 0 {
		return "", fmt.Errorf("no endpoint seen yet")
	}
	var notes []string
	for _, ep := range k.seen {
		body := k.completion("kvroute conformance subset " + ep)
		x, p, err := Start(ctx, k.c, &Request{Path: "/v1/completions", Body: body, Subset: []string{ep}})
		if err != nil {
			return "", err
		}
		err = k.checkPicked(p, body)
		x.Close()
		if err != nil {
			return "", err
		}
		for _, e := range p.Endpoints() {
			if e != ep {
				return "", fmt.Errorf("subset [%s] answered %q", ep, p.Header)
			}
		}
		notes = append(notes, ep)
	}
	return fmt.Sprintf("each of %d endpoints alone in the subset was picked alone: %s", len(notes), strings.Join(notes, " ")), nil
}

func (k *Checker) emptySubset(ctx context.Context) (string, error) {
	for _, subset := range [][]string{{}, {"192.0.2.1:9"}} {
		body := k.completion("kvroute conformance empty subset")
		x, p, err := Start(ctx, k.c, &Request{Path: "/v1/completions", Body: body, Subset: subset})
		if err != nil {
			return "", err
		}
		x.Close()
		if p.Immediate == nil || p.Immediate.GetStatus().GetCode() != 503 {
			return "", fmt.Errorf("subset %q: want an immediate 503, got %+v", subset, p)
		}
	}
	return "an empty subset and one of an unknown endpoint: immediate 503", nil
}

// checkError checks an immediate answer: status and an OpenAI-style JSON
// error body naming param when param != "".
func checkError(p *Picked, status int, param string) (string, error) {
	im := p.Immediate
	if im == nil {
		return "", fmt.Errorf("want an immediate %d, got a pick %q", status, p.Header)
	}
	if int(im.GetStatus().GetCode()) != status {
		return "", fmt.Errorf("want status %d, got %d: %s", status, im.GetStatus().GetCode(), im.GetBody())
	}
	var e struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(im.GetBody(), &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
		return "", fmt.Errorf("body is not an OpenAI-style error {error:{message,type,param,code}}: %s", im.GetBody())
	}
	if param != "" && (e.Error.Param == nil || *e.Error.Param != param) {
		return "", fmt.Errorf("error param is not %q: %s", param, im.GetBody())
	}
	if headerOf(im.GetHeaders().GetSetHeaders(), "content-type") != "application/json" {
		return "", fmt.Errorf("content-type is not application/json")
	}
	return fmt.Sprintf("%d %s", status, im.GetBody()), nil
}

func headerOf(hs []*corev3.HeaderValueOption, key string) string {
	for _, h := range hs {
		if strings.EqualFold(h.GetHeader().GetKey(), key) {
			if v := h.GetHeader().GetRawValue(); v != nil {
				return string(v)
			}
			return h.GetHeader().GetValue()
		}
	}
	return ""
}

func (k *Checker) badBody(ctx context.Context) (string, error) {
	var out []string
	for _, c := range []struct {
		body  string
		param string
	}{{`{"prompt": "unterminated`, ""}, {`{"prompt": 42}`, "prompt"}} {
		x, p, err := Start(ctx, k.c, &Request{Path: "/v1/completions", Body: []byte(c.body)})
		if err != nil {
			return "", err
		}
		x.Close()
		d, err := checkError(p, 400, c.param)
		if err != nil {
			return "", fmt.Errorf("body %s: %w", c.body, err)
		}
		out = append(out, d)
	}
	return strings.Join(out, "; "), nil
}

func (k *Checker) cancelMidBody(ctx context.Context) (string, error) {
	body := k.completion(strings.Repeat("kvroute conformance cancel ", 4000))
	cctx, cancel := context.WithCancel(ctx)
	st, err := k.c.Process(cctx)
	if err != nil {
		cancel()
		return "", err
	}
	half := len(body) / 2
	_ = st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":method", RawValue: []byte("POST")}, {Key: ":path", RawValue: []byte("/v1/completions")}}}}}})
	_ = st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: body[:half]}}})
	cancel()
	// The EPP serves the next request.
	d, err := k.roundTrip(ctx, "/v1/completions", k.completion("kvroute conformance after cancel"), nil)
	if err != nil {
		return "", fmt.Errorf("after a stream cancelled mid-body: %w", err)
	}
	return "cancelled after " + fmt.Sprint(half) + " bytes; next request: " + d, nil
}

func (k *Checker) concurrent(ctx context.Context) (string, error) {
	n := k.cfg.Streams
	errs := make(chan error, n)
	var wg sync.WaitGroup
	start := time.Now()
	hits := sync.Map{}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := k.completion(fmt.Sprintf("kvroute conformance concurrent %d", i))
			x, p, err := Start(ctx, k.c, &Request{Path: "/v1/completions", Body: body})
			if err != nil {
				errs <- err
				return
			}
			defer x.Close()
			if p.Immediate != nil || !bytes.Equal(p.Body, body) || p.Header == "" || p.Header != p.Metadata {
				errs <- fmt.Errorf("stream %d: bad answer (immediate %v, header %q)", i, p.Immediate.GetStatus().GetCode(), p.Header)
				return
			}
			hits.Store(p.Endpoints()[0], true)
			if _, err := x.Respond(200, p.Endpoints()[0], [][]byte{[]byte("{}")}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	var bad []error
	for err := range errs {
		bad = append(bad, err)
	}
	if len(bad) > 0 {
		return "", fmt.Errorf("%d of %d streams failed; first: %v", len(bad), n, bad[0])
	}
	eps := 0
	hits.Range(func(any, any) bool { eps++; return true })
	return fmt.Sprintf("%d concurrent streams answered in %v over %d endpoints", n, time.Since(start).Round(time.Millisecond), eps), nil
}

// overload opens streams that it holds (picked, no response sent; a
// queued one waits) until the EPP sheds one with 429, then checks its
// shape and releases them all.
func (k *Checker) overload(ctx context.Context) (string, error) {
	if k.cfg.Overload <= 0 {
		return "not run (give --overload N to hold up to N streams until a 429)", errSkip
	}
	hold, release := context.WithCancel(ctx)
	defer release()
	type answer struct {
		i   int
		p   *Picked
		err error
	}
	answers := make(chan answer, k.cfg.Overload)
	big := strings.Repeat("overload ", 200)
	for i := range k.cfg.Overload {
		go func() {
			body := k.completion(fmt.Sprintf("%d %s", i, big))
			x, p, err := Start(hold, k.c, &Request{Path: "/v1/completions", Body: body})
			answers <- answer{i, p, err}
			if err == nil {
				<-hold.Done()
				x.Close()
			}
		}()
		time.Sleep(time.Millisecond) // in order, as a burst arrives
	}
	for range k.cfg.Overload {
		var a answer
		select {
		case a = <-answers:
		case <-ctx.Done():
			return "", fmt.Errorf("no 429 among %d held streams before the timeout", k.cfg.Overload)
		}
		if a.err != nil || a.p.Immediate == nil {
			continue
		}
		d, err := checkError(a.p, 429, "")
		if err != nil {
			return "", err
		}
		ra := headerOf(a.p.Immediate.GetHeaders().GetSetHeaders(), "retry-after")
		if ra == "" {
			return "", fmt.Errorf("429 without retry-after")
		}
		return fmt.Sprintf("stream %d of %d held: %s retry-after=%s", a.i, k.cfg.Overload, d, ra), nil
	}
	return "", fmt.Errorf("no 429 among %d held streams", k.cfg.Overload)
}

func containsStr(s []string, v string) bool {
	for _, e := range s {
		if e == v {
			return true
		}
	}
	return false
}
