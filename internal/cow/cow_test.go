package cow

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSlice: random writes (each after Touch), appends that reallocate and
// steps of random budgets leave Result equal to the slice at Begin.
func TestSlice(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	touched := 0
	for round := range 200 {
		cur := make([]uint32, r.IntN(300))
		for i := range cur {
			cur[i] = r.Uint32()
		}
		want := slices.Clone(cur)
		var s Slice[uint32]
		s.Begin(cur, 1+r.IntN(64))
		for !s.Done() {
			for range r.IntN(8) {
				if len(cur) == 0 {
					break
				}
				switch i := r.IntN(len(cur)); r.IntN(10) {
				case 0:
					cur = append(cur, r.Uint32()) // may reallocate: the old array is frozen
				case 1:
					hi := min(len(cur), i+r.IntN(20))
					s.TouchRange(cur, i, hi)
					for j := i; j < hi; j++ {
						cur[j] = r.Uint32()
					}
				default:
					s.Touch(cur, i)
					cur[i] = r.Uint32()
				}
			}
			s.Step(r.IntN(64))
		}
		touched += s.Touched()
		if got := s.Result(); !slices.Equal(got, want) {
			t.Fatalf("round %d: copy differs from the slice at Begin", round)
		}
		s.Touch(cur, 0) // idle after Done
	}
	if touched == 0 {
		t.Fatal("no page was copied by Touch")
	}
	var idle Slice[byte]
	idle.Touch(nil, 3)
	if !idle.Done() || idle.Result() != nil {
		t.Fatal("zero Slice is not an idle capture")
	}
}

// TestSliceReallocated: once the owner's slice is a new array, Touch copies
// nothing and the old array's pages are still copied by Step.
func TestSliceReallocated(t *testing.T) {
	src := []int{1, 2, 3, 4, 5, 6, 7, 8}
	var s Slice[int]
	s.Begin(src, 8) // one element per page
	cur := append(slices.Clone(src), 9)
	s.Touch(cur, 0)
	cur[0] = 100
	if s.Touched() != 0 || s.Pending() != 8 {
		t.Fatalf("touched %d, pending %d", s.Touched(), s.Pending())
	}
	s.Touch(src, 3)
	if s.Touched() != 1 {
		t.Fatal("a write to the captured array was not copied first")
	}
	src[3] = 40
	for !s.Done() {
		s.Step(1)
	}
	if got := s.Result(); !slices.Equal(got, []int{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Fatalf("got %v", got)
	}
}

// TestPooledPages: with full-size pages (pooled buffers, reused across
// captures) and several captures in flight at once, each Result equals its
// slice at Begin: a buffer goes back to the pool only after Result copied
// it, never while another capture holds it. Pooled and unpooled alike.
func TestPooledPages(t *testing.T) {
	defer SetPoolingForTesting(true)
	r := rand.New(rand.NewPCG(3, 4))
	for _, pool := range []bool{true, false} {
		SetPoolingForTesting(pool)
		for round := range 20 {
			var caps [3]Slice[uint64]
			var wants [3][]uint64
			for k := range caps {
				cur := make([]uint64, 1+r.IntN(8*MaxPage/8))
				for i := range cur {
					cur[i] = r.Uint64()
				}
				wants[k] = slices.Clone(cur)
				caps[k].Begin(cur, MaxPage)
				for range 200 {
					i := r.IntN(len(cur))
					caps[k].Touch(cur, i)
					cur[i] = r.Uint64()
				}
			}
			for k := range caps {
				for !caps[k].Done() {
					caps[k].Step(MaxPage)
				}
			}
			for k := range caps {
				if got := caps[k].Result(); !slices.Equal(got, wants[k]) {
					t.Fatalf("pool %v round %d capture %d: copy differs from the slice at Begin", pool, round, k)
				}
			}
		}
	}
}

// TestSliceConcurrentRead: Result on another goroutine while the owner
// keeps writing (each write after Touch) and stepping equals the slice at
// Begin, pages taken both ways; with -race it also checks that the owner
// never writes a page while the reader copies it.
func TestSliceConcurrentRead(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	touched, waits := 0, 0
	for round := range 100 {
		cur := make([]uint64, 1+r.IntN(4*MaxPage/8))
		for i := range cur {
			cur[i] = r.Uint64()
		}
		want := slices.Clone(cur)
		var s Slice[uint64]
		s.Begin(cur, []int{8, 512, MaxPage}[round%3])
		results := make(chan []uint64)
		go func() { results <- s.Result() }()
		var got []uint64
		for got == nil || !s.Done() {
			for range 1 + r.IntN(16) {
				i := r.IntN(len(cur))
				if r.IntN(4) == 0 {
					hi := min(len(cur), i+r.IntN(64))
					s.TouchRange(cur, i, hi)
					for j := i; j < hi; j++ {
						cur[j] = r.Uint64()
					}
				} else {
					s.Touch(cur, i)
					cur[i] = r.Uint64()
				}
			}
			if round%4 == 0 {
				s.Step(r.IntN(256))
			}
			if got == nil {
				select {
				case got = <-results:
				default:
				}
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: copy differs from the slice at Begin", round)
		}
		touched += s.Touched()
		waits += s.ReadWaits()
	}
	t.Logf("pages touched by the owner %d, waits for the reader %d", touched, waits)
	if touched == 0 {
		t.Fatal("the owner never copied a page")
	}
}
