package radix

import (
	"fmt"
	"math/bits"
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
	hw, actW := t.hdrWords(), 3
	if t.sparse {
		actW = 7
		if err := t.checkSparse(); err != nil {
			return err
		}
	}
	if len(t.sets) != len(t.nodes)*hw {
		return fmt.Errorf("sets has %d words for %d nodes × %d", len(t.sets), len(t.nodes), hw)
	}
	if t.tiers != nil && (len(t.tiers) != len(t.nodes)*numTiers*hw || len(t.act) != actW*t.w) {
		return fmt.Errorf("tiers has %d words, act %d, for %d nodes × %d", len(t.tiers), len(t.act), len(t.nodes), t.w)
	}
	if t.nodes[0].live || !t.nodes[rootID].live || t.nodes[rootID].n != 0 || t.nodes[rootID].parent != 0 {
		return fmt.Errorf("nil or root node malformed: %+v %+v", t.nodes[0], t.nodes[rootID])
	}
	if !t.emptySet(rootID) {
		return fmt.Errorf("root has workers")
	}
	seen := make([]bool, len(t.nodes))
	seenBlock := make([]bool, t.blocks.len())
	held := make([]int, len(t.slots))
	var chunkUse [numClasses]map[uint32]bool
	for c := range chunkUse {
		chunkUse[c] = map[uint32]bool{}
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
			if err := t.checkNode(x, held, seenBlock, chunkUse[:]); err != nil {
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
				cw, xw := t.setWords(c, make([]uint64, t.w)), t.setWords(x, make([]uint64, t.w))
				for i, w := range cw {
					if w&^xw[i] != 0 {
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
	for id := t.freeBlock; id != 0; id = t.blocks.at(id).node {
		if int(id) >= t.blocks.len() || seenBlock[id] || t.blocks.at(id).off != freeOff {
			return fmt.Errorf("free block %d is live or out of range", id)
		}
		seenBlock[id] = true
		if freeB++; freeB > t.blocks.len() {
			return fmt.Errorf("block free list cycles")
		}
	}
	if liveB+freeB != t.blocks.len()-1 {
		return fmt.Errorf("%d live + %d free blocks != %d", liveB, freeB, t.blocks.len()-1)
	}
	// Run chunks: every chunk of a page is of the page's class, used by one
	// node or on its class's free list.
	pageClass := make([]int, len(t.runs.loc))
	for p := range pageClass {
		pageClass[p] = -1
	}
	for c := range numClasses {
		if o := t.runs.open[c]; o != 0 {
			if int(o) > len(t.runs.loc) || pageClass[o-1] >= 0 {
				return fmt.Errorf("class %d: open page %d out of range or shared", c, o-1)
			}
			pageClass[o-1] = c
		}
	}
	for c := range numClasses {
		for a := range chunkUse[c] {
			p := int(a >> runPageShift)
			if pageClass[p] < 0 {
				pageClass[p] = c
			} else if pageClass[p] != c {
				return fmt.Errorf("page %d holds chunks of classes %d and %d", p, pageClass[p], c)
			}
		}
	}
	handed := t.runs.blocks()
	for c := range numClasses {
		size := runSize(uint8(c))
		if len(chunkUse[c]) != int(t.runs.live[c]) {
			return fmt.Errorf("class %d: %d chunks used, live %d", c, len(chunkUse[c]), t.runs.live[c])
		}
		nfree := 0
		for f := t.runs.free[c]; f != 0; f = t.runs.ids[(f-1)>>runPageShift][(f-1)&runOffMask] {
			a := f - 1
			p, off := int(a>>runPageShift), int(a&runOffMask)
			if p >= len(t.runs.loc) || off+size > len(t.runs.loc[p]) || off%size != 0 || chunkUse[c][a] {
				return fmt.Errorf("class %d: free chunk %d in use or out of range", c, a)
			}
			if pageClass[p] < 0 {
				pageClass[p] = c
			} else if pageClass[p] != c {
				return fmt.Errorf("page %d holds chunks of classes %d and %d", p, pageClass[p], c)
			}
			chunkUse[c][a] = true
			if nfree++; nfree > handed {
				return fmt.Errorf("class %d: free list cycles", c)
			}
		}
	}
	chunks := make([]int, numClasses)
	for p, c := range pageClass {
		if c < 0 {
			return fmt.Errorf("runs page %d belongs to no class", p)
		}
		size := runSize(uint8(c))
		if n := len(t.runs.loc[p]); n%size != 0 || len(t.runs.ids[p]) != n || cap(t.runs.loc[p]) > pageBlocks(uint8(c)) {
			return fmt.Errorf("runs page %d of class %d: %d blocks, capacity %d", p, c, n, cap(t.runs.loc[p]))
		}
		if p+1 != int(t.runs.open[c]) && len(t.runs.loc[p]) != pageBlocks(uint8(c)) {
			return fmt.Errorf("runs page %d of class %d is not full and not open", p, c)
		}
		chunks[c] += len(t.runs.loc[p]) / size
	}
	for c := range numClasses {
		if len(chunkUse[c]) != chunks[c] {
			return fmt.Errorf("class %d: %d chunks used or free of %d", c, len(chunkUse[c]), chunks[c])
		}
	}
	return t.checkSlots(held)
}

// checkNode checks one non-root node's run, blocks and set.
func (t *Tree) checkNode(x uint32, held []int, seenBlock []bool, chunkUse []map[uint32]bool) error {
	nd := t.nodes[x]
	if nd.n == 0 || int(nd.n) > runSize(nd.class) || (t.maxRun > 0 && int(nd.n) > t.maxRun) {
		return fmt.Errorf("node %d: run of %d in class %d", x, nd.n, nd.class)
	}
	if p, off := int(nd.run>>runPageShift), int(nd.run&runOffMask); p >= len(t.runs.loc) || off+runSize(nd.class) > len(t.runs.loc[p]) || off%runSize(nd.class) != 0 {
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
		if id == 0 || int(id) >= t.blocks.len() || seenBlock[id] {
			return fmt.Errorf("node %d: block id %d invalid or shared", x, id)
		}
		seenBlock[id] = true
		if b := t.blocks.at(id); b.node != x || b.off != uint32(i) {
			return fmt.Errorf("node %d: block %d at %d records node %d off %d", x, id, i, b.node, b.off)
		}
	}
	if t.emptySet(x) {
		return fmt.Errorf("node %d has no workers", x)
	}
	if t.tiers != nil {
		set := t.setWords(x, make([]uint64, t.w))
		for i := range set {
			var union uint64
			for k := range numTiers {
				union |= t.tierWords(x, k, make([]uint64, t.w))[i]
			}
			if union != set[i] {
				return fmt.Errorf("node %d: tier sets' union %#x, set %#x (word %d)", x, union, set[i], i)
			}
		}
	}
	for wi, w := range t.setWords(x, make([]uint64, t.w)) {
		for ; w != 0; w &= w - 1 {
			s := wi*64 + bits.TrailingZeros64(w)
			if s >= len(t.slots) || !t.slots[s].live {
				return fmt.Errorf("node %d holds dead slot %d", x, s)
			}
			held[s] += int(nd.n)
		}
	}
	return nil
}

// checkSlots checks slots against the per-slot block counts and the nodes.
func (t *Tree) checkSlots(held []int) error {
	owner := make([]uint32, t.blocks.len())
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
			if !isFree[s] || sl.eng.count != 0 || sl.size != 0 || held[s] != 0 {
				return fmt.Errorf("dead slot %d not free or not empty", s)
			}
			continue
		}
		liveSlots++
		if int(s) >= 64*t.w {
			return fmt.Errorf("slot %d beyond set width %d", s, t.w)
		}
		if got, ok := t.slotOf[sl.key]; !ok || got != uint32(s) {
			return fmt.Errorf("slot %d key %v maps to %d %v", s, sl.key, got, ok)
		}
		if sl.eng.count == 0 {
			return fmt.Errorf("slot %d is live but empty", s)
		}
		if sl.size != sl.eng.count {
			return fmt.Errorf("slot %d (%v): size %d, table count %d", s, sl.key, sl.size, sl.eng.count)
		}
		if int(sl.eng.count) != held[s] {
			return fmt.Errorf("slot %d (%v): table holds %d, nodes %d", s, sl.key, sl.eng.count, held[s])
		}
		if err := sl.eng.check(); err != nil {
			return fmt.Errorf("slot %d: %v", s, err)
		}
		n := 0
		for i := range sl.eng.e {
			id := sl.eng.e[i].val
			if id == 0 {
				continue
			}
			n++
			k := sl.eng.e[i].key()
			if sl.eng.get(k) != id {
				return fmt.Errorf("slot %d: engine hash %x not found at its probe position", s, k)
			}
			if int(id) >= t.blocks.len() || t.blocks.at(id).off == freeOff || !t.has(t.blocks.at(id).node, uint32(s)) {
				return fmt.Errorf("slot %d: engine hash %x maps to block %d it does not hold", s, k, id)
			}
			if owner[id] == uint32(s)+1 {
				return fmt.Errorf("slot %d: two engine hashes map to block %d", s, id)
			}
			owner[id] = uint32(s) + 1
		}
		if n != int(sl.eng.count) {
			return fmt.Errorf("slot %d: %d entries, count %d", s, n, sl.eng.count)
		}
	}
	if liveSlots != len(t.slotOf) {
		return fmt.Errorf("%d live slots, slot map holds %d", liveSlots, len(t.slotOf))
	}
	return t.checkPool()
}

// checkPool checks the engine-table pool's counts and bound, that every
// table and pooled array is of a size class, and that no pooled array is a
// table's.
func (t *Tree) checkPool() error {
	p := &t.pool
	var live int64
	inUse := make(map[*engEntry]bool)
	for s := range t.slots {
		m := &t.slots[s].eng
		if len(m.e) == 0 {
			continue
		}
		live += m.bytes()
		if c := engClassOf(len(m.e)); engClasses[c] != len(m.e) {
			return fmt.Errorf("slot %d: %d slots is not a size class", s, len(m.e))
		}
		inUse[&m.e[0]] = true
	}
	if live != p.live {
		return fmt.Errorf("pool counts %d live table bytes, tables hold %d", p.live, live)
	}
	var held int64
	for c, l := range p.free {
		for _, a := range l {
			if len(a.e) != engClasses[c] || len(a.ctrl) != len(a.e)+groupLen {
				return fmt.Errorf("pool class %d (%d slots) holds %d slots, %d control bytes", c, engClasses[c], len(a.e), len(a.ctrl))
			}
			if inUse[&a.e[0]] {
				return fmt.Errorf("pool class %d holds a live table's array", c)
			}
			inUse[&a.e[0]] = true
			held += int64(len(a.e))*13 + groupLen
		}
	}
	if held != p.held {
		return fmt.Errorf("pool counts %d bytes held, holds %d", p.held, held)
	}
	if p.held*engPoolDen > p.live {
		return fmt.Errorf("pool holds %d bytes, over 1/%d of %d live", p.held, engPoolDen, p.live)
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
