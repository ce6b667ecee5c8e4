package kvmodel

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/kvroute/kvroute/wire"
)

// Block is one cached block of a worker (plain data).
type Block struct {
	Engine    wire.EngineHash
	Local     wire.BlockHash
	Parent    wire.EngineHash // meaningful only when HasParent
	HasParent bool
}

type worker struct {
	blocks   map[wire.EngineHash]Block
	children map[wire.EngineHash]int
	byLocal  map[edge]wire.EngineHash // (parent, local) -> block, for Match
	lastID   uint64
}

// edge names a block by its parent (root: hasParent false) and local hash.
type edge struct {
	parent    wire.EngineHash
	hasParent bool
	local     wire.BlockHash
}

func edgeOf(b Block) edge { return edge{b.Parent, b.HasParent, b.Local} }

// Model is the replay model. Not goroutine-safe; the zero value is an empty
// model ready to use.
type Model struct {
	workers map[wire.WorkerKey]*worker
	events  int
}

func (m *Model) worker(k wire.WorkerKey) *worker {
	if m.workers == nil {
		m.workers = make(map[wire.WorkerKey]*worker)
	}
	w := m.workers[k]
	if w == nil {
		w = &worker{
			blocks:   make(map[wire.EngineHash]Block),
			children: make(map[wire.EngineHash]int),
			byLocal:  make(map[edge]wire.EngineHash),
		}
		m.workers[k] = w
	}
	return w
}

// Events returns the number of events applied.
func (m *Model) Events() int { return m.events }

// Apply applies one event. Event ids must be contiguous from 1 per worker
// (id 0 is accepted without a check). On error the model is unchanged.
func (m *Model) Apply(ev *wire.Event) error {
	w := m.worker(ev.Worker)
	if ev.ID != 0 && ev.ID != w.lastID+1 {
		return fmt.Errorf("worker %v: event id %d after %d", ev.Worker, ev.ID, w.lastID)
	}
	switch ev.Kind {
	case wire.KindStored:
		if ev.HasParent {
			if _, ok := w.blocks[ev.Parent]; !ok {
				return fmt.Errorf("event %d: stored under unknown parent %x", ev.ID, ev.Parent)
			}
		}
		seen := make(map[wire.EngineHash]bool, len(ev.Blocks))
		e := edge{parent: ev.Parent, hasParent: ev.HasParent}
		if !e.hasParent {
			e.parent = 0
		}
		for _, b := range ev.Blocks {
			if _, ok := w.blocks[b.Engine]; ok || seen[b.Engine] {
				return fmt.Errorf("event %d: block %x stored twice", ev.ID, b.Engine)
			}
			seen[b.Engine] = true
			// Within the event each block is new, so only the first can
			// collide with a cached sibling of the same content.
			e.local = b.Local
			if _, ok := w.byLocal[e]; ok {
				return fmt.Errorf("event %d: local hash %x stored twice under one parent", ev.ID, b.Local)
			}
			e = edge{parent: b.Engine, hasParent: true}
		}
		e = edge{parent: ev.Parent, hasParent: ev.HasParent}
		if !e.hasParent {
			e.parent = 0
		}
		for _, b := range ev.Blocks {
			nb := Block{Engine: b.Engine, Local: b.Local, HasParent: e.hasParent, Parent: e.parent}
			if nb.HasParent {
				w.children[nb.Parent]++
			}
			w.blocks[b.Engine] = nb
			w.byLocal[edgeOf(nb)] = b.Engine
			e = edge{parent: b.Engine, hasParent: true}
		}
	case wire.KindRemoved:
		gone := make(map[wire.EngineHash]bool, len(ev.Blocks))
		for _, b := range ev.Blocks {
			if _, ok := w.blocks[b.Engine]; !ok || gone[b.Engine] {
				return fmt.Errorf("event %d: removed unknown block %x", ev.ID, b.Engine)
			}
			gone[b.Engine] = true
		}
		// Every child of a removed block must be removed by the same event.
		kids := make(map[wire.EngineHash]int, len(ev.Blocks))
		for _, b := range ev.Blocks {
			if cb := w.blocks[b.Engine]; cb.HasParent && gone[cb.Parent] {
				kids[cb.Parent]++
			}
		}
		for _, b := range ev.Blocks {
			if left := w.children[b.Engine] - kids[b.Engine]; left != 0 {
				return fmt.Errorf("event %d: removed block %x keeps %d cached children", ev.ID, b.Engine, left)
			}
		}
		for _, b := range ev.Blocks {
			cb := w.blocks[b.Engine]
			if cb.HasParent {
				w.children[cb.Parent]--
			}
			delete(w.byLocal, edgeOf(cb))
			delete(w.blocks, b.Engine)
			delete(w.children, b.Engine)
		}
	case wire.KindCleared:
		clear(w.blocks)
		clear(w.children)
		clear(w.byLocal)
	default:
		return fmt.Errorf("event %d: unknown kind %v", ev.ID, ev.Kind)
	}
	if ev.ID != 0 {
		w.lastID = ev.ID
	}
	m.events++
	return nil
}

// Blocks returns worker k's cached blocks sorted by engine hash.
func (m *Model) Blocks(k wire.WorkerKey) []Block {
	w := m.workers[k]
	if w == nil {
		return nil
	}
	out := make([]Block, 0, len(w.blocks))
	for _, b := range w.blocks {
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b Block) int { return cmp.Compare(a.Engine, b.Engine) })
	return out
}

// Path returns the local hashes from the root to block e of worker k, or nil
// if k does not cache e.
func (m *Model) Path(k wire.WorkerKey, e wire.EngineHash) []wire.BlockHash {
	w := m.workers[k]
	if w == nil {
		return nil
	}
	var rev []wire.BlockHash
	for {
		b, ok := w.blocks[e]
		if !ok {
			return nil
		}
		rev = append(rev, b.Local)
		if !b.HasParent {
			break
		}
		e = b.Parent
	}
	slices.Reverse(rev)
	return rev
}

// Check compares worker k's cached blocks with want (any order) and
// describes the first difference.
func (m *Model) Check(k wire.WorkerKey, want []Block) error {
	got := m.Blocks(k)
	w := slices.Clone(want)
	slices.SortFunc(w, func(a, b Block) int { return cmp.Compare(a.Engine, b.Engine) })
	for i := 0; i < max(len(got), len(w)); i++ {
		switch {
		case i >= len(got):
			return fmt.Errorf("worker %v: events lack held block %+v (%d held, %d replayed)", k, w[i], len(w), len(got))
		case i >= len(w):
			return fmt.Errorf("worker %v: events keep block %+v the manager does not hold (%d held, %d replayed)", k, got[i], len(w), len(got))
		case got[i] != w[i]:
			return fmt.Errorf("worker %v: replayed %+v, held %+v", k, got[i], w[i])
		}
	}
	return nil
}

// Match returns how many leading blocks of a prompt with local hashes local
// worker k caches (its overlap, as an index answers it).
func (m *Model) Match(k wire.WorkerKey, local []wire.BlockHash) int {
	w := m.workers[k]
	if w == nil {
		return 0
	}
	e := edge{}
	for i, l := range local {
		e.local = l
		b, ok := w.byLocal[e]
		if !ok {
			return i
		}
		e = edge{parent: b, hasParent: true}
	}
	return len(local)
}

// Workers returns the workers the model has seen, in no particular order.
func (m *Model) Workers() []wire.WorkerKey {
	out := make([]wire.WorkerKey, 0, len(m.workers))
	for k := range m.workers {
		out = append(out, k)
	}
	return out
}
