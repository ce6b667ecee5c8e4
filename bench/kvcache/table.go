package kvcache

// table is an open-addressing hash map from uint64 to a non-zero uint32
// (value 0 marks an empty slot), with linear probing and backward-shift
// deletion, so deletes leave no tombstones and a table sized for its peak
// population never allocates again. Keys may be any uint64, including 0.
type table struct {
	keys  []uint64
	vals  []uint32
	mask  uint64
	shift uint8
	n     int
}

// newTable returns a table that holds n entries without growing.
func newTable(n int) table {
	var t table
	t.init(n)
	return t
}

func (t *table) init(n int) {
	size, bits := 8, uint8(3)
	for size < 2*n { // load <= 1/2
		size, bits = size*2, bits+1
	}
	t.keys = make([]uint64, size)
	t.vals = make([]uint32, size)
	t.mask = uint64(size - 1)
	t.shift = 64 - bits
	t.n = 0
}

// home is the ideal slot of k (Fibonacci hashing: sequential keys such as
// sequence ids spread out).
func (t *table) home(k uint64) uint64 { return (k * 0x9e3779b97f4a7c15) >> t.shift }

func (t *table) get(k uint64) uint32 {
	for i := t.home(k); ; i = (i + 1) & t.mask {
		v := t.vals[i]
		if v == 0 || t.keys[i] == k {
			return v
		}
	}
}

// put inserts or overwrites k; v must be non-zero.
func (t *table) put(k uint64, v uint32) {
	if 2*(t.n+1) > len(t.vals) {
		t.grow()
	}
	for i := t.home(k); ; i = (i + 1) & t.mask {
		if t.vals[i] == 0 {
			t.keys[i], t.vals[i] = k, v
			t.n++
			return
		}
		if t.keys[i] == k {
			t.vals[i] = v
			return
		}
	}
}

// del removes k and reports whether it was present.
func (t *table) del(k uint64) bool {
	i := t.home(k)
	for ; ; i = (i + 1) & t.mask {
		if t.vals[i] == 0 {
			return false
		}
		if t.keys[i] == k {
			break
		}
	}
	// Shift later members of the probe run back over the hole when their
	// home is not in the cyclic range (i, j].
	for j := (i + 1) & t.mask; t.vals[j] != 0; j = (j + 1) & t.mask {
		if (j-t.home(t.keys[j]))&t.mask >= (j-i)&t.mask {
			t.keys[i], t.vals[i] = t.keys[j], t.vals[j]
			i = j
		}
	}
	t.vals[i] = 0
	t.n--
	return true
}

func (t *table) clear() {
	clear(t.vals)
	t.n = 0
}

func (t *table) grow() {
	keys, vals := t.keys, t.vals
	t.init(len(vals)) // doubles: init sizes for load 1/2 of len(vals) entries
	for i, v := range vals {
		if v != 0 {
			t.put(keys[i], v)
		}
	}
}

// each calls f for every entry, in slot order.
func (t *table) each(f func(k uint64, v uint32)) {
	for i, v := range t.vals {
		if v != 0 {
			f(t.keys[i], v)
		}
	}
}
