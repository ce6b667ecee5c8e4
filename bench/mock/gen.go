package mock

import "github.com/kvroute/kvroute/wire"

// The simulated engine's output is a pure function of the prompt and the
// position: two identical requests generate the same tokens, so they store
// the same KV blocks, and a follow-up prompt that repeats a prompt and its
// answer (the next turn of a chat) finds the answer's blocks cached, as on a
// real engine with greedy sampling. No global or per-worker randomness is
// involved.

// promptDigest names a prompt for generation: the xxh3 hash of all its
// tokens under seed (wire.Seed, or the LoRA adapter's).
func promptDigest(tokens []uint32, seed uint64) uint64 {
	return uint64(wire.BlockHashOf(tokens, seed))
}

// genToken returns the i-th generated token of the prompt with this digest:
// a lowercase ASCII letter, so its text is one byte that the bytes tokenizer
// maps back to the same token id.
func genToken(digest uint64, i int) uint32 {
	x := digest + uint64(i)*0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	x ^= x >> 31
	return uint32('a' + x%26)
}

// appendOutput appends the first n generated tokens to dst.
func appendOutput(dst []uint32, digest uint64, n int) []uint32 {
	for i := range n {
		dst = append(dst, genToken(digest, i))
	}
	return dst
}

// tokenText returns the text of the i-th generated token.
func tokenText(digest uint64, i int) string {
	k := genToken(digest, i) - 'a'
	return letters[k : k+1]
}

const letters = "abcdefghijklmnopqrstuvwxyz"

// appendText appends the text of generated tokens [from, to) to dst.
func appendText(dst []byte, digest uint64, from, to int) []byte {
	for i := from; i < to; i++ {
		dst = append(dst, byte(genToken(digest, i)))
	}
	return dst
}
