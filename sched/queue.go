package sched

import (
	"math"
	"sort"
)

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

	// Cache-aware dispatch scratch (pickAffinity): avail[slot] == agen
	// marks a rank a request may be admitted to now, wok[worker] == agen a
	// worker with a rank that is not busy. Sized with the slot and worker
	// tables, so dispatching does not allocate once they stop growing.
	avail []uint32
	wok   []uint32
	agen  uint32

	// waitAvg is the mean wait, in ns, of the requests admitted from the
	// queue, weighted over about the last waitAvgN of them (an exponential
	// moving average; Config.QueueAffinityTail).
	waitAvg float64

	holds uint64 // drains that left an available rank idle (tests, benchmarks)

	// Classes and tenants (classes.go): waiting requests per class rank,
	// how many belong to a tenant other than 0, the tenants' shares and
	// deficit round robin cursors, and nextFair's scratch. While fon,
	// pickAffinity considers only requests of class fclass and tenant
	// ftenant.
	byClass  [numClasses]int
	tenanted int
	tenants  []tenantState
	drr      [numClasses]drr
	tlist    []uint32
	tgen     uint32
	fon      bool
	fclass   Class
	ftenant  uint32
	// critSince counts the critical admissions since the last standard
	// one (Config.ClassAgingShare).
	critSince int
}

// waitAvgN is the span, in admissions, of queue.waitAvg.
const waitAvgN = 64

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
	if ra, rb := ea.req.Class.Rank(), eb.req.Class.Rank(); ra != rb {
		return ra < rb // classes first: strict priority
	}
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
	q.byClass[r.Class.Rank()]++
	if r.Tenant != 0 {
		q.tenanted++
	}
	q.tenant(r.Tenant).waiting[r.Class.Rank()]++
}

// release frees an entry that has left q.order.
func (q *queue) release(e uint32) {
	qe := &q.ents[e]
	q.ids.del(qe.req.ID)
	rk := qe.req.Class.Rank()
	q.byClass[rk]--
	if qe.req.Tenant != 0 {
		q.tenanted--
	}
	t := &q.tenants[qe.req.Tenant]
	if t.waiting[rk]--; t.waiting[rk] == 0 {
		t.deficit[rk] = 0 // deficit round robin: an empty queue keeps no credit
	}
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

// remove takes the entry at position k out of the admission order.
func (q *queue) remove(k int) {
	q.order = append(q.order[:k], q.order[k+1:]...)
}

// drain admits waiting requests that can now be routed, walking the queue
// in order. Once a request without restrictions finds every worker busy,
// the later ones without restrictions are skipped: busy-ness does not
// depend on the request. Restricted requests (pinned, or with an allowed
// set) are each tried in turn. Under PolicyKV with Config.QueueAffinity > 1,
// the unrestricted request admitted at each step is chosen by cache-aware
// dispatch (pickAffinity) among the first QueueAffinity from there on;
// otherwise it is the first.
func (s *Scheduler) drain(now int64) {
	s.shed.account(now, s.q.len())
	if s.q.len() == 0 {
		s.shed.sample()
		return
	}
	if s.q.fairNeeded(s.cfg.ClassAging > 0) {
		s.drainFair(now)
		s.shed.sample()
		return
	}
	affinity := s.cfg.Policy == PolicyKV && s.cfg.QueueAffinity > 1
	blocked := false
	for k := 0; k < len(s.q.order); {
		e := s.q.order[k]
		if !s.q.ents[e].unrestricted {
			if s.admit(e, now) == stBusy {
				k++
			} else {
				s.q.remove(k)
			}
			continue
		}
		if blocked {
			k++
			continue
		}
		pick := k
		if affinity {
			if pick = s.pickAffinity(k, now); pick < 0 {
				blocked = true // held: every candidate's cache is on a busy rank
				k++
				continue
			}
		}
		if s.admit(s.q.order[pick], now) == stBusy {
			blocked = true
			k++
			continue
		}
		if pick != k {
			s.stats.AdmittedAhead++
		}
		s.q.remove(pick) // the request at k, if not picked, is next in line again
	}
	s.shed.sample()
}

// admit routes waiting entry e and, unless every rank it may use is busy,
// reports it (EffectAdmitted or EffectRejected) and releases the entry.
// The caller removes it from the order when the status is not stBusy.
func (s *Scheduler) admit(e uint32, now int64) status {
	qe := &s.q.ents[e]
	d, st := s.route(&qe.req, qe.overlaps, now, nil)
	switch st {
	case stRouted:
		s.q.tenants[qe.req.Tenant].deficit[qe.req.Class.Rank()] -= float64(qe.req.ISL)
		switch qe.req.Class {
		case ClassCritical:
			s.q.critSince++
		case ClassStandard:
			s.q.critSince = 0
		}
		s.noteRouted(&qe.req)
		s.q.waitAvg += (float64(now-qe.at) - s.q.waitAvg) / waitAvgN
		s.stats.Admitted++
		s.shed.admitted(1)
		s.emit(Effect{Kind: EffectAdmitted, ID: d.ID, Decision: d, At: now})
		s.q.release(e)
	case stNoWorkers:
		s.stats.Rejections++
		s.stats.RejectedNoWorkers++
		s.emit(Effect{Kind: EffectRejected, ID: qe.req.ID, Reason: ReasonNoWorkers, At: now})
		s.q.release(e)
	}
	return st
}

// pickAffinity is cache-aware dispatch (doc.go, "Cache-aware dispatch"):
// the position, from k on (k holds an unrestricted request), of the waiting
// request to admit next. Of the first Config.QueueAffinity unrestricted
// requests from k in queue order it is the first that has waited its aging
// bound (aged; agingBound, extended by its saving: patience), else the one
// whose cached prefix favours the ranks available now most: the largest
//
//	advantage = max cached on an available rank − max cached on any other
//
// (see advantage), the earliest in queue order among equals. With no rank
// available it is k, which finds out (busy, or no rank left at all). The
// request is then routed as any other: the cost picks among the available
// ranks. With Config.QueueAffinityHold it is −1 (hold: the available ranks
// idle) while every candidate's advantage is negative and the request at k
// has waited less than the hold, extended by its saving; otherwise it is
// work-conserving: while a rank is available and requests wait, one is
// admitted.
func (s *Scheduler) pickAffinity(k int, now int64) int {
	if !s.markAvailable(now) {
		return k
	}
	aging := s.agingBound()
	maxWait := durNanos(s.cfg.QueueAffinityMaxWait)
	perBlock := float64(durNanos(s.cfg.QueueAffinityHoldPerBlock))
	pick, n := k, 0
	best, first := math.Inf(-1), 0.0
	for j := k; j < len(s.q.order); j++ {
		qe := &s.q.ents[s.q.order[j]]
		if !qe.unrestricted || (s.q.fon && (qe.req.Class != s.q.fclass || qe.req.Tenant != s.q.ftenant)) {
			continue
		}
		waited := now - qe.at
		if waited >= aging && (perBlock == 0 || waited >= maxWait) {
			return j // aged, whatever its saving
		}
		a := s.advantage(qe)
		if waited >= aging && waited >= patience(aging, maxWait, a, perBlock) {
			return j
		}
		if j == k {
			first = a
		}
		if a > best {
			best, pick = a, j
		}
		if n++; n == s.cfg.QueueAffinity {
			break
		}
	}
	if hold := durNanos(s.cfg.QueueAffinityHold); hold > 0 && best < 0 && now-s.q.ents[s.q.order[k]].at < patience(hold, maxWait, first, perBlock) {
		s.q.holds++
		return -1
	}
	return pick
}

// patience is a wait bound (the aging bound or the hold, in ns) for a
// request whose advantage is a: extended, when a < 0, by perBlock ns
// (Config.QueueAffinityHoldPerBlock) per block of its saving −a (the blocks
// a busy rank holds beyond the best available one), but not past maxWait
// (nor shortened below bound).
func patience(bound, maxWait int64, a, perBlock float64) int64 {
	if a >= 0 || perBlock == 0 {
		return bound
	}
	ext := -a * perBlock
	if ext >= float64(maxWait-bound) {
		return max(bound, maxWait)
	}
	return bound + int64(ext)
}

// agingBound is the wait, in ns, past which a request goes before any later
// one in cache-aware dispatch: Config.QueueAffinityMaxWait, or, with
// Config.QueueAffinityTail > 0, QueueAffinityTail × the queue's recent mean
// wait if that is shorter, but not below QueueAffinityHold (a request is not
// aged while it may still be held for its rank).
func (s *Scheduler) agingBound() int64 {
	aging := durNanos(s.cfg.QueueAffinityMaxWait)
	if s.cfg.QueueAffinityTail > 0 {
		tail := max(int64(s.cfg.QueueAffinityTail*s.q.waitAvg), durNanos(s.cfg.QueueAffinityHold))
		aging = min(aging, tail)
	}
	return aging
}

// markAvailable stamps (under a new q.agen) every rank a request without
// restrictions may be admitted to now, as route decides it: a live rank
// that is not busy, or a busy one of a worker with another rank that is
// not. It reports whether there is one. With the plain-rank heap (heap.go,
// always under PolicyKV) it reads the heap's ranks (live, not busy, their
// worker's only rank) and the slow list (every other live rank that may be
// free: decaying, of a worker with several ranks, huge loads), not every
// rank: a drain finding the whole fleet busy costs O(slow ranks), as route
// does, not O(ranks).
func (s *Scheduler) markAvailable(now int64) bool {
	q := &s.q
	if n := len(s.hot); len(q.avail) < n {
		q.avail = append(q.avail, make([]uint32, n-len(q.avail))...)
	}
	if n := len(s.workers); len(q.wok) < n {
		q.wok = append(q.wok, make([]uint32, n-len(q.wok))...)
	}
	q.agen++
	if q.agen == 0 {
		clear(q.avail)
		clear(q.wok)
		q.agen = 1
	}
	if !s.ph.on || s.forceScan {
		return s.markAvailableScan(now)
	}
	g, free, multi := q.agen, false, false
	for _, e := range s.ph.ents {
		q.avail[e.rank], free = g, true
	}
	for _, i := range s.ph.slow {
		h := &s.hot[i]
		if h.busy(s.prefillAt(int(i), now)) {
			multi = multi || h.multi
			continue
		}
		q.avail[i], q.wok[h.worker], free = g, g, true
	}
	if multi && free {
		for _, i := range s.ph.slow {
			if h := &s.hot[i]; h.multi && q.wok[h.worker] == g {
				q.avail[i] = g
			}
		}
	}
	return free
}

// markAvailableScan is markAvailable by a scan of every rank (no heap, or
// tests forcing the scan).
func (s *Scheduler) markAvailableScan(now int64) bool {
	q := &s.q
	g, free, multi := q.agen, false, false
	for i := range s.hot {
		h := &s.hot[i]
		if !h.live || h.busy(s.prefillAt(i, now)) {
			multi = multi || h.multi
			continue
		}
		q.avail[i], q.wok[h.worker], free = g, g, true
	}
	if multi && free {
		for i := range s.hot {
			if h := &s.hot[i]; h.live && h.multi && q.wok[h.worker] == g {
				q.avail[i] = g
			}
		}
	}
	return free
}

// advantage is how much more of r's prompt is cached on the best available
// rank (marked by markAvailable) than on the best other rank, in blocks
// (pickAffinity). A rank's cached blocks are the larger of the overlap the
// index reported when r arrived (tiers weighed as in the cost) and the
// blocks of r's prompt active there now (booked by requests admitted since,
// whose prefix will be cached by the time r's prefill runs).
func (s *Scheduler) advantage(qe *qentry) float64 {
	dw := 1.0
	if s.cfg.CreditCost {
		dw = s.cfg.OverlapCredit
	}
	g := s.q.agen
	in, out := 0.0, 0.0
	for j := range qe.overlaps {
		o := &qe.overlaps[j]
		i, ok := s.lookup(o.Worker)
		if !ok || !s.hot[i].live {
			continue
		}
		c := s.cachedOf(o, dw)
		if s.q.avail[i] == g {
			in = max(in, c)
		} else {
			out = max(out, c)
		}
	}
	if s.cfg.AssumeKVReuse {
		gen := s.nextGen()
		s.countHeld(qe.req.Blocks, gen)
		for _, i := range s.touched {
			c := float64(s.heldOf(int(i), gen))
			if s.q.avail[i] == g {
				in = max(in, c)
			} else {
				out = max(out, c)
			}
		}
		s.untouch()
	}
	return in - out
}

// holdForCache reports whether a new request should wait in the queue for
// the busy rank that holds most of its prompt (Config.QueueAffinityHold,
// under PolicyKV with cache-aware dispatch): it is unrestricted, and a busy
// rank has more of it cached (the index's overlaps, tiers weighed as in the
// cost) than any rank that is not busy. Routed now, it would recompute on
// a free rank what its busy rank holds.
func (s *Scheduler) holdForCache(r *Request, ov []Overlap, now int64) bool {
	if s.cfg.QueueAffinityHold <= 0 || s.cfg.Policy != PolicyKV || s.cfg.QueueAffinity <= 1 ||
		r.Override.PinnedSet || len(r.Override.Allowed) > 0 || s.q.len() >= s.cfg.QueueDepth {
		return false
	}
	if s.ph.on && len(s.ph.ents) == len(s.slotOf) {
		return false // every rank is in the plain-rank heap: none is busy
	}
	// A busy rank has more cached than every free one exactly when every
	// live rank with the most cached is busy: only those are looked up.
	most := 0.0
	for j := range ov {
		most = max(most, s.cachedOf(&ov[j], 1))
	}
	if most == 0 {
		return false
	}
	held := false
	for j := range ov {
		o := &ov[j]
		if s.cachedOf(o, 1) != most {
			continue
		}
		i, ok := s.lookup(o.Worker)
		if !ok || !s.hot[i].live {
			continue
		}
		if !s.hot[i].busy(s.prefillAt(int(i), now)) {
			return false
		}
		held = true
	}
	return held
}

// cachedOf is an overlap's cached blocks with its tiers weighed as in the
// cost, device blocks counted dw times.
func (s *Scheduler) cachedOf(o *Overlap, dw float64) float64 {
	return dw*float64(o.Device) + s.cfg.HostHitWeight*float64(o.Host) + s.cfg.DiskHitWeight*float64(o.Disk)
}
