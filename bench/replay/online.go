package replay

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fastjson"

	"github.com/kvroute/kvroute/bench/trace"
	"github.com/kvroute/kvroute/wire/openai"
)

// DefaultWorkerHeader is the response header naming the worker that served a
// request (kvroute serve sets it).
const DefaultWorkerHeader = "X-Kvroute-Worker"

// OnlineConfig configures an online replay against OpenAI-compatible
// endpoints. A plain value; zero fields take the defaults noted.
type OnlineConfig struct {
	// URLs are the endpoints' base URLs (http://host:port); requests go to
	// <url>/v1/completions, spread over several URLs in turn (client-side
	// round-robin). At least one.
	URLs []string
	// Model is the request's "model" field. Default "mock".
	Model string
	// Label names the result's policy column. Default "online".
	Label string
	// Speedup divides the trace's arrival times and session delays.
	// Default 1. Ignored with Concurrency.
	Speedup float64
	// Concurrency > 0 ignores the trace's timing: this many clients send
	// the requests back to back, in arrival order.
	Concurrency int
	// Timeout bounds one request (default 10 min).
	Timeout time.Duration
	// WorkerHeader names the response header that says which worker
	// served (default DefaultWorkerHeader). Without it the worker is read
	// from a `kvroute mock` response id (cmpl-mock-<worker>-<n>), else the
	// URL stands for the worker.
	WorkerHeader string
	// Progress, when set, is called with 1 as each request ends, from the
	// request's goroutine (so it must be goroutine-safe).
	Progress func(ended int)
	// Client sends the requests (default: a client with keep-alive pools
	// sized for the replay).
	Client *http.Client
}

// RunOnline replays w against live endpoints, streaming every request
// (prompt as token ids, max_tokens the trace's output length), and measures
// from the client side: TTFT at the first streamed chunk, the end at the
// [DONE] line, the hit ratio from usage.prompt_tokens_details.cached_tokens.
// Its report has the shape of an offline one (mode "online", one Result).
// A session turn without a timestamp is sent its delay after the previous
// turn ended. Canceling ctx stops sending and aborts requests in flight.
func RunOnline(ctx context.Context, w *Workload, cfg OnlineConfig) (*Report, error) {
	if len(cfg.URLs) == 0 {
		return nil, fmt.Errorf("%w: no URL", ErrConfig)
	}
	var endpoints []string
	for _, u := range cfg.URLs {
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return nil, fmt.Errorf("%w: URL %q must start with http:// or https://", ErrConfig, u)
		}
		endpoints = append(endpoints, strings.TrimRight(u, "/")+"/v1/completions")
	}
	if cfg.Model == "" {
		cfg.Model = "mock"
	}
	if cfg.Label == "" {
		cfg.Label = "online"
	}
	if cfg.Speedup == 0 {
		cfg.Speedup = 1
	}
	if cfg.Speedup < 0 || cfg.Concurrency < 0 || cfg.Timeout < 0 {
		return nil, fmt.Errorf("%w: speedup, concurrency and timeout must not be negative", ErrConfig)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Minute
	}
	if cfg.WorkerHeader == "" {
		cfg.WorkerHeader = DefaultWorkerHeader
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        4096,
			MaxIdleConnsPerHost: 4096,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		}}
	}
	o := &online{w: w, cfg: cfg, endpoints: endpoints, recs: make([]record, w.Len()), workerIdx: map[string]int{}}
	start := time.Now()
	o.start = start
	if cfg.Concurrency > 0 {
		o.runConcurrent(ctx)
	} else {
		o.runTimed(ctx)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rep := &Report{
		Trace: w.Name, Mode: "online", URL: strings.Join(cfg.URLs, ","), Requests: w.Len(), SpanS: w.span.Seconds(),
		BlockSize: w.BlockSize, Concurrency: cfg.Concurrency,
		AchievableHitRatio: w.achievable, AchievableOverTime: w.achievableOver,
	}
	span := time.Duration(float64(w.span) / cfg.Speedup)
	if cfg.Concurrency > 0 {
		span = 0
	}
	o.sortWorkers()
	res := summarize(o.recs, o.workers, span, w.achievable)
	res.Policy, res.Speedup = cfg.Label, cfg.Speedup
	res.WallS = time.Since(start).Seconds()
	rep.Workers = len(o.workers)
	rep.Speedups = []float64{cfg.Speedup}
	rep.Policies = []Result{res}
	if o.firstErr != nil && res.Completed == 0 {
		return rep, fmt.Errorf("replay: no request completed; first error: %w", o.firstErr)
	}
	return rep, nil
}

type online struct {
	w         *Workload
	cfg       OnlineConfig
	endpoints []string
	start     time.Time

	recs []record // each written by its request's goroutine only

	mu        sync.Mutex
	next      int // round-robin over endpoints
	workers   []string
	workerIdx map[string]int
	firstErr  error

	wg sync.WaitGroup
}

// runTimed sends each request at its (compressed) arrival time.
func (o *online) runTimed(ctx context.Context) {
	w := o.w
	order := arrivalOrder(w.arrival)
	followers := make([]int32, w.Len())
	for i := range followers {
		followers[i] = -1
	}
	for i := range w.Len() {
		if p := w.prev[i]; p >= 0 && !w.Trace.Requests[i].HasTime {
			followers[p] = int32(i)
		}
	}
	var send func(i int32)
	send = func(i int32) {
		url := o.endpoint()
		o.wg.Go(func() {
			o.do(ctx, int(i), url)
			if f := followers[i]; f >= 0 {
				d := time.Duration(float64(w.Trace.Requests[f].Delay) / o.cfg.Speedup)
				select {
				case <-ctx.Done():
					return
				case <-time.After(d):
				}
				send(f)
			}
		})
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
loop:
	for _, i := range order {
		if p := w.prev[i]; p >= 0 && !w.Trace.Requests[i].HasTime {
			continue // sent after its previous turn
		}
		at := time.Duration(float64(w.arrival[i]) / o.cfg.Speedup)
		if d := at - time.Since(o.start); d > 0 {
			timer.Reset(d)
			select {
			case <-ctx.Done():
				break loop
			case <-timer.C:
			}
		}
		send(i)
	}
	o.wg.Wait()
}

// runConcurrent sends the requests in arrival order from Concurrency
// clients, each sending its next request when the previous one ends.
func (o *online) runConcurrent(ctx context.Context) {
	order := arrivalOrder(o.w.arrival)
	next := make(chan int32)
	for range o.cfg.Concurrency {
		o.wg.Go(func() {
			for i := range next {
				o.do(ctx, int(i), o.endpoint())
			}
		})
	}
	for _, i := range order {
		select {
		case <-ctx.Done():
		case next <- i:
			continue
		}
		break
	}
	close(next)
	o.wg.Wait()
}

// endpoint picks the next endpoint in turn. Callers pick in sending order
// (the dispatcher, or a session's goroutine), so the spread is deterministic
// for requests sent from one goroutine.
func (o *online) endpoint() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	url := o.endpoints[o.next%len(o.endpoints)]
	o.next++
	return url
}

// do sends request i to url and fills its record.
func (o *online) do(ctx context.Context, i int, url string) {
	rec := &o.recs[i]
	rec.worker = -1
	rec.bucket = o.w.bucketOf(o.w.arrival[i])
	req := &o.w.Trace.Requests[i]
	rec.prompt = req.InputLength
	body := o.body(req)
	ctx, cancel := context.WithTimeout(ctx, o.cfg.Timeout)
	defer cancel()
	defer func() {
		if o.cfg.Progress != nil {
			o.cfg.Progress(1)
		}
	}()
	rec.arrive = time.Since(o.start)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		o.fail(rec, err)
		return
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "text/event-stream")
	resp, err := o.cfg.Client.Do(hr)
	if err != nil {
		o.fail(rec, err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
			rec.rejected = true
			rec.finish = time.Since(o.start)
			return
		}
		o.fail(rec, fmt.Errorf("HTTP %d from %s: %s", resp.StatusCode, url, bytes.TrimSpace(msg)))
		return
	}
	worker := resp.Header.Get(o.cfg.WorkerHeader)
	if err := o.stream(rec, resp.Body, &worker); err != nil {
		o.fail(rec, err)
		return
	}
	if worker == "" {
		worker = url
	}
	rec.worker = o.workerIndex(worker)
}

// stream reads the SSE response into rec.
func (o *online) stream(rec *record, body io.Reader, worker *string) error {
	var p fastjson.Parser
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	chunks := 0
	usage := false
	for sc.Scan() {
		line := sc.Bytes()
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		data = bytes.TrimSpace(data)
		if bytes.Equal(data, []byte("[DONE]")) {
			rec.finish = time.Since(o.start)
			rec.done = true
			break
		}
		v, err := p.ParseBytes(data)
		if err != nil {
			return fmt.Errorf("bad SSE chunk %.80q: %v", data, err)
		}
		if e := v.Get("error"); e != nil {
			return fmt.Errorf("error in stream: %s", e.String())
		}
		if ch := v.GetArray("choices"); len(ch) > 0 {
			if !rec.hasFirst {
				rec.first = time.Since(o.start)
				rec.hasFirst = true
			}
			chunks++
		}
		if *worker == "" {
			*worker = mockWorker(v.GetStringBytes("id"))
		}
		if u := v.Get("usage"); u != nil && u.Type() == fastjson.TypeObject {
			usage = true
			rec.cached = u.GetInt("prompt_tokens_details", "cached_tokens")
			rec.output = u.GetInt("completion_tokens")
			if pt := u.GetInt("prompt_tokens"); pt > 0 {
				rec.prompt = pt
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if !rec.done {
		return errors.New("stream ended without [DONE]")
	}
	if !rec.hasFirst {
		return errors.New("stream carried no token")
	}
	if !usage {
		rec.output = chunks
	}
	return nil
}

// mockWorker extracts the worker id of a `kvroute mock` response id
// (cmpl-mock-<worker>-<n>), or returns "".
func mockWorker(id []byte) string {
	rest, ok := bytes.CutPrefix(id, []byte("cmpl-mock-"))
	if !ok {
		return ""
	}
	w, _, ok := bytes.Cut(rest, []byte("-"))
	if !ok || len(w) == 0 {
		return ""
	}
	return string(w)
}

func (o *online) workerIndex(name string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	if i, ok := o.workerIdx[name]; ok {
		return i
	}
	o.workerIdx[name] = len(o.workers)
	o.workers = append(o.workers, name)
	return len(o.workers) - 1
}

// sortWorkers orders the worker labels (numerically when they are numbers)
// and renumbers the records' worker indexes to match.
func (o *online) sortWorkers() {
	idx := make([]int, len(o.workers))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		x, y := o.workers[a], o.workers[b]
		nx, ex := strconv.ParseUint(x, 10, 64)
		ny, ey := strconv.ParseUint(y, 10, 64)
		if ex == nil && ey == nil {
			return cmp.Compare(nx, ny)
		}
		return strings.Compare(x, y)
	})
	remap := make([]int, len(idx))
	sorted := make([]string, len(idx))
	for to, from := range idx {
		remap[from] = to
		sorted[to] = o.workers[from]
	}
	for i := range o.recs {
		if w := o.recs[i].worker; w >= 0 {
			o.recs[i].worker = remap[w]
		}
	}
	o.workers = sorted
}

func (o *online) fail(rec *record, err error) {
	rec.failed, rec.done, rec.hasFirst = true, false, false
	rec.finish = time.Since(o.start)
	o.mu.Lock()
	if o.firstErr == nil {
		o.firstErr = err
	}
	o.mu.Unlock()
}

// body builds the request: the prompt as token ids, streaming with usage.
func (o *online) body(r *trace.Request) []byte {
	toks := trace.AppendTokens(make([]uint32, 0, r.InputLength), r)
	b := make([]byte, 0, 160+7*len(toks))
	b = append(b, `{"model":`...)
	b = openai.AppendJSONString(b, o.cfg.Model)
	b = append(b, `,"prompt":[`...)
	for j, t := range toks {
		if j > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(t), 10)
	}
	b = append(b, `],"max_tokens":`...)
	b = strconv.AppendInt(b, int64(max(r.OutputLength, 1)), 10)
	b = append(b, `,"min_tokens":`...)
	b = strconv.AppendInt(b, int64(max(r.OutputLength, 1)), 10)
	b = append(b, `,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`...)
	return b
}
