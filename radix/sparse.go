package radix

import (
	"fmt"
	"slices"
)

// Sparse worker sets (issue 17 §1). A dense set costs w words per node
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

// spPair returns the index and word of the j-th nonzero word of a set with
// header h0, h1 (j < n).
func (t *Tree) spPair(h0, h1 uint64, j int) (uint32, uint64) {
	if spN(h1) == 1 {
		return uint32(h1 >> 32), h0
	}
	base, c := int(h0), spClassOf(h1)
	v := t.sp[base+1<<c+j>>1]
	return uint32(v >> (32 * (j & 1))), t.sp[base+j]
}

// spSearch returns the position of word index wi in a chunked set (or
// where it would be inserted) and whether it is there.
func (t *Tree) spSearch(h0, h1 uint64, wi uint32) (int, bool) {
	n := spN(h1)
	base, c := int(h0), spClassOf(h1)
	idx := t.sp[base+1<<c:]
	lo, hi := 0, n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if uint32(idx[m>>1]>>(32*(m&1))) < wi {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < n && uint32(idx[lo>>1]>>(32*(lo&1))) == wi
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
	if j, ok := t.spSearch(h0, h1, wi); ok {
		return t.sp[int(h0)+j]
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

// spSetIdx writes index wi of pair j of the chunk at base (class c).
func (t *Tree) spSetIdx(base int, c uint8, j int, wi uint32) {
	i := base + 1<<c + j>>1
	sh := 32 * uint(j&1)
	t.sp[i] = t.sp[i]&^(0xffffffff<<sh) | uint64(wi)<<sh
}

// spWrite sets set g's pairs to those given by pair (n of them, ascending),
// reusing its chunk when the class fits and is not 4× too large.
func (t *Tree) spWrite(tier bool, g, n int, pair func(j int) (uint32, uint64)) {
	arr := t.hdrArr(tier)
	h0, h1 := spHdr(arr, g)
	old := spN(h1)
	t.wHdr(tier, g)
	if n <= 1 {
		var nh0, nh1 uint64
		if n == 1 {
			wi, w := pair(0)
			nh0, nh1 = w, 1|uint64(wi)<<32
		}
		if old >= 2 {
			t.spRelease(int(h0), spClassOf(h1))
		}
		arr[g*spStride], arr[g*spStride+1] = nh0, nh1
		return
	}
	// pair may read the chunk being rewritten: gather first.
	tmp := t.spTmp[:0]
	for j := range n {
		wi, w := pair(j)
		tmp = append(tmp, uint64(wi), w)
	}
	t.spTmp = tmp
	c := max(classFor(n), 1)
	var base int
	if old >= 2 && spClassOf(h1) >= c && spClassOf(h1) <= c+1 {
		base, c = int(h0), spClassOf(h1)
	} else {
		if old >= 2 {
			t.spRelease(int(h0), spClassOf(h1))
		}
		base = t.spAlloc(c)
	}
	t.wSp(base, base+spChunkLen(c))
	for j := range n {
		t.sp[base+j] = tmp[2*j+1]
		t.spSetIdx(base, c, j, uint32(tmp[2*j]))
	}
	arr[g*spStride], arr[g*spStride+1] = uint64(base), uint64(n)|uint64(c)<<16
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
		if uint32(h1>>32) == wi {
			t.wHdr(tier, g)
			arr[g*spStride] |= b
			return
		}
	default:
		j, ok := t.spSearch(h0, h1, wi)
		if ok {
			t.wSp(int(h0)+j, int(h0)+j+1)
			t.sp[int(h0)+j] |= b
			return
		}
		if c := spClassOf(h1); n < 1<<c {
			// Room in the chunk: shift the pairs after j up by one.
			base := int(h0)
			t.wSp(base, base+spChunkLen(c))
			for k := n; k > j; k-- {
				pw, pv := t.spPair(h0, h1, k-1)
				t.sp[base+k] = pv
				t.spSetIdx(base, c, k, pw)
			}
			t.sp[base+j] = b
			t.spSetIdx(base, c, j, wi)
			t.wHdr(tier, g)
			arr[g*spStride+1] = h1 + 1
			return
		}
	}
	// Insert (wi, b) in order, into a larger chunk.
	pos := 0
	for pos < n {
		if pw, _ := t.spPair(h0, h1, pos); pw > wi {
			break
		}
		pos++
	}
	t.spWrite(tier, g, n+1, func(j int) (uint32, uint64) {
		switch {
		case j < pos:
			return t.spPair(h0, h1, j)
		case j == pos:
			return wi, b
		}
		return t.spPair(h0, h1, j-1)
	})
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
	j, ok := t.spSearch(h0, h1, wi)
	if !ok {
		return
	}
	base := int(h0)
	if w := t.sp[base+j] &^ b; w != 0 {
		t.wSp(base+j, base+j+1)
		t.sp[base+j] = w
		return
	}
	c := spClassOf(h1)
	if n-1 >= 2 && (c == 1 || (n-1)*4 > 1<<c) {
		// Shift the pairs after j down by one, in place.
		t.wSp(base, base+spChunkLen(c))
		for k := j; k < n-1; k++ {
			pw, pv := t.spPair(h0, h1, k+1)
			t.sp[base+k] = pv
			t.spSetIdx(base, c, k, pw)
		}
		t.wHdr(tier, g)
		arr[g*spStride+1] = h1 - 1
		return
	}
	t.spWrite(tier, g, n-1, func(k int) (uint32, uint64) {
		if k >= j {
			k++
		}
		return t.spPair(h0, h1, k)
	})
}

// spCopy gives set dg of dst (tier sets when dtier) the contents of set sg
// of src.
func (t *Tree) spCopy(dtier bool, dg int, stier bool, sg int) {
	h0, h1 := spHdr(t.hdrArr(stier), sg)
	t.spWrite(dtier, dg, spN(h1), func(j int) (uint32, uint64) { return t.spPair(h0, h1, j) })
}

// spClear empties set g.
func (t *Tree) spClear(tier bool, g int) {
	arr := t.hdrArr(tier)
	if _, h1 := spHdr(arr, g); spN(h1) == 0 {
		return
	}
	t.spWrite(tier, g, 0, nil)
}

// spEqual reports whether set a of arr and set b of the same array hold the
// same words.
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
	for j := range n {
		ai, aw := t.spPair(a0, a1, j)
		bi, bw := t.spPair(b0, b1, j)
		if ai != bi || aw != bw {
			return false
		}
	}
	return true
}

// spDense writes set g of arr as a dense bitset into buf (t.w words) and
// returns buf.
func (t *Tree) spDense(arr []uint64, g int, buf []uint64) []uint64 {
	clear(buf)
	h0, h1 := spHdr(arr, g)
	for j := range spN(h1) {
		wi, w := t.spPair(h0, h1, j)
		buf[wi] = w
	}
	return buf
}

// toSparse converts every dense set (and tier set) to the sparse form.
func (t *Tree) toSparse() {
	conv := func(dense []uint64, groups int) []uint64 {
		per := groups / len(t.nodes) // sets per node
		hdr := make([]uint64, groups*spStride, cap(t.nodes)*per*spStride)
		old := t.sets
		t.sets = hdr // spWrite writes headers through hdrArr(false)
		for g := range groups {
			words := dense[g*t.w : (g+1)*t.w]
			var pairs [][2]uint64
			for i, w := range words {
				if w != 0 {
					pairs = append(pairs, [2]uint64{uint64(i), w})
				}
			}
			t.spWrite(false, g, len(pairs), func(j int) (uint32, uint64) { return uint32(pairs[j][0]), pairs[j][1] })
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

// spEmit appends an Overlap of depth blocks for every slot of set c that is
// not in set next (a subset of c's, so its word indexes are a subsequence
// of c's).
func (t *Tree) spEmitLeaving(dst []Overlap, c, next uint32, depth int) []Overlap {
	c0, c1 := spHdr(t.sets, int(c))
	n0, n1 := spHdr(t.sets, int(next))
	cn, nn := spN(c1), spN(n1)
	if cn == 1 && nn == 1 {
		return t.emit(dst, int(c1>>32), c0&^n0, depth)
	}
	k := 0
	for j := range cn {
		wi, w := t.spPair(c0, c1, j)
		if k < nn {
			if ni, nw := t.spPair(n0, n1, k); ni == wi {
				w &^= nw
				k++
			}
		}
		dst = t.emit(dst, int(wi), w, depth)
	}
	return dst
}

// spEmitAll appends an Overlap of depth blocks for every slot of set c.
func (t *Tree) spEmitAll(dst []Overlap, c uint32, depth int) []Overlap {
	c0, c1 := spHdr(t.sets, int(c))
	for j := range spN(c1) {
		wi, w := t.spPair(c0, c1, j)
		dst = t.emit(dst, int(wi), w, depth)
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
