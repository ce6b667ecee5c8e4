package kvcache

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"

	"github.com/kvroute/kvroute/bench/kvcache/kvmodel"
	"github.com/kvroute/kvroute/wire"
)

// localOf names a block's content: its local hash is the name's xxh3.
func localOf(name string) wire.BlockHash { return wire.BlockHash(xxh3.HashString(name)) }

// toModel converts Held output for kvmodel.Check.
func toModel(held []HeldBlock) []kvmodel.Block {
	out := make([]kvmodel.Block, len(held))
	for i, h := range held {
		out[i] = kvmodel.Block{Engine: h.Engine, Local: h.Local, Parent: h.Parent, HasParent: h.HasParent}
	}
	return out
}

// verify drains m's events into model and checks that the replayed blocks
// are exactly the held ones, and the manager's invariants.
func verify(m *Manager, model *kvmodel.Model) error {
	for _, ev := range m.Events() {
		if err := model.Apply(&ev); err != nil {
			return err
		}
	}
	m.Reset()
	if err := m.CheckInvariants(); err != nil {
		return err
	}
	return model.Check(m.Config().Worker, toModel(m.Held(nil)))
}

// harness runs kvcache scripts: blocks are named by path ("a/b" is block b
// after a) so engine hashes print readably.
type harness struct {
	m     *Manager
	model kvmodel.Model
	names map[wire.EngineHash]string
}

func newHarness(cfg Config) *harness {
	return &harness{m: New(cfg), names: map[wire.EngineHash]string{}}
}

// hashes converts block names to local hashes, naming their engine hashes.
func (h *harness) hashes(names []string) []wire.BlockHash {
	out := make([]wire.BlockHash, len(names))
	parent, path := h.m.Config().Salt, ""
	for i, n := range names {
		out[i] = localOf(n)
		e := EngineHash(parent, out[i])
		path += n
		h.names[e] = path
		path += "/"
		parent = uint64(e)
	}
	return out
}

func (h *harness) name(e wire.EngineHash) string {
	if n, ok := h.names[e]; ok {
		return n
	}
	return fmt.Sprintf("%x", uint64(e))
}

// events prints and verifies the outbox.
func (h *harness) events(t testing.TB, b *strings.Builder) {
	for _, ev := range h.m.Events() {
		fmt.Fprintf(b, "%d %s", ev.ID, ev.Kind)
		if ev.Kind == wire.KindStored {
			if ev.HasParent {
				fmt.Fprintf(b, " parent=%s", h.name(ev.Parent))
			} else {
				b.WriteString(" root")
			}
		}
		if ev.Kind != wire.KindCleared {
			b.WriteString(" [")
			for i, blk := range ev.Blocks {
				if i > 0 {
					b.WriteByte(' ')
				}
				b.WriteString(h.name(blk.Engine))
			}
			b.WriteString("]")
		}
		b.WriteByte('\n')
	}
	if err := verify(h.m, &h.model); err != nil {
		t.Fatal(err)
	}
}

func (h *harness) held() string {
	var lines []string
	for _, b := range h.m.Held(nil) {
		lines = append(lines, fmt.Sprintf("%s refs=%d", h.name(b.Engine), b.Refs))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// queue prints the free queue from the eviction end; _ is a block without a
// hash.
func (h *harness) queue() string {
	var parts []string
	for b := h.m.blocks[0].next; b != 0; b = h.m.blocks[b].next {
		if blk := &h.m.blocks[b]; blk.hashed {
			parts = append(parts, h.name(wire.EngineHash(blk.engine)))
		} else {
			parts = append(parts, "_")
		}
	}
	return strings.Join(parts, " ")
}
