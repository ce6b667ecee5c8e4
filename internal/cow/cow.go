// Package cow provides page-granular copy-on-write capture of pointer-free
// slices: Slice freezes a slice's elements as they are at Begin while its
// owner goes on writing, copying each page (a fixed-size run of elements)
// either before the owner's first write to it (Touch) or in bounded
// background steps (Step), whichever comes first.
//
// It is synchronous and single-goroutine: the owner of the slice calls every
// method; no locks, no goroutines, no clock. Full-size page buffers come from
// a package-wide sync.Pool that Result refills (see MaxPage). The copy is handed to another
// goroutine only after Done, with a happens-before edge of the caller's
// making (a channel, a waiter).
package cow

import (
	"math/bits"
	"sync"
	"unsafe"
)

// Slice captures one slice. Its zero value is an idle capture (Done, and
// Touch does nothing).
//
// Reallocation needs no barrier: when the owner replaces the slice's backing
// array (append beyond capacity, make and rehash), the old array is no
// longer written and the capture, which still references it, copies its
// remaining pages from there. Writes beyond the length the slice had at Begin
// need none either. So Touch is needed exactly before a write to an element
// below that length in the array the capture began on.
//
// Pages are copied into page-sized buffers (small allocations: the owner
// never waits for a large one to be zeroed); Result assembles them into one
// slice, on any goroutine, once the capture is Done.
type Slice[T any] struct {
	src   []T   // the slice at Begin; nil once Done
	n     int   // len(src)
	pages [][]T // copied pages; nil = pending
	left  int   // pages not yet copied
	next  int   // Step's cursor: the first page that may be pending
	shift uint  // elements per page = 1 << shift
	size  int   // bytes per element
	touch int   // pages copied by Touch
	count *int  // if set, bytes copied are added here (CountInto)
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
	*s = Slice[T]{src: src, n: len(src), left: n, shift: shift, size: size}
	if n > 0 {
		s.pages = make([][]T, n)
	}
}

// CountInto makes the capture add the bytes of every page it copies from
// now on (by Touch or Step) to *p: one counter for many slices lets their
// owner pace background copying against all the copying done (call it after
// Begin, which resets it).
func (s *Slice[T]) CountInto(p *int) { s.count = p }

// Touch must be called before the owner writes element i of cur, the
// owner's current slice: it copies i's page first if it is still pending.
// It is cheap when the capture is done or cur is not the captured array.
func (s *Slice[T]) Touch(cur []T, i int) {
	if s.left == 0 || i >= len(s.src) || unsafe.SliceData(cur) != unsafe.SliceData(s.src) {
		return
	}
	if p := i >> s.shift; s.pages[p] == nil {
		s.copyPage(p)
		s.touch++
	}
}

// TouchRange is Touch for every element of [lo, hi).
func (s *Slice[T]) TouchRange(cur []T, lo, hi int) {
	if s.left == 0 || lo >= len(s.src) || hi <= lo || unsafe.SliceData(cur) != unsafe.SliceData(s.src) {
		return
	}
	hi = min(hi, len(s.src))
	for p := lo >> s.shift; p <= (hi-1)>>s.shift; p++ {
		if s.pages[p] == nil {
			s.copyPage(p)
			s.touch++
		}
	}
}

func (s *Slice[T]) copyPage(p int) {
	lo := p << s.shift
	hi := min(len(s.src), lo+1<<s.shift)
	if nb := (hi - lo) * s.size; pooling && nb > MaxPage/2 && nb <= MaxPage {
		// A page buffer from an earlier capture: no allocation (a fresh
		// one costs a page fault or two, and the GC assists that
		// allocating ~50 MB per capture brings), no zeroing.
		buf := pagePool.Get().(*[MaxPage]byte)
		pg := unsafe.Slice((*T)(unsafe.Pointer(buf)), hi-lo)
		copy(pg, s.src[lo:hi])
		s.pages[p] = pg
	} else {
		s.pages[p] = append([]T(nil), s.src[lo:hi]...)
	}
	if s.count != nil {
		*s.count += (hi - lo) * s.size
	}
	if s.left--; s.left == 0 {
		s.src = nil // let the owner's old arrays go
	}
}

// Step copies pending pages until about budget bytes are copied (at least
// one page if any is pending) and returns the bytes copied.
func (s *Slice[T]) Step(budget int) int {
	done := 0
	for s.left > 0 && (done == 0 || done < budget) {
		for s.pages[s.next] != nil {
			s.next++
		}
		s.copyPage(s.next)
		done += len(s.pages[s.next]) * s.size
		s.next++
	}
	return done
}

// Done reports whether every page has been copied.
func (s *Slice[T]) Done() bool { return s.left == 0 }

// Touched returns the pages copied by Touch and TouchRange.
func (s *Slice[T]) Touched() int { return s.touch }

// Pending returns the pages not yet copied.
func (s *Slice[T]) Pending() int { return s.left }

// Len returns the length of the slice captured.
func (s *Slice[T]) Len() int { return s.n }

// Result returns the copy (length: the slice's length at Begin; nil if it
// was empty) and releases the pages. Call it once Done, from one
// goroutine; it allocates the whole slice and copies the pages into it.
func (s *Slice[T]) Result() []T {
	if s.left != 0 {
		panic("cow: Result before Done")
	}
	var d []T
	if s.n > 0 {
		d = make([]T, 0, s.n)
		for _, pg := range s.pages {
			d = append(d, pg...)
			if nb := len(pg) * s.size; pooling && nb > MaxPage/2 && nb <= MaxPage {
				pagePool.Put((*[MaxPage]byte)(unsafe.Pointer(unsafe.SliceData(pg))))
			}
		}
	}
	s.src, s.pages = nil, nil
	return d
}

// MaxPage is the size of the pooled page buffers: pages of more than half
// of it and at most it (the 8 KiB pages radix uses) are copied into
// buffers that Result returns to a pool once it has assembled them, so the
// next capture reuses them instead of allocating. The pool is a sync.Pool:
// buffers not reused within two garbage collections are freed, so captures
// minutes apart hold no memory in between, and back-to-back captures
// allocate little (shard/doc.go § Snapshots has the measurements).
const MaxPage = 8 << 10

var pagePool = sync.Pool{New: func() any { return new([MaxPage]byte) }}

// pooling is SetPoolingForTesting's switch.
var pooling = true

// SetPoolingForTesting turns the page pool off (false) or on, so benchmarks
// compare both in one run. Call it while no capture is in progress.
func SetPoolingForTesting(on bool) { pooling = on }
