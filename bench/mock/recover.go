package mock

import (
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/kvroute/kvroute/bench/kvcache"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/plane"
)

// DefaultRecoveryRing is the default number of recent KV events a worker
// keeps for recovery requests (WorkerConfig.RecoveryRing).
const DefaultRecoveryRing = 4096

// maxDumpRun bounds the blocks of one Stored event of a dump (a long chain
// is cut into several events, each the parent of the next).
const maxDumpRun = 1024

// recRing is a worker's ring of recent KV events (guarded by Worker.mu).
// Slot id%len(slots) holds event id; ids first..last are held.
type recRing struct {
	slots []wire.Event // Blocks owned by the slot, reused
	first uint64       // oldest id held (0: empty)
	last  uint64
	epoch uint64 // engine incarnation, changed by Restart
}

// rememberLocked copies a step's events into the ring.
func (w *Worker) rememberLocked(evs []wire.Event) {
	r := &w.mu.rec
	if len(r.slots) == 0 {
		return
	}
	for i := range evs {
		ev := &evs[i]
		s := &r.slots[ev.ID%uint64(len(r.slots))]
		blocks := append(s.Blocks[:0], ev.Blocks...)
		*s = *ev
		s.Blocks, s.LoRA = blocks, nil
		if r.first == 0 || ev.ID < r.first {
			r.first = ev.ID
		}
		r.last = ev.ID
		if r.last-r.first >= uint64(len(r.slots)) {
			r.first = r.last - uint64(len(r.slots)) + 1
		}
	}
}

// resetRingLocked empties the ring for a new engine incarnation.
func (w *Worker) resetRingLocked() {
	w.mu.rec.first, w.mu.rec.last = 0, 0
	w.mu.rec.epoch++
}

// onRecover answers a recovery request (see plane's recovery protocol) on
// the worker's recovery subject. A paused worker does not answer, as a hung
// engine would not.
func (w *Worker) onRecover(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	req, err := plane.DecodeRecoverRequest(m.Data)
	h := plane.RecoverReply{Kind: plane.RecoverError, Last: true, Worker: req.Worker}
	if err != nil {
		w.reply(m.Reply, h, []byte(err.Error()))
		return
	}
	if req.Worker.Worker != w.cfg.ID || req.Worker.Dp != w.rank {
		// Every rank hears the worker's recovery subject: the rank asked
		// answers, and rank 0 answers for a rank the worker does not have.
		if w.rank == 0 && (req.Worker.Worker != w.cfg.ID || req.Worker.Dp >= uint32(w.cfg.DPSize)) {
			w.reply(m.Reply, h, fmt.Appendf(nil, "unknown worker key: this worker has dp ranks 0 to %d", w.cfg.DPSize-1))
		}
		return
	}
	var evs []wire.Event
	w.mu.Lock()
	if w.mu.paused || w.mu.closed {
		w.mu.Unlock()
		return
	}
	r := &w.mu.rec
	h.At = w.mu.eng.KV().NextEventID() - 1
	h.Epoch = r.epoch
	switch {
	case req.After >= h.At && req.After == h.At:
		h.Kind = plane.RecoverEvents // nothing missing
	case r.first != 0 && req.After+1 >= r.first && req.After < h.At && r.last == h.At:
		h.Kind = plane.RecoverEvents
		for id := req.After + 1; id <= h.At; id++ {
			ev := r.slots[id%uint64(len(r.slots))]
			ev.Blocks = append([]wire.Block(nil), ev.Blocks...)
			evs = append(evs, ev)
		}
	default:
		h.Kind = plane.RecoverDump
		kv := w.mu.eng.KV()
		evs = dumpEvents(kv.Held(nil), kv.HostHeld(nil), req.Worker, h.At)
	}
	w.mu.Unlock()
	w.replyEvents(m.Reply, h, evs)
}

// replyEvents sends evs in native-batch chunks of at most about
// plane.RecoverChunkBytes (an event is never split).
func (w *Worker) replyEvents(inbox string, h plane.RecoverReply, evs []wire.Event) {
	var body []byte
	from, size := 0, 0
	for i := range evs {
		n := 40 + 16*len(evs[i].Blocks)
		if i > from && size+n > plane.RecoverChunkBytes {
			body = wire.AppendNative(body[:0], evs[from:i])
			w.reply(inbox, h, body)
			h.Chunk++
			from, size = i, 0
		}
		size += n
	}
	h.Last = true
	w.reply(inbox, h, wire.AppendNative(body[:0], evs[from:]))
}

func (w *Worker) reply(inbox string, h plane.RecoverReply, body []byte) {
	if err := w.nc.Publish(inbox, plane.AppendRecoverReply(nil, h, body)); err != nil {
		w.cfg.Logger.Warn("mock: recovery reply", "worker", w.cfg.ID, "err", err)
	}
}

// dumpEvents returns Stored events that rebuild the cached blocks, those
// the device holds (device) and then the host tier's copies (host), all
// with id at: a dump replaces everything an index holds of the worker key,
// so a tier left out would be lost until the blocks are stored again,
// while the id says the index is up to date. Each block comes after its
// parent (depth first from the chain roots, a chain's run of single
// children in one event of at most maxDumpRun blocks). A block whose
// parent is in neither tier cannot be placed by an index (its prefix is
// unknown) and is left out; a host copy may hang below a device block.
func dumpEvents(device, host []kvcache.HeldBlock, k wire.WorkerKey, at uint64) []wire.Event {
	placed := make(map[wire.EngineHash]bool, len(device)+len(host))
	evs := appendTierDump(nil, device, placed, k, at, wire.TierDevice)
	return appendTierDump(evs, host, placed, k, at, wire.TierHost)
}

// appendTierDump appends the Stored events of one tier's blocks held (see
// dumpEvents) to evs: a chain starts at a block without a parent or whose
// parent is not in this tier but was placed by an earlier one. It adds the
// blocks it places to placed.
func appendTierDump(evs []wire.Event, held []kvcache.HeldBlock, placed map[wire.EngineHash]bool, k wire.WorkerKey, at uint64, tier wire.Tier) []wire.Event {
	children := make(map[wire.EngineHash][]int, len(held))
	var roots []int
	present := make(map[wire.EngineHash]bool, len(held))
	for _, b := range held {
		present[b.Engine] = true
	}
	for i, b := range held {
		switch {
		case !b.HasParent:
			roots = append(roots, i)
		case present[b.Parent]:
			children[b.Parent] = append(children[b.Parent], i)
		case placed[b.Parent]:
			roots = append(roots, i)
		}
	}
	stack := append([]int(nil), roots...)
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		b := held[i]
		ev := wire.Event{Worker: k, ID: at, Kind: wire.KindStored, Tier: tier, HasParent: b.HasParent, Parent: b.Parent}
		for {
			ev.Blocks = append(ev.Blocks, wire.Block{Engine: b.Engine, Local: b.Local})
			placed[b.Engine] = true
			kids := children[b.Engine]
			if len(kids) != 1 || len(ev.Blocks) == maxDumpRun {
				stack = append(stack, kids...)
				break
			}
			b = held[kids[0]]
		}
		evs = append(evs, ev)
	}
	return evs
}
