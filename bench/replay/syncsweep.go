package replay

import (
	"fmt"
	"image/color"
	"image/png"
	"io"
	"math"
	"slices"
	"time"
)

// SyncPoint is the routing quality of one setup of a sync-delay sweep
// (SyncSweep): one router, or Routers replicas whose bookings reach each
// other Delay late (negative: never).
type SyncPoint struct {
	Routers int           `json:"routers"`
	Delay   time.Duration `json:"sync_delay_ns"` // negative: replicas without sync
	// WindowMaxMean is the mean, over windows of as many consecutive
	// arrivals as the fleet has ranks, of the busiest rank's requests over
	// the mean (1: every window spread evenly). It shows what a burst
	// does: replicas blind to each other's bookings send a window's
	// requests to the same idle rank.
	WindowMaxMean float64 `json:"window_max_mean"`
	// MaxWorkerShare and HitRatio are the run's (Result).
	MaxWorkerShare float64 `json:"max_worker_share"`
	HitRatio       float64 `json:"hit_ratio"`
}

// SyncSweepReport is a sync-delay sweep: the references (one router taking
// all the traffic, the replicas without sync) and one point per delay.
type SyncSweepReport struct {
	Trace    string      `json:"trace"`
	Requests int         `json:"requests"`
	Workers  int         `json:"workers"`
	Policy   string      `json:"policy"`
	Speedup  float64     `json:"speedup"`
	One      SyncPoint   `json:"one_router"`
	NoSync   SyncPoint   `json:"no_sync"`
	Points   []SyncPoint `json:"points"`
}

// SyncSweep simulates w under cfg (cfg.Routers ≥ 2 replicas) with policy p
// for every delay of delays, and the two references. The runs are
// deterministic (no clock is read); they run one after the other.
func SyncSweep(w *Workload, cfg Config, p Policy, delays []time.Duration) (*SyncSweepReport, error) {
	if cfg.Routers < 2 {
		return nil, fmt.Errorf("%w: a sync-delay sweep needs --routers > 1 (got %d)", ErrConfig, cfg.Routers)
	}
	if len(delays) == 0 {
		return nil, fmt.Errorf("%w: a sync-delay sweep needs delays", ErrConfig)
	}
	rep := &SyncSweepReport{Trace: w.Name, Requests: w.Len(), Workers: cfg.Fleet.Workers, Policy: p.Name, Speedup: cfg.Speedup}
	run := func(routers int, delay time.Duration) (SyncPoint, error) {
		c := cfg
		c.Routers, c.SyncDelay = routers, delay
		if err := c.Validate(); err != nil {
			return SyncPoint{}, err
		}
		c = c.withDefaults()
		if c.Fleet.BlockSize != w.BlockSize {
			return SyncPoint{}, fmt.Errorf("%w: workload hashed at block size %d, fleet block size %d", ErrConfig, w.BlockSize, c.Fleet.BlockSize)
		}
		s, err := newSim(w, c, p)
		if err != nil {
			return SyncPoint{}, err
		}
		if err := s.run(); err != nil {
			return SyncPoint{}, err
		}
		r := s.result()
		return SyncPoint{Routers: routers, Delay: delay, WindowMaxMean: s.windowMaxMean(), MaxWorkerShare: r.MaxWorkerShare, HitRatio: r.HitRatio}, nil
	}
	var err error
	if rep.One, err = run(1, -1); err != nil {
		return nil, err
	}
	if rep.NoSync, err = run(cfg.Routers, -1); err != nil {
		return nil, err
	}
	for _, d := range delays {
		if d < 0 {
			return nil, fmt.Errorf("%w: sync delay %v < 0", ErrConfig, d)
		}
		pt, err := run(cfg.Routers, d)
		if err != nil {
			return nil, err
		}
		rep.Points = append(rep.Points, pt)
	}
	return rep, nil
}

// windowMaxMean is SyncPoint.WindowMaxMean of a finished run: requests in
// the order they arrived, cut into windows of as many as the fleet has
// ranks (a partial last window is left out; unrouted requests count for no
// rank).
func (s *sim) windowMaxMean() float64 {
	n := len(s.keys)
	order := make([]int32, len(s.rank))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortStableFunc(order, func(a, b int32) int {
		switch {
		case s.arrive[a] < s.arrive[b]:
			return -1
		case s.arrive[a] > s.arrive[b]:
			return 1
		}
		return 0
	})
	counts := make([]int, n)
	var sum float64
	windows := 0
	for start := 0; start+n <= len(order); start += n {
		clear(counts)
		mx := 0
		for _, i := range order[start : start+n] {
			if r := s.rank[i]; r >= 0 {
				counts[r]++
				mx = max(mx, counts[r])
			}
		}
		sum += float64(mx) // mean per rank in a window is 1
		windows++
	}
	if windows == 0 {
		return 0
	}
	return sum / float64(windows)
}

// PlotSyncSweep draws the sweep as an SVG or PNG figure (PlotSVG,
// PlotPNG): window max/mean and hit ratio against the sync delay (log
// scale; a delay of 0 is drawn at the left edge), with one router's and the
// unsynced replicas' values as horizontal references.
func PlotSyncSweep(w io.Writer, r *SyncSweepReport, format string) error {
	if len(r.Points) == 0 {
		return fmt.Errorf("replay: no sync-delay points to plot")
	}
	const width, height = 900.0, 700.0
	draw := func(c canvas) {
		title := fmt.Sprintf("kvroute replay: %d router replicas, sync delay sweep (%s, %d requests, %d workers, %s, speedup %g)",
			r.NoSync.Routers, baseName(r.Trace), r.Requests, r.Workers, r.Policy, r.Speedup)
		c.text(width/2, 24, title, 14, anchorMiddle, black)
		panel := func(y0 float64, name string, fixed bool, get func(SyncPoint) float64) {
			x, y, w, h := 90.0, y0, width-130, 220.0
			c.rect(x, y, w, h, dark)
			c.text(x+w/2, y-8, name, 13, anchorMiddle, black)
			vals := []float64{get(r.One), get(r.NoSync)}
			for _, p := range r.Points {
				vals = append(vals, get(p))
			}
			lo, hi := 0.0, 1.0 // a ratio
			if !fixed {
				lo, hi = min(1, slices.Min(vals)), max(slices.Max(vals), 1.5)
				pad := (hi - lo) * 0.1
				lo, hi = lo-pad, hi+pad
			}
			yOf := func(v float64) float64 { return y + h - (v-lo)/(hi-lo)*h }
			// x: log10 of the delay in ms over the points' range; 0 at
			// the left edge.
			minMs, maxMs := math.Inf(1), 0.0
			for _, p := range r.Points {
				if ms := float64(p.Delay) / float64(time.Millisecond); ms > 0 {
					minMs, maxMs = min(minMs, ms), max(maxMs, ms)
				}
			}
			if math.IsInf(minMs, 1) {
				minMs, maxMs = 1, 10
			}
			l0, l1 := math.Floor(math.Log10(minMs))-0.5, math.Ceil(math.Log10(maxMs))
			if l1 <= l0 {
				l1 = l0 + 1
			}
			xOf := func(d time.Duration) float64 {
				ms := float64(d) / float64(time.Millisecond)
				if ms <= 0 {
					return x
				}
				return x + (math.Log10(ms)-l0)/(l1-l0)*w
			}
			for e := math.Ceil(l0); e <= l1; e++ {
				gx := x + (e-l0)/(l1-l0)*w
				c.polyline([]pt{{gx, y}, {gx, y + h}}, grey, 1, false)
				c.text(gx, y+h+16, msLabel(math.Pow(10, e)), 11, anchorMiddle, black)
			}
			c.text(x+2, y+h+16, "0", 11, anchorStart, black)
			for i := range 5 {
				v := lo + (hi-lo)*float64(i)/4
				c.polyline([]pt{{x - 4, yOf(v)}, {x, yOf(v)}}, dark, 1, false)
				c.text(x-8, yOf(v)+4, fmt.Sprintf("%.2f", v), 11, anchorEnd, black)
			}
			c.polyline([]pt{{x, yOf(get(r.One))}, {x + w, yOf(get(r.One))}}, palette["round-robin"], 1.5, true)
			c.polyline([]pt{{x, yOf(get(r.NoSync))}, {x + w, yOf(get(r.NoSync))}}, palette["least-loaded"], 1.5, true)
			var line []pt
			for _, p := range r.Points {
				line = append(line, pt{xOf(p.Delay), yOf(get(p))})
			}
			c.polyline(line, palette["kv"], 2.5, false)
			for _, q := range line {
				c.polyline([]pt{{q.x - 3, q.y}, {q.x + 3, q.y}}, palette["kv"], 5, false)
			}
			c.text(x+w/2, y+h+34, "sync delay (log scale)", 12, anchorMiddle, black)
		}
		legend := func(x float64, col color.RGBA, dashed bool, s string) float64 {
			c.polyline([]pt{{x, 50}, {x + 26, 50}}, col, 2.5, dashed)
			c.text(x+32, 55, s, 12, anchorStart, black)
			return x + 48 + 7*float64(len(s))
		}
		x := legend(90, palette["kv"], false, fmt.Sprintf("%d replicas, --router-replica-sync, against the delay", r.NoSync.Routers))
		x = legend(x, palette["round-robin"], true, "1 router")
		legend(x, palette["least-loaded"], true, fmt.Sprintf("%d replicas, no sync", r.NoSync.Routers))
		panel(100, "busiest rank's requests over the mean, per window of one request per rank (1: even)", false, func(p SyncPoint) float64 { return p.WindowMaxMean })
		panel(420, "hit ratio (cached / prompt tokens)", true, func(p SyncPoint) float64 { return p.HitRatio })
	}
	switch format {
	case PlotSVG:
		c := &svgCanvas{}
		draw(c)
		return c.write(w, width, height)
	case PlotPNG:
		c := newPNGCanvas(width, height)
		draw(c)
		return png.Encode(w, c.img)
	}
	return fmt.Errorf("%w: plot format %q (want svg or png)", ErrConfig, format)
}
