package wire

import (
	"encoding/binary"
	"math"

	"github.com/tinylib/msgp/msgp"
)

// DynamoHeader is the envelope of a message on Dynamo's event plane.
// Topic is a view into the message.
type DynamoHeader struct {
	PublisherID uint64
	Sequence    uint64
	PublishedAt uint64 // milliseconds since the epoch
	Topic       []byte
}

// DecodeDynamo decodes one event-plane message: a msgpack map
// {publisher_id, sequence, published_at, topic, payload} whose payload (bin)
// holds a msgpack RouterEvent, and appends the event to b. On error b is
// left unchanged. A RouterEvent of a kind kvroute does not know is counted
// in b.Ignored and appends nothing.
func DecodeDynamo(b *Batch, msg []byte) (DynamoHeader, error) {
	var h DynamoHeader
	m := b.mark()
	n, o, err := readMapHeader(msg)
	if err != nil {
		return h, malformed("dynamo envelope", err)
	}
	gotPayload := false
	for range n {
		var key []byte
		if key, o, err = msgp.ReadMapKeyZC(o); err != nil {
			return h, fail(b, m, malformed("dynamo envelope key", err))
		}
		switch string(key) {
		case "publisher_id":
			h.PublisherID, o, err = readUint(o)
		case "sequence":
			h.Sequence, o, err = readUint(o)
		case "published_at":
			h.PublishedAt, o, err = readUint(o)
		case "topic":
			h.Topic, o, err = readOptString(o)
		case "payload":
			var p []byte
			if p, o, err = readOptString(o); err == nil {
				if gotPayload || p == nil {
					return h, fail(b, m, malformed("dynamo envelope: payload missing or twice", nil))
				}
				gotPayload = true
				if err = DecodeDynamoEvent(b, p); err != nil {
					return h, fail(b, m, err)
				}
			}
		default:
			o, err = msgp.Skip(o)
		}
		if err != nil {
			return h, fail(b, m, malformed("dynamo envelope "+string(key), err))
		}
	}
	if !gotPayload {
		return h, fail(b, m, malformed("dynamo envelope without payload", nil))
	}
	if len(o) != 0 {
		return h, fail(b, m, malformed("dynamo envelope", errTrailing))
	}
	return h, nil
}

func fail(b *Batch, m mark, err error) error {
	b.rollback(m)
	return err
}

// DecodeDynamoEvent decodes a bare msgpack RouterEvent
// {worker_id, storage_tier, event: {event_id, dp_rank, data}} and appends it
// to b; data is {"stored": {parent_hash, blocks: [{block_hash, tokens_hash}]}},
// {"removed": {block_hashes}} or "cleared". On error b is left unchanged.
func DecodeDynamoEvent(b *Batch, p []byte) error {
	m := b.mark()
	o, err := decodeRouterEvent(b, p)
	if err == nil && len(o) != 0 {
		err = malformed("dynamo RouterEvent", errTrailing)
	}
	if err != nil {
		b.rollback(m)
	}
	return err
}

func decodeRouterEvent(b *Batch, o []byte) ([]byte, error) {
	n, o, err := readMapHeader(o)
	if err != nil {
		return o, malformed("dynamo RouterEvent", err)
	}
	var ev Event
	var tier []byte
	var worker uint64
	var dp uint32
	var res outcome = rejected // until an event map was read
	for range n {
		var key []byte
		if key, o, err = msgp.ReadMapKeyZC(o); err != nil {
			return o, malformed("dynamo RouterEvent key", err)
		}
		switch string(key) {
		case "worker_id":
			worker, o, err = readIntBits(o)
		case "storage_tier":
			tier, o, err = readOptString(o)
		case "event":
			if res != rejected {
				return o, malformed("dynamo RouterEvent has two events", nil)
			}
			o, res, dp, err = decodeKvCacheEvent(b, o, &ev)
		default:
			o, err = msgp.Skip(o)
		}
		if err != nil {
			return o, malformed("dynamo RouterEvent "+string(key), err)
		}
	}
	switch res {
	case rejected:
		return o, malformed("dynamo RouterEvent without event", nil)
	case ignored:
		b.Ignored++
		return o, nil
	}
	ev.Worker = WorkerKey{Worker: worker, Dp: dp}
	ev.Tier = tierOf(tier)
	b.Events = append(b.Events, ev)
	return o, nil
}

// decodeKvCacheEvent reads {event_id, dp_rank, data} into ev.
func decodeKvCacheEvent(b *Batch, o []byte, ev *Event) ([]byte, outcome, uint32, error) {
	n, o, err := readMapHeader(o)
	if err != nil {
		return o, rejected, 0, err
	}
	var dp uint64
	res := rejected
	for range n {
		var key []byte
		if key, o, err = msgp.ReadMapKeyZC(o); err != nil {
			return o, rejected, 0, err
		}
		switch string(key) {
		case "event_id":
			ev.ID, o, err = readUint(o)
		case "dp_rank":
			if dp, o, err = readUint(o); err == nil && dp > math.MaxUint32 {
				err = errTooLarge
			}
		case "data":
			if res != rejected {
				return o, rejected, 0, malformed("two data", nil)
			}
			o, res, err = decodeKvData(b, o, ev)
		default:
			o, err = msgp.Skip(o)
		}
		if err != nil {
			return o, rejected, 0, malformed(string(key), err)
		}
	}
	if res == rejected {
		return o, rejected, 0, malformed("event without data", nil)
	}
	return o, res, uint32(dp), nil
}

// decodeKvData reads the externally tagged data enum.
func decodeKvData(b *Batch, o []byte, ev *Event) ([]byte, outcome, error) {
	switch msgp.NextType(o) {
	case msgp.StrType: // a unit variant
		tag, o, err := msgp.ReadStringZC(o)
		if err != nil {
			return o, rejected, err
		}
		if equalFold(tag, "cleared") {
			ev.Kind = KindCleared
			return o, accepted, nil
		}
		return o, ignored, nil
	case msgp.MapType:
	default:
		return o, rejected, malformed("data is neither a string nor a map", nil)
	}
	n, o, err := readMapHeader(o)
	if err != nil {
		return o, rejected, err
	}
	if n != 1 {
		return o, rejected, malformed("data map must have one variant", nil)
	}
	tag, o, err := msgp.ReadMapKeyZC(o)
	if err != nil {
		return o, rejected, err
	}
	switch {
	case equalFold(tag, "stored"):
		ev.Kind = KindStored
		o, err = decodeStored(b, o, ev)
	case equalFold(tag, "removed"):
		ev.Kind = KindRemoved
		o, err = decodeRemoved(b, o, ev)
	case equalFold(tag, "cleared"):
		ev.Kind = KindCleared
		o, err = msgp.Skip(o)
	default:
		o, err = msgp.Skip(o)
		return o, ignored, err
	}
	if err != nil {
		return o, rejected, malformed(string(tag), err)
	}
	return o, accepted, nil
}

func decodeStored(b *Batch, o []byte, ev *Event) ([]byte, error) {
	n, o, err := readMapHeader(o)
	if err != nil {
		return o, err
	}
	gotBlocks := false
	for range n {
		var key []byte
		if key, o, err = msgp.ReadMapKeyZC(o); err != nil {
			return o, err
		}
		switch string(key) {
		case "parent_hash":
			var p uint64
			p, ev.HasParent, o, err = readOptHash(o)
			ev.Parent = EngineHash(p)
		case "blocks":
			if gotBlocks {
				return o, malformed("blocks twice", nil)
			}
			gotBlocks = true
			o, err = decodeStoredBlocks(b, o, ev)
		default: // start_position, newer fields
			o, err = msgp.Skip(o)
		}
		if err != nil {
			return o, malformed(string(key), err)
		}
	}
	if !gotBlocks {
		return o, malformed("stored without blocks", nil)
	}
	return o, nil
}

// decodeStoredBlocks reads [{block_hash, tokens_hash, mm_extra_info}, ...];
// a block may also be an array [block_hash, tokens_hash, ...].
func decodeStoredBlocks(b *Batch, o []byte, ev *Event) ([]byte, error) {
	n, o, err := readListHeader(o)
	if err != nil {
		return o, err
	}
	at := b.growBlocks(n)
	blocks := b.blocks[at : at+n]
	for i := range blocks {
		// Fast path: the map Dynamo's publisher writes for each block,
		// {"block_hash": int, "tokens_hash": int} in that order with 64-bit
		// (or fixint) values, recognised byte for byte (TestDecodeBlockFastPath).
		if e, l, rest, ok := readBlockMapFast(o); ok {
			blocks[i] = Block{Engine: EngineHash(e), Local: BlockHash(l)}
			o = rest
			continue
		}
		if isArray(o) {
			var sz uint32
			if sz, o, err = msgp.ReadArrayHeaderBytes(o); err != nil {
				return o, err
			}
			if sz < 2 {
				return o, malformed("block array shorter than [block_hash, tokens_hash]", nil)
			}
			var e, l uint64
			if e, o, err = readIntBits(o); err != nil {
				return o, err
			}
			if l, o, err = readIntBits(o); err != nil {
				return o, err
			}
			blocks[i] = Block{Engine: EngineHash(e), Local: BlockHash(l)}
			for range sz - 2 {
				if o, err = msgp.Skip(o); err != nil {
					return o, err
				}
			}
			continue
		}
		var sz int
		if sz, o, err = readMapHeader(o); err != nil {
			return o, err
		}
		var seen uint8
		for range sz {
			var key []byte
			if key, o, err = msgp.ReadMapKeyZC(o); err != nil {
				return o, err
			}
			var v uint64
			switch string(key) {
			case "block_hash":
				v, o, err = readIntBits(o)
				blocks[i].Engine = EngineHash(v)
				seen |= 1
			case "tokens_hash":
				v, o, err = readIntBits(o)
				blocks[i].Local = BlockHash(v)
				seen |= 2
			default: // mm_extra_info
				o, err = msgp.Skip(o)
			}
			if err != nil {
				return o, malformed(string(key), err)
			}
		}
		if seen != 3 {
			return o, malformed("block without block_hash or tokens_hash", nil)
		}
	}
	ev.Blocks = b.blocksAt(at, n)
	return o, nil
}

func decodeRemoved(b *Batch, o []byte, ev *Event) ([]byte, error) {
	n, o, err := readMapHeader(o)
	if err != nil {
		return o, err
	}
	got := false
	for range n {
		var key []byte
		if key, o, err = msgp.ReadMapKeyZC(o); err != nil {
			return o, err
		}
		if string(key) != "block_hashes" {
			if o, err = msgp.Skip(o); err != nil {
				return o, err
			}
			continue
		}
		if got {
			return o, malformed("block_hashes twice", nil)
		}
		got = true
		var cnt int
		if cnt, o, err = readListHeader(o); err != nil {
			return o, err
		}
		at := b.growBlocks(cnt)
		blocks := b.blocks[at : at+cnt]
		for i := range blocks {
			if len(o) >= 9 && isInt64(o[0]) { // the common encoding, inline
				blocks[i].Engine = EngineHash(binary.BigEndian.Uint64(o[1:]))
				o = o[9:]
				continue
			}
			var v uint64
			if v, o, err = readIntBits(o); err != nil {
				return o, malformed("block_hashes", err)
			}
			blocks[i].Engine = EngineHash(v)
		}
		ev.Blocks = b.blocksAt(at, cnt)
	}
	if !got {
		return o, malformed("removed without block_hashes", nil)
	}
	return o, nil
}

// readIntBits reads an integer sent signed or unsigned and returns its 64
// bits (Dynamo's hashes and worker ids are u64 but have been i64).
func readIntBits(b []byte) (uint64, []byte, error) {
	if v, o, ok := readIntFast(b); ok {
		return v, o, nil
	}
	return readIntBitsSlow(b)
}

func readIntBitsSlow(b []byte) (uint64, []byte, error) {
	if msgp.NextType(b) == msgp.BinType {
		return 0, b, errNotHash
	}
	return readHash(b)
}

// isInt64 reports whether c is the type byte of a uint64 or an int64.
func isInt64(c byte) bool { return c == 0xcf || c == 0xd3 }

// readIntFast reads the two integer encodings hashes come in, a positive
// fixint and a full-width uint64 or int64; ok false for any other.
func readIntFast(b []byte) (v uint64, rest []byte, ok bool) {
	if len(b) > 0 {
		switch c := b[0]; {
		case c <= 0x7f:
			return uint64(c), b[1:], true
		case isInt64(c) && len(b) >= 9:
			return binary.BigEndian.Uint64(b[1:]), b[9:], true
		}
	}
	return 0, b, false
}

// The keys of a Dynamo block map as msgpack fixstrs.
const (
	blockHashKey  = "\xaablock_hash"
	tokensHashKey = "\xabtokens_hash"
)

// readBlockMapFast reads a block map written as {"block_hash": h,
// "tokens_hash": t} (a fixmap of 2, those keys in that order, each value a
// fixint or a 64-bit integer); ok false for anything else, which the
// general path then reads.
func readBlockMapFast(o []byte) (e, l uint64, rest []byte, ok bool) {
	const k1 = 1 + len(blockHashKey)
	// Both values 64-bit (what Dynamo's publisher writes for hashes): a
	// fixed layout, checked and read with no slicing in between.
	const k2, end = k1 + 9, k1 + 9 + len(tokensHashKey) + 9
	if len(o) >= end && o[0] == 0x82 && string(o[1:k1]) == blockHashKey && isInt64(o[k1]) &&
		string(o[k2:k2+len(tokensHashKey)]) == tokensHashKey && isInt64(o[end-9]) {
		return binary.BigEndian.Uint64(o[k1+1:]), binary.BigEndian.Uint64(o[end-8:]), o[end:], true
	}
	if len(o) < k1 || o[0] != 0x82 || string(o[1:k1]) != blockHashKey {
		return 0, 0, o, false
	}
	if e, rest, ok = readIntFast(o[k1:]); !ok {
		return 0, 0, o, false
	}
	if len(rest) < len(tokensHashKey) || string(rest[:len(tokensHashKey)]) != tokensHashKey {
		return 0, 0, o, false
	}
	if l, rest, ok = readIntFast(rest[len(tokensHashKey):]); !ok {
		return 0, 0, o, false
	}
	return e, l, rest, true
}

// isArray reports whether b starts with a msgpack array header.
func isArray(b []byte) bool {
	return len(b) > 0 && (b[0]&0xf0 == 0x90 || b[0] == 0xdc || b[0] == 0xdd)
}

// AppendDynamo appends an event-plane message carrying ev to dst: the
// envelope map with the msgpack RouterEvent as its payload.
func AppendDynamo(dst []byte, h *DynamoHeader, ev *Event) []byte {
	dst = msgp.AppendMapHeader(dst, 5)
	dst = msgp.AppendString(dst, "publisher_id")
	dst = msgp.AppendUint64(dst, h.PublisherID)
	dst = msgp.AppendString(dst, "sequence")
	dst = msgp.AppendUint64(dst, h.Sequence)
	dst = msgp.AppendString(dst, "published_at")
	dst = msgp.AppendUint64(dst, h.PublishedAt)
	dst = msgp.AppendString(dst, "topic")
	dst = msgp.AppendStringFromBytes(dst, h.Topic)
	dst = msgp.AppendString(dst, "payload")
	// bin32 header, length patched once the payload is written.
	dst = append(dst, 0xc6, 0, 0, 0, 0)
	start := len(dst)
	dst = AppendDynamoEvent(dst, ev)
	binary.BigEndian.PutUint32(dst[start-4:start], uint32(len(dst)-start))
	return dst
}

// AppendDynamoEvent appends ev as a bare msgpack RouterEvent (field names as
// map keys). ev.LoRA is not sent: Dynamo's publisher folds it into the
// tokens_hash seed.
func AppendDynamoEvent(dst []byte, ev *Event) []byte {
	dst = msgp.AppendMapHeader(dst, 3)
	dst = msgp.AppendString(dst, "worker_id")
	dst = msgp.AppendUint64(dst, ev.Worker.Worker)
	dst = msgp.AppendString(dst, "storage_tier")
	dst = msgp.AppendString(dst, ev.Tier.String())
	dst = msgp.AppendString(dst, "event")
	dst = msgp.AppendMapHeader(dst, 3)
	dst = msgp.AppendString(dst, "event_id")
	dst = msgp.AppendUint64(dst, ev.ID)
	dst = msgp.AppendString(dst, "data")
	switch ev.Kind {
	case KindStored:
		dst = msgp.AppendMapHeader(dst, 1)
		dst = msgp.AppendString(dst, "stored")
		dst = msgp.AppendMapHeader(dst, 2)
		dst = msgp.AppendString(dst, "parent_hash")
		if ev.HasParent {
			dst = msgp.AppendUint64(dst, uint64(ev.Parent))
		} else {
			dst = msgp.AppendNil(dst)
		}
		dst = msgp.AppendString(dst, "blocks")
		dst = msgp.AppendArrayHeader(dst, uint32(len(ev.Blocks)))
		for _, bl := range ev.Blocks {
			dst = msgp.AppendMapHeader(dst, 2)
			dst = msgp.AppendString(dst, "block_hash")
			dst = msgp.AppendUint64(dst, uint64(bl.Engine))
			dst = msgp.AppendString(dst, "tokens_hash")
			dst = msgp.AppendUint64(dst, uint64(bl.Local))
		}
	case KindRemoved:
		dst = msgp.AppendMapHeader(dst, 1)
		dst = msgp.AppendString(dst, "removed")
		dst = msgp.AppendMapHeader(dst, 1)
		dst = msgp.AppendString(dst, "block_hashes")
		dst = msgp.AppendArrayHeader(dst, uint32(len(ev.Blocks)))
		for _, bl := range ev.Blocks {
			dst = msgp.AppendUint64(dst, uint64(bl.Engine))
		}
	default:
		dst = msgp.AppendString(dst, "cleared")
	}
	dst = msgp.AppendString(dst, "dp_rank")
	return msgp.AppendUint32(dst, ev.Worker.Dp)
}
