package radix

import (
	"fmt"

	"github.com/kvroute/kvroute/wire"
)

// CheckInvariants verifies the whole tree and returns the first violation it
// finds: parent, child and sibling links and the edge table; canonical form
// (every non-root node has workers, holds its parent's workers' subset, and
// differs in set from an only child); block records; per-worker sizes against
// the nodes and every engine-table entry against the nodes; the node, block,
// chunk and slot free lists disjoint from live ones. It costs O(size) and
// allocates; tests call it, and every mutation does under -tags invariants.
func (t *Tree) CheckInvariants() error {
	if t.nodes == nil {
		return nil
	}
	if len(t.sets) != len(t.nodes) {
		return fmt.Errorf("%d sets for %d nodes", len(t.sets), len(t.nodes))
	}
	if t.nodes[0].live || !t.nodes[rootID].live || t.nodes[rootID].n != 0 || t.nodes[rootID].parent != 0 {
		return fmt.Errorf("nil or root node malformed: %+v %+v", t.nodes[0], t.nodes[rootID])
	}
	if !t.emptySet(rootID) {
		return fmt.Errorf("root has workers")
	}
	seen := make([]bool, len(t.nodes))
	seenBlock := make([]bool, len(t.blocks))
	held := make([]int, len(t.slots))
	var chunkUse, setUse [numClasses]map[uint32]bool
	for c := range chunkUse {
		chunkUse[c], setUse[c] = map[uint32]bool{}, map[uint32]bool{}
	}
	live, edges := 0, 0
	stack := []uint32{rootID}
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[x] {
			return fmt.Errorf("node %d reached twice", x)
		}
		seen[x] = true
		live++
		nd := t.nodes[x]
		if !nd.live {
			return fmt.Errorf("node %d reachable but not live", x)
		}
		if x != rootID {
			if err := t.checkNode(x, held, seenBlock, chunkUse[:], setUse[:]); err != nil {
				return err
			}
		}
		count := 0
		prev := uint32(0)
		for c := nd.first; c != 0; c = t.nodes[c].next {
			cn := t.nodes[c]
			if cn.parent != x || cn.prev != prev {
				return fmt.Errorf("node %d: child %d has parent %d prev %d, want %d %d", x, c, cn.parent, cn.prev, x, prev)
			}
			if got := t.children.get(x, cn.head); got != c {
				return fmt.Errorf("edge table maps (%d, %x) to %d, want %d", x, cn.head, got, c)
			}
			if x != rootID {
				for _, m := range t.members(c) {
					if !t.has(x, m>>memberShift) {
						return fmt.Errorf("node %d holds workers its parent %d does not", c, x)
					}
				}
			}
			count++
			if count > len(t.nodes) {
				return fmt.Errorf("node %d: sibling list cycles", x)
			}
			prev = c
			stack = append(stack, c)
		}
		if count != int(nd.nchild) {
			return fmt.Errorf("node %d: %d children listed, nchild %d", x, count, nd.nchild)
		}
		if x != rootID && count == 1 && t.sameSet(x, nd.first) && t.maxRun == 0 {
			return fmt.Errorf("node %d and its only child %d have the same workers (not merged)", x, nd.first)
		}
		edges += count
	}
	if live != t.liveNodes {
		return fmt.Errorf("%d nodes reachable, liveNodes %d", live, t.liveNodes)
	}
	if edges != t.children.count {
		return fmt.Errorf("%d edges, edge table holds %d", edges, t.children.count)
	}
	for _, e := range t.children.e {
		if e.child != 0 && (int(e.child) >= len(t.nodes) || !seen[e.child] || t.nodes[e.child].parent != e.parent || t.nodes[e.child].head != e.head) {
			return fmt.Errorf("stale edge-table entry %+v", e)
		}
	}
	// Free nodes.
	free := 0
	for x := t.freeNode; x != 0; x = t.nodes[x].next {
		if int(x) >= len(t.nodes) || seen[x] || t.nodes[x].live {
			return fmt.Errorf("free node %d is live or out of range", x)
		}
		if !t.emptySet(x) {
			return fmt.Errorf("free node %d has workers", x)
		}
		seen[x] = true
		if free++; free > len(t.nodes) {
			return fmt.Errorf("node free list cycles")
		}
	}
	if live+free != len(t.nodes)-1 {
		return fmt.Errorf("%d live + %d free nodes != %d", live, free, len(t.nodes)-1)
	}
	// Blocks.
	liveB := 0
	for _, b := range seenBlock {
		if b {
			liveB++
		}
	}
	if liveB != t.liveBlocks {
		return fmt.Errorf("%d blocks in runs, liveBlocks %d", liveB, t.liveBlocks)
	}
	freeB := 0
	for id := t.freeBlock; id != 0; id = t.blocks[id].node {
		if int(id) >= len(t.blocks) || seenBlock[id] || t.blocks[id].off != freeOff {
			return fmt.Errorf("free block %d is live or out of range", id)
		}
		seenBlock[id] = true
		if freeB++; freeB > len(t.blocks) {
			return fmt.Errorf("block free list cycles")
		}
	}
	if liveB+freeB != len(t.blocks)-1 {
		return fmt.Errorf("%d live + %d free blocks != %d", liveB, freeB, len(t.blocks)-1)
	}
	// Run chunks.
	for c := range numClasses {
		chunks := uint32(len(t.runs.loc[c]) >> c)
		if len(chunkUse[c]) != int(t.runs.live[c]) {
			return fmt.Errorf("class %d: %d chunks used, live %d", c, len(chunkUse[c]), t.runs.live[c])
		}
		nfree := 0
		for f := t.runs.free[c]; f != 0; f = t.runs.ids[c][(f-1)<<c] {
			if f-1 >= chunks || chunkUse[c][f-1] {
				return fmt.Errorf("class %d: free chunk %d in use or out of range", c, f-1)
			}
			chunkUse[c][f-1] = true
			if nfree++; nfree > int(chunks) {
				return fmt.Errorf("class %d: free list cycles", c)
			}
		}
		if uint32(len(chunkUse[c])) != chunks {
			return fmt.Errorf("class %d: %d chunks used or free of %d", c, len(chunkUse[c]), chunks)
		}
	}
	// Set chunks.
	for c := range numClasses {
		chunks := uint32(len(t.pool.m[c]) >> c)
		if len(setUse[c]) != int(t.pool.live[c]) {
			return fmt.Errorf("set class %d: %d chunks used, live %d", c, len(setUse[c]), t.pool.live[c])
		}
		nfree := 0
		for f := t.pool.free[c]; f != 0; f = t.pool.m[c][(f-1)<<c] {
			if f-1 >= chunks || setUse[c][f-1] {
				return fmt.Errorf("set class %d: free chunk %d in use or out of range", c, f-1)
			}
			setUse[c][f-1] = true
			if nfree++; nfree > int(chunks) {
				return fmt.Errorf("set class %d: free list cycles", c)
			}
		}
		if uint32(len(setUse[c])) != chunks {
			return fmt.Errorf("set class %d: %d chunks used or free of %d", c, len(setUse[c]), chunks)
		}
	}
	return t.checkSlots(held)
}

// checkNode checks one non-root node's run, blocks and set.
func (t *Tree) checkNode(x uint32, held []int, seenBlock []bool, chunkUse, setUse []map[uint32]bool) error {
	nd := t.nodes[x]
	if nd.n == 0 || int(nd.n) > 1<<nd.class || (t.maxRun > 0 && int(nd.n) > t.maxRun) {
		return fmt.Errorf("node %d: run of %d in class %d", x, nd.n, nd.class)
	}
	if int(nd.run+1)<<nd.class > len(t.runs.loc[nd.class]) {
		return fmt.Errorf("node %d: chunk %d of class %d out of range", x, nd.run, nd.class)
	}
	if chunkUse[nd.class][nd.run] {
		return fmt.Errorf("node %d: chunk %d of class %d shared", x, nd.run, nd.class)
	}
	chunkUse[nd.class][nd.run] = true
	loc, ids := t.runOf(x)
	if loc[0] != nd.head {
		return fmt.Errorf("node %d: head %x, run starts %x", x, nd.head, loc[0])
	}
	for i, id := range ids {
		if id == 0 || int(id) >= len(t.blocks) || seenBlock[id] {
			return fmt.Errorf("node %d: block id %d invalid or shared", x, id)
		}
		seenBlock[id] = true
		if b := t.blocks[id]; b.node != x || b.off != uint32(i) {
			return fmt.Errorf("node %d: block %d at %d records node %d off %d", x, id, i, b.node, b.off)
		}
	}
	if t.emptySet(x) {
		return fmt.Errorf("node %d has no workers", x)
	}
	if r := t.sets[x]; r.n > 1 {
		k := r.ref[0]
		if int(r.n) > 1<<r.cls || int(k+1)<<r.cls > len(t.pool.m[r.cls]) || setUse[r.cls][k] {
			return fmt.Errorf("node %d: set of %d in chunk %d of class %d: too small, out of range or shared", x, r.n, k, r.cls)
		}
		setUse[r.cls][k] = true
		if r.cls > 0 && int(r.n)*4 < 1<<r.cls {
			return fmt.Errorf("node %d: set of %d in a chunk of %d", x, r.n, 1<<r.cls)
		}
	} else if r.cls != 0 {
		return fmt.Errorf("node %d: inline set of %d with class %d", x, r.n, r.cls)
	}
	prev := -1
	for _, m := range t.members(x) {
		s := int(m >> memberShift)
		if s <= prev {
			return fmt.Errorf("node %d: set not sorted (slot %d after %d)", x, s, prev)
		}
		prev = s
		if m&maskBits == 0 || (!t.tiered && m&maskBits != devBit) {
			return fmt.Errorf("node %d: slot %d has tier mask %#x (tiered %v)", x, s, m&maskBits, t.tiered)
		}
		if s >= len(t.slots) || !t.slots[s].live {
			return fmt.Errorf("node %d holds dead slot %d", x, s)
		}
		held[s] += int(nd.n)
	}
	return nil
}

// checkSlots checks slots against the per-slot block counts and the nodes.
func (t *Tree) checkSlots(held []int) error {
	owner := make([]uint32, len(t.blocks))
	isFree := make([]bool, len(t.slots))
	for _, s := range t.freeSlots {
		if int(s) >= len(t.slots) || t.slots[s].live || isFree[s] {
			return fmt.Errorf("free slot %d live, duplicated or out of range", s)
		}
		isFree[s] = true
	}
	liveSlots := 0
	for s := range t.slots {
		sl := &t.slots[s]
		if !sl.live {
			if !isFree[s] || sl.eng.count() != 0 || held[s] != 0 {
				return fmt.Errorf("dead slot %d not free or not empty", s)
			}
			continue
		}
		liveSlots++
		if s >= maxSlots {
			return fmt.Errorf("slot %d beyond %d", s, maxSlots)
		}
		if got, ok := t.slotOf[sl.key]; !ok || got != uint32(s) {
			return fmt.Errorf("slot %d key %v maps to %d %v", s, sl.key, got, ok)
		}
		if sl.eng.count() == 0 {
			return fmt.Errorf("slot %d is live but empty", s)
		}
		if int(sl.eng.count()) != held[s] {
			return fmt.Errorf("slot %d (%v): table holds %d, nodes %d", s, sl.key, sl.eng.count(), held[s])
		}
		if err := sl.eng.full.check(); err != nil && len(sl.eng.full.e) > 0 {
			return fmt.Errorf("slot %d: %v", s, err)
		}
		if err := sl.eng.ids.check(t.blocks); err != nil {
			return fmt.Errorf("slot %d: %v", s, err)
		}
		n := 0
		var bad error
		sl.eng.each(t.blocks, func(k wire.EngineHash, id uint32) {
			n++
			switch {
			case bad != nil:
			case sl.eng.get(k, t.blocks) != id:
				bad = fmt.Errorf("slot %d: engine hash %x not found at its probe position", s, k)
			case int(id) >= len(t.blocks) || t.blocks[id].off == freeOff || !t.has(t.blocks[id].node, uint32(s)):
				bad = fmt.Errorf("slot %d: engine hash %x maps to block %d it does not hold", s, k, id)
			case owner[id] == uint32(s)+1:
				bad = fmt.Errorf("slot %d: two engine hashes map to block %d", s, id)
			}
			owner[id] = uint32(s) + 1
		})
		if bad != nil {
			return bad
		}
		for i := range sl.eng.full.e {
			if e := &sl.eng.full.e[i]; e.val != 0 && t.blocks[e.val].eng == e.key() {
				return fmt.Errorf("slot %d: engine hash %x of block %d, its recorded hash, is in the full table", s, e.key(), e.val)
			}
		}
		if n != int(sl.eng.count()) {
			return fmt.Errorf("slot %d: %d entries, count %d", s, n, sl.eng.count())
		}
	}
	if liveSlots != len(t.slotOf) {
		return fmt.Errorf("%d live slots, slot map holds %d", liveSlots, len(t.slotOf))
	}
	return nil
}

// check verifies the control bytes against the entries and the mirror.
func (m *engineTable) check() error {
	n := len(m.e)
	if len(m.ctrl) != n+groupLen {
		return fmt.Errorf("%d control bytes for %d slots", len(m.ctrl), n)
	}
	for i := range m.e {
		c := m.ctrl[i]
		if (c == 0) != (m.e[i].val == 0) {
			return fmt.Errorf("slot %d: control %#x, value %d", i, c, m.e[i].val)
		}
		if c != 0 {
			if _, fp := probe(m.e[i].key(), n); c != fp {
				return fmt.Errorf("slot %d: control %#x, fingerprint %#x", i, c, fp)
			}
		}
	}
	for i := range groupLen {
		if m.ctrl[n+i] != m.ctrl[i] {
			return fmt.Errorf("mirror byte %d differs", i)
		}
	}
	return nil
}

// check verifies the control bytes against the ids and the mirror.
func (m *idTable) check(bl []block) error {
	n := len(m.ids)
	if n == 0 {
		return nil
	}
	if len(m.ctrl) != n+groupLen {
		return fmt.Errorf("%d control bytes for %d id slots", len(m.ctrl), n)
	}
	for i, id := range m.ids {
		c := m.ctrl[i]
		if (c == 0) != (id == 0) {
			return fmt.Errorf("id slot %d: control %#x, id %d", i, c, id)
		}
		if c != 0 {
			if int(id) >= len(bl) {
				return fmt.Errorf("id slot %d: block %d out of range", i, id)
			}
			if _, fp := probe(bl[id].eng, n); c != fp {
				return fmt.Errorf("id slot %d: control %#x, fingerprint %#x", i, c, fp)
			}
		}
	}
	for i := range groupLen {
		if m.ctrl[n+i] != m.ctrl[i] {
			return fmt.Errorf("id mirror byte %d differs", i)
		}
	}
	return nil
}
