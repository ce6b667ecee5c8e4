package wire

// BlockHash is the router's local hash of one block's tokens: xxh3-64 of the
// block's little-endian token bytes. The radix tree is navigated by it.
type BlockHash uint64

// SeqHash is the chained hash of a block and every block before it
// (see SequenceHashes). Two requests share a SeqHash only if they share the
// whole prefix up to and including that block.
type SeqHash uint64

// EngineHash is an engine's own, opaque identifier of a cached block (vLLM: a
// sha256-derived value). It is unique per worker, not across workers, and is
// used only for parent links and removals.
type EngineHash uint64

// WorkerKey identifies one KV cache: a worker and one of its data-parallel ranks.
type WorkerKey struct {
	Worker uint64
	Dp     uint32
}

// Kind is the kind of a KV event.
type Kind uint8

// Event kinds.
const (
	KindStored Kind = iota + 1
	KindRemoved
	KindCleared
)

func (k Kind) String() string {
	switch k {
	case KindStored:
		return "stored"
	case KindRemoved:
		return "removed"
	case KindCleared:
		return "cleared"
	}
	return "unknown"
}

// Tier is the storage tier a block lives in.
type Tier uint8

// Storage tiers. vLLM's medium maps GPU→TierDevice, CPU→TierHost,
// DISK and STORAGE→TierDisk, anything else→TierExternal; a host or disk
// copy whose locality is not LOCAL is TierExternal (see the package doc).
const (
	TierDevice Tier = iota
	TierHost
	TierDisk
	TierExternal
)

func (t Tier) String() string {
	switch t {
	case TierDevice:
		return "device"
	case TierHost:
		return "host"
	case TierDisk:
		return "disk"
	}
	return "external"
}

// Block is one block of a Stored event: the engine's hash and the router's
// local hash of its tokens. In a Removed event only Engine is set.
type Block struct {
	Engine EngineHash
	Local  BlockHash
}

// Event is the normalized KV event every decoder produces.
//
// Blocks and LoRA are views: they point into the decoder's reusable batch
// storage or the received message, and are valid only until that batch is
// reset or the message buffer reused. Copy what must outlive it.
type Event struct {
	Worker    WorkerKey
	ID        uint64 // event id, contiguous per WorkerKey at the publisher; 0 if the transport has none
	Kind      Kind
	Tier      Tier
	HasParent bool       // Stored only: Parent is set
	Parent    EngineHash // Stored only: engine hash of the block before Blocks[0]
	Blocks    []Block    // Stored: blocks in prefix order; Removed: engine hashes to remove
	LoRA      []byte     // adapter name, nil for the base model
	// ByEngine (Stored, a tier other than the device): Blocks carry engine
	// hashes only (Local is 0), of blocks the worker already holds in
	// another tier; the event adds Tier to them. vLLM's offloading
	// connector publishes its CPU copies so (token_ids empty: the tokens
	// are those of the GPU block of the same hash).
	ByEngine bool
}

// Overlap is one worker key's match against a request (a plain value).
//
// Blocks is the device-tier overlap: the leading blocks the worker key holds
// on its device (GPU). Host is how many blocks further the prefix extends
// when host copies count too (every block of it on the device or in host
// memory), and Disk how many further still with the disk and external tiers
// (the prefix held in any tier is Blocks + Host + Disk). A tree that has
// only seen device-tier events reports Host = Disk = 0.
type Overlap struct {
	Worker   WorkerKey
	Blocks   uint32 // leading blocks held on the device
	Host     uint32 // further leading blocks held on the device or the host
	Disk     uint32 // further leading blocks held in any tier
	TreeSize uint32 // blocks this worker key holds in this tree, in any tier
}
