package shard

import (
	"sync/atomic"
)

// cacheLine is the padding unit that keeps producer- and consumer-written
// words apart (64 bytes on amd64 and arm64 cores in use; xsync uses the same).
const cacheLine = 64

// queue is a bounded multi-producer, single-consumer lock-free FIFO of
// pointers (Vyukov's bounded queue with a per-slot sequence number).
// tryPush never blocks and fails only when the queue is full; tryPop must be
// called by one goroutine only. The zero value is not usable; see newQueue.
type queue[T any] struct {
	mask  uint64
	slots []qslot[T]
	_     [cacheLine - 32]byte
	head  atomic.Uint64 // next position to push, written by producers
	_     [cacheLine - 8]byte
	tail  atomic.Uint64 // next position to pop, written by the consumer only
	_     [cacheLine - 8]byte
}

type qslot[T any] struct {
	seq  atomic.Uint64
	item *T
	_    [cacheLine - 16]byte
}

// newQueue returns a queue holding at least capacity items (rounded up to a
// power of two, minimum 2).
func newQueue[T any](capacity int) *queue[T] {
	n := uint64(2)
	for n < uint64(capacity) {
		n <<= 1
	}
	q := &queue[T]{mask: n - 1, slots: make([]qslot[T], n)}
	for i := range q.slots {
		q.slots[i].seq.Store(uint64(i))
	}
	return q
}

// tryPush appends item and reports true, or reports false if the queue is full.
func (q *queue[T]) tryPush(item *T) bool {
	pos := q.head.Load()
	for {
		s := &q.slots[pos&q.mask]
		seq := s.seq.Load()
		switch d := int64(seq - pos); {
		case d == 0:
			if q.head.CompareAndSwap(pos, pos+1) {
				s.item = item
				s.seq.Store(pos + 1)
				return true
			}
			pos = q.head.Load()
		case d < 0:
			return false // the slot still holds the item from one lap ago: full
		default:
			pos = q.head.Load() // another producer took pos
		}
	}
}

// tryPop removes and returns the oldest item, or nil if the queue is empty
// (or the oldest push is still being written). Consumer only.
func (q *queue[T]) tryPop() *T {
	pos := q.tail.Load()
	s := &q.slots[pos&q.mask]
	if s.seq.Load() != pos+1 {
		return nil
	}
	item := s.item
	s.item = nil
	s.seq.Store(pos + q.mask + 1)
	q.tail.Store(pos + 1)
	return item
}

// len returns the number of items queued (approximate while producers run).
func (q *queue[T]) len() int {
	t := q.tail.Load() // load tail first: head can only have grown since
	return int(q.head.Load() - t)
}

func (q *queue[T]) cap() int { return len(q.slots) }

// depthAfterPop returns the queue's depth just before the consumer's last
// successful pop: what remains plus the popped item, at most the capacity
// (producers may have refilled the freed slot already). Consumer only.
func (q *queue[T]) depthAfterPop() int {
	return min(q.len()+1, q.cap())
}
