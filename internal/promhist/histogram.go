// Package promhist provides Histogram, a Prometheus histogram (cumulative le
// buckets, _sum, _count) with fixed upper bounds that registers its writer on
// a VictoriaMetrics metrics.Set, so the Set's WritePrometheus writes it next
// to the Set's counters.
package promhist

import (
	"io"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// Histogram is a Prometheus histogram (cumulative le buckets, _sum, _count)
// with fixed upper bounds, which histogram_quantile reads (VictoriaMetrics'
// Histogram writes vmrange buckets, which it cannot).
//
// Goroutine-safe; Update is lock-free and allocates nothing: one atomic add
// on its bucket and a compare-and-swap on the sum. Write reads the buckets
// without stopping updates, so a scrape racing an update may see the update
// in _sum but not yet in its bucket; _count is the sum of the buckets, so it
// always equals the +Inf bucket.
type Histogram struct {
	bounds  []float64
	buckets []atomic.Uint64 // buckets[i]: values ≤ bounds[i] and > bounds[i-1]; the last: the rest
	sum     atomic.Uint64   // math.Float64bits of the sum

	// Rendered at construction so a scrape formats only numbers.
	lines   []string // `name_bucket{labels,le="b"} ` per bucket, +Inf last
	sumLine string   // `name_sum{labels} `
	cntLine string   // `name_count{labels} `
}

// New returns a histogram named name (a metric name with optional
// labels, as for metrics.Set: `foo_seconds` or `foo_seconds{op="x"}`) with
// the given strictly increasing upper bounds (+Inf is implied), and
// registers its writer on s when s is not nil, so s.WritePrometheus writes
// it. It panics on bounds that are empty, not increasing, or NaN.
func New(s *metrics.Set, name string, upperBounds []float64) *Histogram {
	if len(upperBounds) == 0 {
		panic("promhist: histogram " + name + " without buckets")
	}
	for i, b := range upperBounds {
		if math.IsNaN(b) || math.IsInf(b, 0) || i > 0 && b <= upperBounds[i-1] {
			panic("promhist: histogram " + name + ": upper bounds must be finite and strictly increasing")
		}
	}
	base, labels := name, ""
	if i := strings.IndexByte(name, '{'); i >= 0 {
		base, labels = name[:i], strings.TrimSuffix(name[i+1:], "}")
	}
	h := &Histogram{
		bounds:  append([]float64(nil), upperBounds...),
		buckets: make([]atomic.Uint64, len(upperBounds)+1),
	}
	sep := ""
	if labels != "" {
		sep = ","
	}
	for _, b := range upperBounds {
		h.lines = append(h.lines, base+"_bucket{"+labels+sep+`le="`+strconv.FormatFloat(b, 'g', -1, 64)+`"} `)
	}
	h.lines = append(h.lines, base+"_bucket{"+labels+sep+`le="+Inf"} `)
	if labels != "" {
		labels = "{" + labels + "}"
	}
	h.sumLine = base + "_sum" + labels + " "
	h.cntLine = base + "_count" + labels + " "
	if s != nil {
		s.RegisterMetricsWriter(h.Write)
	}
	return h
}

// Update records v. NaN and negative values are ignored.
func (h *Histogram) Update(v float64) {
	if !(v >= 0) {
		return
	}
	i := 0
	for i < len(h.bounds) && v > h.bounds[i] {
		i++
	}
	h.buckets[i].Add(1)
	for {
		old := h.sum.Load()
		if h.sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// UpdateDuration records the seconds since start.
func (h *Histogram) UpdateDuration(start time.Time) { h.Update(time.Since(start).Seconds()) }

// Write writes the histogram's samples (no metadata) to w.
func (h *Histogram) Write(w io.Writer) {
	var b []byte
	var cum uint64
	for i, l := range h.lines {
		cum += h.buckets[i].Load()
		b = append(b, l...)
		b = strconv.AppendUint(b, cum, 10)
		b = append(b, '\n')
	}
	b = append(b, h.sumLine...)
	b = strconv.AppendFloat(b, math.Float64frombits(h.sum.Load()), 'g', -1, 64)
	b = append(b, '\n')
	b = append(b, h.cntLine...)
	b = strconv.AppendUint(b, cum, 10)
	b = append(b, '\n')
	w.Write(b) //nolint:errcheck
}
