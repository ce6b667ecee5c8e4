package promhist_test

import (
	"bytes"
	"math"
	"sync"
	"testing"

	"github.com/VictoriaMetrics/metrics"

	"github.com/kvroute/kvroute/internal/promhist"
	"github.com/kvroute/kvroute/internal/promtext"
)

// TestHistogram: values land in the first bucket whose bound is ≥ them,
// buckets are written cumulative with _sum and _count, labels are kept,
// NaN and negative values are ignored, and the Set writes the histogram.
func TestHistogram(t *testing.T) {
	set := metrics.NewSet()
	h := promhist.New(set, `x_seconds{op="a"}`, []float64{0.001, 0.1, 1})
	for _, v := range []float64{0, 0.001, 0.0011, 0.5, 1, 7, math.NaN(), -1} {
		h.Update(v)
	}
	var b bytes.Buffer
	set.WritePrometheus(&b)
	want := `x_seconds_bucket{op="a",le="0.001"} 2
x_seconds_bucket{op="a",le="0.1"} 3
x_seconds_bucket{op="a",le="1"} 5
x_seconds_bucket{op="a",le="+Inf"} 6
x_seconds_sum{op="a"} 8.5021
x_seconds_count{op="a"} 6
`
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
	var plain bytes.Buffer
	promhist.New(nil, "y", []float64{0, 1}).Write(&plain)
	if want := "y_bucket{le=\"0\"} 0\ny_bucket{le=\"1\"} 0\ny_bucket{le=\"+Inf\"} 0\ny_sum 0\ny_count 0\n"; plain.String() != want {
		t.Fatalf("unlabelled: got\n%s\nwant\n%s", plain.String(), want)
	}
	var expo bytes.Buffer
	promtext.NewRegistry([]promtext.Family{{Name: "x_seconds", Type: promtext.Histogram, Help: "x"}}).Write(&expo, set.WritePrometheus)
	if err := promtext.Check(expo.Bytes()); err != nil {
		t.Fatal(err)
	}
}

// TestHistogramConcurrent: concurrent updates are all counted, and the sum
// adds up.
func TestHistogramConcurrent(t *testing.T) {
	h := promhist.New(nil, "c", []float64{1, 2})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 1000 {
				h.Update(1.5)
			}
		})
	}
	wg.Wait()
	var b bytes.Buffer
	h.Write(&b)
	if want := "c_bucket{le=\"1\"} 0\nc_bucket{le=\"2\"} 4000\nc_bucket{le=\"+Inf\"} 4000\nc_sum 6000\nc_count 4000\n"; b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestNewRejectsBadBounds(t *testing.T) {
	for _, b := range [][]float64{nil, {1, 1}, {2, 1}, {math.NaN()}, {1, math.Inf(1)}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New accepted bounds %v", b)
				}
			}()
			promhist.New(nil, "z", b)
		}()
	}
}
