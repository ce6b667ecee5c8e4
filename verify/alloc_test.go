//go:build !race

package verify

import "testing"

func TestObserveAllocs(t *testing.T) {
	tr := New(Config{BlockSize: 16})
	tr.Observe(k0, Sample{}, 0)
	i := int64(0)
	if a := testing.AllocsPerRun(200, func() {
		i++
		tr.Observe(k0, Sample{Predicted: uint32(i % 7), Reported: int(i%5) * 16, Publishes: true}, i)
	}); a != 0 {
		t.Errorf("Observe: %v allocs, want 0", a)
	}
}
