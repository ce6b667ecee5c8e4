package wire

import (
	"encoding/binary"
	"slices"
	"unsafe"

	"github.com/zeebo/xxh3"
)

// Seed is the xxh3 seed for block and sequence hashes (bit-compatible with
// Dynamo's router).
const Seed uint64 = 1337

// maxBlockBytes bounds the stack scratch used to hash one block; larger blocks
// are hashed in chunks through the streaming hasher path.
const maxBlockBytes = 4096

// LoRASeed returns the hash seed for a LoRA adapter: Seed + xxh3_64(name),
// wrapping. The empty name is the base model and returns Seed.
func LoRASeed(name string) uint64 {
	if name == "" {
		return Seed
	}
	return Seed + xxh3.HashString(name)
}

// LoRASeedBytes is LoRASeed for a name held as bytes (no allocation).
func LoRASeedBytes(name []byte) uint64 {
	if len(name) == 0 {
		return Seed
	}
	return Seed + xxh3.Hash(name)
}

// LocalHashes appends to dst the local hash of every full block of tokens:
// xxh3-64 with the given seed over the little-endian bytes of the block's
// tokens. A trailing partial block is ignored. blockSize must be > 0.
// It does not allocate when dst has room.
func LocalHashes(dst []BlockHash, tokens []uint32, blockSize int, seed uint64) []BlockHash {
	for len(tokens) >= blockSize {
		dst = append(dst, BlockHashOf(tokens[:blockSize], seed))
		tokens = tokens[blockSize:]
	}
	return dst
}

// LocalHashesEagle appends to dst the local hashes of tokens as Dynamo
// hashes them for an EAGLE model (lib/kv-router/src/protocols.rs,
// compute_block_hash_for_seq with is_eagle): block i is the window of
// blockSize+1 tokens starting at i × blockSize (the block and the first
// token after it, which SGLang's bigram keys cover), so (len(tokens) − 1) /
// blockSize blocks. blockSize must be > 0. It does not allocate when dst
// has room.
func LocalHashesEagle(dst []BlockHash, tokens []uint32, blockSize int, seed uint64) []BlockHash {
	for len(tokens) > blockSize {
		dst = append(dst, BlockHashOf(tokens[:blockSize+1], seed))
		tokens = tokens[blockSize:]
	}
	return dst
}

// BlockHashOf returns the local hash of one block of tokens.
func BlockHashOf(block []uint32, seed uint64) BlockHash {
	if isLittleEndian {
		// The in-memory layout already is the little-endian byte string.
		b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(block))), len(block)*4)
		return BlockHash(xxh3.HashSeed(b, seed))
	}
	return blockHashPortable(block, seed)
}

func blockHashPortable(block []uint32, seed uint64) BlockHash {
	if len(block)*4 <= maxBlockBytes {
		var buf [maxBlockBytes]byte
		for i, t := range block {
			binary.LittleEndian.PutUint32(buf[i*4:], t)
		}
		return BlockHash(xxh3.HashSeed(buf[:len(block)*4], seed))
	}
	h := xxh3.NewSeed(seed)
	var buf [4]byte
	for _, t := range block {
		binary.LittleEndian.PutUint32(buf[:], t)
		_, _ = h.Write(buf[:])
	}
	return BlockHash(h.Sum64())
}

// SequenceHashes appends to dst the chained sequence hashes of local:
// seq[0] = local[0]; seq[i] = xxh3_64(le(seq[i-1]) || le(local[i]), Seed).
func SequenceHashes(dst []SeqHash, local []BlockHash) []SeqHash {
	if len(local) == 0 {
		return dst
	}
	prev := SeqHash(local[0])
	dst = append(dst, prev)
	for _, l := range local[1:] {
		prev = ChainHash(prev, l)
		dst = append(dst, prev)
	}
	return dst
}

// ChainHash returns the sequence hash of a block given its parent's sequence
// hash and its own local hash.
func ChainHash(parent SeqHash, local BlockHash) SeqHash {
	var buf [16]byte
	binary.LittleEndian.PutUint64(buf[:8], uint64(parent))
	binary.LittleEndian.PutUint64(buf[8:], uint64(local))
	return SeqHash(xxh3.HashSeed(buf[:], Seed))
}

var isLittleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// SaltSeed returns the hash seed for a LoRA adapter and a cache salt (vLLM's
// request field cache_salt; Dynamo's cache_namespace): Dynamo's
// compute_salt_hash (lib/kv-hashing), Seed + xxh3_64(lora, 0) +
// xxh3_64(salt, 1), wrapping, each term only when its name is non-empty.
// Without a salt it is LoRASeedBytes(lora), so unsalted blocks keep their
// hashes; two tenants with different salts never share a block hash.
func SaltSeed(lora, salt []byte) uint64 {
	return LoRASeedBytes(lora) + saltTerm(salt)
}

// saltTerm is the salt's part of SaltSeed: 0 for no salt.
func saltTerm(salt []byte) uint64 {
	if len(salt) == 0 {
		return 0
	}
	return xxh3.HashSeed(salt, 1)
}

// MMHashOf maps a multimodal identifier to the 64-bit hash folded into block
// hashes, as Dynamo's hash_mm_identifier does (lib/kv-router protocols.rs):
// a 64-character hex digest (vLLM's own identifiers) is read from its first 16
// hex digits; any other non-empty identifier is xxh3_64(identifier). It
// reports false for the empty identifier.
func MMHashOf(id []byte) (uint64, bool) {
	if len(id) == 0 {
		return 0, false
	}
	if h, ok := mmHexDigest(id); ok {
		return h, true
	}
	return xxh3.Hash(id), true
}

// mmHexDigest reads a 64-character hex digest's first 16 digits; false if id
// is not one. (Dynamo's parse_mm_hash_from_extra_key: in vLLM's extra_keys
// only such digests are multimodal identifiers.)
func mmHexDigest(id []byte) (uint64, bool) {
	if len(id) != 64 {
		return 0, false
	}
	var v uint64
	for i, c := range id {
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		if i < 16 {
			v = v<<4 | uint64(d)
		}
	}
	return v, true
}

// BlockHashMM returns the local hash of one block that holds multimodal
// objects: xxh3-64 with seed over the block's little-endian token bytes
// followed by the objects' hashes (MMHashOf), sorted, as little-endian
// uint64s (Dynamo's compute_block_hash_for_seq with block_mm_infos). mm is
// sorted in place. With no mm it equals BlockHashOf. scratch is reused
// storage; the grown scratch is returned, so a warm caller allocates nothing.
func BlockHashMM(scratch []byte, block []uint32, mm []uint64, seed uint64) (BlockHash, []byte) {
	if len(mm) == 0 {
		return BlockHashOf(block, seed), scratch
	}
	slices.Sort(mm)
	scratch = scratch[:0]
	for _, t := range block {
		scratch = binary.LittleEndian.AppendUint32(scratch, t)
	}
	for _, h := range mm {
		scratch = binary.LittleEndian.AppendUint64(scratch, h)
	}
	return BlockHash(xxh3.HashSeed(scratch, seed)), scratch
}

// MMRange is one multimodal object of a request: its hash (MMHashOf of the
// engine's identifier) and the token positions [Offset, Offset+Length) its
// placeholder tokens take in the prompt.
type MMRange struct {
	Hash           uint64
	Offset, Length int
}

// LocalHashesMM is LocalHashes for a prompt with multimodal objects: every
// block overlapping an object's range is hashed with BlockHashMM and the
// hashes of all the objects it overlaps, as vLLM puts them in the block's
// extra_keys. mmScratch and scratch are reused storage, returned grown.
func LocalHashesMM(dst []BlockHash, tokens []uint32, blockSize int, seed uint64, mm []MMRange, mmScratch []uint64, scratch []byte) ([]BlockHash, []uint64, []byte) {
	if len(mm) == 0 {
		return LocalHashes(dst, tokens, blockSize, seed), mmScratch, scratch
	}
	for i := 0; (i+1)*blockSize <= len(tokens); i++ {
		lo, hi := i*blockSize, (i+1)*blockSize
		mmScratch = mmScratch[:0]
		for _, r := range mm {
			if r.Length > 0 && r.Offset < hi && r.Offset+r.Length > lo {
				mmScratch = append(mmScratch, r.Hash)
			}
		}
		var h BlockHash
		h, scratch = BlockHashMM(scratch, tokens[lo:hi], mmScratch, seed)
		dst = append(dst, h)
	}
	return dst, mmScratch, scratch
}
