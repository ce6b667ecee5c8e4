// Package cow provides page-granular copy-on-write capture of pointer-free
// slices: Slice freezes a slice's elements as they are at Begin while its
// owner goes on writing. Each page (a fixed-size run of elements) is taken
// once, by whichever comes first: the owner copies it before its first
// write to it (Touch) or in bounded steps (Step), or a reader on another
// goroutine copies it straight from the owner's slice into the result
// (Result; the per-page handshake below).
//
// The owner calls Begin, Touch, TouchRange, Step and the counters; no
// locks, no goroutines, no clock. Result may run on one other goroutine
// concurrently with the owner, after a happens-before edge from Begin of
// the caller's making (a channel, a go statement), or on any goroutine once
// Done. Full-size page buffers for the owner's copies come from a
// package-wide sync.Pool that Result refills (see MaxPage).
package cow

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Page states: a page goes from pending to copied (the owner copied it)
// or to read (the reader copied it from the source; in race-detector
// builds through reading). Only the owner moves a page from pending to
// copied; only the reader from pending to read or reading, and reading to
// read.
const (
	pending uint32 = iota
	reading
	copied // final: pages[p] holds the owner's copy
	read   // final: the reader has the page
)

// Slice captures one slice. Its zero value is an idle capture (Done, and
// Touch does nothing).
//
// Reallocation needs no barrier: when the owner replaces the slice's backing
// array (append beyond capacity, make and rehash), the old array is no
// longer written and the capture, which still references it, takes its
// remaining pages from there. Writes beyond the length the slice had at
// Begin need none either. So Touch is needed exactly before a write to an
// element below that length in the array the capture began on.
//
// The handshake: the owner's Touch of a pending page copies it into a
// page-sized buffer (a small allocation: the owner never waits for a large
// one to be zeroed) and publishes the copy (pending → copied, one
// compare-and-swap: the only locked instruction per page the owner copies);
// only then does the owner write the page. If the swap fails, the reader had
// the page first and the owner drops its copy. The reader copies a pending
// page from the source into the result optimistically and then marks it read
// (pending → read): if that fails, the owner published its copy meanwhile,
// and may have written the page during the read, so the reader takes the
// owner's copy instead. If it succeeds, the owner had not published a copy
// before the mark, so it had not written the page during the read: the copy
// is the page as at Begin. The owner never waits for the reader (a reader
// holding pages made writes wait for a preempted reader's thread: 0.2–0.3
// waits per capture of 1.6–4.5 ms on the loaded 2-vCPU machine, docs/decisions/0012-copy-on-write-captures.md). The optimistic read is a data race by design, benign as
// argued; race-detector builds use a blocking variant instead (the reader
// claims the page, pending → reading, for its read, and a Touch of that page
// waits: ReadWaits counts them), so that -race checks that every write to a
// page is preceded by its Touch.
type Slice[T any] struct {
	// Set by Begin, then only read (by the owner and the reader).
	src   []T // the slice at Begin
	n     int // len(src)
	shift uint
	size  int   // bytes per element
	pages [][]T // the owner's copies: pages[p] is set before state[p] = copied
	state []atomic.Uint32
	nread atomic.Int64 // pages read by the reader

	// The owner's.
	lim   int  // Touch looks at elements below lim: n, 0 once the owner copied every page
	ncopy int  // pages copied by the owner
	next  int  // Step's cursor: the first page that may be pending
	touch int  // pages copied by Touch
	waits int  // Touches that waited for the reader
	count *int // if set, bytes copied are added here (CountInto)

	// The reader's.
	taken bool // Result was called
}

// Begin starts capturing src (its elements [0, len(src))) in pages of about
// pageBytes bytes (a power-of-two number of elements, at least one).
func (s *Slice[T]) Begin(src []T, pageBytes int) {
	var zero T
	size := max(1, int(unsafe.Sizeof(zero)))
	shift := uint(0)
	if per := pageBytes / size; per > 1 {
		shift = uint(bits.Len(uint(per)) - 1)
	}
	n := (len(src) + 1<<shift - 1) >> shift
	*s = Slice[T]{src: src, n: len(src), lim: len(src), shift: shift, size: size}
	if n > 0 {
		s.pages = make([][]T, n)
		s.state = make([]atomic.Uint32, n)
	}
}

// CountInto makes the capture add the bytes of every page the owner copies
// from now on (by Touch or Step) to *p: one counter for many slices lets
// their owner pace background copying against all the copying done (call
// it after Begin, which resets it).
func (s *Slice[T]) CountInto(p *int) { s.count = p }

// Touch must be called before the owner writes element i of cur, the
// owner's current slice: it copies i's page first if it is still pending,
// or waits for the reader if the reader is copying it. It is cheap when cur
// is not the captured array or the page is taken (one atomic load).
func (s *Slice[T]) Touch(cur []T, i int) {
	if i >= s.lim || unsafe.SliceData(cur) != unsafe.SliceData(s.src) {
		return
	}
	if p := i >> s.shift; s.state[p].Load() < copied {
		s.touchSlow(p)
	}
}

// TouchRange is Touch for every element of [lo, hi).
func (s *Slice[T]) TouchRange(cur []T, lo, hi int) {
	if lo >= s.lim || hi <= lo || unsafe.SliceData(cur) != unsafe.SliceData(s.src) {
		return
	}
	hi = min(hi, s.lim)
	for p := lo >> s.shift; p <= (hi-1)>>s.shift; p++ {
		if s.state[p].Load() < copied {
			s.touchSlow(p)
		}
	}
}

// touchSlow takes page p for a write: copies it if pending, waits while
// the reader copies it.
func (s *Slice[T]) touchSlow(p int) {
	if s.take(p) {
		s.touch++
		return
	}
	if raceEnabled && s.state[p].Load() == reading {
		s.waits++
		for s.state[p].Load() == reading {
			// Spin: the reader holds the page for one page copy.
		}
	}
}

// take copies page p into a buffer if it is pending and reports whether it
// did (the owner's claim).
func (s *Slice[T]) take(p int) bool {
	if s.state[p].Load() != pending {
		return false
	}
	lo := p << s.shift
	hi := min(s.n, lo+1<<s.shift)
	var pg []T
	if nb := (hi - lo) * s.size; pooling && nb > MaxPage/2 && nb <= MaxPage {
		// A page buffer from an earlier capture: no allocation (a fresh
		// one costs a page fault or two, and the GC assists that
		// allocating ~50 MB per capture brings), no zeroing.
		buf := pagePool.Get().(*[MaxPage]byte)
		pg = unsafe.Slice((*T)(unsafe.Pointer(buf)), hi-lo)
		copy(pg, s.src[lo:hi])
	} else {
		pg = append([]T(nil), s.src[lo:hi]...)
	}
	s.pages[p] = pg
	if !s.state[p].CompareAndSwap(pending, copied) { // the reader was first
		s.pages[p] = nil
		if pooling && len(pg)*s.size > MaxPage/2 && len(pg)*s.size <= MaxPage {
			pagePool.Put((*[MaxPage]byte)(unsafe.Pointer(unsafe.SliceData(pg))))
		}
		return false
	}
	if s.ncopy++; s.ncopy == len(s.state) {
		s.lim = 0 // nothing left to copy: Touch returns at once
	}
	if s.count != nil {
		*s.count += (hi - lo) * s.size
	}
	return true
}

// Step copies pending pages until about budget bytes are copied (at least
// one page if any is pending) and returns the bytes copied. Pages the
// reader holds are skipped.
func (s *Slice[T]) Step(budget int) int {
	done := 0
	for ; s.next < len(s.state) && (done == 0 || done < budget); s.next++ {
		if s.take(s.next) {
			done += len(s.pages[s.next]) * s.size
		}
	}
	return done
}

// Stepped reports whether Step has passed every page: those it did not
// copy are copied, or taken by the reader.
func (s *Slice[T]) Stepped() bool { return s.next >= len(s.state) }

// Done reports whether every page has been copied or read (the owner's:
// once it has, the owner may write without Touch).
func (s *Slice[T]) Done() bool { return s.Pending() == 0 }

// Touched returns the pages copied by Touch and TouchRange (the owner's).
func (s *Slice[T]) Touched() int { return s.touch }

// ReadWaits returns the Touches that waited for the reader's copy of their
// page (the owner's; always 0 but in race-detector builds).
func (s *Slice[T]) ReadWaits() int { return s.waits }

// Pending returns the pages neither copied nor read (the owner's).
func (s *Slice[T]) Pending() int { return len(s.state) - s.ncopy - int(s.nread.Load()) }

// Len returns the length of the slice captured.
func (s *Slice[T]) Len() int { return s.n }

// Result returns the copy (length: the slice's length at Begin; nil if it
// was empty), after which the capture is Done. It may run while the owner
// goes on writing: it copies every page the owner has not copied straight
// from the source (the handshake), and the owner's copies from their
// buffers, which it returns to the pool; it never waits for the owner.
// Call it once, from one goroutine; it allocates the whole slice.
func (s *Slice[T]) Result() []T {
	if s.taken {
		panic("cow: Result called twice")
	}
	s.taken = true
	if s.n == 0 {
		return nil
	}
	d := make([]T, s.n)
	for p := range s.state {
		lo := p << s.shift
		hi := min(s.n, lo+1<<s.shift)
		st := &s.state[p]
		if raceEnabled {
			if st.CompareAndSwap(pending, reading) {
				copy(d[lo:hi], s.src[lo:hi])
				st.Store(read)
				s.nread.Add(1)
				continue
			}
		} else if st.Load() == pending {
			copy(d[lo:hi], s.src[lo:hi]) // may race with the owner's writes: kept only if still pending after
			if st.CompareAndSwap(pending, read) {
				s.nread.Add(1)
				continue
			}
		}
		pg := s.pages[p] // copied: the owner's swap published it
		copy(d[lo:hi], pg)
		if nb := len(pg) * s.size; pooling && nb > MaxPage/2 && nb <= MaxPage {
			pagePool.Put((*[MaxPage]byte)(unsafe.Pointer(unsafe.SliceData(pg))))
		}
	}
	return d
}

// MaxPage is the size of the pooled page buffers: pages of more than half
// of it and at most it (the 8 KiB pages radix uses) are copied into
// buffers that Result returns to a pool once it has assembled them, so the
// next capture reuses them instead of allocating. The pool is a sync.Pool:
// buffers not reused within two garbage collections are freed, so captures
// minutes apart hold no memory in between, and back-to-back captures
// allocate little (docs/decisions/0012-copy-on-write-captures.md has the measurements).
const MaxPage = 8 << 10

var pagePool = sync.Pool{New: func() any { return new([MaxPage]byte) }}

// pooling is SetPoolingForTesting's switch.
var pooling = true

// SetPoolingForTesting turns the page pool off (false) or on, so benchmarks
// compare both in one run. Call it while no capture is in progress.
func SetPoolingForTesting(on bool) { pooling = on }
