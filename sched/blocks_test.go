package sched

import (
	"math/rand/v2"
	"testing"
)

// TestBlockIndexModel drives the block index with random acquires and
// releases on few hashes and many slots (so blocks have dozens of holders,
// most of them indexed in pairs) against a map of reference counts, and
// checks holders, counts, membership and the pairs index after every step.
func TestBlockIndexModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var b blockIndex
	b.init()
	type key struct{ hash, slot uint32 }
	ref := map[key]uint32{}
	maxIndexed := 0
	check := func(step int) {
		t.Helper()
		live, indexed := 0, 0
		for _, c := range b.heads.cells {
			if c.val == 0 {
				continue
			}
			v := c.val
			vec := &b.vecs[v]
			hs := b.appendHolders(nil, v)
			if len(hs) != int(vec.n) || vec.n == 0 {
				t.Fatalf("step %d: hash %d: %d holders listed, n %d", step, c.key, len(hs), vec.n)
			}
			for k, h := range hs {
				if ref[key{uint32(c.key), h.slot}] != h.rc {
					t.Fatalf("step %d: hash %d slot %d: rc %d, want %d", step, c.key, h.slot, h.rc, ref[key{uint32(c.key), h.slot}])
				}
				if k > chunkHolders {
					indexed++
				}
			}
			live += len(hs)
		}
		if live != len(ref) || live != b.live {
			t.Fatalf("step %d: %d holders, %d referenced, live %d", step, live, len(ref), b.live)
		}
		maxIndexed = max(maxIndexed, indexed)
		if indexed != b.pairs.len() {
			t.Fatalf("step %d: %d holders beyond the first chunk, %d in pairs", step, indexed, b.pairs.len())
		}
		for hash := range uint32(4) {
			v := b.heads.get(uint64(hash))
			for slot := range uint32(60) {
				_, want := ref[key{hash, slot}]
				if got := v != 0 && b.holds(v, slot); got != want {
					t.Fatalf("step %d: holds(%d, %d) = %v, want %v", step, hash, slot, got, want)
				}
			}
		}
	}
	for step := range 20000 {
		k := key{uint32(rng.IntN(4)), uint32(rng.IntN(60))}
		// Drift between filling and emptying so counts cross the chunk
		// boundaries both ways.
		fill := (step/2000)%2 == 0
		if rc := ref[k]; rc > 0 && (rng.IntN(10) < 3 || !fill && rng.IntN(10) < 9) {
			v := b.heads.get(uint64(k.hash))
			left := b.release(v, k.slot)
			if left != (rc == 1) {
				t.Fatalf("step %d: release reported %v at rc %d", step, left, rc)
			}
			if rc == 1 {
				delete(ref, k)
			} else {
				ref[k] = rc - 1
			}
		} else if fill || rng.IntN(10) == 0 {
			v := b.vec(uint64(k.hash))
			if became := b.acquire(v, k.slot); became != (ref[k] == 0) {
				t.Fatalf("step %d: acquire reported %v at rc %d", step, became, ref[k])
			}
			ref[k]++
		}
		if step%97 == 0 {
			check(step)
		}
	}
	check(-1)
	if maxIndexed < 100 || b.pairs.len() > maxIndexed/2 {
		t.Fatalf("the pairs index peaked at %d holders, ends at %d: the walk did not fill and empty it", maxIndexed, b.pairs.len())
	}
}
