package kvcache

import (
	"fmt"
)

// CheckInvariants verifies the manager's internal consistency and returns the
// first violation found:
//   - the free queue is a well-linked list holding exactly the blocks with
//     no users, and its length is the free count;
//   - every block's reference count equals the number of sequence positions
//     holding it;
//   - the cache map holds exactly the hashed blocks, by engine hash;
//   - a cached block's parent is cached (the prefix property), and a free
//     cached block sits nearer the eviction end than its free parent
//     (descendants are evicted first), which is what keeps a tree of the
//     announced blocks free of orphans;
//   - every sequence has ceil(tokens/BlockSize) blocks, the first
//     tokens/BlockSize hashed and chained from Salt, the rest unhashed.
//
// It costs O(capacity + held positions); tests call it after every step, and
// the "invariants" build tag makes every mutator call it.
func (m *Manager) CheckInvariants() error {
	n := len(m.blocks)
	pos := make([]int, n) // position in the free queue, 1-based; 0 = not queued
	count := 0
	prev := uint32(0)
	for b := m.blocks[0].next; b != 0; b = m.blocks[b].next {
		if int(b) >= n || pos[b] != 0 {
			return fmt.Errorf("free queue corrupt at block %d", b)
		}
		if m.blocks[b].prev != prev {
			return fmt.Errorf("block %d: prev link %d, want %d", b, m.blocks[b].prev, prev)
		}
		count++
		pos[b] = count
		prev = b
	}
	if m.blocks[0].prev != prev {
		return fmt.Errorf("free queue tail %d, want %d", m.blocks[0].prev, prev)
	}
	if count != m.free {
		return fmt.Errorf("free queue holds %d blocks, free count %d", count, m.free)
	}
	refs := make([]int32, n)
	seqs := 0
	var err error
	m.seqIdx.each(func(id uint64, v uint32) {
		seqs++
		s := &m.seqs[v-1]
		if err != nil {
			return
		}
		if s.id != id {
			err = fmt.Errorf("seq index %d points at seq %d", id, s.id)
			return
		}
		bs := m.cfg.BlockSize
		if len(s.blocks) != (s.tokens+bs-1)/bs || s.full != s.tokens/bs {
			err = fmt.Errorf("seq %d: %d tokens in %d blocks (%d full)", id, s.tokens, len(s.blocks), s.full)
			return
		}
		parent := m.cfg.Salt
		for i, b := range s.blocks {
			refs[b]++
			blk := &m.blocks[b]
			if i < s.full {
				if !blk.hashed || blk.engine == parent {
					err = fmt.Errorf("seq %d block %d (#%d) should be full and hashed", id, i, b)
					return
				}
				if i > 0 && (!blk.hasParent || blk.parent != parent) || i == 0 && blk.hasParent {
					err = fmt.Errorf("seq %d block %d: parent link broken", id, i)
					return
				}
				parent = blk.engine
			} else if blk.hashed {
				err = fmt.Errorf("seq %d partial block %d (#%d) is hashed", id, i, b)
				return
			}
		}
		if s.last != parent {
			err = fmt.Errorf("seq %d: chain state %x, want %x", id, s.last, parent)
		}
	})
	if err != nil {
		return err
	}
	if seqs+len(m.spare) != len(m.seqs) {
		return fmt.Errorf("%d live + %d spare seq slots, %d total", seqs, len(m.spare), len(m.seqs))
	}
	hashed := 0
	for b := 1; b < n; b++ {
		blk := &m.blocks[b]
		if blk.refs != refs[b] {
			return fmt.Errorf("block %d: refs %d, held by %d positions", b, blk.refs, refs[b])
		}
		if (blk.refs == 0) != (pos[b] != 0) {
			return fmt.Errorf("block %d: refs %d but queued=%v", b, blk.refs, pos[b] != 0)
		}
		if !blk.hashed {
			continue
		}
		hashed++
		if got := m.cache.get(blk.engine); got != uint32(b) {
			return fmt.Errorf("block %d: cache maps its hash to %d", b, got)
		}
		if !blk.hasParent {
			continue
		}
		p := m.cache.get(blk.parent)
		if p == 0 {
			return fmt.Errorf("block %d cached without its parent %x", b, blk.parent)
		}
		if pos[b] != 0 && pos[p] != 0 && pos[p] < pos[b] {
			return fmt.Errorf("free block %d is evicted after its parent %d", b, p)
		}
		if pos[b] == 0 && pos[p] != 0 {
			return fmt.Errorf("block %d is used but its parent %d is free", b, p)
		}
	}
	if hashed != m.cache.n {
		return fmt.Errorf("%d hashed blocks, cache map holds %d", hashed, m.cache.n)
	}
	return nil
}
