// Package cow provides page-granular copy-on-write capture of pointer-free
// slices: Slice freezes a slice's elements as they are at Begin while its
// owner goes on writing, copying each page (a fixed-size run of elements)
// either before the owner's first write to it (Touch) or in bounded
// background steps (Step), whichever comes first.
//
// It is synchronous and single-goroutine: the owner of the slice calls every
// method; no locks, no goroutines, no clock. The copy is handed to another
// goroutine only after Done, with a happens-before edge of the caller's
// making (a channel, a waiter).
package cow

import (
	"math/bits"
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
type Slice[T any] struct {
	src   []T      // the slice at Begin
	dst   []T      // the copy, allocated on the first page copied
	pend  []uint64 // bit p: page p not yet copied
	left  int      // pages not yet copied
	next  int      // Step's cursor: the first page that may be pending
	shift uint     // elements per page = 1 << shift
	size  int      // bytes per element
	touch int      // pages copied by Touch
}

// Begin starts capturing src (its elements [0, len(src))) in pages of about
// pageBytes bytes. reuse, if its capacity suffices, holds the copy (so a
// buffer kept from an earlier capture allocates nothing).
func (s *Slice[T]) Begin(src, reuse []T, pageBytes int) {
	var zero T
	size := max(1, int(unsafe.Sizeof(zero)))
	shift := uint(0)
	if per := pageBytes / size; per > 1 {
		shift = uint(bits.Len(uint(per)) - 1)
	}
	pages := (len(src) + 1<<shift - 1) >> shift
	pend := s.pend[:0]
	for range (pages + 63) / 64 {
		pend = append(pend, ^uint64(0))
	}
	if r := pages % 64; r != 0 {
		pend[len(pend)-1] = 1<<r - 1
	}
	*s = Slice[T]{src: src, pend: pend, left: pages, shift: shift, size: size}
	if len(src) > 0 && cap(reuse) >= len(src) {
		s.dst = reuse[:len(src)]
	}
}

// Touch must be called before the owner writes element i of cur, the
// owner's current slice: it copies i's page first if it is still pending.
// It is cheap when the capture is done or cur is not the captured array.
func (s *Slice[T]) Touch(cur []T, i int) {
	if s.left == 0 || i >= len(s.src) || unsafe.SliceData(cur) != unsafe.SliceData(s.src) {
		return
	}
	if p := i >> s.shift; s.pend[p>>6]&(1<<(p&63)) != 0 {
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
		if s.pend[p>>6]&(1<<(p&63)) != 0 {
			s.copyPage(p)
			s.touch++
		}
	}
}

func (s *Slice[T]) copyPage(p int) {
	if s.dst == nil {
		s.dst = make([]T, len(s.src))
	}
	lo := p << s.shift
	hi := min(len(s.src), lo+1<<s.shift)
	copy(s.dst[lo:hi], s.src[lo:hi])
	s.pend[p>>6] &^= 1 << (p & 63)
	s.left--
}

// Step copies pending pages until about budget bytes are copied (at least
// one page if any is pending) and returns the bytes copied.
func (s *Slice[T]) Step(budget int) int {
	done := 0
	for s.left > 0 && (done == 0 || done < budget) {
		w := s.next >> 6
		word := s.pend[w] &^ (1<<(s.next&63) - 1)
		if word == 0 {
			s.next = (w + 1) << 6
			continue
		}
		p := w<<6 + bits.TrailingZeros64(word)
		s.copyPage(p)
		s.next = p + 1
		done += (1 << s.shift) * s.size
	}
	return done
}

// Done reports whether every page has been copied.
func (s *Slice[T]) Done() bool { return s.left == 0 }

// Touched returns the pages copied by Touch and TouchRange.
func (s *Slice[T]) Touched() int { return s.touch }

// Pending returns the pages not yet copied.
func (s *Slice[T]) Pending() int { return s.left }

// Result returns the copy (length: the slice's length at Begin) once Done,
// and forgets the source.
func (s *Slice[T]) Result() []T {
	if s.left != 0 {
		panic("cow: Result before Done")
	}
	d := s.dst
	if len(s.src) == 0 {
		d = nil
	}
	s.src, s.dst = nil, nil
	return d
}
