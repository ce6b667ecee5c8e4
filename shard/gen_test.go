package shard

import (
	"math/rand/v2"
	"slices"

	"github.com/kvroute/kvroute/wire"
)

// eventGen produces random but plausible KV event streams for a set of
// workers: blocks follow a small branching tree of local hashes so that
// workers share prefixes, engine hashes are unique per worker, and some
// events reference parents or blocks that are gone (gaps, unknown removals).
type eventGen struct {
	rng     *rand.Rand
	workers []wire.WorkerKey
	known   map[wire.WorkerKey][]genBlock // blocks stored per worker (may be stale)
	branch  uint64                        // children per local-hash node
	tierPct int                           // percent of Stored and Removed events in the host tier
}

type genBlock struct {
	engine wire.EngineHash
	path   []wire.BlockHash // local hashes from the root to this block
}

func newEventGen(seed uint64, workers []wire.WorkerKey) *eventGen {
	return &eventGen{
		rng:     rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		workers: workers,
		known:   make(map[wire.WorkerKey][]genBlock),
		branch:  3,
	}
}

// engineOf is a worker's engine hash for the block at a position (local
// hashes chain over the path, so the local hash names the position): stable
// per worker and position, as an engine's is, so re-stores never conflict.
func engineOf(k wire.WorkerKey, local wire.BlockHash) wire.EngineHash {
	return wire.EngineHash(wire.ChainHash(wire.SeqHash(k.Worker<<8|uint64(k.Dp)), local))
}

func childHash(parent wire.BlockHash, i uint64) wire.BlockHash {
	return wire.BlockHash(wire.ChainHash(wire.SeqHash(parent)+1, wire.BlockHash(i)))
}

// event appends one random event to dst. Its Blocks are freshly allocated.
func (g *eventGen) event(dst []wire.Event) []wire.Event {
	k := g.workers[g.rng.IntN(len(g.workers))]
	ev := wire.Event{Worker: k, ID: g.rng.Uint64()}
	known := g.known[k]
	switch r := g.rng.IntN(100); {
	case r < 70 || len(known) == 0:
		ev.Kind = wire.KindStored
		var path []wire.BlockHash
		parent := wire.BlockHash(0)
		if len(known) > 0 && g.rng.IntN(3) > 0 {
			p := known[g.rng.IntN(len(known))]
			ev.HasParent, ev.Parent = true, p.engine
			path, parent = p.path, p.path[len(p.path)-1]
		}
		if g.rng.IntN(50) == 0 { // a parent the worker never had: a gap
			ev.HasParent, ev.Parent = true, wire.EngineHash(g.rng.Uint64())
		}
		n := 1 + g.rng.IntN(4)
		for range n {
			h := childHash(parent, g.rng.Uint64N(g.branch))
			path = append(path[:len(path):len(path)], h)
			e := engineOf(k, h)
			ev.Blocks = append(ev.Blocks, wire.Block{Engine: e, Local: h})
			if !slices.ContainsFunc(g.known[k], func(b genBlock) bool { return b.engine == e }) {
				g.known[k] = append(g.known[k], genBlock{engine: e, path: path})
			}
			parent = h
		}
	case r < 97:
		ev.Kind = wire.KindRemoved
		for range 1 + g.rng.IntN(3) {
			if g.rng.IntN(10) == 0 {
				ev.Blocks = append(ev.Blocks, wire.Block{Engine: wire.EngineHash(g.rng.Uint64())})
				continue
			}
			gone := known[g.rng.IntN(len(known))].path
			ev.Blocks = append(ev.Blocks, wire.Block{Engine: engineOf(k, gone[len(gone)-1])})
			// The tree drops the block's descendants with it.
			known = slices.DeleteFunc(known, func(b genBlock) bool {
				return len(b.path) >= len(gone) && slices.Equal(b.path[:len(gone)], gone)
			})
			if len(known) == 0 {
				break
			}
		}
		g.known[k] = known
	default:
		ev.Kind = wire.KindCleared
		for _, w := range g.workers {
			if w.Worker == k.Worker {
				delete(g.known, w)
			}
		}
	}
	if ev.Kind != wire.KindCleared && g.rng.IntN(100) < g.tierPct {
		ev.Tier = wire.TierHost
	}
	return append(dst, ev)
}

// probe returns local hashes along a random path of the generator's tree,
// usually one some worker stored.
func (g *eventGen) probe() []wire.BlockHash {
	var path []wire.BlockHash
	if k := g.workers[g.rng.IntN(len(g.workers))]; len(g.known[k]) > 0 && g.rng.IntN(4) > 0 {
		b := g.known[k][g.rng.IntN(len(g.known[k]))]
		path = append(path, b.path...)
	}
	parent := wire.BlockHash(0)
	if len(path) > 0 {
		parent = path[len(path)-1]
	}
	for range g.rng.IntN(3) {
		h := childHash(parent, g.rng.Uint64N(g.branch))
		path = append(path, h)
		parent = h
	}
	if len(path) == 0 {
		path = append(path, childHash(0, 0))
	}
	return path
}

// cloneEvents deep-copies events (Blocks and LoRA).
func cloneEvents(evs []wire.Event) []wire.Event {
	out := make([]wire.Event, len(evs))
	for i, ev := range evs {
		out[i] = ev
		out[i].Blocks = append([]wire.Block(nil), ev.Blocks...)
		out[i].LoRA = append([]byte(nil), ev.LoRA...)
	}
	return out
}
