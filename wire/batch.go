package wire

import (
	"errors"
	"fmt"
	"slices"
)

// Errors the decoders wrap. Test with errors.Is.
var (
	// ErrBlockSizeMismatch: a vLLM/SGLang Stored event whose block_size field,
	// or whose token count per block, differs from the decoder's configured
	// block size. The wrapping error names both sizes.
	ErrBlockSizeMismatch = errors.New("wire: block size mismatch")
	// ErrMalformed: a message or event that does not follow its format.
	ErrMalformed = errors.New("wire: malformed message")
)

// Batch holds decoded events and the storage their Blocks point into.
//
// Decoders append to Events; Reset empties the batch and keeps its capacity,
// so decoding into a warmed-up Batch allocates nothing. Events[i].Blocks are
// sub-slices of the batch's block storage (or, for the native format, of the
// message) and Events[i].LoRA points into the message bytes: both are valid
// until the next Reset and while the message buffer is unchanged.
//
// A decoder either appends every valid event of a message and returns nil, or
// returns an error and leaves the batch as it found it (message-level errors:
// bad framing, truncation, trailing bytes). Within a well-framed vLLM batch an
// invalid event is dropped on its own: Rejected counts it and Err keeps the
// first such error, while the other events of the message are kept.
//
// The zero value is ready to use. A Batch is not goroutine-safe.
type Batch struct {
	Events []Event
	// Rejected counts events dropped because they were invalid (a block size
	// mismatch, a hash of the wrong type, ...) since the last Reset.
	Rejected int
	// SizeMismatches counts the rejected events whose error is
	// ErrBlockSizeMismatch: the most common misconfiguration, exported on
	// its own so that it can be alarmed on.
	SizeMismatches int
	// Ignored counts well-formed events of a kind kvroute does not know
	// (a newer engine's event types). They take no event id.
	Ignored int
	// OtherGroups counts the well-formed vLLM events of a hybrid model's
	// KV cache groups other than the main (full-attention) group: they are
	// not indexed (a sliding-window group's removal says nothing about the
	// prefix the main group holds) and take no event id.
	OtherGroups int
	// Err is the first rejection's error since the last Reset, or nil.
	Err error

	blocks []Block  // backing storage of Events[i].Blocks
	tokens []uint32 // scratch: token ids of the event being decoded
	// Scratch of the event being decoded: the multimodal hashes of its
	// blocks (block i's are mm[mmAt[i]:mmAt[i+1]]) and the bytes BlockHashMM
	// hashes.
	mm      []uint64
	mmAt    []int32
	scratch []byte
}

// Reset empties the batch for reuse and keeps its storage.
func (b *Batch) Reset() {
	clear(b.Events) // drop references into old messages
	b.Events = b.Events[:0]
	b.blocks = b.blocks[:0]
	b.Rejected, b.SizeMismatches, b.Ignored, b.OtherGroups, b.Err = 0, 0, 0, 0, nil
}

// Blocks returns the total number of blocks in b.Events.
func (b *Batch) Blocks() int {
	n := 0
	for i := range b.Events {
		n += len(b.Events[i].Blocks)
	}
	return n
}

// mark is the state of a batch before a message, to roll back to on a
// message-level error.
type mark struct {
	events, blocks, rejected, mismatches, ignored, others int
	err                                                   error
}

func (b *Batch) mark() mark {
	return mark{len(b.Events), len(b.blocks), b.Rejected, b.SizeMismatches, b.Ignored, b.OtherGroups, b.Err}
}

func (b *Batch) rollback(m mark) {
	clear(b.Events[m.events:])
	b.Events = b.Events[:m.events]
	b.blocks = b.blocks[:m.blocks]
	b.Rejected, b.SizeMismatches, b.Ignored, b.OtherGroups, b.Err = m.rejected, m.mismatches, m.ignored, m.others, m.err
}

// reject counts a dropped event. err is built only for the first rejection, so
// a stream of bad events (a misconfigured block size) costs no allocation.
func (b *Batch) reject(err rejection) {
	b.Rejected++
	if err.mismatch {
		b.SizeMismatches++
	}
	if b.Err == nil {
		b.Err = err.error()
	}
}

// growBlocks extends the block storage by n zeroed blocks and returns the
// offset of the first. If the storage must grow, events decoded earlier keep
// pointing into the old array, which stays valid; once the batch is warm it
// no longer grows.
func (b *Batch) growBlocks(n int) int {
	at := len(b.blocks)
	b.blocks = slices.Grow(b.blocks, n)[:at+n]
	clear(b.blocks[at:])
	return at
}

// blocksAt returns the stored blocks [at, at+n) with the capacity clipped, so
// that an append by a consumer cannot overwrite the next event's blocks.
func (b *Batch) blocksAt(at, n int) []Block {
	if n == 0 {
		return nil
	}
	return b.blocks[at : at+n : at+n]
}

// rejection describes an invalid event without allocating; error() builds the
// error value when it is kept.
type rejection struct {
	mismatch bool
	// mismatch: got is the event's block size (its block_size field or, when
	// the token count is at fault, tokens and blocks are set), want the
	// configured one.
	got, want, tokens, blocks int
	cause                     error // otherwise
	what                      string
}

// invalid reports whether r describes a problem (the zero value does not).
func (r rejection) invalid() bool { return r.mismatch || r.what != "" }

func (r rejection) error() error {
	if r.mismatch {
		if r.blocks > 0 || r.tokens > 0 {
			return fmt.Errorf("%w: %d token ids for %d blocks (%s), configured block size %d",
				ErrBlockSizeMismatch, r.tokens, r.blocks, perBlock(r.tokens, r.blocks), r.want)
		}
		return fmt.Errorf("%w: event block_size %d, configured block size %d", ErrBlockSizeMismatch, r.got, r.want)
	}
	if r.cause == nil {
		return fmt.Errorf("%w: %s", ErrMalformed, r.what)
	}
	return fmt.Errorf("%w: %s: %w", ErrMalformed, r.what, r.cause)
}

func perBlock(tokens, blocks int) string {
	if blocks > 0 && tokens%blocks == 0 {
		return fmt.Sprintf("block size %d", tokens/blocks)
	}
	return "not a whole number per block"
}

// malformed wraps a message-level cause.
func malformed(what string, cause error) error {
	if cause == nil {
		return fmt.Errorf("%w: %s", ErrMalformed, what)
	}
	return fmt.Errorf("%w: %s: %w", ErrMalformed, what, cause)
}

// tierOf maps a storage tier or medium name, ignoring ASCII case: vLLM's
// GPU/CPU/DISK, SGLang's CPU_PINNED, Dynamo's device/host/disk (and
// host_pinned) and the media of Dynamo's StorageTier::from_kv_medium
// (CPU_TIER1 host; CPU_TIER2, NVME disk), vLLM's STORAGE (its native
// offload to a file system or object store, named FS before 0.27) disk; any
// other name is TierExternal. A missing name (nil) is TierDevice.
func tierOf(name []byte) Tier {
	switch {
	case name == nil:
		return TierDevice
	case equalFold(name, "gpu"), equalFold(name, "device"):
		return TierDevice
	case equalFold(name, "cpu"), equalFold(name, "host"), equalFold(name, "host_pinned"), equalFold(name, "hostpinned"),
		equalFold(name, "cpu_pinned"), equalFold(name, "cpu_tier1"):
		return TierHost
	case equalFold(name, "disk"), equalFold(name, "cpu_tier2"), equalFold(name, "nvme"),
		equalFold(name, "storage"), equalFold(name, "fs"):
		return TierDisk
	}
	return TierExternal
}

// equalFold reports whether b equals the lower-case ASCII string s, ignoring
// ASCII case. It does not allocate.
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}
