package sched

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"unsafe"
)

// TestU64Map checks the open-addressing table against a Go map on random
// inserts, replacements and deletions, with keys drawn from a small range
// (so deletions hit long probe runs) and sequential ids.
func TestU64Map(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		var m u64map
		ref := map[uint64]uint32{}
		space := uint64(1 + rng.IntN(2000))
		for i := 0; i < 50000; i++ {
			k := rng.Uint64N(space)
			if seed == 5 {
				k = uint64(i % 3000) // sequential ids
			}
			switch rng.IntN(3) {
			case 0, 1:
				v := uint32(1 + rng.IntN(1000))
				m.set(k, v)
				ref[k] = v
			default:
				_, had := ref[k]
				if m.del(k) != had {
					t.Fatalf("seed %d: del(%d) = %v, want %v", seed, k, !had, had)
				}
				delete(ref, k)
			}
			if m.len() != len(ref) {
				t.Fatalf("seed %d: len %d, want %d", seed, m.len(), len(ref))
			}
			if i%1000 == 0 {
				for k2 := uint64(0); k2 < space; k2++ {
					if got := m.get(k2); got != ref[k2] {
						t.Fatalf("seed %d step %d: get(%d) = %d, want %d", seed, i, k2, got, ref[k2])
					}
				}
			}
		}
	}
}

// TestNoPointers guards the GC-free layout of the per-slot, per-block and
// table cells and of the outbox values (STYLE.md "Offsets, not pointers").
func TestNoPointers(t *testing.T) {
	for _, v := range []any{u64cell{}, holder{}, blockVec{}, holderChunk{}, slotScan{}, slotHot{}, slotState{}, Effect{}, Decision{}, Overlap{}, Candidate{}} {
		if typ := reflect.TypeOf(v); hasPointers(typ) {
			t.Errorf("%v contains pointers", typ)
		}
	}
	if s := unsafe.Sizeof(u64cell{}); s != 16 {
		t.Errorf("u64cell is %d bytes, want 16", s)
	}
	if s := unsafe.Sizeof(holderChunk{}); s != 64 {
		t.Errorf("holderChunk is %d bytes, want one cache line", s)
	}
	if s := unsafe.Sizeof(slotScan{}); s != 12 {
		t.Errorf("slotScan is %d bytes, want 12", s)
	}
	// One cache line per rank in the decision scan.
	if s := unsafe.Sizeof(slotHot{}); s > 64 {
		t.Errorf("slotHot is %d bytes, want ≤ 64", s)
	}
}

func hasPointers(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map, reflect.String, reflect.Interface, reflect.Func, reflect.Chan, reflect.UnsafePointer:
		return true
	case reflect.Array:
		return hasPointers(t.Elem())
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			if hasPointers(t.Field(i).Type) {
				return true
			}
		}
	}
	return false
}
