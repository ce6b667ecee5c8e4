package kvcache

import (
	"errors"
	"flag"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvroute/kvroute/bench/kvcache/kvmodel"
	"github.com/kvroute/kvroute/wire"
)

var seedFlag = flag.Uint64("seed", 0, "seed for randomized tests (0: time-based, logged)")

func testSeed(t testing.TB) uint64 {
	s := *seedFlag
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -seed %d)", s, s)
	return s
}

// liveSeq is the test's view of a running sequence.
type liveSeq struct {
	id     uint64
	local  []wire.BlockHash // full blocks known so far (prompt, then decoded)
	tokens int
}

// randomOps drives m with a random mix of allocations (chunked), growth
// (prefill chunks and decode), frees, preemptions and rare clears, with
// prompts drawn from a small alphabet so prefixes are shared, calling after
// each step. It checks Allocate's reuse count against Match.
func randomOps(t testing.TB, rng *rand.Rand, m *Manager, steps int, after func(step int)) {
	bs := m.Config().BlockSize
	var live []liveSeq
	next := uint64(1)
	randLocal := func() wire.BlockHash { return wire.BlockHash(rng.IntN(3)*7919 + 1) }
	for step := range steps {
		switch r := rng.IntN(100); {
		case r < 35 || len(live) == 0:
			n := rng.IntN(7)
			local := make([]wire.BlockHash, n)
			for i := range local {
				local[i] = randLocal()
			}
			total := n*bs + rng.IntN(bs)
			first := total
			if rng.IntN(3) == 0 {
				first = rng.IntN(total + 1) // chunked prefill
			}
			want := m.Match(local[:first/bs])
			reused, err := m.Allocate(next, local, first)
			switch {
			case errors.Is(err, ErrNoSpace):
			case err != nil:
				t.Fatalf("step %d: allocate: %v", step, err)
			case reused != want:
				t.Fatalf("step %d: reused %d blocks, Match said %d", step, reused, want)
			default:
				live = append(live, liveSeq{id: next, local: local, tokens: first})
			}
			next++
		case r < 70:
			s := &live[rng.IntN(len(live))]
			tokens := s.tokens + 1 + rng.IntN(2*bs)
			for len(s.local) < tokens/bs { // decode beyond the prompt
				s.local = append(s.local, randLocal())
			}
			if _, err := m.Grow(s.id, s.local, tokens); err == nil {
				s.tokens = tokens
			} else if !errors.Is(err, ErrNoSpace) {
				t.Fatalf("step %d: grow: %v", step, err)
			}
		case r < 99:
			i := rng.IntN(len(live))
			var ok bool
			if r < 92 {
				ok = m.Free(live[i].id)
			} else {
				ok = m.Preempt(live[i].id)
			}
			if !ok {
				t.Fatalf("step %d: seq %d not found", step, live[i].id)
			}
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
		default:
			m.Clear()
			live = live[:0]
		}
		if m.Sequences() != len(live) {
			t.Fatalf("step %d: %d sequences, want %d", step, m.Sequences(), len(live))
		}
		after(step)
	}
}

// TestRandomEventsReproduceHeld is the key property: after any sequence of
// operations, the events emitted so far, replayed into an empty strict model,
// give exactly the blocks the manager holds; and the internal invariants
// hold after every step.
func TestRandomEventsReproduceHeld(t *testing.T) {
	seed := testSeed(t)
	for _, c := range []struct{ capacity, block int }{{6, 1}, {16, 4}, {64, 2}, {200, 16}} {
		rng := rand.New(rand.NewPCG(seed, uint64(c.capacity)))
		m := New(Config{Capacity: c.capacity, BlockSize: c.block, Worker: wire.WorkerKey{Worker: 3, Dp: 1}})
		var model kvmodel.Model
		probe := make([]wire.BlockHash, 6)
		missed := func() bool {
			st := m.Stats()
			return st.RemovedBlocks == 0 || st.ReusedBlocks == 0 || st.Clears == 0 || (c.capacity < 100 && st.NoSpace == 0)
		}
		// Rounds of 3000 steps until the mix has taken every path (a
		// round can miss a rare one, e.g. NoSpace at capacity 64 with
		// some seeds), at most 10 rounds.
		for round := 0; round == 0 || (missed() && round < 10); round++ {
			if round > 0 {
				m.Clear() // randomOps starts with no live sequences
			}
			randomOps(t, rng, m, 3000, func(step int) {
				if err := verify(m, &model); err != nil {
					t.Fatalf("capacity %d block %d round %d step %d: %v", c.capacity, c.block, round, step, err)
				}
				for i := range probe {
					probe[i] = wire.BlockHash(rng.IntN(3)*7919 + 1)
				}
				if got, want := model.Match(m.Config().Worker, probe), m.Match(probe); got != want {
					t.Fatalf("round %d step %d: replayed overlap %d, manager's %d", round, step, got, want)
				}
			})
		}
		if missed() {
			t.Errorf("capacity %d: the mix missed a path in 30000 steps: %+v", c.capacity, m.Stats())
		}
	}
}

// TestEngineHashPerWorker: the same prompt gets the same local hashes but
// different engine hashes on different workers (the salt), and engine
// hashes differ from local and sequence hashes.
func TestEngineHashPerWorker(t *testing.T) {
	local := []wire.BlockHash{localOf("a"), localOf("b")}
	var held [2][]HeldBlock
	for w := range 2 {
		m := New(Config{Capacity: 4, BlockSize: 2, Worker: wire.WorkerKey{Worker: uint64(w)}})
		if _, err := m.Allocate(1, local, 4); err != nil {
			t.Fatal(err)
		}
		held[w] = m.Held(nil)
		ev := m.Events()
		if len(ev) != 1 || ev[0].Worker.Worker != uint64(w) || ev[0].ID != 1 || len(ev[0].Blocks) != 2 {
			t.Fatalf("events %+v", ev)
		}
	}
	seq := wire.SequenceHashes(nil, local)
	for i := range 2 {
		a, b := held[0][i], held[1][i]
		if a.Local != b.Local || a.Engine == b.Engine {
			t.Fatalf("block %d: %+v vs %+v", i, a, b)
		}
		if uint64(a.Engine) == uint64(a.Local) || uint64(a.Engine) == uint64(seq[i]) {
			t.Fatalf("engine hash equals a router hash: %+v", a)
		}
	}
	m := New(Config{Capacity: 1, BlockSize: 1, Salt: 42})
	if m.Config().Salt != 42 {
		t.Fatal("explicit salt ignored")
	}
}
