//go:build !race

package tracestream

import "testing"

func TestIterateAllocs(t *testing.T) {
	s, err := Build(loadSmall(t), Config{Workers: 2, Capacity: 1024, BlockSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	if a := testing.AllocsPerRun(10, func() { n = iterate(s) }); a != 0 {
		t.Fatalf("%v allocations per walk", a)
	}
	if n != s.Counts.BlockOps() {
		t.Fatalf("walked %d block ops, counts say %d", n, s.Counts.BlockOps())
	}
}
