package shard

import (
	"runtime"
	"sync"
	"testing"
)

// TestQueue checks FIFO order per producer, capacity and that nothing is
// lost or duplicated with concurrent producers.
func TestQueue(t *testing.T) {
	q := newQueue[int](3) // rounds up to 4
	if q.cap() != 4 {
		t.Fatalf("cap %d, want 4", q.cap())
	}
	vals := make([]int, 5)
	for i := range 4 {
		vals[i] = i
		if !q.tryPush(&vals[i]) {
			t.Fatalf("push %d failed below capacity", i)
		}
	}
	if q.tryPush(&vals[4]) {
		t.Fatal("push succeeded on a full queue")
	}
	if q.len() != 4 {
		t.Fatalf("len %d, want 4", q.len())
	}
	for i := range 4 {
		if p := q.tryPop(); p == nil || *p != i {
			t.Fatalf("pop %d: got %v", i, p)
		}
	}
	if q.tryPop() != nil {
		t.Fatal("pop from an empty queue")
	}

	const producers, each = 4, 2000
	q2 := newQueue[[2]int](8)
	items := make([][2]int, producers*each)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range each {
				it := &items[p*each+i]
				*it = [2]int{p, i}
				for !q2.tryPush(it) {
					runtime.Gosched()
				}
			}
		})
	}
	next := make([]int, producers)
	for got := 0; got < producers*each; {
		it := q2.tryPop()
		if it == nil {
			runtime.Gosched()
			continue
		}
		if it[1] != next[it[0]] {
			t.Fatalf("producer %d: got item %d, want %d", it[0], it[1], next[it[0]])
		}
		next[it[0]]++
		got++
	}
	wg.Wait()
	if q2.tryPop() != nil {
		t.Fatal("extra item")
	}
}
