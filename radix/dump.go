package radix

import "github.com/kvroute/kvroute/wire"

// Dump appends Stored events that, applied to an empty tree in order, rebuild
// an equal tree, and returns dst: per worker key (in slot order), one event
// per maximal chain of its nodes held in the same tiers, parents before
// children, repeated once per tier that holds the chain (device first).
// Every event's Blocks is freshly allocated. Dump allocates O(blocks)
// scratch.
func (t *Tree) Dump(dst []wire.Event) []wire.Event {
	if t.nodes == nil {
		return dst
	}
	engineOf := make([]wire.EngineHash, t.blocks.len())
	type start struct {
		x         uint32
		hasParent bool
		parent    wire.EngineHash
	}
	var stack []start
	for s := range t.slots {
		sl := &t.slots[s]
		if !sl.live {
			continue
		}
		for i := range sl.eng.e {
			if e := &sl.eng.e[i]; e.val != 0 {
				engineOf[e.val] = e.key()
			}
		}
		for c := t.nodes[rootID].first; c != 0; c = t.nodes[c].next {
			if t.has(c, uint32(s)) {
				stack = append(stack, start{x: c})
			}
		}
		for len(stack) > 0 {
			st := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			ev := wire.Event{Worker: sl.key, Kind: wire.KindStored, HasParent: st.hasParent, Parent: st.parent}
			x := st.x
			for {
				loc, ids := t.runOf(x)
				for i, id := range ids {
					ev.Blocks = append(ev.Blocks, wire.Block{Engine: engineOf[id], Local: loc[i]})
				}
				// Follow x's only child held by s in the same tiers; at a
				// branch or a change of tiers, queue them all.
				next, held := uint32(0), 0
				for c := t.nodes[x].first; c != 0; c = t.nodes[c].next {
					if t.has(c, uint32(s)) {
						next = c
						held++
					}
				}
				if held == 1 && t.maskOf(next, uint32(s)) == t.maskOf(x, uint32(s)) {
					x = next
					continue
				}
				if held > 0 {
					last := ev.Blocks[len(ev.Blocks)-1].Engine
					for c := t.nodes[x].first; c != 0; c = t.nodes[c].next {
						if t.has(c, uint32(s)) {
							stack = append(stack, start{x: c, hasParent: true, parent: last})
						}
					}
				}
				break
			}
			m := t.maskOf(x, uint32(s))
			for k := range wire.Tier(numTiers) {
				if m&tierBit(k) == 0 {
					continue
				}
				m &^= tierBit(k)
				e := ev
				e.Tier = k
				if m != 0 {
					e.Blocks = append([]wire.Block(nil), ev.Blocks...) // each event owns its blocks
				}
				dst = append(dst, e)
			}
		}
	}
	return dst
}
