package sched

import (
	"fmt"
	"math"
)

// Class is a request's priority class. The zero value is ClassStandard.
type Class uint8

// Priority classes, from the zero value; Rank orders them.
const (
	// ClassStandard is the default class.
	ClassStandard Class = iota
	// ClassCritical is admitted before every other class and is never shed
	// while a request of a lower class is waiting or running.
	ClassCritical
	// ClassSheddable is admitted last and shed first.
	ClassSheddable

	numClasses = 3
)

var classNames = [...]string{"standard", "critical", "sheddable"}

func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return fmt.Sprintf("Class(%d)", c)
}

// Rank is the class's place in admission order: 0 for critical, 1 for
// standard, 2 for sheddable (and for unknown values).
func (c Class) Rank() int {
	switch c {
	case ClassCritical:
		return 0
	case ClassStandard:
		return 1
	}
	return 2
}

// ClassOfRank is the class of admission rank r (Class.Rank's inverse).
func ClassOfRank(r int) Class {
	switch r {
	case 0:
		return ClassCritical
	case 1:
		return ClassStandard
	}
	return ClassSheddable
}

// ParseClass parses "critical", "standard" or "sheddable".
func ParseClass(s string) (Class, error) {
	for i, n := range classNames {
		if n == s {
			return Class(i), nil
		}
	}
	return 0, fmt.Errorf("sched: unknown priority class %q (want critical, standard or sheddable)", s)
}

// tenantState is one tenant's share of the waiting queue: its weight, and
// per class rank how many of its requests wait and its deficit (deficit
// round robin, in prompt tokens). Pointer-free.
type tenantState struct {
	weight  float64
	waiting [numClasses]int
	deficit [numClasses]float64
	served  uint64 // prompt tokens routed, directly or from the queue
	routed  uint64
	headGen uint32 // head valid when == queue.tgen
	head    int32  // position in queue.order of its first entry in the class being chosen
}

// drr is one class's deficit round robin cursor: the tenant whose turn it
// is, and whether its quantum for this turn is still to be added.
type drr struct {
	cur   uint32
	fresh bool
}

// SetTenant sets tenant id's weight in the fair sharing of the waiting
// queue (> 0; every tenant's weight is 1 until set). Tenant ids are dense
// small integers the caller assigns; 0 is the default tenant. Control
// plane: it may allocate.
func (s *Scheduler) SetTenant(id uint32, weight float64) error {
	if !(weight > 0) || math.IsInf(weight, 0) {
		return fmt.Errorf("%w: tenant %d weight %v must be finite and > 0", ErrConfig, id, weight)
	}
	s.tenant(id).weight = weight
	return nil
}

// tenant returns tenant id's state, growing the table if it must.
func (s *Scheduler) tenant(id uint32) *tenantState { return s.q.tenant(id) }

func (q *queue) tenant(id uint32) *tenantState {
	if int(id) >= len(q.tenants) {
		q.growTenants(id)
	}
	return &q.tenants[id]
}

func (q *queue) growTenants(id uint32) {
	for int(id) >= len(q.tenants) {
		q.tenants = append(q.tenants, tenantState{weight: 1})
	}
	if cap(q.tlist) < len(q.tenants) {
		q.tlist = make([]uint32, 0, 2*len(q.tenants))
	}
}

// TenantShare is one tenant's state in the scheduler (AppendTenants). A
// plain value.
type TenantShare struct {
	Tenant uint32
	Weight float64
	// Waiting is the tenant's waiting requests per class rank (critical,
	// standard, sheddable).
	Waiting [numClasses]int
	// ServedTokens and Routed count the prompt tokens and requests routed
	// (directly or from the queue) since the start.
	ServedTokens uint64
	Routed       uint64
}

// AppendTenants appends every tenant the scheduler has seen, by id.
func (s *Scheduler) AppendTenants(dst []TenantShare) []TenantShare {
	for i := range s.q.tenants {
		t := &s.q.tenants[i]
		dst = append(dst, TenantShare{Tenant: uint32(i), Weight: t.weight, Waiting: t.waiting, ServedTokens: t.served, Routed: t.routed})
	}
	return dst
}

// Running returns the active (routed, not yet freed) requests of class c.
func (s *Scheduler) Running(c Class) int { return s.running[c.Rank()] }

// busyAt is busy with the decode and prefill limits scaled by keep
// (Config.ClassHeadroom: the headroom lower classes leave to critical
// requests).
func (h *slotHot) busyAt(pf int64, keep float64) bool {
	return (h.decLimit != math.MaxInt64 && float64(h.active) > keep*float64(h.decLimit)) ||
		(h.pfLimit != math.MaxInt64 && float64(pf) > keep*float64(h.pfLimit))
}

// noteRouted counts a routed request for its tenant.
func (s *Scheduler) noteRouted(r *Request) {
	if int(r.Tenant) < len(s.q.tenants) {
		t := &s.q.tenants[r.Tenant]
		t.served += uint64(r.ISL)
		t.routed++
	}
}

// fairNeeded reports whether the waiting queue needs the fair path of
// drain: requests of several tenants wait, or a standard request may have
// aged past critical ones. Otherwise the policy order, classes first, is
// the admission order.
func (q *queue) fairNeeded(aging bool) bool {
	return q.tenanted > 0 || (aging && q.byClass[0] > 0 && q.byClass[1] > 0)
}

// drainFair is drain when fairNeeded: restricted requests are tried in
// queue order, then unrestricted ones are admitted one at a time, each
// chosen by nextFair (class, then tenant), and under cache-aware dispatch by
// pickAffinity among that tenant's requests of that class.
func (s *Scheduler) drainFair(now int64) {
	for k := 0; k < len(s.q.order); {
		e := s.q.order[k]
		if s.q.ents[e].unrestricted || s.admit(e, now) == stBusy {
			k++
			continue
		}
		s.q.remove(k)
	}
	affinity := s.cfg.Policy == PolicyKV && s.cfg.QueueAffinity > 1
	for s.q.len() > 0 {
		k := s.nextFair(now)
		if k < 0 {
			return
		}
		pick := k
		if affinity {
			qe := &s.q.ents[s.q.order[k]]
			s.q.fon, s.q.fclass, s.q.ftenant = true, qe.req.Class, qe.req.Tenant
			pick = s.pickAffinity(k, now)
			s.q.fon = false
			if pick < 0 {
				return // held for its cache
			}
		}
		if s.admit(s.q.order[pick], now) == stBusy {
			return
		}
		if pick != k {
			s.stats.AdmittedAhead++
		}
		s.q.remove(pick)
	}
}

// nextFair returns the position in the queue order of the unrestricted
// request to admit next, or −1 if none waits:
//   - the oldest standard request that has waited Config.ClassAging while
//     critical ones wait (the aging bound), if critical requests have taken
//     at least 1/ClassAgingShare − 1 admissions since the last standard
//     one;
//   - else, in the highest class with unrestricted requests waiting, the
//     first (in policy order) request of the tenant whose turn it is under
//     deficit round robin: each turn adds TenantQuantum × weight prompt
//     tokens to the tenant's deficit, and the tenant keeps its turn while
//     its next request's prompt fits its deficit (admit deducts it).
//
// The queue order sorts classes first, so a class's requests are
// contiguous.
func (s *Scheduler) nextFair(now int64) int {
	q := &s.q
	top := -1
	for k, e := range q.order {
		if q.ents[e].unrestricted {
			top = k
			break
		}
	}
	if top < 0 {
		return -1
	}
	class := q.ents[q.order[top]].req.Class
	if aging := durNanos(s.cfg.ClassAging); aging > 0 && class == ClassCritical && q.byClass[1] > 0 &&
		s.cfg.ClassAgingShare > 0 && float64(q.critSince+1)*s.cfg.ClassAgingShare >= 1 {
		oldest, at := -1, now-aging
		for k := top; k < len(q.order); k++ {
			qe := &q.ents[q.order[k]]
			if c := qe.req.Class.Rank(); c > 1 {
				break
			} else if c == 1 && qe.unrestricted && qe.at <= at {
				oldest, at = k, qe.at
			}
		}
		if oldest >= 0 {
			return oldest
		}
	}
	// The class's tenants and the first request of each.
	q.tgen++
	if q.tgen == 0 {
		for i := range s.q.tenants {
			s.q.tenants[i].headGen = 0
		}
		q.tgen = 1
	}
	tl := q.tlist[:0]
	for k := top; k < len(q.order); k++ {
		qe := &q.ents[q.order[k]]
		if qe.req.Class != class {
			break
		}
		if !qe.unrestricted {
			continue
		}
		t := s.tenant(qe.req.Tenant)
		if t.headGen != q.tgen {
			t.headGen, t.head = q.tgen, int32(k)
			tl = insertSorted(tl, qe.req.Tenant)
		}
	}
	q.tlist = tl
	if len(tl) == 1 {
		return int(s.q.tenants[tl[0]].head)
	}
	d := &q.drr[class.Rank()]
	quantum := float64(s.cfg.TenantQuantum)
	if quantum == 0 {
		quantum = 4096
	}
	// Each visit adds a quantum to a tenant's deficit, so the loop ends;
	// a prompt of P tokens needs at most P / (quantum × weight) rounds.
	j := nextAtLeast(tl, d.cur)
	if tl[j] != d.cur {
		d.cur, d.fresh = tl[j], true
	}
	for {
		t := &s.q.tenants[d.cur]
		rk := class.Rank()
		if d.fresh {
			t.deficit[rk] += quantum * t.weight
			d.fresh = false
		}
		head := int(t.head)
		if float64(q.ents[q.order[head]].req.ISL) <= t.deficit[rk] {
			return head
		}
		j = (j + 1) % len(tl)
		d.cur, d.fresh = tl[j], true
	}
}

// insertSorted inserts v into the ascending list l (v not in l).
func insertSorted(l []uint32, v uint32) []uint32 {
	l = append(l, v)
	k := len(l) - 1
	for k > 0 && l[k-1] > v {
		l[k] = l[k-1]
		k--
	}
	l[k] = v
	return l
}

// nextAtLeast returns the index of the first element of the ascending,
// non-empty list l that is ≥ v, cyclically (0 if none).
func nextAtLeast(l []uint32, v uint32) int {
	for j, x := range l {
		if x >= v {
			return j
		}
	}
	return 0
}

// classShed reports whether request r that would wait is shed by the
// queue-wait bound. Its predicted place in the queue counts the requests of
// higher classes (strict priority) and, of its own class, those its tenant
// waits behind under deficit round robin: (its tenant's waiting + 1) ×
// the waiting tenants' total weight / its tenant's weight, at most all of
// them. A critical request is never shed while a request of a lower class
// waits or runs.
func (s *Scheduler) classShed(r *Request) bool {
	rk := r.Class.Rank()
	if rk == 0 && (s.q.byClass[1]+s.q.byClass[2] > 0 || s.running[1]+s.running[2] > 0) {
		return false
	}
	ahead := 0
	for i := 0; i < rk; i++ {
		ahead += s.q.byClass[i]
	}
	ahead += s.sameClassAhead(r, rk)
	return s.shed.shed(ahead, s.cfg.QueueDepth)
}

// sameClassAhead is how many of its class rank rk's waiting requests r is
// predicted to wait behind (classShed).
func (s *Scheduler) sameClassAhead(r *Request, rk int) int {
	n := s.q.byClass[rk]
	if s.q.tenanted == 0 && r.Tenant == 0 {
		return n
	}
	t := s.tenant(r.Tenant)
	total := t.weight
	for i := range s.q.tenants {
		if o := &s.q.tenants[i]; uint32(i) != r.Tenant && o.waiting[rk] > 0 {
			total += o.weight
		}
	}
	pos := float64(t.waiting[rk]+1)*total/t.weight - 1
	return min(n, int(math.Ceil(pos)))
}

// evictFor makes room in a full queue for request r: it rejects
// (EffectRejected, ReasonEvicted) the last waiting request in admission
// order if its class is lower than r's, else, among r's class, the last
// request of the tenant with the most waiting per unit of weight if that
// tenant has more than r's would with r, and reports whether it did.
func (s *Scheduler) evictFor(r *Request, now int64) bool {
	n := len(s.q.order)
	if n == 0 {
		return false
	}
	victim := -1
	rk := r.Class.Rank()
	if s.q.ents[s.q.order[n-1]].req.Class.Rank() > rk {
		victim = n - 1
	} else if s.q.tenanted > 0 || r.Tenant != 0 {
		mine := s.tenant(r.Tenant)
		worst, most := uint32(0), float64(mine.waiting[rk]+1)/mine.weight
		found := false
		for i := range s.q.tenants {
			t := &s.q.tenants[i]
			if x := float64(t.waiting[rk]) / t.weight; uint32(i) != r.Tenant && x > most {
				worst, most, found = uint32(i), x, true
			}
		}
		if found {
			for k := n - 1; k >= 0; k-- {
				if q := &s.q.ents[s.q.order[k]].req; q.Tenant == worst && q.Class.Rank() == rk {
					victim = k
					break
				}
			}
		}
	}
	if victim < 0 {
		return false
	}
	e := s.q.order[victim]
	qe := &s.q.ents[e]
	s.q.remove(victim)
	s.stats.Rejections++
	s.stats.RejectedEvicted++
	s.emit(Effect{Kind: EffectRejected, ID: qe.req.ID, Reason: ReasonEvicted, At: now})
	s.q.release(e)
	return true
}

// checkClasses checks the class and tenant counts against the queue and
// the active requests, and the session list against its map
// (CheckInvariants).
func (s *Scheduler) checkClasses() error {
	var byClass [numClasses]int
	tenanted := 0
	waiting := make([][numClasses]int, len(s.q.tenants))
	for _, e := range s.q.order {
		r := &s.q.ents[e].req
		byClass[r.Class.Rank()]++
		if r.Tenant != 0 {
			tenanted++
		}
		if int(r.Tenant) >= len(waiting) {
			return fmt.Errorf("waiting request %d of tenant %d beyond the tenant table (%d)", r.ID, r.Tenant, len(waiting))
		}
		waiting[r.Tenant][r.Class.Rank()]++
	}
	if byClass != s.q.byClass || tenanted != s.q.tenanted {
		return fmt.Errorf("queue counts per class %v (tenanted %d), the queue holds %v (%d)", s.q.byClass, s.q.tenanted, byClass, tenanted)
	}
	for i := range waiting {
		if waiting[i] != s.q.tenants[i].waiting {
			return fmt.Errorf("tenant %d: waiting %v, the queue holds %v", i, s.q.tenants[i].waiting, waiting[i])
		}
	}
	var running [numClasses]int
	for i := 1; i < len(s.reqs); i++ {
		if rq := &s.reqs[i]; rq.live {
			running[rq.class.Rank()]++
		}
	}
	if running != s.running {
		return fmt.Errorf("running per class %v, the active requests are %v", s.running, running)
	}
	n := 0
	for e, prev := s.sess.head, uint32(0); e != 0; prev, e = e, s.sess.ents[e].next {
		en := &s.sess.ents[e]
		if en.prev != prev || s.sess.ids.get(en.id) != e {
			return fmt.Errorf("session entry %d: broken list or map", e)
		}
		if prev != 0 && s.sess.ents[prev].last > en.last {
			return fmt.Errorf("session list out of time order at entry %d", e)
		}
		n++
	}
	if n != s.sess.ids.len() {
		return fmt.Errorf("%d sessions listed, %d mapped", n, s.sess.ids.len())
	}
	return nil
}
