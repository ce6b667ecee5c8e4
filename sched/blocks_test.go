package sched

import (
	"math/rand/v2"
	"testing"

	"github.com/kvroute/kvroute/wire"
)

// TestBlockIndexModel drives the block index with random acquires and
// releases on few hashes and many slots (so blocks have dozens of holders
// in several chunks) against a map of reference counts, and checks
// holders, counts, membership and the holder records after every step.
func TestBlockIndexModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var b blockIndex
	b.init()
	type key struct{ hash, slot uint32 }
	ref := map[key]uint32{}
	maxHolders, lastMax := 0, 0
	check := func(step int) {
		t.Helper()
		live, most := 0, 0
		for _, cell := range b.heads.cells {
			if cell == 0 {
				continue
			}
			v := uint32(cell)
			c := struct{ key uint64 }{b.vecs[v].hash}
			vec := &b.vecs[v]
			hs := b.appendHolders(nil, v)
			if len(hs) != int(vec.n) || vec.n == 0 {
				t.Fatalf("step %d: hash %d: %d holders listed, n %d", step, c.key, len(hs), vec.n)
			}
			for _, h := range hs {
				if ref[key{uint32(c.key), h.slot}] != h.rc {
					t.Fatalf("step %d: hash %d slot %d: rc %d, want %d", step, c.key, h.slot, h.rc, ref[key{uint32(c.key), h.slot}])
				}
			}
			live += len(hs)
			most = max(most, len(hs))
		}
		if live != len(ref) || live != b.live {
			t.Fatalf("step %d: %d holders, %d referenced, live %d", step, live, len(ref), b.live)
		}
		maxHolders, lastMax = max(maxHolders, most), most
		for id := range b.recs {
			r := b.recs[id]
			if r.rc == 0 {
				continue
			}
			if e := b.entryAt(&b.vecs[r.vec], r.pos); e.id != uint32(id) {
				t.Fatalf("step %d: record %d at %d of vector %d holds record %d", step, id, r.pos, r.vec, e.id)
			}
		}
		for hash := range uint32(4) {
			v := b.heads.get(uint64(hash), b.vecs, nil)
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
			v := b.heads.get(uint64(k.hash), b.vecs, nil)
			id, ok := b.locate(&b.vecs[v], k.slot)
			if !ok {
				t.Fatalf("step %d: hash %d slot %d not found", step, k.hash, k.slot)
			}
			left := b.release(id)
			if left != (rc == 1) {
				t.Fatalf("step %d: release reported %v at rc %d", step, left, rc)
			}
			if rc == 1 {
				delete(ref, k)
			} else {
				ref[k] = rc - 1
			}
		} else if fill || rng.IntN(10) == 0 {
			var became bool
			if rng.IntN(2) == 0 {
				v := b.vec(uint64(k.hash))
				_, became = b.acquire(v, k.slot, 0, 0)
			} else { // by hash: creates absent vectors with their first holder
				_, _, became = b.acquireHash(uint64(k.hash), k.slot, 0, 0)
			}
			if became != (ref[k] == 0) {
				t.Fatalf("step %d: acquire reported %v at rc %d", step, became, ref[k])
			}
			ref[k]++
		}
		if step%97 == 0 {
			check(step)
		}
	}
	check(-1)
	if maxHolders < 40 || lastMax > maxHolders/2 {
		t.Fatalf("blocks peaked at %d holders, end at %d: the walk did not fill and empty them", maxHolders, lastMax)
	}
}

// TestCountHeldMatchesNaive books random requests (chains of a few families
// at random lengths, so holders shrink along a prefix; arbitrary hash lists
// with repeats, so predecessors disagree) and compares countHeld, which
// counts runs of blocks with the same holders in one visit, with a count
// from the active requests' block lists.
func TestCountHeldMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	cfg := testConfig()
	s, err := New(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	const ranks = 30
	for w := range ranks {
		s.AddWorker(wire.WorkerKey{Worker: uint64(w + 1)}, Capacity{})
	}
	blocks := func() []wire.SeqHash {
		n := rng.IntN(12)
		hs := make([]wire.SeqHash, n)
		fam := uint64(rng.IntN(3))
		arbitrary := rng.IntN(4) == 0
		for j := range hs {
			if arbitrary {
				hs[j] = wire.SeqHash(rng.IntN(3)<<32 | rng.IntN(12) + 1)
			} else {
				hs[j] = wire.SeqHash(fam<<32 | uint64(j+1))
			}
		}
		return hs
	}
	type active struct {
		slot   int
		blocks []wire.SeqHash
	}
	live := map[uint64]active{}
	runs := 0
	for step := range 6000 {
		id := uint64(1 + rng.IntN(400))
		if _, ok := live[id]; ok {
			s.Free(id, 0)
			delete(live, id)
		} else {
			slot := rng.IntN(ranks)
			bs := blocks()
			if err := s.AddRequest(id, wire.WorkerKey{Worker: uint64(slot + 1)}, bs, 0, 0, PrefillLoadHint{}, 0); err != nil {
				t.Fatal(err)
			}
			live[id] = active{slot, bs}
		}
		q := blocks()
		gen := s.nextGen()
		s.countHeld(q, gen)
		s.untouch()
		// Naive: which ranks hold each hash, then walk until no rank does.
		holds := make(map[wire.SeqHash]map[int]bool)
		for _, a := range live {
			for _, h := range a.blocks {
				if holds[h] == nil {
					holds[h] = map[int]bool{}
				}
				holds[h][a.slot] = true
			}
		}
		want := make([]uint32, ranks)
		for _, h := range q {
			if len(holds[h]) == 0 {
				break
			}
			for r := range holds[h] {
				want[r]++
			}
		}
		for r := range ranks {
			if got := s.heldOf(r, gen); got != want[r] {
				t.Fatalf("step %d: blocks %v: rank %d holds %d, want %d", step, q, r, got, want[r])
			}
		}
		if want[0] > 1 {
			runs++
		}
		if step%100 == 0 {
			if err := s.CheckInvariants(); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
		}
	}
	if runs < 100 {
		t.Fatalf("only %d queries with a rank holding several blocks", runs)
	}
}

// Private blocks (docs/decisions/0023-private-blocks.md): a block booked where no rank has it is indexed
// under its request until a lookup finds it. Every way of finding one (a
// held-count walk, another booking on the same or another rank, the same
// request repeating the hash, a walk that enters mid-request) must promote it
// to the state a booking would have made, with the counts unchanged.
func TestPrivateBlocks(t *testing.T) {
	s, err := New(testConfig(), 1)
	if err != nil {
		t.Fatal(err)
	}
	w1, w2 := wire.WorkerKey{Worker: 1}, wire.WorkerKey{Worker: 2}
	for _, w := range []wire.WorkerKey{w1, w2} {
		s.AddWorker(w, Capacity{TotalBlocks: 1000})
	}
	hs := func(xs ...uint64) []wire.SeqHash {
		out := make([]wire.SeqHash, len(xs))
		for i, x := range xs {
			out[i] = wire.SeqHash(x)
		}
		return out
	}
	check := func(step string, blocks []wire.SeqHash, wantHeld, wantActive [2]int) {
		t.Helper()
		if err := s.CheckInvariants(); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		ls := s.AppendLoads(nil, blocks, 0)
		for k, l := range ls {
			if int(l.HeldBlocks) != wantHeld[k] || int(l.ActiveBlocks) != wantActive[k] {
				t.Fatalf("%s: worker %d held %d active %d, want %d %d", step, k+1, l.HeldBlocks, l.ActiveBlocks, wantHeld[k], wantActive[k])
			}
		}
		if err := s.CheckInvariants(); err != nil {
			t.Fatalf("%s, after the walk: %v", step, err)
		}
	}
	add := func(id uint64, w wire.WorkerKey, blocks []wire.SeqHash) {
		t.Helper()
		if err := s.AddRequest(id, w, blocks, 64, 0, PrefillLoadHint{}, 0); err != nil {
			t.Fatal(err)
		}
	}
	add(1, w1, hs(1, 2, 3, 4))
	if s.blocks.npriv != 4 || s.blocks.live != 0 {
		t.Fatalf("a new request's blocks: %d private, %d records; want 4, 0", s.blocks.npriv, s.blocks.live)
	}
	// A walk that enters mid-request finds block 3 and promotes 1..3.
	check("walk from 3", hs(3, 4, 9), [2]int{2, 0}, [2]int{4, 0})
	add(2, w2, hs(1, 2, 7))    // another rank shares 1, 2 (already vectors)
	add(3, w1, hs(5, 5, 6, 5)) // a request repeating its own private hash
	check("repeat", hs(5, 6), [2]int{2, 0}, [2]int{6, 3})
	add(4, w2, hs(7, 8)) // another booking finds request 2's private 7
	check("other rank", hs(1, 2, 7, 8), [2]int{2, 4}, [2]int{6, 4})
	add(5, w1, hs(8, 1)) // arbitrary order: 8 is request 4's (now a vector after the walk)
	check("arbitrary", hs(8), [2]int{1, 1}, [2]int{7, 4})
	for id := uint64(1); id <= 5; id++ {
		s.Free(id, 0)
		if err := s.CheckInvariants(); err != nil {
			t.Fatalf("free %d: %v", id, err)
		}
	}
	if s.blocks.npriv != 0 || s.blocks.live != 0 || s.blocks.heads.n != 0 {
		t.Fatalf("after freeing all: %d private, %d records, %d cells", s.blocks.npriv, s.blocks.live, s.blocks.heads.n)
	}
	if s.promotions == 0 {
		t.Fatal("nothing promoted")
	}
}

// Private stretches (Config.ChainedHashes): a request's blocks
// found nowhere are one stretch with one table cell, its first block's. A
// walk sharing a prefix of the stretch promotes that prefix (each promoted
// block indexed) and indexes the stretch's new first block; a booking of
// the same prompt on another rank does the same; freeing deletes the one
// cell. Held counts match the per-block index's.
func TestPrivateStretch(t *testing.T) {
	cfg := testConfig()
	cfg.ChainedHashes = true
	s, err := New(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	w1, w2 := wire.WorkerKey{Worker: 1}, wire.WorkerKey{Worker: 2}
	for _, w := range []wire.WorkerKey{w1, w2} {
		s.AddWorker(w, Capacity{TotalBlocks: 1000})
	}
	seq := func(locals ...uint64) []wire.SeqHash {
		ls := make([]wire.BlockHash, len(locals))
		for i, l := range locals {
			ls[i] = wire.BlockHash(l)
		}
		return wire.SequenceHashes(nil, ls)
	}
	state := func(step string, npriv, live, cells int) {
		t.Helper()
		if err := s.CheckInvariants(); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if s.blocks.npriv != npriv || s.blocks.live != live || s.blocks.heads.n != cells {
			t.Fatalf("%s: %d private, %d records, %d cells; want %d, %d, %d", step, s.blocks.npriv, s.blocks.live, s.blocks.heads.n, npriv, live, cells)
		}
	}
	held := func(step string, blocks []wire.SeqHash, want [2]uint32) {
		t.Helper()
		for k, l := range s.AppendLoads(nil, blocks, 0) {
			if l.HeldBlocks != want[k] {
				t.Fatalf("%s: worker %d holds %d, want %d", step, k+1, l.HeldBlocks, want[k])
			}
		}
	}
	if err := s.AddRequest(1, w1, seq(1, 2, 3, 4, 5, 6), 24, 0, PrefillLoadHint{}, 0); err != nil {
		t.Fatal(err)
	}
	state("one request", 6, 0, 1)
	held("walk of a shared prefix", seq(1, 2, 3, 9), [2]uint32{3, 0}) // promotes 1..3
	state("after the walk", 3, 3, 3+1)                                // 3 vectors, the stretch from 4
	held("walk of the rest", seq(1, 2, 3, 4, 5, 6), [2]uint32{6, 0})  // promotes 4..6
	state("all promoted", 0, 6, 6)
	if err := s.AddRequest(2, w2, seq(7, 8, 9, 10), 16, 0, PrefillLoadHint{}, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.AddRequest(3, w1, seq(7, 8, 11), 12, 0, PrefillLoadHint{}, 0); err != nil {
		t.Fatal(err) // a booking finds request 2's stretch: promotes 7, 8
	}
	state("a booking shares a prefix", 2+1, 6+2+2, 6+2+1+1)
	held("both", seq(7, 8, 9), [2]uint32{2, 3})
	for id := uint64(1); id <= 3; id++ {
		s.Free(id, 0)
		if err := s.CheckInvariants(); err != nil {
			t.Fatalf("free %d: %v", id, err)
		}
	}
	state("after freeing all", 0, 0, 0)
}
