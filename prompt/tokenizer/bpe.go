package tokenizer

import (
	"bytes"
	"encoding/binary"
	"unicode/utf8"
)

// pairTable maps a pair of token ids to the merge's rank and the merged id:
// open addressing over one flat array, a multiplicative hash of the pair.
type pairTable struct {
	slots []pairSlot
	shift uint
}

type pairSlot struct {
	key uint64 // a<<32 | b; emptyKey when free
	val uint64 // rank<<32 | merged id
}

const emptyKey = ^uint64(0)

func newPairTable(n int) pairTable {
	size, shift := 16, uint(60)
	for size < 2*n {
		size <<= 1
		shift--
	}
	slots := make([]pairSlot, size)
	for i := range slots {
		slots[i].key = emptyKey
	}
	return pairTable{slots: slots, shift: shift}
}

func (p *pairTable) put(a, b, rank, id uint32) {
	k := uint64(a)<<32 | uint64(b)
	mask := uint64(len(p.slots) - 1)
	for h := (k * 0x9E3779B97F4A7C15) >> p.shift; ; h = (h + 1) & mask {
		s := &p.slots[h]
		if s.key == emptyKey || s.key == k {
			// A later duplicate overrides, as HF's HashMap collect does.
			s.key, s.val = k, uint64(rank)<<32|uint64(id)
			return
		}
	}
}

// get returns the rank and merged id of (a, b); rank is noRank when the pair
// does not merge.
func (p *pairTable) get(a, b uint32) (rank, id uint32) {
	if len(p.slots) == 0 {
		return noRank, 0
	}
	k := uint64(a)<<32 | uint64(b)
	mask := uint64(len(p.slots) - 1)
	for h := (k * 0x9E3779B97F4A7C15) >> p.shift; ; h = (h + 1) & mask {
		s := &p.slots[h]
		if s.key == k {
			return uint32(s.val >> 32), uint32(s.val)
		}
		if s.key == emptyKey {
			return noRank, 0
		}
	}
}

const noRank = ^uint32(0)

type sym struct {
	id         uint32
	rank, nid  uint32 // naive: merge of (this, next)
	prev, next int32  // heap: links; prev == -2 marks a merged-away symbol
}

type mergeItem struct {
	key uint64 // rank<<32 | pos: the lowest rank first, then the leftmost
	nid uint32
}

// naiveMax is the longest word merged by rescanning the pair ranks; longer
// words use a heap (O(n log n)), so a long run of one class stays linear-ish.
var naiveMax = 48

// bpeCut runs BPE on the chunks of w between the cuts, the positions where
// no merge can join the symbols on either side (see cutter): merges on one
// side never see the other, so the ids are those of the whole word, and a
// Metaspace text, which is one word without a pre-tokenizer (Llama 2), is
// merged word by word through the cache instead of as one long word.
func (t *Tokenizer) bpeCut(sc *scratch, dst []uint32, w []byte) []uint32 {
	c := t.cut
	start := 0
	for i := 1; ; {
		j := bytes.Index(w[i:], c.repl)
		if j < 0 {
			break
		}
		p := i + j
		i = p + len(c.repl)
		if c.cuttable(t, w[start:p]) {
			dst = t.bpeChunk(sc, dst, w[start:p])
			start = p
		}
	}
	return t.bpeChunk(sc, dst, w[start:])
}

// cutter says where a word may be cut: before the replacement character
// (▁) whenever the character before it cannot end the left operand of a
// merge whose right operand starts with ▁. Load derives bad, those
// characters, from the merges (Llama 2: only ▁ itself; Gemma 3: ▁ and >).
type cutter struct {
	repl []byte
	bad  []rune // last characters of the left operands of merges (A, ▁…)
	// vocabOnly: bad holds the last character of a byte-fallback token
	// (<0xXX>) or of the unk token, so a character spelled with those (not in
	// the vocab) must not end a chunk either.
	vocabOnly bool
	ascii     [utf8.RuneSelf]bool // the ASCII characters that are vocab tokens
}

// cuttable reports whether a chunk ending with left's last character may be
// cut off before a ▁; left is not empty.
func (c *cutter) cuttable(t *Tokenizer, left []byte) bool {
	r, n := utf8.DecodeLastRune(left)
	for _, b := range c.bad {
		if r == b {
			return false
		}
	}
	if c.vocabOnly {
		if r < utf8.RuneSelf {
			return c.ascii[r]
		}
		_, ok := t.vocab[string(left[len(left)-n:])]
		return ok
	}
	return true
}

// bpeChunk is BPE on w through the word caches. w's capacity must not
// reach past the text being encoded (encodeSegment limits it): the short
// key is read 16 bytes at a time within it.
func (t *Tokenizer) bpeChunk(sc *scratch, dst []uint32, w []byte) []uint32 {
	if len(w) > cacheKeyMax || t.noCache {
		return t.bpeLong(sc, dst, w)
	}
	if len(w) == 1 && t.byteLevel {
		return append(dst, t.byteID[w[0]]) // one symbol: nothing to merge
	}
	k0, k1 := cacheKey(w)
	set := (*[cacheWays]cacheEntry)(sc.cache[cacheSlot(k0, k1)*cacheWays:])
	for k := range set {
		// An empty entry never matches: a key holds its length, at least 1.
		if ce := &set[k]; ce.k0 == k0 && ce.k1&^nMask == k1 {
			if k > 0 {
				// To the front, by a swap: a frequent word is found in the
				// first way (and no memmove call per hit, as a shift has).
				set[0], *ce = *ce, set[0]
			}
			return appendIDs(dst, &set[0].ids, int(set[0].k1>>56))
		}
	}
	return t.bpeShortMiss(sc, dst, w, set, k0, k1)
}

// bpeShortMiss: w was not in the short cache; its ids are in the long one
// when there are more than fit a short entry.
func (t *Tokenizer) bpeShortMiss(sc *scratch, dst []uint32, w []byte, set *[cacheWays]cacheEntry, k0, k1 uint64) []uint32 {
	h := mix(k0*0x9E3779B97F4A7C15 ^ k1)
	if ids, ok := sc.longGet(h, w); ok {
		return append(dst, ids...)
	}
	start := len(dst)
	dst = t.merge(sc, dst, w)
	if len(dst)-start <= len(set[0].ids) {
		// The new entry first, the least recently used one dropped.
		copy(set[1:], set[:cacheWays-1])
		ce := &set[0]
		n := copy(ce.ids[:], dst[start:])
		ce.k0, ce.k1 = k0, k1|uint64(n)<<56
	} else {
		sc.longPut(h, w, dst[start:])
	}
	return dst
}

// appendIDs appends ids[:n], copying all four at once when dst has room.
func appendIDs(dst []uint32, ids *[4]uint32, n int) []uint32 {
	l := len(dst)
	if cap(dst)-l < len(ids) {
		return append(dst, ids[:n]...)
	}
	*(*[4]uint32)(dst[l : l+4]) = *ids
	return dst[:l+n]
}

// bpeLong is BPE on a word too long for the short cache, through the long
// one when it fits there.
func (t *Tokenizer) bpeLong(sc *scratch, dst []uint32, w []byte) []uint32 {
	if len(w) > len(longEntry{}.b) || t.noCache {
		return t.merge(sc, dst, w)
	}
	h := longHash(w)
	if ids, ok := sc.longGet(h, w); ok {
		return append(dst, ids...)
	}
	start := len(dst)
	dst = t.merge(sc, dst, w)
	sc.longPut(h, w, dst[start:])
	return dst
}

// longGet returns the ids of w (hash h) from the long cache.
func (sc *scratch) longGet(h uint64, w []byte) ([]uint32, bool) {
	set := sc.longSet(h)
	for k := range set {
		if e := &set[k]; e.h == h && int(e.n) == len(w) && string(e.b[:e.n]) == string(w) {
			if k > 0 {
				e := *e
				copy(set[1:k+1], set[:k])
				set[0] = e
			}
			return set[0].ids[:set[0].k], true
		}
	}
	return nil, false
}

// longSet is the set of hash h.
func (sc *scratch) longSet(h uint64) *[longWays]longEntry {
	return (*[longWays]longEntry)(sc.long[h>>(64-longSetBits)*longWays:])
}

// longPut puts w (hash h, at most 64 bytes) and its ids in the long cache,
// if they fit.
func (sc *scratch) longPut(h uint64, w []byte, ids []uint32) {
	if len(ids) > len(longEntry{}.ids) {
		return
	}
	set := sc.longSet(h)
	copy(set[1:], set[:longWays-1])
	e := &set[0]
	e.h, e.n, e.k = h, uint8(len(w)), uint8(len(ids))
	copy(e.b[:], w)
	copy(e.ids[:], ids)
}

// mergeHook, when set (tests), sees every word merged.
var mergeHook func(w []byte)

// merge appends the BPE ids of w: its own token first with ignore_merges
// (Llama 3), which the caches then hold like any result.
func (t *Tokenizer) merge(sc *scratch, dst []uint32, w []byte) []uint32 {
	if mergeHook != nil {
		mergeHook(w)
	}
	if t.ignoreMerges {
		if id, ok := t.vocab[string(w)]; ok {
			return append(dst, id)
		}
	}
	syms := t.initialSymbols(sc.syms[:0], w)
	sc.syms = syms
	if len(syms) <= naiveMax {
		return t.mergeNaive(dst, syms)
	}
	return t.mergeHeap(sc, dst, syms)
}

func (t *Tokenizer) initialSymbols(syms []sym, w []byte) []sym {
	if t.byteLevel {
		for _, c := range w {
			syms = append(syms, sym{id: t.byteID[c]})
		}
		return syms
	}
	prevUnk := false
	for i := 0; i < len(w); {
		_, n := utf8.DecodeRune(w[i:])
		if id, ok := t.vocab[string(w[i:i+n])]; ok {
			syms = append(syms, sym{id: id})
			prevUnk = false
		} else if t.byteFallback {
			for _, c := range w[i : i+n] {
				syms = append(syms, sym{id: t.byteID[c]})
			}
			prevUnk = false
		} else if t.unk >= 0 {
			if !(t.fuseUnk && prevUnk) {
				syms = append(syms, sym{id: uint32(t.unk)})
			}
			prevUnk = true
		}
		i += n
	}
	return syms
}

// mergeNaive applies merges lowest rank first, leftmost among equals, by
// rescanning the ranks of adjacent pairs.
func (t *Tokenizer) mergeNaive(dst []uint32, s []sym) []uint32 {
	n := len(s)
	if n == 0 {
		return dst
	}
	for i := 0; i < n-1; i++ {
		s[i].rank, s[i].nid = t.merges.get(s[i].id, s[i+1].id)
	}
	s[n-1].rank = noRank
	for n > 1 {
		best, br := -1, noRank
		for i := 0; i < n-1; i++ {
			if s[i].rank < br {
				br, best = s[i].rank, i
			}
		}
		if best < 0 {
			break
		}
		s[best].id = s[best].nid
		copy(s[best+1:n-1], s[best+2:n])
		n--
		if best < n-1 {
			s[best].rank, s[best].nid = t.merges.get(s[best].id, s[best+1].id)
		} else {
			s[best].rank = noRank
		}
		if best > 0 {
			s[best-1].rank, s[best-1].nid = t.merges.get(s[best-1].id, s[best].id)
		}
	}
	for i := 0; i < n; i++ {
		dst = append(dst, s[i].id)
	}
	return dst
}

// mergeHeap is HF's merge loop: a min-heap of candidate merges keyed by
// (rank, position), stale entries skipped when popped.
func (t *Tokenizer) mergeHeap(sc *scratch, dst []uint32, s []sym) []uint32 {
	n := len(s)
	h := sc.heap[:0]
	for i := range s {
		s[i].prev, s[i].next = int32(i-1), int32(i+1)
	}
	s[n-1].next = -1
	for i := 0; i < n-1; i++ {
		if r, id := t.merges.get(s[i].id, s[i+1].id); r != noRank {
			h = heapPush(h, mergeItem{key: uint64(r)<<32 | uint64(i), nid: id})
		}
	}
	for len(h) > 0 {
		var top mergeItem
		top, h = heapPop(h)
		pos := int32(uint32(top.key))
		cur := &s[pos]
		if cur.prev == -2 || cur.next < 0 {
			continue
		}
		nx := &s[cur.next]
		if r, id := t.merges.get(cur.id, nx.id); r == noRank || id != top.nid {
			continue
		}
		cur.id = top.nid
		nx.prev = -2
		cur.next = nx.next
		if cur.next >= 0 {
			s[cur.next].prev = pos
		}
		if cur.prev >= 0 {
			if r, id := t.merges.get(s[cur.prev].id, cur.id); r != noRank {
				h = heapPush(h, mergeItem{key: uint64(r)<<32 | uint64(uint32(cur.prev)), nid: id})
			}
		}
		if cur.next >= 0 {
			if r, id := t.merges.get(cur.id, s[cur.next].id); r != noRank {
				h = heapPush(h, mergeItem{key: uint64(r)<<32 | uint64(uint32(pos)), nid: id})
			}
		}
	}
	sc.heap = h
	for i := int32(0); i >= 0; i = s[i].next {
		dst = append(dst, s[i].id)
	}
	return dst
}

func heapPush(h []mergeItem, x mergeItem) []mergeItem {
	h = append(h, x)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if h[p].key <= h[i].key {
			break
		}
		h[p], h[i] = h[i], h[p]
		i = p
	}
	return h
}

func heapPop(h []mergeItem) (mergeItem, []mergeItem) {
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h[r].key < h[l].key {
			m = r
		}
		if h[i].key <= h[m].key {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	return top, h
}

// The word cache: eight-way set-associative with LRU order, per scratch (so
// per goroutine at a time), for the pieces of at most cacheKeyMax bytes whose
// ids fit an entry. On the benchmark prompt (~2k distinct words, 8192
// entries), once warm, two ways still merged 130-180 words per call (three
// words in a set thrash it), four 13-34, eight none (TestWarmCacheMerges).
// A hit moves its entry to the front, so a frequent word is found in the
// first way.
const (
	cacheBits   = 13
	cacheSize   = 1 << cacheBits
	cacheWays   = 8
	cacheKeyMax = 14
)

// cacheEntry is 32 bytes: a set of eight is four 64-byte cache lines. The key
// is the word's bytes in k0 (0-7) and k1 (8-13), its length in k1's byte 6;
// byte 7 holds the number of ids (0: empty).
type cacheEntry struct {
	k0, k1 uint64
	ids    [4]uint32
}

const nMask = 0xff << 56

// cacheKey packs a word of at most cacheKeyMax bytes: its bytes
// little-endian, zero-padded, and its length. With 16 bytes of capacity (the
// text goes on after the word) it reads them in two loads and masks what is
// not the word's, with no branch on the length.
func cacheKey(w []byte) (k0, k1 uint64) {
	n := len(w)
	if cap(w) >= 16 {
		b := w[:16]
		s0 := uint(min(n, 8)) * 8
		s1 := uint(max(n-8, 0)) * 8
		k0 = binary.LittleEndian.Uint64(b) & (1<<s0 - 1) // s0 = 64: all ones
		k1 = binary.LittleEndian.Uint64(b[8:]) & (1<<s1 - 1)
		return k0, k1 | uint64(n)<<48
	}
	k1 = uint64(n) << 48
	if n >= 8 {
		k0 = binary.LittleEndian.Uint64(w)
		return k0, k1 | load(w[8:])
	}
	return load(w), k1
}

// load reads up to 7 bytes little-endian (overlapping loads: the bytes read
// twice are the same).
func load(b []byte) uint64 {
	switch n := len(b); {
	case n >= 4:
		return uint64(binary.LittleEndian.Uint32(b)) | uint64(binary.LittleEndian.Uint32(b[n-4:]))<<(8*(n-4))
	case n > 0:
		return uint64(b[0]) | uint64(b[n/2])<<(8*(n/2)) | uint64(b[n-1])<<(8*(n-1))
	}
	return 0
}

// cacheSlot hashes a key to its set. Every bit of the key reaches the set
// index: a multiply alone carries a bit only upwards, and words differing
// only in their last bytes shared sets (45 of a warm cache's 8.7k words
// missed on the benchmark prompt at any cache size).
func cacheSlot(k0, k1 uint64) int {
	return int(mix(k0*0x9E3779B97F4A7C15^k1)) & (cacheSize/cacheWays - 1)
}

// The long-word cache: eight-way set-associative with LRU order like the
// short one, per scratch, for the words of cacheKeyMax+1 to 64 bytes (runs
// of spaces, identifiers, Llama 2's chunks with punctuation and newlines)
// and the short words of more than four ids.
const (
	longSetBits = 8
	longWays    = 8
	longSize    = longWays << longSetBits // 2048 entries, 256 KiB
)

// longEntry is 128 bytes, two cache lines; n == 0 marks it empty.
type longEntry struct {
	h    uint64
	n, k uint8 // the word's length, its number of ids
	ids  [13]uint32
	b    [64]byte
}

// longHash hashes a word of 8 to 64 bytes from its first, middle and last 8
// bytes and its length (equal hashes are then compared byte for byte).
func longHash(w []byte) uint64 {
	n := len(w)
	h := binary.LittleEndian.Uint64(w)*0x9E3779B97F4A7C15 ^ uint64(n)
	h ^= binary.LittleEndian.Uint64(w[n/2-4:]) * 0xc4ceb9fe1a85ec53
	h ^= binary.LittleEndian.Uint64(w[n-8:]) * 0xff51afd7ed558ccd
	return mix(h) // runs of one character differ in n alone
}

// mix spreads every bit of h over all of them (murmur3's finalizer, less
// one round): a multiply alone carries a bit only upwards.
func mix(h uint64) uint64 {
	h ^= h >> 29
	h *= 0x94d049bb133111eb
	return h ^ h>>32
}
