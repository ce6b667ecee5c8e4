package wire

import (
	"encoding/binary"
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
