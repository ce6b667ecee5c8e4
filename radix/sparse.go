package radix

import (
	"fmt"
	"slices"
	"unsafe"
)

// Sparse worker sets (docs/decisions/0004-sparse-worker-sets.md). A dense set costs w words per node
// whatever it holds: at 7,000 worker keys, 128 words (1 KiB) per node and
// 15.6 of 48.3 bytes per (block, worker) entry. Past denseMaxWords words a
// tree switches every set, once, to a sparse form: the set's nonzero words
// with their word indexes, in ascending index order. A set keeps word
// operations (Match takes a parent's word minus the child's word, as the
// dense form does) and costs 12 bytes per nonzero word plus a 16-byte
// header, so a set of a few workers costs a few words and a dense one about
// what a bitset costs.
//
// The header is two words in the place of the dense set (t.sets, stride 2;
// the tier sets likewise in t.tiers): h1 holds the number of nonzero words
// n (bits 0–15) and, for n ≥ 2, the chunk's size class (bits 16–23); for
// n = 1 the word's index (bits 32–63) and h0 the word itself (no chunk);
// for n ≥ 2 h0 is the chunk's offset in t.sp. A chunk of class c holds 2^c
// words followed by their 2^c indexes packed two per word (1.5·2^c words in
// all); free chunks of a class are linked through their first word (1 + the
// next chunk's offset, 0 = end) from t.spFree[c].

// denseMaxWords is the widest dense set: up to 512 worker keys a tree keeps
// today's inline bitsets (at 256 workers, 4 words: 0.49 bytes per entry on
// the synthetic trace), past it sparse sets.
const denseMaxWords = 8

// denseMax is denseMaxWords; tests set it to 0 for trees that are sparse
// from New on.
var denseMax = denseMaxWords

// spStride is the header's width in words.
const spStride = 2

const numSetClasses = 18 // chunks up to 2^17 words: 8M worker keys

// spHdr returns the header words of set g of arr (t.sets or t.tiers).
func spHdr(arr []uint64, g int) (h0, h1 uint64) {
	return arr[g*spStride], arr[g*spStride+1]
}

func spN(h1 uint64) int         { return int(h1 & 0xffff) }
func spClassOf(h1 uint64) uint8 { return uint8(h1 >> 16) }

// spView returns a chunked set's (n ≥ 2) indexes and words, views into t.sp
// of length n and capacity the chunk's (write t.sp through them only after
// wSp over the chunk).
func (t *Tree) spView(h0, h1 uint64) ([]uint32, []uint64) {
	base, c, n := int(h0), spClassOf(h1), spN(h1)
	words := t.sp[base : base+n : base+1<<c]
	idx := unsafe.Slice((*uint32)(unsafe.Pointer(&t.sp[base+1<<c])), 1<<c)[:n]
	return idx, words
}

// spPair returns the index and word of the j-th nonzero word of a set with
// header h0, h1 (j < n).
func (t *Tree) spPair(h0, h1 uint64, j int) (uint32, uint64) {
	if spN(h1) == 1 {
		return uint32(h1 >> 32), h0
	}
	idx, words := t.spView(h0, h1)
	return idx[j], words[j]
}

// spSearch returns the position of word index wi in idx (or where it
// would be inserted) and whether it is there.
func spSearch(idx []uint32, wi uint32) (int, bool) {
	if len(idx) <= 8 {
		for j, v := range idx {
			if v >= wi {
				return j, v == wi
			}
		}
		return len(idx), false
	}
	j, ok := slices.BinarySearch(idx, wi)
	return j, ok
}

// spWord returns word wi of set g of arr.
func (t *Tree) spWord(arr []uint64, g int, wi uint32) uint64 {
	h0, h1 := spHdr(arr, g)
	switch spN(h1) {
	case 0:
		return 0
	case 1:
		if uint32(h1>>32) == wi {
			return h0
		}
		return 0
	}
	idx, words := t.spView(h0, h1)
	if j, ok := spSearch(idx, wi); ok {
		return words[j]
	}
	return 0
}

// wHdr precedes a write to set g's header in t.sets (tier false) or
// t.tiers.
func (t *Tree) wHdr(tier bool, g int) {
	if tier {
		t.wTiers(g*spStride, g*spStride+spStride)
	} else {
		t.wSets(g*spStride, g*spStride+spStride)
	}
}

func (t *Tree) hdrArr(tier bool) []uint64 {
	if tier {
		return t.tiers
	}
	return t.sets
}

// wSp precedes writes to t.sp[lo:hi].
func (t *Tree) wSp(lo, hi int) {
	if t.cw != nil {
		t.cw.sp.TouchRange(t.sp, lo, hi)
	}
}

func spChunkLen(c uint8) int { return 1<<c + 1<<c>>1 }

// spAlloc returns a chunk of class c (its offset in t.sp).
func (t *Tree) spAlloc(c uint8) int {
	if f := t.spFree[c]; f != 0 {
		base := int(f - 1)
		t.spFree[c] = uint32(t.sp[base])
		return base
	}
	l := len(t.sp)
	t.sp = slices.Grow(t.sp, spChunkLen(c))[:l+spChunkLen(c)]
	return l
}

func (t *Tree) spRelease(base int, c uint8) {
	t.wSp(base, base+1)
	t.sp[base] = uint64(t.spFree[c])
	t.spFree[c] = uint32(base + 1)
}

// spPut makes set g hold the pairs (a[i], aw[i]) followed by (b[i], bw[i])
// (ascending indexes, nonzero words): inline for one, else in a new chunk;
// the set's old chunk is released after the copy (the pairs may be in it).
func (t *Tree) spPut(tier bool, g int, a []uint32, aw []uint64, b []uint32, bw []uint64) {
	arr := t.hdrArr(tier)
	o0, o1 := spHdr(arr, g)
	n := len(a) + len(b)
	var h0, h1 uint64
	switch n {
	case 0:
	case 1:
		if len(a) == 1 {
			h0, h1 = aw[0], 1|uint64(a[0])<<32
		} else {
			h0, h1 = bw[0], 1|uint64(b[0])<<32
		}
	default:
		c := max(pow2Class(n), 1)
		base := t.spAlloc(c)
		h0, h1 = uint64(base), uint64(n)|uint64(c)<<16
		t.wSp(base, base+spChunkLen(c))
		idx, words := t.spView(h0, h1)
		copy(idx, a)
		copy(idx[len(a):], b)
		copy(words, aw)
		copy(words[len(a):], bw)
	}
	if spN(o1) >= 2 {
		t.spRelease(int(o0), spClassOf(o1))
	}
	t.wHdr(tier, g)
	arr[g*spStride], arr[g*spStride+1] = h0, h1
}

// spPairs returns a set's pairs as slices (the inline one in buf).
func (t *Tree) spPairs(h0, h1 uint64, bi *[1]uint32, bw *[1]uint64) ([]uint32, []uint64) {
	switch spN(h1) {
	case 0:
		return nil, nil
	case 1:
		bi[0], bw[0] = uint32(h1>>32), h0
		return bi[:], bw[:]
	}
	return t.spView(h0, h1)
}

// spSetBit adds slot s to set g.
func (t *Tree) spSetBit(tier bool, g int, s uint32) {
	arr := t.hdrArr(tier)
	h0, h1 := spHdr(arr, g)
	wi, b := s>>6, uint64(1)<<(s&63)
	n := spN(h1)
	switch n {
	case 0:
		t.wHdr(tier, g)
		arr[g*spStride], arr[g*spStride+1] = b, 1|uint64(wi)<<32
		return
	case 1:
		if i1 := uint32(h1 >> 32); i1 == wi {
			t.wHdr(tier, g)
			arr[g*spStride] |= b
		} else if i1 < wi {
			t.spPut(tier, g, []uint32{i1}, []uint64{h0}, []uint32{wi}, []uint64{b})
		} else {
			t.spPut(tier, g, []uint32{wi}, []uint64{b}, []uint32{i1}, []uint64{h0})
		}
		return
	}
	idx, words := t.spView(h0, h1)
	j, ok := spSearch(idx, wi)
	base := int(h0)
	if ok {
		t.wSp(base+j, base+j+1)
		words[j] |= b
		return
	}
	if c := spClassOf(h1); n < 1<<c {
		// Room in the chunk: shift the pairs from j up by one.
		t.wSp(base, base+spChunkLen(c))
		idx, words = idx[:n+1], words[:n+1]
		copy(idx[j+1:], idx[j:n])
		copy(words[j+1:], words[j:n])
		idx[j], words[j] = wi, b
		t.wHdr(tier, g)
		arr[g*spStride+1] = h1 + 1
		return
	}
	c := spClassOf(h1) + 1
	nb := t.spAlloc(c)
	idx, words = t.spView(h0, h1) // t.sp may have moved
	nh0, nh1 := uint64(nb), uint64(n+1)|uint64(c)<<16
	t.wSp(nb, nb+spChunkLen(c))
	ni, nw := t.spView(nh0, nh1)
	copy(ni, idx[:j])
	copy(nw, words[:j])
	ni[j], nw[j] = wi, b
	copy(ni[j+1:], idx[j:])
	copy(nw[j+1:], words[j:])
	t.spRelease(base, spClassOf(h1))
	t.wHdr(tier, g)
	arr[g*spStride], arr[g*spStride+1] = nh0, nh1
}

// spClearBit removes slot s from set g.
func (t *Tree) spClearBit(tier bool, g int, s uint32) {
	arr := t.hdrArr(tier)
	h0, h1 := spHdr(arr, g)
	wi, b := s>>6, uint64(1)<<(s&63)
	n := spN(h1)
	switch n {
	case 0:
		return
	case 1:
		if uint32(h1>>32) != wi {
			return
		}
		t.wHdr(tier, g)
		if w := h0 &^ b; w != 0 {
			arr[g*spStride] = w
		} else {
			arr[g*spStride], arr[g*spStride+1] = 0, 0
		}
		return
	}
	idx, words := t.spView(h0, h1)
	j, ok := spSearch(idx, wi)
	if !ok {
		return
	}
	base := int(h0)
	if w := words[j] &^ b; w != 0 {
		t.wSp(base+j, base+j+1)
		words[j] = w
		return
	}
	c := spClassOf(h1)
	if n-1 >= 2 && (c == 1 || (n-1)*4 > 1<<c) {
		// Shift the pairs after j down by one, in place.
		t.wSp(base, base+spChunkLen(c))
		copy(idx[j:], idx[j+1:])
		copy(words[j:], words[j+1:])
		t.wHdr(tier, g)
		arr[g*spStride+1] = h1 - 1
		return
	}
	t.spPut(tier, g, idx[:j], words[:j], idx[j+1:], words[j+1:])
}

// spCopy gives set dg (a tier set when dtier) the contents of set sg.
func (t *Tree) spCopy(dtier bool, dg int, stier bool, sg int) {
	h0, h1 := spHdr(t.hdrArr(stier), sg)
	var bi [1]uint32
	var bw [1]uint64
	idx, words := t.spPairs(h0, h1, &bi, &bw)
	t.spPut(dtier, dg, idx, words, nil, nil)
}

// spClear empties set g.
func (t *Tree) spClear(tier bool, g int) {
	if _, h1 := spHdr(t.hdrArr(tier), g); spN(h1) != 0 {
		t.spPut(tier, g, nil, nil, nil, nil)
	}
}

// spEqual reports whether sets a and b of arr hold the same words.
func (t *Tree) spEqual(arr []uint64, a, b int) bool {
	a0, a1 := spHdr(arr, a)
	b0, b1 := spHdr(arr, b)
	n := spN(a1)
	if n != spN(b1) {
		return false
	}
	if n <= 1 {
		return a0 == b0 && a1 == b1
	}
	ai, aw := t.spView(a0, a1)
	bi, bw := t.spView(b0, b1)
	return slices.Equal(ai, bi) && slices.Equal(aw, bw)
}

// spDense writes set g of arr as a dense bitset into buf (t.w words) and
// returns buf.
func (t *Tree) spDense(arr []uint64, g int, buf []uint64) []uint64 {
	clear(buf)
	h0, h1 := spHdr(arr, g)
	var bi [1]uint32
	var bw [1]uint64
	idx, words := t.spPairs(h0, h1, &bi, &bw)
	for j, wi := range idx {
		buf[wi] = words[j]
	}
	return buf
}

// toSparse converts every dense set (and tier set) to the sparse form.
func (t *Tree) toSparse() {
	conv := func(dense []uint64, groups int) []uint64 {
		per := groups / len(t.nodes) // sets per node
		hdr := make([]uint64, groups*spStride, cap(t.nodes)*per*spStride)
		old := t.sets
		t.sets = hdr // spPut writes headers through hdrArr(false)
		for g := range groups {
			var idx []uint32
			var words []uint64
			for i, w := range dense[g*t.w : (g+1)*t.w] {
				if w != 0 {
					idx, words = append(idx, uint32(i)), append(words, w)
				}
			}
			t.spPut(false, g, idx, words, nil, nil)
		}
		t.sets = old
		return hdr
	}
	sets := conv(t.sets, len(t.nodes))
	var tiers []uint64
	if t.tiers != nil {
		tiers = conv(t.tiers, len(t.nodes)*numTiers)
	}
	t.sets, t.tiers, t.sparse = sets, tiers, true
}

// spEmitLeaving appends an Overlap of depth blocks for every slot of set c
// that is not in set next (a subset of c's, so its word indexes are a
// subsequence of c's).
func (t *Tree) spEmitLeaving(dst []Overlap, c, next uint32, depth int) []Overlap {
	c0, c1 := spHdr(t.sets, int(c))
	n0, n1 := spHdr(t.sets, int(next))
	if spN(c1) == 1 {
		if spN(n1) == 0 {
			n0 = 0
		}
		return t.emit(dst, int(c1>>32), c0&^n0, depth)
	}
	var bi [1]uint32
	var bw [1]uint64
	ni, nw := t.spPairs(n0, n1, &bi, &bw)
	ci, cw := t.spView(c0, c1)
	k := 0
	for j, wi := range ci {
		w := cw[j]
		if k < len(ni) && ni[k] == wi {
			w &^= nw[k]
			k++
		}
		dst = t.emit(dst, int(wi), w, depth)
	}
	return dst
}

// spEmitAll appends an Overlap of depth blocks for every slot of set c.
func (t *Tree) spEmitAll(dst []Overlap, c uint32, depth int) []Overlap {
	c0, c1 := spHdr(t.sets, int(c))
	var bi [1]uint32
	var bw [1]uint64
	idx, words := t.spPairs(c0, c1, &bi, &bw)
	for j, wi := range idx {
		dst = t.emit(dst, int(wi), words[j], depth)
	}
	return dst
}

// spBytes is the sparse pool's memory.
func (t *Tree) spBytes() int64 { return int64(cap(t.sp)) * 8 }

// checkSparse checks every sparse set: indexes ascending and below t.w,
// words nonzero, chunks of a class that holds them, inside t.sp and
// disjoint from each other and from the free chunks.
func (t *Tree) checkSparse() error {
	owner := make([]int, len(t.sp)) // 1 + set number, or -1 - class for a free chunk
	claim := func(base int, c uint8, who int) error {
		if base < 0 || base+spChunkLen(c) > len(t.sp) {
			return fmt.Errorf("sparse chunk %d of class %d outside the pool (%d words)", base, c, len(t.sp))
		}
		for i := base; i < base+spChunkLen(c); i++ {
			if owner[i] != 0 {
				return fmt.Errorf("sparse chunk %d of class %d (%d) overlaps %d", base, c, who, owner[i])
			}
			owner[i] = who
		}
		return nil
	}
	for c := range uint8(numSetClasses) {
		for f, n := t.spFree[c], 0; f != 0; f, n = uint32(t.sp[f-1]), n+1 {
			if n > len(t.sp) {
				return fmt.Errorf("sparse free list %d cycles", c)
			}
			if err := claim(int(f-1), c, -1-int(c)); err != nil {
				return err
			}
		}
	}
	check := func(arr []uint64, sets int, tier int) error {
		for g := range sets {
			h0, h1 := spHdr(arr, g)
			n := spN(h1)
			if n >= 2 {
				c := spClassOf(h1)
				if c < 1 || c >= numSetClasses || n > 1<<c {
					return fmt.Errorf("sparse set %d/%d: %d words in class %d", tier, g, n, c)
				}
				if err := claim(int(h0), c, 1+g); err != nil {
					return err
				}
			} else if n == 0 && (h0 != 0 || h1 != 0) {
				return fmt.Errorf("sparse set %d/%d: empty with header %#x %#x", tier, g, h0, h1)
			}
			prev := -1
			for j := range n {
				wi, w := t.spPair(h0, h1, j)
				if int(wi) <= prev || int(wi) >= t.w || w == 0 {
					return fmt.Errorf("sparse set %d/%d: word %d index %d (after %d, width %d) is %#x", tier, g, j, wi, prev, t.w, w)
				}
				prev = int(wi)
			}
		}
		return nil
	}
	if err := check(t.sets, len(t.sets)/spStride, 0); err != nil {
		return err
	}
	return check(t.tiers, len(t.tiers)/spStride, 1)
}
