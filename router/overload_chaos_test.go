//go:build chaos

package router

// Overload for `make chaos`: a real router, NATS and
// simulated fleet (4 workers, real-time engine steps) under 3× its measured
// capacity for 20 s, once with the reference behaviour (--max-queue-wait 0:
// the queue fills, the all-workers-busy window opens, ...) and once with
// --max-queue-wait 1s. Each run prints its 1-second timeline
//
//	chaos: overload[MODE] sec offered 200 429 503 done p50 p99
//
// (per second of sending: requests offered, answered 200, 429, 503, the
// 200s' latency quantiles; done = 200s completed in that second), a summary
// line, and out/overload-timeline.svg plots both. The shedding run fails when
// one of these targets does not hold over the steady seconds (5 to 18):
//
//   - the 200s' p99 latency ≤ --max-queue-wait + the saturated p99: the
//     p99 latency of the 200s of the capacity phase, a closed loop that
//     keeps the fleet saturated. Under saturation the engines run full
//     batches and a request's service time grows past its unloaded one;
//     the queue wait is what the router bounds, the service time is the
//     fleet's (2 × the unloaded p99 + --max-queue-wait is no bound: 3× a
//     55/s fleet with --max-queue-wait 2s measured 3.94-4.00 s against its
//     2.77 s);
//   - the 200s completed per second at least 90% of the capacity on average
//     (more means the closed-loop measure of the capacity came out low):
//     printed (done, capacity, targets_met); the test fails when the fleet
//     was not kept saturated (requests waiting in under 90% of the
//     queue-depth samples), since the fleet's own speed on a shared machine
//     drifts by more than 10% between two measurements;
//   - no on/off pattern: no second in which fewer than 10% of the offered
//     requests got past admission (not 429 or 503), and a coefficient of
//     variation of the per-second completions ≤ 0.25.
//
// Seconds in which the load generator itself sent 10% more or less than its
// rate (the machine did not run the test process) are left out; when they
// are over a third of the steady seconds the run is unjudgeable: the test
// prints a line "chaos: UNJUDGED overload[shed] ..." after its figures and
// is skipped, and `make chaos` ends on that verdict with exit status 3
// instead of passing.

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvroute/kvroute/sched"
)

// shot is one request of a load phase.
type shot struct {
	sent, done time.Duration // since the phase started
	code       int           // -1: transport error
}

type overloadRun struct {
	mode        string
	maxWait     time.Duration
	unloadedP99 time.Duration
	// saturatedP99 is the p99 latency of the capacity phase's 200s: the
	// fleet saturated, about 30 requests waiting.
	saturatedP99 time.Duration
	capacity     float64 // 200s per second under a closed-loop saturating load
	offered      float64 // requests per second sent in the overload
	shots        []shot
	queue        []queueSample // kvroute_queue_depth every 250 ms of the overload
	refused      float64       // kvroute_refused_total{reason="queue_wait"}
	windows      float64       // kvroute_all_workers_busy_total
}

type queueSample struct {
	at    time.Duration
	depth float64
}

// queueDepth scrapes kvroute_queue_depth (-1 on failure).
func queueDepth(c *http.Client, url string) float64 {
	resp, err := c.Get(url + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "kvroute_queue_depth "); ok {
			var d float64
			if _, err := fmt.Sscan(v, &d); err == nil {
				return d
			}
		}
	}
	return -1
}

// second is one row of the timeline.
type second struct {
	offered, ok, r429, r503, other, done int
	p50, p99                             time.Duration
}

const (
	overloadSecs            = 20
	steadyFrom, steadyUntil = 5, 18 // seconds the targets are checked over
)

func loadClient() *http.Client {
	return &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, IdleConnTimeout: time.Minute}}
}

// fire sends completion i (a unique 64-token prompt, 16 to 48 tokens out,
// 32 on average, so that requests booked together do not all end together)
// and records it against t0.
func fire(c *http.Client, url string, i int, t0 time.Time) shot {
	body := fmt.Sprintf(`{"prompt":%s,"max_tokens":%d}`, promptJSON(tokens(9, i, 0, 64)), 16+i%33)
	s := shot{sent: time.Since(t0), code: -1}
	resp, err := c.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		s.code = resp.StatusCode
	}
	s.done = time.Since(t0)
	return s
}

// closedLoop runs n clients sending back to back for d and returns their
// shots; a client refused (429, 503) waits 50 ms before its next request
// instead of spinning.
func closedLoop(c *http.Client, url string, n int, d time.Duration, base int) []shot {
	var (
		mu    sync.Mutex
		shots []shot
		wg    sync.WaitGroup
	)
	t0 := time.Now()
	for k := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Since(t0) < d; i++ {
				s := fire(c, url, base+k*100_000+i, t0)
				mu.Lock()
				shots = append(shots, s)
				mu.Unlock()
				if s.code != 200 {
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	return shots
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

func runOverload(t *testing.T, mode string, maxWait time.Duration) overloadRun {
	e := startEnv(t, envOptions{workers: 4, kvBlocks: 1024, speedup: 1, sched: func(c *sched.Config) {
		// A rank is busy above 3% of its 1,024 blocks in use: about 5
		// requests of 6 blocks (64 prompt + 32 generated tokens); four
		// workers, so that the fleet's completions are not one engine's
		// batches.
		c.BusyDecodeFrac = 0.03
		c.QueueDepth = 256
		c.MaxQueueWait = maxWait
	}, health: func(c *Config) { c.QueueTimeout = 30 * time.Second }})
	c := loadClient()
	run := overloadRun{mode: mode, maxWait: maxWait}

	// Unloaded: 2 clients, far below the fleet's ~20 concurrent requests,
	// after a first second of warm-up (connections, the engines' first
	// steps).
	var lat []time.Duration
	for _, s := range closedLoop(c, e.url, 2, 5*time.Second, 0) {
		if s.code == 200 && s.sent >= time.Second {
			lat = append(lat, s.done-s.sent)
		}
	}
	run.unloadedP99 = quantile(lat, 0.99)
	t.Logf("unloaded: %d 200s, p50 %v p99 %v", len(lat), quantile(lat, 0.5), run.unloadedP99)
	// Capacity: 56 clients keep about 30 requests waiting (a wait of ~0.4 s,
	// at the foot of the shedding ramp), so the fleet is saturated
	// throughout; the 200s completed in the last 4 of 6 seconds. (36
	// clients measured 15% under the overload's throughput.)
	ok := 0
	codes := map[int]int{}
	var sat []time.Duration
	for _, s := range closedLoop(c, e.url, 56, 6*time.Second, 1_000_000) {
		codes[s.code]++
		if s.code == 200 && s.done >= 2*time.Second && s.done < 6*time.Second {
			ok++
			sat = append(sat, s.done-s.sent)
		}
	}
	run.saturatedP99 = quantile(sat, 0.99)
	t.Logf("capacity phase: codes %v, 200s' p50 %v p99 %v", codes, quantile(sat, 0.5), run.saturatedP99)
	run.capacity = float64(ok) / 4
	waitFor(t, "fleet idle", e.idle)

	// Overload: open loop at 3 × capacity, evenly spaced.
	run.offered = 3 * run.capacity
	gap := time.Duration(float64(time.Second) / run.offered)
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	t0 := time.Now()
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tk := time.NewTicker(250 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				at := time.Since(t0)
				if d := queueDepth(c, e.url); d >= 0 {
					run.queue = append(run.queue, queueSample{at, d})
				}
			}
		}
	}()
	for i := 0; ; i++ {
		at := time.Duration(i) * gap
		if at >= overloadSecs*time.Second {
			break
		}
		if d := at - time.Since(t0); d > 0 {
			time.Sleep(d)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := fire(c, e.url, 2_000_000+i, t0)
			mu.Lock()
			run.shots = append(run.shots, s)
			mu.Unlock()
		}()
	}
	close(stop)
	<-sampled
	wg.Wait()
	run.refused = e.refused("queue_wait")
	run.windows = e.metric("kvroute_all_workers_busy_total")
	return run
}

func (r overloadRun) timeline() []second {
	n := overloadSecs
	for _, s := range r.shots {
		n = max(n, int(s.done/time.Second)+1)
	}
	rows := make([]second, n)
	lat := make([][]time.Duration, n)
	for _, s := range r.shots {
		i := int(s.sent / time.Second)
		rows[i].offered++
		switch s.code {
		case 200:
			rows[i].ok++
			rows[int(s.done/time.Second)].done++
			lat[i] = append(lat[i], s.done-s.sent)
		case 429:
			rows[i].r429++
		case 503:
			rows[i].r503++
		default:
			rows[i].other++
		}
	}
	for i := range rows {
		rows[i].p50, rows[i].p99 = quantile(lat[i], 0.5), quantile(lat[i], 0.99)
	}
	return rows
}

// verdict computes the targets' figures over the steady seconds.
type verdict struct {
	p99, p99Bound time.Duration // of the 200s sent in the steady, unstalled seconds
	done, cv      float64       // mean completions per second, and their coefficient of variation
	offSeconds    int           // seconds with < 10% of the offered requests admitted
	// saturated is the fraction of the queue-depth samples with requests
	// waiting, i.e. every worker busy: the fleet's throughput is its
	// capacity, whatever speed the shared machine gives it.
	saturated float64
	// stalled are the steady seconds in which the load generator itself
	// sent over 10% more or less than its rate: the test process did not
	// run (a machine shared with other work), so neither did the router or
	// the fleet. They are left out of the other figures but done.
	stalled int
	pass    bool
}

func (r overloadRun) verdict() verdict {
	rows := r.timeline()
	stalled := func(i int) bool { return math.Abs(float64(rows[i].offered)-r.offered) > 0.1*r.offered }
	steady := func(i int) bool { return i >= steadyFrom && i < steadyUntil && !stalled(i) }
	var lat []time.Duration
	for _, s := range r.shots {
		if s.code == 200 && steady(int(s.sent/time.Second)) {
			lat = append(lat, s.done-s.sent)
		}
	}
	v := verdict{p99: quantile(lat, 0.99), p99Bound: r.maxWait + r.saturatedP99}
	var sum, sq, n, all float64
	for i := steadyFrom; i < steadyUntil; i++ {
		all += float64(rows[i].done)
		if !steady(i) {
			v.stalled++
			continue
		}
		n++
		sum += float64(rows[i].done)
		if x := rows[i]; float64(x.offered-x.r429-x.r503) < 0.1*float64(x.offered) {
			v.offSeconds++
		}
	}
	v.done = all / float64(steadyUntil-steadyFrom)
	mean := sum / n
	for i := steadyFrom; i < steadyUntil; i++ {
		if steady(i) {
			sq += (float64(rows[i].done) - mean) * (float64(rows[i].done) - mean)
		}
	}
	v.cv = math.Sqrt(sq/n) / mean
	var busy, samples float64
	for _, q := range r.queue {
		if steady(int(q.at / time.Second)) {
			samples++
			if q.depth > 0 {
				busy++
			}
		}
	}
	v.saturated = busy / samples
	v.pass = len(lat) > 0 && v.p99 <= v.p99Bound && v.done >= 0.9*r.capacity && v.offSeconds == 0 && v.cv <= 0.25
	return v
}

// unjudgedLine is the line a run prints when the load generator stalled in
// over a third of the steady seconds, so that the targets cannot be judged
// (`make chaos` looks for it); "" when the run can be judged.
func (v verdict) unjudgedLine(mode string) string {
	if v.stalled <= (steadyUntil-steadyFrom)/3 {
		return ""
	}
	return fmt.Sprintf("chaos: UNJUDGED overload[%s] stalled_seconds=%d of %d: the load generator itself stalled, the machine is too loaded to judge the targets\n",
		mode, v.stalled, steadyUntil-steadyFrom)
}

func (r overloadRun) print() verdict {
	fmt.Printf("chaos: overload[%s] max_queue_wait=%v unloaded_p99=%v saturated_p99=%v capacity=%.1f/s offered=%.1f/s\n",
		r.mode, r.maxWait, r.unloadedP99.Round(time.Millisecond), r.saturatedP99.Round(time.Millisecond), r.capacity, r.offered)
	fmt.Printf("chaos: overload[%s] %4s %7s %5s %5s %5s %5s %8s %8s\n", r.mode, "sec", "offered", "200", "429", "503", "done", "p50", "p99")
	for i, x := range r.timeline() {
		fmt.Printf("chaos: overload[%s] %4d %7d %5d %5d %5d %5d %8s %8s\n", r.mode, i, x.offered, x.ok, x.r429, x.r503, x.done,
			x.p50.Round(time.Millisecond), x.p99.Round(time.Millisecond))
	}
	v := r.verdict()
	fmt.Printf("chaos: overload[%s] steady=%d-%ds p99=%v bound=%v done=%.1f/s capacity=%.1f/s (%+.1f%%) cv=%.3f off_seconds=%d saturated=%.2f stalled_seconds=%d refused_queue_wait=%.0f busy_windows=%.0f targets_met=%v\n",
		r.mode, steadyFrom, steadyUntil, v.p99.Round(time.Millisecond), v.p99Bound.Round(time.Millisecond), v.done, r.capacity,
		100*(v.done-r.capacity)/r.capacity, v.cv, v.offSeconds, v.saturated, v.stalled, r.refused, r.windows, v.pass)
	return v
}

// TestChaosOverload: see the file comment.
func TestChaosOverload(t *testing.T) {
	var ref, shed overloadRun
	t.Run("reference", func(t *testing.T) { ref = runOverload(t, "reference", 0) })
	t.Run("shed", func(t *testing.T) { shed = runOverload(t, "shed", time.Second) })
	if ref.mode != "" { // not filtered out by -run
		ref.print()
	}
	v := shed.print()
	if err := writeTimelineSVG(filepath.Join("..", "out", "overload-timeline.svg"), ref, shed); err != nil {
		t.Logf("timeline plot: %v", err)
	}
	if line := v.unjudgedLine(shed.mode); line != "" {
		fmt.Print(line)
		t.Skipf("unjudged: the load generator stalled in %d of %d steady seconds: the machine is too loaded to judge the targets", v.stalled, steadyUntil-steadyFrom)
	}
	if v.p99 > v.p99Bound {
		t.Errorf("the 200s' p99 latency %v is over --max-queue-wait + the saturated p99 = %v", v.p99, v.p99Bound)
	}
	// The fleet's speed on a shared machine drifts (capacity measured 30 s
	// apart differed by 14%): a throughput under capacity fails only when
	// the fleet was not kept saturated, the router's part of the target.
	if v.saturated < 0.9 {
		t.Errorf("the queue was empty in %.0f%% of the samples: the fleet idled (%.1f 200s/s, capacity %.1f)",
			100*(1-v.saturated), v.done, shed.capacity)
	}
	if v.offSeconds > 0 || v.cv > 0.25 {
		t.Errorf("on/off pattern: %d seconds with < 10%% admitted, completions cv %.3f (want 0 and ≤ 0.25)", v.offSeconds, v.cv)
	}
	if shed.refused == 0 || shed.windows != 0 {
		t.Errorf("shedding: %v refused for queue wait, %v all-workers-busy windows: want > 0 and 0", shed.refused, shed.windows)
	}
}

// TestChaosOverloadUnjudged: a run whose load generator sent nothing in 5
// of the 13 steady seconds cannot be judged and says so; with 4 such
// seconds, or none, it is judged.
func TestChaosOverloadUnjudged(t *testing.T) {
	for _, stalled := range []int{0, 4, 5} {
		r := overloadRun{mode: "shed", maxWait: time.Second, saturatedP99: time.Second, capacity: 10, offered: 10}
		for sec := range overloadSecs {
			if sec >= steadyFrom && sec < steadyFrom+stalled {
				continue
			}
			for k := range 10 {
				at := time.Duration(sec)*time.Second + time.Duration(k)*100*time.Millisecond
				r.shots = append(r.shots, shot{sent: at, done: at + 50*time.Millisecond, code: 200})
			}
		}
		v := r.verdict()
		line := v.unjudgedLine(r.mode)
		if v.stalled != stalled || (line != "") != (stalled > 4) {
			t.Errorf("%d seconds without load: verdict counted %d stalled, unjudged line %q", stalled, v.stalled, line)
		}
		if line != "" && !strings.HasPrefix(line, "chaos: UNJUDGED overload[shed] stalled_seconds=5 of 13") {
			t.Errorf("unjudged line %q", line)
		}
	}
}

// writeTimelineSVG plots both runs' per-second completions, 429s and 503s
// (by second of sending; completions by second of completion) over the
// capacity, and their 200s' p99 latency.
func writeTimelineSVG(path string, runs ...overloadRun) error {
	const w, h, pad, gapY = 760, 520, 50, 40
	panelH := (h - 2*pad - gapY) / 2
	var maxRate float64
	var maxLat time.Duration
	n := 0
	for _, r := range runs {
		for _, x := range r.timeline() {
			maxRate = max(maxRate, float64(x.offered), float64(x.done))
			maxLat = max(maxLat, x.p99)
		}
		n = max(n, len(r.timeline()))
	}
	maxRate *= 1.1
	sx := func(i int) float64 { return pad + float64(i)*float64(w-2*pad)/float64(n) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	line := func(pts []float64, y0, ph int, top float64, color, dash string) {
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" stroke-dasharray="%s" points="`, color, dash)
		for i, v := range pts {
			fmt.Fprintf(&b, "%.1f,%.1f ", sx(i)+float64(w-2*pad)/float64(n)/2, float64(y0+ph)-v/top*float64(ph))
		}
		b.WriteString("\"/>\n")
	}
	axes := func(y0 int, title string, top float64, unit string) {
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", pad, y0, w-2*pad, panelH)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", pad, y0-6, title)
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%.0f%s</text><text x="%d" y="%d" text-anchor="end">0</text>`+"\n",
			pad-4, y0+10, top, unit, pad-4, y0+panelH)
		for s := 0; s <= n; s += 5 {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%ds</text>`+"\n", sx(s), y0+panelH+14, s)
		}
	}
	y1, y2 := pad, pad+panelH+gapY
	axes(y1, "requests per second: 200s completed (solid), 429s (dashed), 503s (dotted); grey: capacity", maxRate, "/s")
	axes(y2, "p99 latency of the 200s, by second sent", maxLat.Seconds(), "s")
	colors := []string{"#c0392b", "#2471a3"}
	for k, r := range runs {
		rows := r.timeline()
		done, r429, r503, p99 := make([]float64, len(rows)), make([]float64, len(rows)), make([]float64, len(rows)), make([]float64, len(rows))
		for i, x := range rows {
			done[i], r429[i], r503[i], p99[i] = float64(x.done), float64(x.r429), float64(x.r503), x.p99.Seconds()
		}
		c := colors[k%len(colors)]
		line(done, y1, panelH, maxRate, c, "")
		line(r429, y1, panelH, maxRate, c, "6,3")
		line(r503, y1, panelH, maxRate, c, "1,3")
		line(p99, y2, panelH, maxLat.Seconds(), c, "")
		cy := float64(y1+panelH) - r.capacity/maxRate*float64(panelH)
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#bbb" stroke-dasharray="2,2"/>`+"\n", pad, w-pad, cy, cy)
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="%s">%s (max queue wait %v)</text>`+"\n", w-pad-220, y1+16+14*k, c, r.mode, r.maxWait)
	}
	b.WriteString("</svg>\n")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
