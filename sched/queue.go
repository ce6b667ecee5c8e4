package sched

import "sort"

// queue holds the requests waiting for a non-busy worker, in admission order
// under its policy. Entries own copies of the request's blocks, allowed list
// and overlaps; their buffers are reused, so a queue that has reached its
// working size does not allocate.
type queue struct {
	policy QueuePolicy
	order  []uint32 // entry indices, admission order
	ents   []qentry // [0] unused
	free   []uint32 // free entry indices
	ids    u64map   // id → entry
	seq    uint64   // arrival counter
}

type qentry struct {
	req          Request
	overlaps     []Overlap
	seq          uint64
	uncached     int64 // WSPT key
	at           int64
	unrestricted bool
}

func (q *queue) init(p QueuePolicy) {
	q.policy = p
	q.ents = make([]qentry, 1, 16)
}

func (q *queue) len() int { return len(q.order) }

func (q *queue) less(a, b uint32) bool {
	ea, eb := &q.ents[a], &q.ents[b]
	switch q.policy {
	case QueueLCFS:
		return ea.seq > eb.seq
	case QueueWSPT:
		if ea.uncached != eb.uncached {
			return ea.uncached < eb.uncached
		}
	}
	return ea.seq < eb.seq
}

// push copies r and its overlaps into a queue entry placed by policy.
func (q *queue) push(r *Request, ov []Overlap, now, blockSize int64) {
	var e uint32
	if n := len(q.free); n > 0 {
		e = q.free[n-1]
		q.free = q.free[:n-1]
	} else {
		q.ents = append(q.ents, qentry{})
		e = uint32(len(q.ents) - 1)
	}
	qe := &q.ents[e]
	blocks := append(qe.req.Blocks[:0], r.Blocks...)
	allowed := append(qe.req.Override.Allowed[:0], r.Override.Allowed...)
	qe.overlaps = append(qe.overlaps[:0], ov...)
	qe.req = *r
	qe.req.Blocks = blocks
	qe.req.Override.Allowed = allowed
	q.seq++
	qe.seq = q.seq
	qe.at = now
	qe.unrestricted = !r.Override.PinnedSet && len(r.Override.Allowed) == 0
	var best uint32
	for i := range ov {
		best = max(best, ov[i].Device)
	}
	qe.uncached = max(0, int64(r.ISL)-int64(best)*blockSize)
	pos := sort.Search(len(q.order), func(i int) bool { return q.less(e, q.order[i]) })
	q.order = append(q.order, 0)
	copy(q.order[pos+1:], q.order[pos:])
	q.order[pos] = e
	q.ids.set(r.ID, e)
}

// release frees an entry that has left q.order.
func (q *queue) release(e uint32) {
	qe := &q.ents[e]
	q.ids.del(qe.req.ID)
	qe.req = Request{Blocks: qe.req.Blocks[:0], Override: Override{Allowed: qe.req.Override.Allowed[:0]}}
	qe.overlaps = qe.overlaps[:0]
	q.free = append(q.free, e)
}

// cancel removes a waiting request and reports whether it was waiting.
func (q *queue) cancel(id uint64) bool {
	e := q.ids.get(id)
	if e == 0 {
		return false
	}
	for i, x := range q.order {
		if x == e {
			q.order = append(q.order[:i], q.order[i+1:]...)
			break
		}
	}
	q.release(e)
	return true
}

func (q *queue) appendWaiting(dst []uint64) []uint64 {
	for _, e := range q.order {
		dst = append(dst, q.ents[e].req.ID)
	}
	return dst
}
