package sched

// vecTable maps a block's sequence hash to its vector id (blockIndex.heads).
// It is u64map specialised for that job
// (docs/decisions/0022-scheduler-block-index.md): a cell is
// 8 bytes, a 32-bit fingerprint and the vector id, instead of u64map's 16
// (the 64-bit key and the value, padded), and the key itself is not stored,
// since the vector holds it (blockVec.hash). The fingerprint is the top 32
// bits of the key's Fibonacci product, and the home cell is the top bits of
// that product, so:
//
//   - a lookup compares fingerprints and reads the vector only on a match
//     (the caller reads that vector next anyway), a 1-in-2^(32−log2 cells)
//     false match costing one more probe;
//   - a deletion finds the cell by the vector id (known to the caller: no key
//     comparison), and the backward shift takes each moved cell's home from
//     its fingerprint, without rehashing or reading a vector;
//   - half the bytes per cell: the table of 17,408 live blocks at 7,000 ranks
//     in BenchmarkDecide is 512 KiB instead of 1 MiB, 64 KiB instead of 128
//     at 8 ranks.
//
// Linear probing, backward-shift deletion (no tombstones), load ≤ 1/2,
// doubling, never shrinking; pointer-free. Tables up to 2^32 cells.
type vecTable struct {
	cells []uint64 // fp<<32 | vector id; 0 is empty (vector ids are ≥ 1)
	mask  uint64
	shift uint8 // 32 − log2(len(cells)): home = fp >> shift
	n     int
}

const vecTableMinCells = 16

// fingerprint of a sequence hash: the top 32 bits of the Fibonacci product
// of the hash with its high half folded into its low half (structured keys
// that differ in their high bits spread; docs/decisions/0023-private-blocks.md).
func vtFingerprint(k uint64) uint32 {
	k ^= k >> 32
	return uint32((k * 0x9E3779B97F4A7C15) >> 32)
}

func (t *vecTable) home(fp uint32) uint64 { return uint64(fp >> t.shift) }

// privBit tags a cell's id as a private block (doc.go § Block index): the rest is the
// slot of the request that holds it (request.holds has 0 there, and
// request.hashes the hash), not a vector id. Vector ids stay below it.
const privBit = 1 << 31

// cellIs reports whether cell id (a vector, or a request's private block)
// is key k's.
func cellIs(id uint32, k uint64, vecs []blockVec, reqs []request) bool {
	if id&privBit == 0 {
		return vecs[id].hash == k
	}
	return reqs[id&^privBit].privPos(k) >= 0
}

// get returns the id of k (a vector, or privBit | the request holding it
// privately; reqs may be nil while there are none), or 0.
func (t *vecTable) get(k uint64, vecs []blockVec, reqs []request) uint32 {
	if t.n == 0 {
		return 0
	}
	fp := vtFingerprint(k)
	for i := t.home(fp); ; i = (i + 1) & t.mask {
		c := t.cells[i]
		if c == 0 {
			return 0
		}
		if uint32(c>>32) == fp && cellIs(uint32(c), k, vecs, reqs) {
			return uint32(c)
		}
	}
}

// probe is get for the hot path, small enough to inline: it returns k's
// vector, 0, or a private cell whose fingerprint is k's without checking the
// request (the caller then asks get). The table must have cells
// (blockIndex.init grows it once).
func (t *vecTable) probe(k uint64, vecs []blockVec) uint32 {
	fp := vtFingerprint(k)
	for i := t.home(fp); ; i = (i + 1) & t.mask {
		c := t.cells[i]
		if c == 0 {
			return 0
		}
		if uint32(c>>32) == fp && (c&privBit != 0 || vecs[uint32(c)].hash == k) {
			return uint32(c)
		}
	}
}

// find returns k's id (as get), or 0 and the empty cell where k goes (valid
// until the next change to the table). It grows the table first if one more
// key would pass the load bound, so put may follow without growing.
func (t *vecTable) find(k uint64, vecs []blockVec, reqs []request) (uint32, uint64) {
	if (t.n+1)*2 > len(t.cells) {
		t.grow()
	}
	fp := vtFingerprint(k)
	for i := t.home(fp); ; i = (i + 1) & t.mask {
		c := t.cells[i]
		if c == 0 {
			return 0, i
		}
		if uint32(c>>32) == fp && cellIs(uint32(c), k, vecs, reqs) {
			return uint32(c), 0
		}
	}
}

// put stores vector v (≥ 1) of key k at the empty cell find returned.
func (t *vecTable) put(cell uint64, k uint64, v uint32) {
	t.cells[cell] = uint64(vtFingerprint(k))<<32 | uint64(v)
	t.n++
}

// insert stores id v under key k without looking k up (the caller knows it
// is absent, or accepts a second cell for it), growing the table first if
// needed.
func (t *vecTable) insert(k uint64, v uint32) {
	if (t.n+1)*2 > len(t.cells) {
		t.grow()
	}
	t.place(uint64(vtFingerprint(k))<<32 | uint64(v))
	t.n++
}

// place stores cell c (fingerprint<<32 | id) in the first empty cell of its
// probe run.
func (t *vecTable) place(c uint64) {
	i := t.home(uint32(c >> 32))
	for t.cells[i] != 0 {
		i = (i + 1) & t.mask
	}
	t.cells[i] = c
}

// del removes vector v, indexed under key k.
func (t *vecTable) del(k uint64, v uint32) {
	fp := vtFingerprint(k)
	want := uint64(fp)<<32 | uint64(v)
	i := t.home(fp)
	for t.cells[i] != want {
		if t.cells[i] == 0 {
			panic("sched: vecTable.del: vector not indexed")
		}
		i = (i + 1) & t.mask
	}
	// Backward shift: move later cells of the probe run into the hole when
	// their home does not lie cyclically in (hole, j].
	j := i
	for {
		j = (j + 1) & t.mask
		c := t.cells[j]
		if c == 0 {
			break
		}
		h := t.home(uint32(c >> 32))
		if !homeIn(h, i, j) {
			t.cells[i] = c
			i = j
		}
	}
	t.cells[i] = 0
	t.n--
}

// repoint makes the cell of id old, indexed under key k, hold id nw. Cells
// of one request's private blocks whose fingerprints are equal are
// interchangeable (same value, same home), so whichever is found first
// serves.
func (t *vecTable) repoint(k uint64, old, nw uint32) {
	fp := vtFingerprint(k)
	want := uint64(fp)<<32 | uint64(old)
	for i := t.home(fp); ; i = (i + 1) & t.mask {
		switch t.cells[i] {
		case want:
			t.cells[i] = uint64(fp)<<32 | uint64(nw)
			return
		case 0:
			panic("sched: vecTable.repoint: id not indexed")
		}
	}
}

// each calls fn with every indexed vector id (for checks and tests).
func (t *vecTable) each(fn func(v uint32)) {
	for _, c := range t.cells {
		if c != 0 {
			fn(uint32(c))
		}
	}
}

// indexedAs reports whether vector v is indexed under key k: its cell holds
// k's fingerprint and a lookup of k finds it (for checks).
func (t *vecTable) indexedAs(k uint64, v uint32, vecs []blockVec, reqs []request) bool {
	return t.get(k, vecs, reqs) == v
}

func (t *vecTable) grow() {
	size, bits := grownSize(len(t.cells), vecTableMinCells)
	old := t.cells
	t.cells = make([]uint64, size)
	t.mask = uint64(size - 1)
	t.shift = 32 - bits
	for _, c := range old {
		if c != 0 {
			t.place(c)
		}
	}
}
