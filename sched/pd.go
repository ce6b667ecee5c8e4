package sched

import (
	"fmt"
)

// Role is what a dp rank serves in a disaggregated fleet (Capacity.Role).
// The zero value is RoleBoth: an aggregated worker, which prefills and
// decodes its own requests.
type Role uint8

// Roles.
const (
	// RoleBoth prefills and decodes (aggregated). The default.
	RoleBoth Role = iota
	// RolePrefill only computes prompts' KV for decode workers to pull.
	RolePrefill
	// RoleDecode decodes, pulling the prompt's KV from a prefill worker (or
	// prefilling itself when the request is served locally).
	RoleDecode
)

var roleNames = [...]string{"both", "prefill", "decode"}

func (r Role) String() string {
	if int(r) < len(roleNames) {
		return roleNames[r]
	}
	return fmt.Sprintf("Role(%d)", r)
}

// ParseRole parses "both", "prefill" or "decode"; "" is RoleBoth.
func ParseRole(s string) (Role, error) {
	if s == "" {
		return RoleBoth, nil
	}
	for i, n := range roleNames {
		if n == s {
			return Role(i), nil
		}
	}
	return 0, fmt.Errorf("sched: unknown role %q (want both, prefill or decode)", s)
}

// DisaggPolicy says when a request in a fleet with prefill workers has its
// prompt computed remotely (doc.go, "Disaggregated prefill and decode"). The
// zero value is DisaggAlways.
type DisaggPolicy uint8

// Disaggregation policies.
const (
	// DisaggAlways prefills remotely whenever a prefill rank is free.
	DisaggAlways DisaggPolicy = iota
	// DisaggISL serves on the decode rank alone when its uncached prompt is
	// shorter than Config.DisaggMinUncachedTokens.
	DisaggISL
	// DisaggLoad serves on the decode rank alone when the prefill pool's
	// prefill tokens exceed the decode pool's.
	DisaggLoad
	// DisaggISLOrLoad applies both rules.
	DisaggISLOrLoad
)

var disaggPolicyNames = [...]string{"always", "isl", "load", "isl-or-load"}

func (p DisaggPolicy) String() string {
	if int(p) < len(disaggPolicyNames) {
		return disaggPolicyNames[p]
	}
	return fmt.Sprintf("DisaggPolicy(%d)", p)
}

// ParseDisaggPolicy parses "always", "isl", "load" or "isl-or-load".
func ParseDisaggPolicy(s string) (DisaggPolicy, error) {
	for i, n := range disaggPolicyNames {
		if n == s {
			return DisaggPolicy(i), nil
		}
	}
	return 0, fmt.Errorf("sched: unknown disaggregation policy %q (want always, isl, load or isl-or-load)", s)
}

// PairRule says which rule decided a PairDecision.
type PairRule uint8

// Pair rules.
const (
	// RuleNone: the serving leg was not routed (queued or rejected).
	RuleNone PairRule = iota
	// RuleNoPrefillPool: no prefill rank is known; decided as Decide does.
	RuleNoPrefillPool
	// RuleRemote: prefilled remotely, then decoded (two bookings).
	RuleRemote
	// RuleShortPrompt: the decode rank's uncached prompt is shorter than
	// Config.DisaggMinUncachedTokens; served there alone.
	RuleShortPrompt
	// RuleLoad: the prefill pool's prefill tokens exceed the decode pool's;
	// served on the decode rank alone.
	RuleLoad
	// RulePrefillBusy: every prefill rank is busy; served on the decode rank
	// alone.
	RulePrefillBusy
)

var pairRuleNames = [...]string{"none", "no-prefill-pool", "remote", "short-prompt", "load", "prefill-busy"}

func (r PairRule) String() string {
	if int(r) < len(pairRuleNames) {
		return pairRuleNames[r]
	}
	return fmt.Sprintf("PairRule(%d)", r)
}

// PairDecision is the outcome of routing one request in a fleet that may
// have prefill ranks. A plain, pointer-free value, safe to copy and keep.
type PairDecision struct {
	// Decode is the serving leg: the rank that answers the client, booked
	// until Free. Its Outcome says whether the request was routed, queued
	// (admitted later as an aggregated request, EffectAdmitted) or
	// rejected; its PrefillTokens are the tokens to pull (remote prefill)
	// or to compute (served alone).
	Decode Decision
	// Prefill is the prefill leg, Outcome Routed when the prompt is
	// computed remotely (Rule RuleRemote), booked until PrefillDone (or
	// Free); the zero Decision otherwise.
	Prefill Decision
	// Rule says which rule decided.
	Rule PairRule
}

// Remote reports whether the request has a prefill leg.
func (d *PairDecision) Remote() bool { return d.Prefill.Outcome == Routed }

// prefillPool returns the scheduler of the prefill-role ranks, making it on
// first use. It has its own table, bookings and RNG (seeded from the
// outer seed); it never queues (a busy pool serves locally) and never
// expires (its bookings end with the request's decode booking).
func (s *Scheduler) prefillPool() *Scheduler {
	if s.pf == nil {
		cfg := s.cfg
		cfg.QueueDepth, cfg.MaxQueueWait, cfg.Expiry = 0, 0, 0
		pf, err := New(cfg, s.seed^0x9e3779b97f4a7c15)
		if err != nil {
			panic(err) // cfg was validated by New
		}
		pf.inner = true
		s.pf = pf
	}
	return s.pf
}

// PrefillRanks returns the number of prefill-role dp ranks in the table.
func (s *Scheduler) PrefillRanks() int {
	if s.pf == nil {
		return 0
	}
	return len(s.pf.slotOf)
}

// DecidePD routes one request in a fleet that may have prefill-role ranks.
// With none, it is Decide for a batch of one, decision for decision
// (TestDecidePDWithoutPrefillIsDecide). Otherwise the decode rank is chosen
// first among the ranks that are not prefill-only, load first (the cost with
// Config.TransferWeight as its weight: the prompt's blocks it does not hold
// are its "prefill", to pull), and booked until Free; then
// Config.DisaggPolicy decides whether the prompt is computed there or on a
// prefill rank, chosen by the cost (cached prefix, prefill load) among the
// prefill ranks and booked until PrefillDone. The request's Override pins
// or restricts the decode leg (the rank that answers); the prefill leg
// takes its weight and temperature only. It does not allocate once the
// tables have grown.
func (s *Scheduler) DecidePD(req *Request, overlaps []Overlap, now int64) PairDecision {
	now = s.advance(now)
	s.drain(now)
	d := s.decidePD(req, overlaps, now, nil, nil)
	s.checkInvariants()
	return d
}

// DecidePDExplained is DecidePD with the explanation of each leg appended to
// dec and pre (every rank of the pool, as DecideExplained); pre is
// unchanged when the prefill leg was not considered.
func (s *Scheduler) DecidePDExplained(dec, pre []Candidate, req *Request, overlaps []Overlap, now int64) (PairDecision, []Candidate, []Candidate) {
	now = s.advance(now)
	s.drain(now)
	d := s.decidePD(req, overlaps, now, &dec, &pre)
	s.checkInvariants()
	return d, dec, pre
}

func (s *Scheduler) decidePD(r *Request, ov []Overlap, now int64, dexp, pexp *[]Candidate) PairDecision {
	if s.pf == nil || len(s.pf.slotOf) == 0 {
		return PairDecision{Decode: s.decideNew(r, ov, now, dexp), Rule: RuleNoPrefillPool}
	}
	if s.pf.byID.get(r.ID) != 0 {
		s.stats.Rejections++
		s.stats.RejectedDuplicate++
		return PairDecision{Decode: Decision{ID: r.ID, Outcome: Rejected, Reason: ReasonDuplicate}}
	}
	// The decode leg: the request's own overrides, the transfer's weight.
	rd := *r
	rd.Override.Weight, rd.Override.WeightSet = s.cfg.TransferWeight, true
	s.decodeLeg = true
	pd := PairDecision{Decode: s.decideNew(&rd, ov, now, dexp)}
	s.decodeLeg = false
	if pd.Decode.Outcome != Routed {
		return pd
	}
	pol := s.cfg.DisaggPolicy
	if (pol == DisaggISL || pol == DisaggISLOrLoad) && pd.Decode.PrefillTokens < s.cfg.DisaggMinUncachedTokens {
		pd.Rule = RuleShortPrompt
		s.stats.ServedLocal++
		return pd
	}
	// The decode pool's prefill tokens before this request's booking.
	if (pol == DisaggLoad || pol == DisaggISLOrLoad) && s.pf.pfTotal > s.pfTotal-int64(pd.Decode.PrefillTokens) {
		pd.Rule = RuleLoad
		s.stats.ServedLocal++
		return pd
	}
	// The prefill leg: no blocks (its KV leaves with the transfer, so only
	// its prefill load is booked), the request's weight and temperature,
	// any rank of the pool.
	pf := s.pf
	pf.advance(now)
	rp := Request{ID: r.ID, ISL: r.ISL, ExpectedPrefill: r.ExpectedPrefill}
	rp.Override.Weight, rp.Override.WeightSet = r.Override.Weight, r.Override.WeightSet
	rp.Override.Temperature, rp.Override.TemperatureSet = r.Override.Temperature, r.Override.TemperatureSet
	p, st := pf.route(&rp, ov, now, pexp)
	pf.checkInvariants()
	if st != stRouted {
		pd.Rule = RulePrefillBusy
		s.stats.ServedLocal++
		return pd
	}
	pd.Prefill, pd.Rule = p, RuleRemote
	s.stats.Disaggregated++
	return pd
}

// PrefillDone ends a request's prefill booking (its prefill leg has
// answered): its prefill load leaves the prefill rank. The decode booking
// stays (MarkPrefillCompleted when the decode rank's first token comes,
// Free when the request ends). It reports whether the request had a prefill
// booking; an unknown id is not an error.
func (s *Scheduler) PrefillDone(id uint64, now int64) bool {
	s.advance(now)
	if s.pf == nil || s.pf.byID.get(id) == 0 {
		return false
	}
	return s.pf.Free(id, now)
}
