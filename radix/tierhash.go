package radix

import "github.com/kvroute/kvroute/wire"

// applyTierByEngine applies a Stored event that names blocks by engine hash
// only (wire.Event.ByEngine: vLLM's offloading connector announces the CPU
// copies of GPU blocks without their tokens): each named block the worker
// holds gains the event's tier; hashes it does not hold are Unknown (their
// tokens, hence their place in the tree, are not known). A device tier is
// refused whole (Unknown): a device copy is only ever announced with tokens.
func (t *Tree) applyTierByEngine(ev *wire.Event) Result {
	var res Result
	s, ok := t.slotOf[ev.Worker]
	tb := tierBit(ev.Tier)
	if !ok || tb == devBit {
		res.Unknown = len(ev.Blocks)
		return res
	}
	if t.tiers == nil && len(ev.Blocks) > 0 {
		t.enableTiers()
	}
	eng := &t.slots[s].eng
	t.sink += eng.touch(ev.Blocks)
	for _, b := range ev.Blocks {
		id := eng.get(b.Engine)
		if id == 0 {
			res.Unknown++
			continue
		}
		bl := t.blocks.at(id)
		if t.maskOf(bl.node, s)&tb != 0 {
			continue // held in this tier already
		}
		off := int(bl.off)
		t.addTier(bl.node, s, off, off+1, tb)
		res.Stored++
	}
	return res
}
