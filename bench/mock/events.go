package mock

import (
	"maps"
	"time"

	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/plane"
)

// outbox holds one step's encoded event messages between the engine lock
// and the publishing (loop goroutine only). Its buffers are reused.
type outbox struct {
	buf  []byte
	msgs []span
	vb   wire.VLLMBatch
	toks []uint32
	offs []int
	hs   []wire.EngineHash
	drop float64 // fault switches for this step's messages
	dup  float64
	cut  bool
}

type span struct{ from, to int }

// dynamoTopic is the topic field of Dynamo event-plane envelopes.
var dynamoTopic = []byte("kv-events")

// encode encodes evs in the worker's transport format. Called with w.mu held
// (evs are views into the engine's outbox).
func (o *outbox) encode(w *Worker, evs []wire.Event) {
	o.buf, o.msgs = o.buf[:0], o.msgs[:0]
	o.drop, o.dup, o.cut = w.mu.drop, w.mu.dup, w.mu.cut
	if len(evs) == 0 {
		return
	}
	switch w.cfg.Transport {
	case plane.TransportDynamo:
		h := wire.DynamoHeader{PublisherID: w.cfg.ID, PublishedAt: uint64(time.Now().UnixMilli()), Topic: dynamoTopic}
		for i := range evs {
			w.seq++
			h.Sequence = w.seq
			from := len(o.buf)
			o.buf = wire.AppendDynamo(o.buf, &h, &evs[i])
			o.msgs = append(o.msgs, span{from, len(o.buf)})
		}
	case plane.TransportNative:
		o.buf = wire.AppendNative(o.buf, evs)
		o.msgs = append(o.msgs, span{0, len(o.buf)})
	case plane.TransportZMQ:
		o.encodeVLLM(w, evs)
	}
}

// keptBlock is a cached block's tokens and the tiers holding it, so that
// a host-tier Stored event (an offload, long after the request that filled
// the block ended) can carry the block's tokens as vLLM events must.
type keptBlock struct {
	tokens []uint32
	tiers  uint8
}

// keep tracks the tokens of cached blocks across tiers (ZMQ with a host
// tier only): a Stored event records them, a Removed of the last tier drops
// them. Host copies the engine drops silently (below an evicted ancestor)
// are pruned when the map outgrows both tiers twice over.
func (w *Worker) keep(evs []wire.Event) {
	if w.mu.kept == nil {
		w.mu.kept = make(map[wire.EngineHash]keptBlock)
	}
	for i := range evs {
		ev := &evs[i]
		bit := uint8(1) << ev.Tier
		switch ev.Kind {
		case wire.KindStored:
			for _, b := range ev.Blocks {
				k := w.mu.kept[b.Engine]
				if k.tokens == nil {
					if e := w.mu.toks[b.Local]; e != nil {
						k.tokens = e.tokens
					} else {
						k.tokens = appendSynthetic(nil, b.Local, w.cfg.BlockSize)
					}
				}
				k.tiers |= bit
				w.mu.kept[b.Engine] = k
			}
		case wire.KindRemoved:
			for _, b := range ev.Blocks {
				if k, ok := w.mu.kept[b.Engine]; ok {
					if k.tiers &^= bit; k.tiers == 0 {
						delete(w.mu.kept, b.Engine)
					} else {
						w.mu.kept[b.Engine] = k
					}
				}
			}
		case wire.KindCleared:
			clear(w.mu.kept)
		}
	}
	if len(w.mu.kept) > 2*(w.cfg.KVBlocks+w.cfg.HostKVBlocks) {
		live := map[wire.EngineHash]bool{}
		kv := w.mu.eng.KV()
		for _, b := range kv.HostHeld(kv.Held(nil)) {
			live[b.Engine] = true
		}
		maps.DeleteFunc(w.mu.kept, func(e wire.EngineHash, _ keptBlock) bool { return !live[e] })
	}
}

// encodeVLLM encodes evs as one vLLM batch of the worker's dp rank.
func (o *outbox) encodeVLLM(w *Worker, evs []wire.Event) {
	bs := w.cfg.BlockSize
	if w.cfg.HostKVBlocks > 0 {
		w.keep(evs)
	}
	o.toks, o.offs = o.toks[:0], o.offs[:0]
	for i := range evs {
		o.offs = append(o.offs, len(o.toks))
		if evs[i].Kind != wire.KindStored {
			continue
		}
		for _, b := range evs[i].Blocks {
			if k, ok := w.mu.kept[b.Engine]; ok {
				o.toks = append(o.toks, k.tokens...)
			} else if e := w.mu.toks[b.Local]; e != nil {
				o.toks = append(o.toks, e.tokens...)
			} else {
				o.toks = appendSynthetic(o.toks, b.Local, bs)
			}
		}
	}
	o.vb.TS = float64(time.Now().UnixNano()) / 1e9
	o.vb.HasDPRank, o.vb.DPRank = true, int(w.rank)
	o.hs = o.hs[:0]
	for i := range evs {
		for _, b := range evs[i].Blocks {
			o.hs = append(o.hs, b.Engine)
		}
	}
	o.vb.Events = o.vb.Events[:0]
	at := 0
	for i := range evs {
		ev := &evs[i]
		ve := wire.VLLMEvent{Kind: ev.Kind, Medium: vllmMedium[ev.Tier]}
		if ev.Kind != wire.KindCleared {
			ve.BlockHashes = o.hs[at : at+len(ev.Blocks)]
		}
		at += len(ev.Blocks)
		if ev.Kind == wire.KindStored {
			ve.HasParent, ve.Parent, ve.BlockSize = ev.HasParent, ev.Parent, bs
			ve.Tokens = o.toks[o.offs[i] : o.offs[i]+len(ev.Blocks)*bs]
		}
		o.vb.Events = append(o.vb.Events, ve)
	}
	o.buf = wire.AppendVLLMBatch(o.buf, &o.vb, wire.VLLMEncoding{})
	o.msgs = append(o.msgs, span{0, len(o.buf)})
	clear(o.vb.Events)
}

// vllmMedium is vLLM's medium string of each tier ("GPU"; its offloading
// connector's "CPU"; "DISK" as LMCache-style connectors write it).
var vllmMedium = [...]string{wire.TierDevice: "GPU", wire.TierHost: "CPU", wire.TierDisk: "DISK", wire.TierExternal: "EXTERNAL"}

// appendSynthetic appends stand-in token ids for a stored block whose
// tokens the worker no longer knows. It is not expected: a block is stored
// while a running call, which references its tokens, fills it.
func appendSynthetic(dst []uint32, local wire.BlockHash, bs int) []uint32 {
	x := uint64(local)
	for range bs {
		x += 0x9e3779b97f4a7c15
		z := (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		dst = append(dst, uint32(z^(z>>31))&0x3ffff)
	}
	return dst
}

// publish sends the encoded messages, applying the drop and duplicate
// fault switches (loop goroutine, without w.mu).
func (o *outbox) publish(w *Worker) {
	for _, m := range o.msgs {
		msg := o.buf[m.from:m.to]
		copies := 1
		if o.cut {
			copies = 0
		} else if o.drop > 0 && w.rng.Float64() < o.drop {
			copies = 0
		} else if o.dup > 0 && w.rng.Float64() < o.dup {
			copies = 2
		}
		switch w.cfg.Transport {
		case plane.TransportZMQ:
			if copies == 0 {
				w.pub.Skip(msg)
				continue
			}
			// A duplicate on ZMQ is the same batch again under a new
			// sequence number, as a resending engine would produce.
			for range copies {
				if _, err := w.pub.Publish(msg); err != nil {
					w.cfg.Logger.Warn("mock: zmq publish", "worker", w.cfg.ID, "err", err)
				}
			}
		default:
			subject := w.cfg.Subjects.KVEvents
			if w.cfg.Transport == plane.TransportNative {
				subject = w.cfg.Subjects.KVEventsNative
			}
			for range copies {
				if err := w.nc.Publish(subject, msg); err != nil {
					w.cfg.Logger.Warn("mock: publish kv events", "worker", w.cfg.ID, "err", err)
				}
			}
		}
	}
}
