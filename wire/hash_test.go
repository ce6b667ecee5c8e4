package wire

import (
	"encoding/binary"
	"testing"

	"github.com/zeebo/xxh3"
)

func TestGoldenXXH3(t *testing.T) {
	if got := xxh3.HashSeed([]byte("test data"), Seed); got != 13226331709069118873 {
		t.Fatalf("xxh3_64(\"test data\", 1337) = %d, want 13226331709069118873", got)
	}
}

// leBytes is the obvious reference: serialize tokens little-endian, hash.
func leBytes(tokens []uint32) []byte {
	b := make([]byte, 4*len(tokens))
	for i, t := range tokens {
		binary.LittleEndian.PutUint32(b[4*i:], t)
	}
	return b
}

func TestLocalHashesVectors(t *testing.T) {
	tokens := make([]uint32, 40)
	for i := range tokens {
		tokens[i] = uint32(i + 1)
	}
	got := LocalHashes(nil, tokens, 16, Seed)
	if len(got) != 2 {
		t.Fatalf("got %d hashes for 40 tokens at block size 16, want 2 (partial block ignored)", len(got))
	}
	for i := range got {
		want := BlockHash(xxh3.HashSeed(leBytes(tokens[i*16:(i+1)*16]), 1337))
		if got[i] != want {
			t.Errorf("block %d: %d, want %d", i, got[i], want)
		}
	}
	// Fixed vectors, so a change in the hashing or its byte order cannot pass
	// by changing the reference alongside.
	pinned := []BlockHash{16863443419780771464, 2287610619914608821}
	for i := range pinned {
		if got[i] != pinned[i] {
			t.Errorf("pinned vector %d: %d, want %d", i, got[i], pinned[i])
		}
	}
	lora := LocalHashes(nil, tokens, 16, LoRASeed("my-adapter"))
	if lora[0] != 16700703466399747636 || lora[1] != 4482449398270684194 {
		t.Errorf("pinned LoRA vector: %v", lora)
	}
	if seq := SequenceHashes(nil, got); seq[0] != 16863443419780771464 || seq[1] != 12466389667045779788 {
		t.Errorf("pinned sequence vector: %v", seq)
	}
	if portable := blockHashPortable(tokens[:16], Seed); portable != got[0] {
		t.Fatalf("portable %d != fast %d", portable, got[0])
	}
	big := make([]uint32, 2048) // 8 KiB: exercises the streaming path
	for i := range big {
		big[i] = uint32(i * 7)
	}
	if a, b := blockHashPortable(big, Seed), BlockHashOf(big, Seed); a != b {
		t.Fatalf("streaming portable %d != fast %d", a, b)
	}
}

func TestLoRASeed(t *testing.T) {
	if LoRASeed("") != Seed {
		t.Fatal("base model seed must be 1337")
	}
	s := LoRASeed("my-adapter")
	if s != Seed+xxh3.HashString("my-adapter") {
		t.Fatal("LoRA seed is not 1337 + xxh3(name)")
	}
	if LoRASeedBytes([]byte("my-adapter")) != s {
		t.Fatal("bytes and string forms differ")
	}
	tokens := []uint32{1, 2, 3, 4}
	if LocalHashes(nil, tokens, 4, s)[0] == LocalHashes(nil, tokens, 4, Seed)[0] {
		t.Fatal("LoRA and base hashes collide")
	}
}

func TestSequenceHashes(t *testing.T) {
	local := []BlockHash{11, 22, 33}
	seq := SequenceHashes(nil, local)
	if seq[0] != 11 {
		t.Fatalf("seq[0] = %d, want local[0]", seq[0])
	}
	buf := make([]byte, 16)
	binary.LittleEndian.PutUint64(buf, 11)
	binary.LittleEndian.PutUint64(buf[8:], 22)
	s1 := xxh3.HashSeed(buf, 1337)
	if uint64(seq[1]) != s1 {
		t.Fatalf("seq[1] = %d, want %d", seq[1], s1)
	}
	binary.LittleEndian.PutUint64(buf, s1)
	binary.LittleEndian.PutUint64(buf[8:], 33)
	if uint64(seq[2]) != xxh3.HashSeed(buf, 1337) {
		t.Fatal("seq[2] not chained from seq[1]")
	}
	if len(SequenceHashes(nil, nil)) != 0 {
		t.Fatal("empty input must give empty output")
	}
}
