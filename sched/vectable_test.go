package sched

import (
	"math/rand/v2"
	"testing"
)

// TestVecTable checks the fingerprint table against a Go map on random
// inserts and deletions. Half the keys come in groups whose Fibonacci
// products (of the folded key, k ^ k>>32) differ by a few units, so they share a fingerprint and a home
// and lookups must tell them apart by the vector's hash; the rest are
// random. The table grows from empty and deletions shift long probe runs.
func TestVecTable(t *testing.T) {
	// inv·φ = 1 (mod 2^64): key + j·inv has product product(key) + j.
	inv := uint64(1)
	for range 6 { // Newton's iteration doubles the correct low bits
		inv *= 2 - 0x9E3779B97F4A7C15*inv
	}
	if inv*0x9E3779B97F4A7C15 != 1 {
		t.Fatal("no inverse")
	}
	for seed := uint64(1); seed <= 4; seed++ {
		rng := rand.New(rand.NewPCG(seed, 9))
		var keys []uint64
		for range 300 {
			keys = append(keys, rng.Uint64())
			base := rng.Uint64() &^ 0xffffffff // product's low half ≈ 0
			base *= inv                        // key whose product is base
			for j := range uint64(3) {
				y := base + j*inv // the folded key (vtFingerprint)
				keys = append(keys, y^y>>32)
			}
		}
		shared := 0
		for i := 1; i < len(keys); i++ {
			if vtFingerprint(keys[i]) == vtFingerprint(keys[i-1]) {
				shared++
			}
		}
		if shared < 500 {
			t.Fatalf("only %d keys share a fingerprint with their neighbour", shared)
		}
		var tab vecTable
		vecs := make([]blockVec, 1)
		var free []uint32
		ref := map[uint64]uint32{}
		space := len(keys)
		if seed == 4 {
			space = 200 // few keys: long runs, many deletions
		}
		for step := range 40000 {
			k := keys[rng.IntN(space)]
			if v, ok := ref[k]; ok && rng.IntN(2) == 0 {
				tab.del(k, v)
				vecs[v] = blockVec{}
				free = append(free, v)
				delete(ref, k)
			} else {
				got, cell := tab.find(k, vecs, nil)
				if got != ref[k] {
					t.Fatalf("seed %d step %d: find(%x) = %d, want %d", seed, step, k, got, ref[k])
				}
				if got == 0 {
					var v uint32
					if n := len(free); n > 0 {
						v, free = free[n-1], free[:n-1]
					} else {
						vecs = append(vecs, blockVec{})
						v = uint32(len(vecs) - 1)
					}
					vecs[v].hash = k
					tab.put(cell, k, v)
					ref[k] = v
				}
			}
			if tab.n != len(ref) {
				t.Fatalf("seed %d step %d: %d indexed, want %d", seed, step, tab.n, len(ref))
			}
			if step%500 == 0 {
				for _, k := range keys[:space] {
					if got := tab.get(k, vecs, nil); got != ref[k] {
						t.Fatalf("seed %d step %d: get(%x) = %d, want %d", seed, step, k, got, ref[k])
					}
				}
				n := 0
				tab.each(func(v uint32) {
					n++
					if ref[vecs[v].hash] != v {
						t.Fatalf("seed %d step %d: cell of vector %d not in the model", seed, step, v)
					}
				})
				if n != len(ref) {
					t.Fatalf("seed %d step %d: each saw %d, want %d", seed, step, n, len(ref))
				}
			}
		}
	}
}
