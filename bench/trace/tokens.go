package trace

import (
	"github.com/kvroute/kvroute/wire"
)

// Vocab is the synthesized token range: tokens are in [0, Vocab), the size
// of a Llama-3-class vocabulary.
const Vocab = 128000

// splitmix64 constants (Steele, Lea, Flood 2014).
const (
	golden = 0x9e3779b97f4a7c15
	mix1   = 0xbf58476d1ce4e5b9
	mix2   = 0x94d049bb133111eb
	// idSalt keeps id 0's stream away from splitmix64's well-known seed-0 stream.
	idSalt = 0x6d6f6f6e63616b65 // "mooncake"
)

// AppendIDTokens appends the IDBlockSize tokens of hash id to dst. They
// depend on id alone: a splitmix64 stream seeded by id, each 64-bit output
// giving two tokens scaled into [0, Vocab). It does not allocate when dst has
// room.
func AppendIDTokens(dst []uint32, id uint64) []uint32 {
	dst = growTokens(dst, IDBlockSize)
	out := dst[len(dst)-IDBlockSize:]
	x := id ^ idSalt
	for i := 0; i < IDBlockSize; i += 2 {
		x += golden
		z := x
		z = (z ^ (z >> 30)) * mix1
		z = (z ^ (z >> 27)) * mix2
		z ^= z >> 31
		out[i] = uint32((uint64(uint32(z)) * Vocab) >> 32)
		out[i+1] = uint32(((z >> 32) * Vocab) >> 32)
	}
	return dst
}

func growTokens(dst []uint32, n int) []uint32 {
	if cap(dst)-len(dst) < n {
		nd := make([]uint32, len(dst), len(dst)+max(n, len(dst)))
		copy(nd, dst)
		dst = nd
	}
	return dst[:len(dst)+n]
}

// AppendTokens appends the r.InputLength prompt tokens of r to dst: its ids'
// tokens concatenated and truncated. It does not allocate when dst has room.
func AppendTokens(dst []uint32, r *Request) []uint32 {
	start := len(dst)
	for _, id := range r.HashIDs {
		dst = AppendIDTokens(dst, id)
	}
	return dst[:min(len(dst), start+r.InputLength)]
}

// Hasher computes the router's local block hashes (wire.LocalHashes
// semantics) of requests at one engine block size and seed, caching the
// hashes of each hash id so a replay hashes every distinct block once.
//
// When the block size B divides IDBlockSize, a B-block lies inside one id, so
// the id's IDBlockSize/B hashes are computed once and reused for every
// request carrying that id (a partial last id uses a prefix of them). Any
// other B (not a divisor, or larger than IDBlockSize) makes blocks straddle
// ids; those requests are hashed from their synthesized tokens without a
// cache.
//
// Not goroutine-safe; the zero value is not usable (use NewHasher). The cache
// grows with the number of distinct ids seen (8*IDBlockSize/B bytes each).
type Hasher struct {
	block  int
	seed   uint64
	per    int               // hashes per id when block divides IDBlockSize, else 0
	index  map[uint64]uint32 // id -> offset of its per hashes in arena
	arena  []wire.BlockHash
	tokens []uint32 // scratch
	hits   uint64
	misses uint64
}

// NewHasher returns a Hasher for engine block size blockSize (> 0) and hash
// seed (wire.Seed for the base model, wire.LoRASeed for an adapter).
func NewHasher(blockSize int, seed uint64) *Hasher {
	if blockSize <= 0 {
		panic("trace: block size must be > 0")
	}
	h := &Hasher{block: blockSize, seed: seed}
	if IDBlockSize%blockSize == 0 {
		h.per = IDBlockSize / blockSize
		h.index = make(map[uint64]uint32)
	}
	return h
}

// BlockSize returns the engine block size.
func (h *Hasher) BlockSize() int { return h.block }

// Cached reports whether the per-id cache applies (the block size divides
// IDBlockSize).
func (h *Hasher) Cached() bool { return h.per > 0 }

// CacheStats returns the ids served from the cache and the ids hashed.
func (h *Hasher) CacheStats() (hits, misses uint64) { return h.hits, h.misses }

// Append appends to dst the local hashes of r's full blocks of BlockSize
// tokens: exactly wire.LocalHashes(dst, AppendTokens(nil, r), BlockSize,
// seed), len r.InputLength/BlockSize. It allocates only when dst lacks room
// or the cache grows.
func (h *Hasher) Append(dst []wire.BlockHash, r *Request) []wire.BlockHash {
	if h.per == 0 {
		h.tokens = AppendTokens(h.tokens[:0], r)
		return wire.LocalHashes(dst, h.tokens, h.block, h.seed)
	}
	full := r.InputLength / h.block
	for i, id := range r.HashIDs {
		n := min(h.per, full-i*h.per)
		if n <= 0 {
			break
		}
		dst = append(dst, h.id(id)[:n]...)
	}
	return dst
}

// id returns the per hashes of id's blocks, computing them on first use.
func (h *Hasher) id(id uint64) []wire.BlockHash {
	if off, ok := h.index[id]; ok {
		h.hits++
		return h.arena[off : int(off)+h.per]
	}
	h.misses++
	return h.idSlow(id)
}

func (h *Hasher) idSlow(id uint64) []wire.BlockHash {
	off := len(h.arena)
	if off+h.per > 1<<32 {
		panic("trace: hasher cache exceeds 2^32 hashes")
	}
	h.tokens = AppendIDTokens(h.tokens[:0], id)
	h.arena = wire.LocalHashes(h.arena, h.tokens, h.block, h.seed)
	h.index[id] = uint32(off)
	return h.arena[off : off+h.per]
}
