package sched

import "github.com/kvroute/kvroute/wire"

// sessions binds each session (Request.Session) to the dp rank that served
// its last turn, with that turn's prompt blocks and time, for
// Config.SessionTTL. Entries live in one slice with a free list and an LRU
// list by last use (oldest first), so binding and expiring allocate nothing
// once the table has grown. Not goroutine-safe; part of the Scheduler.
type sessions struct {
	ids  u64map // session id → entry
	ents []sessEnt
	free []uint32
	head uint32 // least recently bound
	tail uint32

	// The current decision's session rank (−1: none) and its credit.
	slot   int32
	credit uint32
}

type sessEnt struct {
	id     uint64
	key    wire.WorkerKey
	blocks uint32
	last   int64
	prev   uint32
	next   uint32
}

// sessionCredit credits the rank bound to r's session, if any and bound
// within Config.SessionTTL, with the blocks of the session's last turn as
// cached device blocks (the larger of those and its overlap), as a cost
// term for the decision gen. It records the rank and credit for explain.
func (s *Scheduler) sessionCredit(r *Request, now int64, gen uint32) {
	ss := &s.sess
	ss.slot = -1
	e := ss.ids.get(r.Session)
	if e == 0 {
		return
	}
	ent := &ss.ents[e]
	if now-ent.last > int64(s.cfg.SessionTTL) {
		return
	}
	i, ok := s.lookup(ent.key)
	if !ok || !s.hot[i].live {
		return
	}
	credit := min(ent.blocks, uint32(len(r.Blocks)))
	if len(r.Blocks) == 0 {
		credit = min(ent.blocks, r.ISL/uint32(s.bs))
	}
	if credit == 0 {
		return
	}
	ss.slot, ss.credit = int32(i), credit
	h := &s.hot[i]
	if h.ovGen == gen {
		h.ovDev = max(h.ovDev, credit)
		return
	}
	h.ovGen, h.ovDev = gen, credit
	sl := &s.slots[i]
	sl.ovHost, sl.ovDisk, sl.ovTree = 0, 0, sl.treeSize
	s.touch(i)
	s.scan[i].flags |= fOverlap
}

// BindSession binds session to the dp rank key, which served its latest
// turn (of blocks prompt blocks) at time at: the router's own decisions do
// it in Decide; a replica calls it for bindings made elsewhere. A binding
// older than the one held is ignored. Allocation-free once the table has
// grown.
func (s *Scheduler) BindSession(session uint64, key wire.WorkerKey, blocks uint32, at int64) {
	if session == 0 {
		return
	}
	ss := &s.sess
	if len(ss.ents) == 0 {
		ss.ents = make([]sessEnt, 1, 64)
	}
	e := ss.ids.get(session)
	if e != 0 {
		if at < ss.ents[e].last {
			return
		}
		ss.unlink(e)
	} else {
		if n := len(ss.free); n > 0 {
			e = ss.free[n-1]
			ss.free = ss.free[:n-1]
		} else {
			ss.ents = append(ss.ents, sessEnt{})
			e = uint32(len(ss.ents) - 1)
		}
		ss.ids.set(session, e)
	}
	ss.ents[e] = sessEnt{id: session, key: key, blocks: blocks, last: at}
	// Append at the tail (bindings arrive in time order but for remote
	// ones, which may be a little older: they go before newer entries).
	p := ss.tail
	for p != 0 && ss.ents[p].last > at {
		p = ss.ents[p].prev
	}
	ss.insertAfter(p, e)
}

func (ss *sessions) unlink(e uint32) {
	en := &ss.ents[e]
	if en.prev != 0 {
		ss.ents[en.prev].next = en.next
	} else {
		ss.head = en.next
	}
	if en.next != 0 {
		ss.ents[en.next].prev = en.prev
	} else {
		ss.tail = en.prev
	}
	en.prev, en.next = 0, 0
}

// insertAfter links e after p (0: at the head).
func (ss *sessions) insertAfter(p, e uint32) {
	en := &ss.ents[e]
	en.prev = p
	if p == 0 {
		en.next = ss.head
		ss.head = e
	} else {
		en.next = ss.ents[p].next
		ss.ents[p].next = e
	}
	if en.next != 0 {
		ss.ents[en.next].prev = e
	} else {
		ss.tail = e
	}
}

// expire drops the bindings last used more than ttl before now.
func (ss *sessions) expire(now, ttl int64) {
	for ss.head != 0 && now-ss.ents[ss.head].last > ttl {
		e := ss.head
		ss.unlink(e)
		ss.ids.del(ss.ents[e].id)
		ss.ents[e] = sessEnt{}
		ss.free = append(ss.free, e)
	}
}

// SessionBinding is a session's binding (LookupSession). A plain value.
type SessionBinding struct {
	Worker wire.WorkerKey
	Blocks uint32
	At     int64
}

// LookupSession returns session's binding, if one is held (expired
// bindings are dropped on Tick).
func (s *Scheduler) LookupSession(session uint64) (SessionBinding, bool) {
	e := s.sess.ids.get(session)
	if e == 0 {
		return SessionBinding{}, false
	}
	en := &s.sess.ents[e]
	return SessionBinding{Worker: en.key, Blocks: en.blocks, At: en.last}, true
}

// Sessions returns the number of session bindings held.
func (s *Scheduler) Sessions() int { return s.sess.ids.len() }
