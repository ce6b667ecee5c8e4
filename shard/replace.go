package shard

import "github.com/kvroute/kvroute/wire"

// Replace makes events the whole content of worker key k in the index: after
// the work queued before it, k's shard removes every block of k and applies
// events (Stored events of k, each block after its parent, as a recovery
// dump carries them) in one work item, so no lookup sees a half-replaced
// worker (lookups are answered between work items and steps, never inside
// one). Events of other keys are ignored. It waits until the shard has done
// it; events are copied, so the caller may reuse them at once. The worker is
// assigned a shard on first sight, as by Apply. Outcomes are counted as by
// Apply (a Stored event whose parent is unknown is a Gap).
func (ix *Index) Replace(k wire.WorkerKey, events []wire.Event) error {
	if ix.closed.Load() {
		return ErrClosed
	}
	own := make([]wire.Event, 0, len(events))
	var blocks []wire.Block
	for i := range events {
		if events[i].Worker == k {
			blocks = append(blocks, events[i].Blocks...)
		}
	}
	at := 0
	for i := range events {
		if ev := events[i]; ev.Worker == k {
			ev.Blocks = blocks[at : at+len(ev.Blocks) : at+len(ev.Blocks)]
			at += len(ev.Blocks)
			ev.LoRA = append([]byte(nil), ev.LoRA...)
			own = append(own, ev)
		}
	}
	return ix.runners[ix.shardOf(k.Worker)].Do(func(c *Core) {
		c.RemoveDpRank(k)
		c.Apply(own)
	})
}
