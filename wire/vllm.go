package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

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
	// EagleWindows hashes SGLang's EAGLE pages (bigram token_ids) as
	// Dynamo does: each page as the window of its tokens and the next
	// (LocalHashesEagle), exact for requests hashed the same way. Off, a
	// page is hashed as the plain page of its first tokens (LocalHashes),
	// which matches plainly hashed requests (see doc.go, "EAGLE pages").
	EagleWindows bool
}

// VLLMDecoder decodes the KV-event batches that one vLLM or SGLang engine
// publishes over ZMQ (all of its data-parallel ranks) into Batches.
//
// Event ids: the decoder keeps a counter per data-parallel rank. Every event
// of a batch, in order, takes the next id (the first is 1), including events
// it rejects; events of unknown kinds and of a hybrid model's non-main KV
// cache groups (see the package doc) take none. When a batch's ZMQ sequence
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
	eagle     bool // VLLMConfig.EagleWindows
	ranks     map[uint32]rankState
	// mainGroup is the KV cache group indexed for a hybrid model: the
	// first group a Stored event declares full attention, -1 until one
	// does (group 0 meanwhile).
	mainGroup int64
	// salts maps the engine hash of a salted block to its salt's seed term
	// (saltTerm), so that a Stored event without a salt whose parent is
	// salted inherits it (vLLM stamps cache_salt into a request's first
	// block only). Empty, and never touched, while no event is salted.
	salts map[EngineHash]uint64
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
	return &VLLMDecoder{worker: cfg.Worker, blockSize: cfg.BlockSize, eagle: cfg.EagleWindows, ranks: make(map[uint32]rankState), mainGroup: -1}
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
	m, main := b.mark(), d.mainGroup
	rank, n, err := d.decodePayload(b, payload)
	if err != nil {
		// The main group learned from a message that is dropped whole is
		// forgotten too. Salts it recorded are kept: a block wrongly taken
		// for salted can only miss, never match another tenant's request.
		b.rollback(m)
		d.mainGroup = main
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
		case otherGroup:
			b.OtherGroups++
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
	otherGroup // a hybrid model's non-main KV cache group: valid, not indexed
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
	fExtraKeys
	fGroup
	fSpecKind
	fSalt
	fLocality
)

// Positional fields of the tagged-array form after the tag (vLLM's
// BlockStored and BlockRemoved field order); lora_id, the sliding window and
// fields past the listed ones (ownership) are skipped. locality was appended
// after the fields before it (vLLM 0.26), as every optional field is.
var (
	storedFields = [...]vllmField{fHashes, fParent, fTokens, fBlockSize, fSkip /* lora_id */, fMedium, fLoRAName,
		fExtraKeys, fGroup, fSpecKind, fSkip /* kv_cache_spec_sliding_window */, fLocality}
	removedFields = [...]vllmField{fHashes, fMedium, fGroup, fLocality}
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
	case "extra_keys":
		return fExtraKeys
	case "group_idx":
		return fGroup
	case "kv_cache_spec_kind":
		return fSpecKind
	case "cache_salt":
		return fSalt
	case "locality":
		return fLocality
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
	hasGroup          bool
	hasMM             bool // some block has multimodal hashes (b.mm, b.mmAt)
	bigram            bool // token_ids were bigrams; b.tokens[len] holds the last pair's second token
	parent            uint64
	blockSize         uint64
	group             uint64
	medium            []byte
	locality          []byte // LOCAL, REMOTE, nil when unspecified
	lora              []byte
	kind              []byte // kv_cache_spec_kind
	salt              []byte // cache_salt (explicit)
	ekSalt            []byte // a salt found in the first block's extra_keys
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

	if !d.mainGroupEvent(kind, &f) {
		if f.hasHashes {
			b.blocks = b.blocks[:f.hashesAt]
		}
		return o, otherGroup, rejection{}
	}
	ev := Event{ID: uint64(ordinal), Kind: kind, Tier: placedTier(tierOf(f.medium), f.locality)}
	switch kind {
	case KindStored:
		if !f.hasHashes || !f.hasTokens {
			return o, rejected, rejection{what: "BlockStored without block_hashes or token_ids"}
		}
		bs := d.blockSize
		if len(b.tokens) == 0 && f.nHashes > 0 && ev.Tier != TierDevice {
			// vLLM's offloading connector (see doc.go, "Offloaded blocks"):
			// the CPU copies of GPU blocks, by hash, without tokens.
			if f.hasBlockSize && f.blockSize%uint64(bs) != 0 {
				return o, rejected, rejection{mismatch: true, got: int(min(f.blockSize, 1<<62)), want: bs}
			}
			ev.ByEngine = true
			ev.Blocks = b.blocksAt(f.hashesAt, f.nHashes)
			break
		}
		if f.hasBlockSize && f.blockSize != uint64(bs) {
			return o, rejected, rejection{mismatch: true, got: int(min(f.blockSize, 1<<62)), want: bs}
		}
		if len(b.tokens) != f.nHashes*bs {
			return o, rejected, rejection{mismatch: true, tokens: len(b.tokens), blocks: f.nHashes, want: bs}
		}
		blocks := b.blocks[f.hashesAt : f.hashesAt+f.nHashes]
		seed := LoRASeedBytes(f.lora) + d.saltOf(&f, blocks)
		if f.hasMM {
			d.hashMM(b, blocks, seed)
		} else if f.bigram && d.eagle {
			windows := b.tokens[:len(b.tokens)+1] // the last pair's second token follows
			for i := range blocks {
				blocks[i].Local = BlockHashOf(windows[i*bs:(i+1)*bs+1], seed)
			}
		} else {
			for i := range blocks {
				blocks[i].Local = BlockHashOf(b.tokens[i*bs:(i+1)*bs], seed)
			}
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
		if len(d.salts) > 0 {
			for _, bl := range ev.Blocks {
				delete(d.salts, bl.Engine)
			}
		}
	case KindCleared:
		if f.hasHashes {
			b.blocks = b.blocks[:f.hashesAt]
		}
		ev.Tier = TierDevice
		clear(d.salts)
	}
	b.Events = append(b.Events, ev)
	return o, accepted, rejection{}
}

// mainGroupEvent reports whether an event belongs to the KV cache group the
// index follows. A hybrid model (vLLM's KV cache groups: full attention
// next to sliding-window or Mamba layers) publishes every group's blocks
// under their own hashes; the prefix a request can reuse is the
// full-attention group's, so that group alone is indexed, as Dynamo does.
// The main group is the first group a Stored event declares full attention
// (kv_cache_spec_kind); until one does, group 0. Events without group_idx
// (engines without groups, SGLang) are the main group's; a Stored event of
// another kind is never.
func (d *VLLMDecoder) mainGroupEvent(kind Kind, f *vllmEvent) bool {
	if f.kind != nil {
		if !fullAttention(f.kind) {
			return false
		}
		if d.mainGroup < 0 && f.hasGroup && f.group <= math.MaxInt32 {
			d.mainGroup = int64(f.group)
		}
	}
	if !f.hasGroup || kind == KindCleared {
		return true
	}
	return int64(f.group) == max(d.mainGroup, 0)
}

// placedTier qualifies a medium's tier with vLLM's locality (where the copy
// lives relative to the publishing engine: LOCAL, REMOTE, or unspecified).
// A host or disk copy that is not LOCAL (a shared CPU pool, a remote file
// system or object store) is priced as TierExternal: the worker can load it,
// at the cost of the slowest tier. A device copy is the worker's own however
// it arrived (a decode worker publishes the blocks it pulled from a prefill
// worker as GPU blocks): locality never changes TierDevice. Unspecified
// locality keeps the medium's tier (vLLM never infers it); a value other
// than LOCAL or REMOTE is taken as not local.
func placedTier(t Tier, locality []byte) Tier {
	if locality == nil || t == TierDevice || t == TierExternal || equalFold(locality, "local") {
		return t
	}
	return TierExternal
}

// fullAttention reports whether a kv_cache_spec_kind names a full-attention
// group (vLLM's FullAttentionSpec and MLAAttentionSpec).
func fullAttention(kind []byte) bool {
	return equalFold(kind, "full_attention") || equalFold(kind, "mla_attention") || equalFold(kind, "full")
}

// saltOf returns the seed term of a Stored event's cache salt: its own
// (cache_salt, or the salt in its first block's extra_keys), else its
// parent's, else none. A salted event's blocks are remembered so that their
// children inherit the salt.
func (d *VLLMDecoder) saltOf(f *vllmEvent, blocks []Block) uint64 {
	salt := f.salt
	if salt == nil && !bytes.Equal(f.ekSalt, f.lora) {
		salt = f.ekSalt
	}
	var term uint64
	switch {
	case len(salt) > 0:
		term = saltTerm(salt)
	case len(d.salts) > 0 && f.hasParent:
		term = d.salts[EngineHash(f.parent)]
	}
	if term != 0 {
		if d.salts == nil {
			d.salts = make(map[EngineHash]uint64)
		}
		for _, bl := range blocks {
			d.salts[bl.Engine] = term
		}
	}
	return term
}

// hashMM hashes the blocks of a Stored event some of whose blocks hold
// multimodal objects (b.mm, b.mmAt from extra_keys).
func (d *VLLMDecoder) hashMM(b *Batch, blocks []Block, seed uint64) {
	bs := d.blockSize
	for i := range blocks {
		var mm []uint64
		if i+1 < len(b.mmAt) {
			mm = b.mm[b.mmAt[i]:b.mmAt[i+1]]
		}
		blocks[i].Local, b.scratch = BlockHashMM(b.scratch, b.tokens[i*bs:(i+1)*bs], mm, seed)
	}
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
		if cap(b.tokens) < n+1 {
			b.tokens = make([]uint32, n, n+1+n/4)
		}
		tokens := b.tokens[:n]
		if n > 0 && o[0] == 0x92 { // bigrams [t, t+1]: SGLang's EAGLE pages
			var last uint32
			if last, o, err = readBigrams(tokens, o); err != nil {
				return o, rejection{what: "token_ids", cause: err}
			}
			b.tokens[:n+1][n], f.bigram = last, true
		} else if o, err = readTokens(tokens, o); err != nil {
			return o, rejection{what: "token_ids", cause: err}
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
		if msgp.NextType(o) == msgp.MapType { // SGLang: {cache_salt, lora_name} in lora_name's place
			return readSaltMap(f, o)
		}
		if f.lora, o, err = readOptString(o); err != nil {
			return o, rejection{what: "lora_name", cause: err}
		}
	case fSalt:
		if f.salt, o, err = readOptString(o); err != nil {
			return o, rejection{what: "cache_salt", cause: err}
		}
	case fLocality:
		if f.locality, o, err = readOptString(o); err != nil {
			return o, rejection{what: "locality", cause: err}
		}
	case fGroup:
		if msgp.IsNil(o) {
			return o[1:], rejection{}
		}
		if f.group, o, err = readUint(o); err != nil {
			return o, rejection{what: "group_idx", cause: err}
		}
		f.hasGroup = true
	case fSpecKind:
		if f.kind, o, err = readOptString(o); err != nil {
			return o, rejection{what: "kv_cache_spec_kind", cause: err}
		}
	case fExtraKeys:
		return readExtraKeys(b, f, o)
	default:
		if o, err = msgp.Skip(o); err != nil {
			return o, rejection{what: "field", cause: err}
		}
	}
	return o, rejection{}
}

var errMixedBigrams = errors.New("token_ids mixes bigrams and plain token ids")

// readBigrams reads token_ids sent as bigrams [t, t+1] (SGLang's EAGLE
// pages) into tokens, one per pair: a bigram page's block is its first
// tokens, hashed as the block of an ordinary page, so that it matches
// requests.
func readBigrams(tokens []uint32, o []byte) (last uint32, _ []byte, err error) {
	for i := range tokens {
		if len(o) == 0 || o[0] != 0x92 {
			return 0, o, errMixedBigrams
		}
		if tokens[i], o, err = readToken(o[1:]); err != nil {
			return 0, o, err
		}
		if last, o, err = readToken(o); err != nil {
			return 0, o, err
		}
	}
	return last, o, nil
}

// readSaltMap reads a map {cache_salt, lora_name, ...} in lora_name's place
// (SGLang's salted events); other keys are skipped.
func readSaltMap(f *vllmEvent, o []byte) ([]byte, rejection) {
	n, o, err := readMapHeader(o)
	if err != nil {
		return o, rejection{what: "lora_name/cache_salt map", cause: err}
	}
	for range n {
		var key []byte
		if key, o, err = msgp.ReadMapKeyZC(o); err != nil {
			return o, rejection{what: "cache_salt map key", cause: err}
		}
		switch string(key) {
		case "cache_salt":
			f.salt, o, err = readOptString(o)
		case "lora_name":
			f.lora, o, err = readOptString(o)
		default:
			o, err = msgp.Skip(o)
		}
		if err != nil {
			return o, rejection{what: "cache_salt map " + string(key), cause: err}
		}
	}
	return o, rejection{}
}

// readExtraKeys reads vLLM's extra_keys: per block, nil or a list of keys
// (lora name, multimodal identifiers, cache salt, prompt-embedding bytes),
// a multimodal identifier also as [identifier, start offset]. As Dynamo's
// extra_keys_to_block_mm_infos, the 64-hex-digit identifiers are the block's
// multimodal hashes (into b.mm, b.mmAt), and the first other string of the
// first block that is not the LoRA name is the cache salt (Dynamo's
// extract_cache_namespace_from_extra_keys; the LoRA name is compared once the
// event is read, in saltOf's caller). A string in extra_keys' place is taken
// for a cache salt.
func readExtraKeys(b *Batch, f *vllmEvent, o []byte) ([]byte, rejection) {
	switch msgp.NextType(o) {
	case msgp.NilType:
		return o[1:], rejection{}
	case msgp.StrType, msgp.BinType:
		var err error
		if f.salt, o, err = readOptString(o); err != nil {
			return o, rejection{what: "extra_keys", cause: err}
		}
		return o, rejection{}
	}
	n, o, err := readListHeader(o)
	if err != nil {
		return o, rejection{what: "extra_keys", cause: err}
	}
	b.mm, b.mmAt = b.mm[:0], append(b.mmAt[:0], 0)
	for i := range n {
		if msgp.IsNil(o) {
			o = o[1:]
			b.mmAt = append(b.mmAt, int32(len(b.mm)))
			continue
		}
		var keys int
		if keys, o, err = readListHeader(o); err != nil {
			return o, rejection{what: "extra_keys", cause: err}
		}
		for range keys {
			var s []byte
			switch msgp.NextType(o) {
			case msgp.StrType:
				s, o, err = msgp.ReadStringZC(o)
			case msgp.ArrayType: // [identifier, offset]
				var sz uint32
				if sz, o, err = msgp.ReadArrayHeaderBytes(o); err == nil && sz > 0 {
					if msgp.NextType(o) == msgp.StrType {
						var id []byte
						if id, o, err = msgp.ReadStringZC(o); err == nil {
							if h, ok := mmHexDigest(id); ok {
								b.mm = append(b.mm, h)
							}
						}
						sz--
					}
					for ; err == nil && sz > 0; sz-- {
						o, err = msgp.Skip(o)
					}
				}
			default:
				o, err = msgp.Skip(o)
			}
			if err != nil {
				return o, rejection{what: "extra_keys", cause: err}
			}
			if s == nil {
				continue
			}
			if h, ok := mmHexDigest(s); ok {
				b.mm = append(b.mm, h)
			} else if i == 0 && f.ekSalt == nil && !bytes.Equal(s, f.lora) {
				f.ekSalt = s
			}
		}
		b.mmAt = append(b.mmAt, int32(len(b.mm)))
	}
	f.hasMM = len(b.mm) > 0
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
	// Locality is vLLM's locality (LOCAL or REMOTE, Stored and Removed),
	// written after the sliding window (Stored) or group_idx (Removed) when
	// set or with VLLMEncoding.Extras; "" is written as nil.
	Locality string

	// Newer fields (written when set, or all of them with VLLMEncoding.Extras).
	// ExtraKeys are the Stored event's extra_keys, one entry per block (a nil
	// entry is written as nil); HasGroup/Group its group_idx (Stored and
	// Removed) and SpecKind its kv_cache_spec_kind.
	ExtraKeys [][]string
	HasGroup  bool
	Group     int
	SpecKind  string
	// Salt is a Stored event's cache salt: the "cache_salt" key in the map
	// form; in the array form SGLang's {"lora_name", "cache_salt"} map in
	// lora_name's place.
	Salt string
	// Bigram writes token_ids as SGLang's EAGLE pages do: the pairs
	// [t_j, t_j+1] of Tokens, which then holds one token more than the
	// len(BlockHashes)*BlockSize pairs.
	Bigram bool
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
		loraName := named("lora_name", optString(e.LoRA))
		if e.Salt != "" && !enc.Map { // SGLang's salted form
			loraName = vllmValue{key: "lora_name", write: func(dst []byte) []byte {
				dst = msgp.AppendMapHeader(dst, 2)
				dst = msgp.AppendString(dst, "lora_name")
				dst = optString(e.LoRA).write(dst)
				dst = msgp.AppendString(dst, "cache_salt")
				return msgp.AppendString(dst, e.Salt)
			}}
		}
		fields = []vllmValue{
			{key: "block_hashes", write: hashes},
			named("parent_block_hash", parent),
			{key: "token_ids", write: func(dst []byte) []byte {
				if e.Bigram {
					n := max(len(e.Tokens)-1, 0)
					dst = msgp.AppendArrayHeader(dst, uint32(n))
					for j := range n {
						dst = msgp.AppendArrayHeader(dst, 2)
						dst = msgp.AppendUint32(dst, e.Tokens[j])
						dst = msgp.AppendUint32(dst, e.Tokens[j+1])
					}
					return dst
				}
				dst = msgp.AppendArrayHeader(dst, uint32(len(e.Tokens)))
				for _, t := range e.Tokens {
					dst = msgp.AppendUint32(dst, t)
				}
				return dst
			}},
			{key: "block_size", write: func(dst []byte) []byte { return msgp.AppendInt(dst, e.BlockSize) }},
			named("lora_id", loraID),
			named("medium", optString(e.Medium)),
			loraName,
		}
		if enc.Extras || e.ExtraKeys != nil || e.HasGroup || e.SpecKind != "" || e.Locality != "" {
			extra := nilValue
			if e.ExtraKeys != nil {
				extra = vllmValue{write: func(dst []byte) []byte {
					dst = msgp.AppendArrayHeader(dst, uint32(len(e.ExtraKeys)))
					for _, keys := range e.ExtraKeys {
						if keys == nil {
							dst = msgp.AppendNil(dst)
							continue
						}
						dst = msgp.AppendArrayHeader(dst, uint32(len(keys)))
						for _, k := range keys {
							dst = msgp.AppendString(dst, k)
						}
					}
					return dst
				}}
			}
			kind := e.SpecKind
			if kind == "" {
				kind = "full_attention"
			}
			fields = append(fields,
				named("extra_keys", extra),
				vllmValue{key: "group_idx", write: func(dst []byte) []byte { return msgp.AppendInt(dst, e.Group) }},
				vllmValue{key: "kv_cache_spec_kind", write: func(dst []byte) []byte { return msgp.AppendString(dst, kind) }},
				named("kv_cache_spec_sliding_window", nilValue))
			if enc.Extras || e.Locality != "" {
				fields = append(fields, named("locality", optString(e.Locality)))
			}
		}
		if e.Salt != "" && enc.Map {
			fields = append(fields, vllmValue{key: "cache_salt", write: func(dst []byte) []byte { return msgp.AppendString(dst, e.Salt) }})
		}
	case KindRemoved:
		tag = "BlockRemoved"
		fields = []vllmValue{{key: "block_hashes", write: hashes}, named("medium", optString(e.Medium))}
		if enc.Extras || e.HasGroup {
			fields = append(fields, vllmValue{key: "group_idx", write: func(dst []byte) []byte { return msgp.AppendInt(dst, e.Group) }})
		} else if e.Locality != "" {
			fields = append(fields, named("group_idx", nilValue))
		}
		if enc.Extras || e.Locality != "" {
			fields = append(fields, named("locality", optString(e.Locality)))
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
