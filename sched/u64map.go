package sched

// u64map is an open-addressing hash table from uint64 keys to non-zero uint32
// values (0 means absent), with linear probing and backward-shift deletion, so
// it has no tombstones and never allocates in steady state: it grows (doubling)
// only when more than half full and never shrinks. Pointer-free, so the GC
// does not scan it. Keys are mixed with a Fibonacci multiplier, so sequential
// ids and arbitrary test hashes spread as well as xxh3 outputs.
//
// It replaces Go maps on the per-block and per-request paths: a lookup is one
// multiply and usually one cache line (BenchmarkU64Map compares it with a map).
type u64map struct {
	cells []u64cell
	mask  uint64
	shift uint8
	n     int
}

type u64cell struct {
	key uint64
	val uint32
}

const u64mapMinCells = 16

func (m *u64map) home(k uint64) uint64 {
	return (k * 0x9E3779B97F4A7C15) >> m.shift
}

func (m *u64map) len() int { return m.n }

// get returns k's value, or 0.
func (m *u64map) get(k uint64) uint32 {
	if m.n == 0 {
		return 0
	}
	i := m.home(k)
	for {
		c := &m.cells[i]
		if c.val == 0 {
			return 0
		}
		if c.key == k {
			return c.val
		}
		i = (i + 1) & m.mask
	}
}

// set inserts or replaces k's value; v must not be 0.
func (m *u64map) set(k uint64, v uint32) {
	if (m.n+1)*2 > len(m.cells) {
		m.grow()
	}
	i := m.home(k)
	for {
		c := &m.cells[i]
		if c.val == 0 {
			c.key, c.val = k, v
			m.n++
			return
		}
		if c.key == k {
			c.val = v
			return
		}
		i = (i + 1) & m.mask
	}
}

// ref returns k's value cell and whether k was present; an absent k is
// inserted with value 0, which the caller must overwrite with a non-zero
// value before any other call. One probe sequence for get-or-insert.
func (m *u64map) ref(k uint64) (*uint32, bool) {
	if (m.n+1)*2 > len(m.cells) {
		m.grow()
	}
	i := m.home(k)
	for {
		c := &m.cells[i]
		if c.val == 0 {
			c.key = k
			m.n++
			return &c.val, false
		}
		if c.key == k {
			return &c.val, true
		}
		i = (i + 1) & m.mask
	}
}

// del removes k and reports whether it was present.
func (m *u64map) del(k uint64) bool {
	if m.n == 0 {
		return false
	}
	i := m.home(k)
	for {
		c := &m.cells[i]
		if c.val == 0 {
			return false
		}
		if c.key == k {
			break
		}
		i = (i + 1) & m.mask
	}
	// Backward shift: move later cells of the probe run into the hole when
	// their home position does not lie cyclically in (hole, j].
	j := i
	for {
		j = (j + 1) & m.mask
		c := m.cells[j]
		if c.val == 0 {
			break
		}
		h := m.home(c.key)
		if !homeIn(h, i, j) {
			m.cells[i] = c
			i = j
		}
	}
	m.cells[i] = u64cell{}
	m.n--
	return true
}

// reserve grows the table so that n keys fit without growing again.
func (m *u64map) reserve(n int) {
	for n*2 > len(m.cells) {
		m.grow()
	}
}

func (m *u64map) grow() {
	size, bits := grownSize(len(m.cells), u64mapMinCells)
	old := m.cells
	m.cells = make([]u64cell, size)
	m.mask = uint64(size - 1)
	m.shift = 64 - bits
	m.n = 0
	for _, c := range old {
		if c.val != 0 {
			m.set(c.key, c.val)
		}
	}
}

// grownSize is the size of a power-of-two table grown from cur cells (twice
// cur, at least least) and its base-2 logarithm.
func grownSize(cur, least int) (int, uint8) {
	size := max(2*cur, least)
	bits := uint8(0)
	for 1<<bits < size {
		bits++
	}
	return size, bits
}

// homeIn reports whether home h lies cyclically in (i, j]: in a backward-shift
// deletion the cell at j, whose home is h, stays when the hole is at i.
func homeIn(h, i, j uint64) bool {
	if i <= j {
		return i < h && h <= j
	}
	return i < h || h <= j
}
