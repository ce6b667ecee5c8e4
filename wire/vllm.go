package wire

import (
	"encoding/binary"
	"fmt"

	"github.com/tinylib/msgp/msgp"
)

// MaxDPRank is the largest data-parallel rank the vLLM decoder accepts; a
// larger one is taken for a corrupt payload. Real deployments use a few
// hundred ranks at most; the bound keeps the per-rank state small.
const MaxDPRank = 1<<16 - 1

// VLLMConfig configures a VLLMDecoder.
type VLLMConfig struct {
	Worker    uint64 // worker id the engine's events belong to
	BlockSize int    // the engine's block size in tokens; must be > 0
}

// VLLMDecoder decodes the KV-event batches that one vLLM or SGLang engine
// publishes over ZMQ (all of its data-parallel ranks) into Batches.
//
// Event ids: the decoder keeps a counter per data-parallel rank. Every event
// of a batch, in order, takes the next id (the first is 1), including events
// it rejects; events of unknown kinds take none. When a batch's ZMQ sequence
// number is not the successor of the rank's previous batch (a batch was lost,
// cut short, or the engine restarted), one id is skipped first. So ids are
// contiguous per WorkerKey exactly while nothing was lost, and a consumer
// that checks ID == last+1 sees every loss as a gap, just as with Dynamo's
// per-event ids. (Event.ID = seq for all events of a batch would break
// contiguity; a plain counter would hide lost batches.)
//
// A VLLMDecoder is not goroutine-safe; create it with NewVLLMDecoder.
type VLLMDecoder struct {
	worker    uint64
	blockSize int
	ranks     map[uint32]rankState
}

type rankState struct {
	next    uint64 // id of the rank's next event
	lastSeq uint64 // sequence number of its last batch
}

// NewVLLMDecoder returns a decoder for one engine. It panics if
// cfg.BlockSize <= 0 (a programming error: the size comes from config).
func NewVLLMDecoder(cfg VLLMConfig) *VLLMDecoder {
	if cfg.BlockSize <= 0 {
		panic(fmt.Sprintf("wire: NewVLLMDecoder: block size %d", cfg.BlockSize))
	}
	return &VLLMDecoder{worker: cfg.Worker, blockSize: cfg.BlockSize, ranks: make(map[uint32]rankState)}
}

// DecodeFrames decodes one three-part ZMQ message (see ParseVLLMFrames).
func (d *VLLMDecoder) DecodeFrames(b *Batch, frames [][]byte) error {
	_, seq, payload, err := ParseVLLMFrames(frames)
	if err != nil {
		return err
	}
	return d.Decode(b, seq, payload)
}

// Decode decodes one batch payload with its ZMQ sequence number and appends
// its valid events to b. On a message-level error it returns the error and
// leaves b unchanged; invalid events within a well-framed batch are counted
// in b (Rejected, Err) and the others are kept.
func (d *VLLMDecoder) Decode(b *Batch, seq uint64, payload []byte) error {
	m := b.mark()
	rank, n, err := d.decodePayload(b, payload)
	if err != nil {
		b.rollback(m)
		return fmt.Errorf("%w (vllm batch seq %d)", err, seq)
	}
	st, seen := d.ranks[rank]
	switch {
	case !seen:
		st.next = 1
	case seq != st.lastSeq+1:
		st.next++ // leave a gap for the lost batch(es)
	}
	key := WorkerKey{Worker: d.worker, Dp: rank}
	for i := m.events; i < len(b.Events); i++ {
		e := &b.Events[i]
		e.Worker = key
		e.ID += st.next // e.ID held the event's ordinal within the batch
	}
	st.next += uint64(n)
	st.lastSeq = seq
	d.ranks[rank] = st
	return nil
}

// decodePayload decodes [ts, events, dp_rank] or its map form. It returns the
// dp rank and the number of events that take an id.
func (d *VLLMDecoder) decodePayload(b *Batch, p []byte) (rank uint32, n int, err error) {
	var o []byte
	switch msgp.NextType(p) {
	case msgp.ArrayType:
		var sz uint32
		sz, o, err = msgp.ReadArrayHeaderBytes(p)
		if err != nil {
			return 0, 0, malformed("batch", err)
		}
		if sz < 2 {
			return 0, 0, malformed(fmt.Sprintf("batch array of %d elements, want [ts, events, dp_rank]", sz), nil)
		}
		if o, err = msgp.Skip(o); err != nil { // ts
			return 0, 0, malformed("ts", err)
		}
		if n, o, err = d.decodeEvents(b, o); err != nil {
			return 0, 0, err
		}
		if sz >= 3 {
			if rank, o, err = readRank(o); err != nil {
				return 0, 0, err
			}
		}
		for range int(sz) - 3 {
			if o, err = msgp.Skip(o); err != nil {
				return 0, 0, malformed("batch", err)
			}
		}
	case msgp.MapType:
		var sz int
		sz, o, err = readMapHeader(p)
		if err != nil {
			return 0, 0, malformed("batch", err)
		}
		gotEvents := false
		for range sz {
			var key []byte
			if key, o, err = msgp.ReadMapKeyZC(o); err != nil {
				return 0, 0, malformed("batch key", err)
			}
			switch string(key) {
			case "events":
				if gotEvents {
					return 0, 0, malformed("batch has two events lists", nil)
				}
				gotEvents = true
				if n, o, err = d.decodeEvents(b, o); err != nil {
					return 0, 0, err
				}
			case "data_parallel_rank":
				if rank, o, err = readRank(o); err != nil {
					return 0, 0, err
				}
			default: // ts and newer fields
				if o, err = msgp.Skip(o); err != nil {
					return 0, 0, malformed(string(key), err)
				}
			}
		}
		if !gotEvents {
			return 0, 0, malformed("batch map without events", nil)
		}
	default:
		if len(p) == 0 {
			return 0, 0, malformed("empty payload", nil)
		}
		return 0, 0, malformed("batch is neither an array nor a map", nil)
	}
	if len(o) != 0 {
		return 0, 0, malformed("batch", errTrailing)
	}
	return rank, n, nil
}

func readRank(o []byte) (uint32, []byte, error) {
	if msgp.IsNil(o) {
		return 0, o[1:], nil
	}
	r, o, err := readUint(o)
	if err != nil {
		return 0, o, malformed("data_parallel_rank", err)
	}
	if r > MaxDPRank {
		return 0, o, malformed(fmt.Sprintf("data_parallel_rank %d > %d", r, MaxDPRank), nil)
	}
	return uint32(r), o, nil
}

// decodeEvents decodes the events list. Each well-framed element is decoded
// on its own: an invalid one is rejected and the rest go on. An element that
// cannot even be skipped breaks the framing and fails the whole message.
func (d *VLLMDecoder) decodeEvents(b *Batch, o []byte) (n int, rest []byte, err error) {
	cnt, o, err := readListHeader(o)
	if err != nil {
		return 0, o, malformed("events", err)
	}
	for range cnt {
		blocks := len(b.blocks)
		next, res, rej := d.decodeEvent(b, o, n)
		if res != accepted {
			b.blocks = b.blocks[:blocks]
			if next == nil { // stopped inside the element: find its end
				if next, err = msgp.Skip(o); err != nil {
					return 0, o, malformed("event", err)
				}
			}
		}
		switch res {
		case accepted:
			n++
		case rejected:
			b.reject(rej)
			n++
		case ignored:
			b.Ignored++
		}
		o = next
	}
	return n, o, nil
}

type outcome uint8

const (
	accepted outcome = iota
	rejected
	ignored
)

// vLLM event fields kvroute reads.
type vllmField uint8

const (
	fSkip vllmField = iota
	fHashes
	fParent
	fTokens
	fBlockSize
	fMedium
	fLoRAName
)

// Positional fields of the tagged-array form after the tag; fields past the
// listed ones (lora_id, extra_keys, group_idx, kv_cache_spec_kind, ...) are
// skipped.
var (
	storedFields  = [...]vllmField{fHashes, fParent, fTokens, fBlockSize, fSkip /* lora_id */, fMedium, fLoRAName}
	removedFields = [...]vllmField{fHashes, fMedium}
)

func vllmFieldOf(key []byte) vllmField {
	switch string(key) {
	case "block_hashes":
		return fHashes
	case "parent_block_hash":
		return fParent
	case "token_ids":
		return fTokens
	case "block_size":
		return fBlockSize
	case "medium":
		return fMedium
	case "lora_name":
		return fLoRAName
	}
	return fSkip
}

func vllmKind(tag []byte) Kind {
	switch string(tag) {
	case "BlockStored":
		return KindStored
	case "BlockRemoved":
		return KindRemoved
	case "AllBlocksCleared":
		return KindCleared
	}
	return 0
}

// vllmEvent collects the fields of one event in either form.
type vllmEvent struct {
	hashesAt, nHashes int
	hasHashes         bool
	hasTokens         bool
	hasParent         bool
	hasBlockSize      bool
	parent            uint64
	blockSize         uint64
	medium            []byte
	lora              []byte
}

// decodeEvent decodes one element of the events list. next is the rest after
// the element, or nil if decoding stopped inside it.
func (d *VLLMDecoder) decodeEvent(b *Batch, o []byte, ordinal int) (next []byte, res outcome, rej rejection) {
	var f vllmEvent
	var kind Kind
	var err error
	switch msgp.NextType(o) {
	case msgp.ArrayType:
		var sz uint32
		if sz, o, err = msgp.ReadArrayHeaderBytes(o); err != nil || sz == 0 {
			return nil, rejected, rejection{what: "event: empty or bad array", cause: err}
		}
		var tag []byte
		if tag, o, err = msgp.ReadStringZC(o); err != nil {
			return nil, rejected, rejection{what: "event tag", cause: err}
		}
		var fields []vllmField
		switch kind = vllmKind(tag); kind {
		case KindStored:
			fields = storedFields[:]
		case KindRemoved:
			fields = removedFields[:]
		case 0:
			return nil, ignored, rejection{}
		}
		for i := range int(sz) - 1 {
			field := fSkip
			if i < len(fields) {
				field = fields[i]
			}
			if o, rej = d.readField(b, &f, field, o); rej.invalid() {
				return nil, rejected, rej
			}
		}
	case msgp.MapType:
		var sz int
		if sz, o, err = readMapHeader(o); err != nil {
			return nil, rejected, rejection{what: "event map", cause: err}
		}
		var tag []byte
		for range sz {
			var key []byte
			if key, o, err = msgp.ReadMapKeyZC(o); err != nil {
				return nil, rejected, rejection{what: "event key", cause: err}
			}
			if string(key) == "type" {
				if tag, o, err = msgp.ReadStringZC(o); err != nil {
					return nil, rejected, rejection{what: "event type", cause: err}
				}
				continue
			}
			if o, rej = d.readField(b, &f, vllmFieldOf(key), o); rej.invalid() {
				return nil, rejected, rej
			}
		}
		if tag == nil {
			return o, rejected, rejection{what: "event map without type"}
		}
		if kind = vllmKind(tag); kind == 0 {
			return o, ignored, rejection{}
		}
	default:
		return nil, rejected, rejection{what: "event is neither an array nor a map"}
	}

	ev := Event{ID: uint64(ordinal), Kind: kind, Tier: tierOf(f.medium)}
	switch kind {
	case KindStored:
		if !f.hasHashes || !f.hasTokens {
			return o, rejected, rejection{what: "BlockStored without block_hashes or token_ids"}
		}
		bs := d.blockSize
		if f.hasBlockSize && f.blockSize != uint64(bs) {
			return o, rejected, rejection{mismatch: true, got: int(min(f.blockSize, 1<<62)), want: bs}
		}
		if len(b.tokens) != f.nHashes*bs {
			return o, rejected, rejection{mismatch: true, tokens: len(b.tokens), blocks: f.nHashes, want: bs}
		}
		seed := LoRASeedBytes(f.lora)
		blocks := b.blocks[f.hashesAt : f.hashesAt+f.nHashes]
		for i := range blocks {
			blocks[i].Local = BlockHashOf(b.tokens[i*bs:(i+1)*bs], seed)
		}
		ev.HasParent, ev.Parent = f.hasParent, EngineHash(f.parent)
		ev.Blocks = b.blocksAt(f.hashesAt, f.nHashes)
		if len(f.lora) > 0 {
			ev.LoRA = f.lora
		}
	case KindRemoved:
		if !f.hasHashes {
			return o, rejected, rejection{what: "BlockRemoved without block_hashes"}
		}
		ev.Blocks = b.blocksAt(f.hashesAt, f.nHashes)
	case KindCleared:
		if f.hasHashes {
			b.blocks = b.blocks[:f.hashesAt]
		}
		ev.Tier = TierDevice
	}
	b.Events = append(b.Events, ev)
	return o, accepted, rejection{}
}

// readField reads one field value into f. A non-empty rej means the event is
// invalid.
func (d *VLLMDecoder) readField(b *Batch, f *vllmEvent, field vllmField, o []byte) ([]byte, rejection) {
	var err error
	switch field {
	case fHashes:
		if f.hasHashes {
			return o, rejection{what: "block_hashes twice"}
		}
		var n int
		if n, o, err = readListHeader(o); err != nil {
			return o, rejection{what: "block_hashes", cause: err}
		}
		f.hasHashes, f.nHashes, f.hashesAt = true, n, b.growBlocks(n)
		blocks := b.blocks[f.hashesAt:]
		for i := range n {
			var h uint64
			if h, o, err = readHash(o); err != nil {
				return o, rejection{what: "block_hashes", cause: err}
			}
			blocks[i].Engine = EngineHash(h)
		}
	case fParent:
		if f.parent, f.hasParent, o, err = readOptHash(o); err != nil {
			return o, rejection{what: "parent_block_hash", cause: err}
		}
	case fTokens:
		if f.hasTokens {
			return o, rejection{what: "token_ids twice"}
		}
		var n int
		if n, o, err = readListHeader(o); err != nil {
			return o, rejection{what: "token_ids", cause: err}
		}
		f.hasTokens = true
		if cap(b.tokens) < n {
			b.tokens = make([]uint32, n, n+n/4)
		}
		tokens := b.tokens[:n]
		for i := range tokens {
			if tokens[i], o, err = readToken(o); err != nil {
				return o, rejection{what: "token_ids", cause: err}
			}
		}
		b.tokens = tokens
	case fBlockSize:
		if msgp.IsNil(o) {
			return o[1:], rejection{}
		}
		if f.blockSize, o, err = readUint(o); err != nil {
			return o, rejection{what: "block_size", cause: err}
		}
		f.hasBlockSize = true
	case fMedium:
		if f.medium, o, err = readOptString(o); err != nil {
			return o, rejection{what: "medium", cause: err}
		}
	case fLoRAName:
		if f.lora, o, err = readOptString(o); err != nil {
			return o, rejection{what: "lora_name", cause: err}
		}
	default:
		if o, err = msgp.Skip(o); err != nil {
			return o, rejection{what: "field", cause: err}
		}
	}
	return o, rejection{}
}

// ParseVLLMFrames splits a ZMQ KV-event message into its topic, its sequence
// number (8 bytes, big-endian) and its payload. The slices alias frames.
func ParseVLLMFrames(frames [][]byte) (topic []byte, seq uint64, payload []byte, err error) {
	if len(frames) != 3 {
		return nil, 0, nil, malformed(fmt.Sprintf("zmq message of %d frames, want [topic, seq, payload]", len(frames)), nil)
	}
	if len(frames[1]) != 8 {
		return nil, 0, nil, malformed(fmt.Sprintf("zmq sequence frame of %d bytes, want 8", len(frames[1])), nil)
	}
	return frames[0], binary.BigEndian.Uint64(frames[1]), frames[2], nil
}

// VLLMFrames returns the three frames of a ZMQ KV-event message: topic,
// seq as 8 bytes big-endian, payload. topic and payload are not copied.
func VLLMFrames(topic []byte, seq uint64, payload []byte) [][]byte {
	return [][]byte{topic, binary.BigEndian.AppendUint64(make([]byte, 0, 8), seq), payload}
}

// HashEncoding selects how an encoder writes engine block hashes; vLLM has
// sent all three over time.
type HashEncoding uint8

// Hash encodings.
const (
	HashUint  HashEncoding = iota // msgpack unsigned integer
	HashInt                       // msgpack signed integer (the hash's bits as int64)
	HashBytes                     // 32-byte bin, the hash in the last 8 bytes big-endian (like a sha256 digest)
)

// VLLMEvent is an encoder's input for one vLLM KV event. The local hashes of
// a Stored event are not invertible, so it carries the tokens instead.
type VLLMEvent struct {
	Kind        Kind
	BlockHashes []EngineHash
	HasParent   bool       // Stored
	Parent      EngineHash // Stored
	Tokens      []uint32   // Stored: len(BlockHashes)*BlockSize token ids
	BlockSize   int        // Stored
	LoRAID      int        // Stored: 0 is written as nil
	Medium      string     // "" is written as nil
	LoRA        string     // Stored: lora_name; "" is written as nil
}

// VLLMBatch is an encoder's input for one vLLM KV-event batch.
type VLLMBatch struct {
	TS        float64
	HasDPRank bool // false: data_parallel_rank is nil (or absent, with Compact)
	DPRank    int
	Events    []VLLMEvent
}

// VLLMEncoding selects the form AppendVLLMBatch writes.
type VLLMEncoding struct {
	Map     bool         // map form keyed by field name, with "type" as the tag
	Hashes  HashEncoding // how block hashes are written
	Compact bool         // omit trailing nil fields (msgspec omit_defaults), nil map entries
	Extras  bool         // also write the newer fields kvroute skips (extra_keys, group_idx, kv_cache_spec_*)
}

// AppendVLLMBatch appends the msgpack payload of batch to dst.
func AppendVLLMBatch(dst []byte, batch *VLLMBatch, enc VLLMEncoding) []byte {
	if enc.Map {
		n := uint32(3)
		if enc.Compact && !batch.HasDPRank {
			n = 2
		}
		dst = msgp.AppendMapHeader(dst, n)
		dst = msgp.AppendString(dst, "ts")
		dst = msgp.AppendFloat64(dst, batch.TS)
		dst = msgp.AppendString(dst, "events")
	} else {
		n := uint32(3)
		if enc.Compact && !batch.HasDPRank {
			n = 2
		}
		dst = msgp.AppendArrayHeader(dst, n)
		dst = msgp.AppendFloat64(dst, batch.TS)
	}
	dst = msgp.AppendArrayHeader(dst, uint32(len(batch.Events)))
	for i := range batch.Events {
		dst = appendVLLMEvent(dst, &batch.Events[i], enc)
	}
	if enc.Map {
		if enc.Compact && !batch.HasDPRank {
			return dst
		}
		dst = msgp.AppendString(dst, "data_parallel_rank")
	} else if enc.Compact && !batch.HasDPRank {
		return dst
	}
	if batch.HasDPRank {
		return msgp.AppendInt(dst, batch.DPRank)
	}
	return msgp.AppendNil(dst)
}

// vllmValue is one field of an event to encode.
type vllmValue struct {
	key   string
	write func(dst []byte) []byte
	isNil bool
}

func appendVLLMEvent(dst []byte, e *VLLMEvent, enc VLLMEncoding) []byte {
	hashes := func(dst []byte) []byte {
		dst = msgp.AppendArrayHeader(dst, uint32(len(e.BlockHashes)))
		for _, h := range e.BlockHashes {
			dst = appendHash(dst, uint64(h), enc.Hashes)
		}
		return dst
	}
	optString := func(s string) vllmValue {
		return vllmValue{isNil: s == "", write: func(dst []byte) []byte {
			if s == "" {
				return msgp.AppendNil(dst)
			}
			return msgp.AppendString(dst, s)
		}}
	}
	named := func(key string, v vllmValue) vllmValue { v.key = key; return v }
	nilValue := vllmValue{isNil: true, write: msgp.AppendNil}

	var tag string
	var fields []vllmValue
	switch e.Kind {
	case KindStored:
		tag = "BlockStored"
		parent := nilValue
		if e.HasParent {
			parent = vllmValue{write: func(dst []byte) []byte { return appendHash(dst, uint64(e.Parent), enc.Hashes) }}
		}
		loraID := nilValue
		if e.LoRAID != 0 {
			loraID = vllmValue{write: func(dst []byte) []byte { return msgp.AppendInt(dst, e.LoRAID) }}
		}
		fields = []vllmValue{
			{key: "block_hashes", write: hashes},
			named("parent_block_hash", parent),
			{key: "token_ids", write: func(dst []byte) []byte {
				dst = msgp.AppendArrayHeader(dst, uint32(len(e.Tokens)))
				for _, t := range e.Tokens {
					dst = msgp.AppendUint32(dst, t)
				}
				return dst
			}},
			{key: "block_size", write: func(dst []byte) []byte { return msgp.AppendInt(dst, e.BlockSize) }},
			named("lora_id", loraID),
			named("medium", optString(e.Medium)),
			named("lora_name", optString(e.LoRA)),
		}
		if enc.Extras {
			fields = append(fields,
				named("extra_keys", nilValue),
				vllmValue{key: "group_idx", write: func(dst []byte) []byte { return msgp.AppendInt(dst, 0) }},
				vllmValue{key: "kv_cache_spec_kind", write: func(dst []byte) []byte { return msgp.AppendString(dst, "full_attention") }},
				named("kv_cache_spec_sliding_window", nilValue))
		}
	case KindRemoved:
		tag = "BlockRemoved"
		fields = []vllmValue{{key: "block_hashes", write: hashes}, named("medium", optString(e.Medium))}
		if enc.Extras {
			fields = append(fields, vllmValue{key: "group_idx", write: func(dst []byte) []byte { return msgp.AppendInt(dst, 0) }})
		}
	default:
		tag = "AllBlocksCleared"
	}

	if enc.Map {
		n := 0
		for _, f := range fields {
			if !(enc.Compact && f.isNil) {
				n++
			}
		}
		if enc.Extras {
			n++
		}
		dst = msgp.AppendMapHeader(dst, uint32(n+1))
		dst = msgp.AppendString(dst, "type")
		dst = msgp.AppendString(dst, tag)
		if enc.Extras { // a key from the future: skipped by the decoder
			dst = msgp.AppendString(dst, "future_field")
			dst = msgp.AppendArrayHeader(dst, 1)
			dst = msgp.AppendMapHeader(dst, 0)
		}
		for _, f := range fields {
			if enc.Compact && f.isNil {
				continue
			}
			dst = msgp.AppendString(dst, f.key)
			dst = f.write(dst)
		}
		return dst
	}
	if enc.Compact { // msgspec omits trailing defaults
		for len(fields) > 0 && fields[len(fields)-1].isNil {
			fields = fields[:len(fields)-1]
		}
	}
	dst = msgp.AppendArrayHeader(dst, uint32(len(fields)+1))
	dst = msgp.AppendString(dst, tag)
	for _, f := range fields {
		dst = f.write(dst)
	}
	return dst
}

func appendHash(dst []byte, h uint64, enc HashEncoding) []byte {
	switch enc {
	case HashInt:
		return msgp.AppendInt64(dst, int64(h))
	case HashBytes:
		var digest [32]byte
		for i := range 24 { // stand-in for the rest of a sha256 digest
			digest[i] = byte(h>>(i%8*8)) ^ 0x5a
		}
		binary.BigEndian.PutUint64(digest[24:], h)
		return msgp.AppendBytes(dst, digest[:])
	}
	return msgp.AppendUint64(dst, h)
}
