package trace

import (
	"slices"
	"testing"

	"github.com/kvroute/kvroute/wire"
)

func TestAppendIDTokens(t *testing.T) {
	a := AppendIDTokens(nil, 42)
	b := AppendIDTokens([]uint32{7}, 42)
	if len(a) != IDBlockSize || len(b) != IDBlockSize+1 || b[0] != 7 || !slices.Equal(a, b[1:]) {
		t.Fatal("tokens of an id depend on more than the id")
	}
	// Pinned values: a change here changes every replay's hashes.
	if got := a[:4]; !slices.Equal(got, []uint32{74248, 30063, 33817, 109500}) {
		t.Fatalf("tokens of id 42 begin %v", got)
	}
	seen := map[[8]uint32]uint64{}
	for id := range uint64(2000) {
		toks := AppendIDTokens(nil, id)
		distinct := map[uint32]bool{}
		for _, x := range toks {
			if x >= Vocab {
				t.Fatalf("token %d out of vocabulary", x)
			}
			distinct[x] = true
		}
		if len(distinct) < IDBlockSize*9/10 {
			t.Fatalf("id %d: only %d distinct tokens in %d", id, len(distinct), IDBlockSize)
		}
		var head [8]uint32
		copy(head[:], toks)
		if prev, ok := seen[head]; ok {
			t.Fatalf("ids %d and %d share their first tokens", prev, id)
		}
		seen[head] = id
	}
}

func TestAppendTokensTruncates(t *testing.T) {
	r := Request{InputLength: 700, HashIDs: []uint64{5, 6}}
	toks := AppendTokens(nil, &r)
	if len(toks) != 700 {
		t.Fatalf("%d tokens", len(toks))
	}
	want := append(AppendIDTokens(nil, 5), AppendIDTokens(nil, 6)[:700-IDBlockSize]...)
	if !slices.Equal(toks, want) {
		t.Fatal("tokens are not the ids' tokens concatenated")
	}
}

// TestHasherMatchesTokens checks the cached fast path and the fallback
// against hashing the synthesized tokens directly, for block sizes that
// divide 512, do not, and exceed it.
func TestHasherMatchesTokens(t *testing.T) {
	tr := loadSmall(t)
	reqs := append(tr.Requests[:40:40],
		Request{InputLength: 1, HashIDs: []uint64{1}},
		Request{InputLength: 511, HashIDs: []uint64{2}},
		Request{InputLength: 1040, HashIDs: []uint64{0, 1, 3}},
	)
	for _, bs := range []int{1, 16, 64, 100, 512, 600, 1024, 1536} {
		for _, seed := range []uint64{wire.Seed, wire.LoRASeed("adapter")} {
			h := NewHasher(bs, seed)
			if h.Cached() != (512%bs == 0) {
				t.Fatalf("B=%d cached=%v", bs, h.Cached())
			}
			var got []wire.BlockHash
			var toks []uint32
			for pass := range 2 { // the second pass is served from the cache
				for i := range reqs {
					r := &reqs[i]
					got = h.Append(got[:0], r)
					toks = AppendTokens(toks[:0], r)
					want := wire.LocalHashes(nil, toks, bs, seed)
					if len(want) != r.InputLength/bs || !slices.Equal(got, want) {
						t.Fatalf("B=%d pass %d request %d: %d hashes, want %d (equal=%v)",
							bs, pass, i, len(got), len(want), slices.Equal(got, want))
					}
				}
			}
		}
	}
}

// TestHasherCacheSharesPrefixes checks that each distinct id holding a full
// block is hashed once and every later reference is served from the cache.
func TestHasherCacheSharesPrefixes(t *testing.T) {
	tr := loadSmall(t)
	const bs = 16
	h := NewHasher(bs, wire.Seed)
	var buf []wire.BlockHash
	refs, distinct := 0, map[uint64]bool{}
	for i := range tr.Requests {
		r := &tr.Requests[i]
		buf = h.Append(buf[:0], r)
		for j, id := range r.HashIDs {
			if r.InputLength-j*IDBlockSize >= bs { // the id holds a full block
				refs++
				distinct[id] = true
			}
		}
	}
	hits, misses := h.CacheStats()
	if misses != uint64(len(distinct)) || hits+misses != uint64(refs) || hits == 0 {
		t.Fatalf("hits %d misses %d, want misses %d of %d refs", hits, misses, len(distinct), refs)
	}
}
