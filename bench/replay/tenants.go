package replay

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/zeebo/xxh3"
	"go.yaml.in/yaml/v3"

	"github.com/kvroute/kvroute/bench/trace"
	"github.com/kvroute/kvroute/sched"
)

// TenantMix assigns tenants, priority classes and sessions to a trace's
// requests (`kvroute replay --tenants FILE`): classes and tenants by ratio,
// each request's drawn from a hash of its index, so the same request has the
// same class and tenant at every speedup; sessions from the trace's
// session_id field. Plain data.
type TenantMix struct {
	// Classes are the fractions of critical, standard and sheddable
	// requests (normalized; all 0: every request standard).
	Classes struct {
		Critical  float64 `yaml:"critical"`
		Standard  float64 `yaml:"standard"`
		Sheddable float64 `yaml:"sheddable"`
	} `yaml:"classes"`
	// Tenants share the requests by Share (normalized) and the fleet by
	// Weight (default 1). Empty: one tenant.
	Tenants []MixTenant `yaml:"tenants"`
	// Sessions passes the trace's session ids to the scheduler (with
	// sched.Config.SessionTTL, 5 minutes unless set).
	Sessions bool `yaml:"sessions"`
	// FromTrace takes a request's class from the trace's "priority" field
	// and its tenant from its "tenant" field (a name not in Tenants joins
	// them with weight 1), where the fields are present; the ratios
	// decide for the others.
	FromTrace bool `yaml:"from_trace"`
	// Window is the span of the windows over which Jain's fairness index
	// of the tenants' served prompt tokens is computed (default 10 s).
	Window time.Duration `yaml:"window"`

	// From the trace (resolve): each request's class and tenant.
	classes []sched.Class
	tenants []uint32
}

// resolve returns the mix for tr: with FromTrace, a copy holding each
// request's class and tenant, its fields first, the ratios otherwise;
// else m.
func (m *TenantMix) resolve(tr *trace.Trace) *TenantMix {
	if !m.FromTrace {
		return m
	}
	r := *m
	r.Tenants = slices.Clone(m.Tenants)
	r.classes = make([]sched.Class, len(tr.Requests))
	r.tenants = make([]uint32, len(tr.Requests))
	idx := map[string]uint32{}
	for k, t := range r.Tenants {
		idx[t.Name] = uint32(k + 1)
	}
	for i := range tr.Requests {
		q := &tr.Requests[i]
		r.classes[i] = m.classOf(i)
		if c, err := sched.ParseClass(q.Priority); err == nil {
			r.classes[i] = c
		}
		r.tenants[i] = m.tenantOf(i)
		if q.Tenant != "" {
			id, ok := idx[q.Tenant]
			if !ok {
				r.Tenants = append(r.Tenants, MixTenant{Name: q.Tenant, Weight: 1})
				id = uint32(len(r.Tenants))
				idx[q.Tenant] = id
			}
			r.tenants[i] = id
		}
	}
	return &r
}

// MixTenant is one tenant of a TenantMix.
type MixTenant struct {
	Name   string  `yaml:"name"`
	Share  float64 `yaml:"share"`
	Weight float64 `yaml:"weight"`
}

// ParseTenantMix parses a --tenants file of `kvroute replay`.
func ParseTenantMix(data []byte) (*TenantMix, error) {
	m := &TenantMix{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(m); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: tenants: %v", ErrConfig, err)
	}
	c := m.Classes
	for _, f := range []float64{c.Critical, c.Standard, c.Sheddable} {
		if f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("%w: tenants: classes must be fractions ≥ 0", ErrConfig)
		}
	}
	for i := range m.Tenants {
		t := &m.Tenants[i]
		if t.Name == "" {
			return nil, fmt.Errorf("%w: tenants[%d].name is missing", ErrConfig, i)
		}
		if t.Share < 0 || t.Weight < 0 || math.IsNaN(t.Share) || math.IsNaN(t.Weight) {
			return nil, fmt.Errorf("%w: tenants[%d] %q: share and weight must be ≥ 0", ErrConfig, i, t.Name)
		}
		if t.Weight == 0 {
			t.Weight = 1
		}
	}
	if m.Window < 0 {
		return nil, fmt.Errorf("%w: tenants: window must be ≥ 0", ErrConfig)
	}
	return m, nil
}

// unit draws request i's number in [0, 1) for a salt.
func unit(i int, salt uint64) float64 {
	return float64(xxh3.HashSeed([]byte{byte(i), byte(i >> 8), byte(i >> 16), byte(i >> 24)}, salt)>>11) / (1 << 53)
}

// classOf is request i's class.
func (m *TenantMix) classOf(i int) sched.Class {
	if m.classes != nil {
		return m.classes[i]
	}
	c := m.Classes
	sum := c.Critical + c.Standard + c.Sheddable
	if sum == 0 {
		return sched.ClassStandard
	}
	u := unit(i, 0x9e3779b97f4a7c15) * sum
	switch {
	case u < c.Critical:
		return sched.ClassCritical
	case u < c.Critical+c.Standard:
		return sched.ClassStandard
	}
	return sched.ClassSheddable
}

// tenantOf is request i's tenant: an index into Tenants, plus 1 (the
// scheduler's tenant id; 0 with no tenants).
func (m *TenantMix) tenantOf(i int) uint32 {
	if m.tenants != nil {
		return m.tenants[i]
	}
	if len(m.Tenants) == 0 {
		return 0
	}
	var sum float64
	for _, t := range m.Tenants {
		sum += t.Share
	}
	u := unit(i, 0xc2b2ae3d27d4eb4f) * sum
	for k, t := range m.Tenants {
		if u < t.Share {
			return uint32(k + 1)
		}
		u -= t.Share
	}
	return uint32(len(m.Tenants))
}

// GroupResult is one class's or tenant's part of a run.
type GroupResult struct {
	Group      string  `json:"group"` // "class critical", "tenant a"
	Requests   int     `json:"requests"`
	Completed  int     `json:"completed"`
	Rejected   int     `json:"rejected"`
	TTFTMeanMs float64 `json:"ttft_mean_ms"`
	TTFTP99Ms  float64 `json:"ttft_p99_ms"`
	// ServedTokens are the prompt tokens of its requests that got a first
	// token; Share is their part of all served.
	ServedTokens int64   `json:"served_prompt_tokens"`
	Share        float64 `json:"share"`
}

// Groups are a run's results per class and tenant, and the fairness of the
// tenants' served prompt tokens: Jain's index over Window-long windows
// (weighted by the tenants' weights; the windows where every tenant was
// served), its minimum and mean.
type Groups struct {
	Classes  []GroupResult `json:"classes"`
	Tenants  []GroupResult `json:"tenants,omitempty"`
	JainMin  float64       `json:"jain_min,omitempty"`
	JainMean float64       `json:"jain_mean,omitempty"`
	Windows  int           `json:"jain_windows,omitempty"`
	// ShedByClass counts the rejected requests per class (critical,
	// standard, sheddable).
	ShedByClass [3]int `json:"shed_by_class"`
}

// groups computes a run's Groups from its records (request i's record is
// recs[i]).
func (m *TenantMix) groups(recs []record) *Groups {
	g := &Groups{}
	classes := [3][]int{}
	tenants := make([][]int, len(m.Tenants))
	for i := range recs {
		rk := m.classOf(i).Rank()
		classes[rk] = append(classes[rk], i)
		if recs[i].rejected {
			g.ShedByClass[rk]++
		}
		if t := m.tenantOf(i); t > 0 {
			tenants[t-1] = append(tenants[t-1], i)
		}
	}
	var total int64
	for i := range recs {
		if recs[i].hasFirst {
			total += int64(recs[i].prompt)
		}
	}
	for rk, ids := range classes {
		g.Classes = append(g.Classes, groupOf("class "+sched.ClassOfRank(rk).String(), ids, recs, total))
	}
	for k, ids := range tenants {
		g.Tenants = append(g.Tenants, groupOf("tenant "+m.Tenants[k].Name, ids, recs, total))
	}
	if len(m.Tenants) > 1 {
		m.jain(g, recs)
	}
	return g
}

func groupOf(name string, ids []int, recs []record, total int64) GroupResult {
	gr := GroupResult{Group: name, Requests: len(ids)}
	var ttft []float64
	for _, i := range ids {
		c := &recs[i]
		if c.rejected {
			gr.Rejected++
		}
		if c.done {
			gr.Completed++
		}
		if c.hasFirst {
			ttft = append(ttft, float64(c.first-c.arrive)/1e6)
			gr.ServedTokens += int64(c.prompt)
		}
	}
	gr.TTFTMeanMs, _, _, gr.TTFTP99Ms = dist(ttft)
	if total > 0 {
		gr.Share = float64(gr.ServedTokens) / float64(total)
	}
	return gr
}

// jain computes Jain's index of the tenants' served prompt tokens, each
// divided by its weight, per window of first tokens.
func (m *TenantMix) jain(g *Groups, recs []record) {
	win := m.Window
	if win <= 0 {
		win = 10 * time.Second
	}
	var last time.Duration
	for i := range recs {
		if recs[i].hasFirst {
			last = max(last, recs[i].first)
		}
	}
	n := int(last/win) + 1
	served := make([][]float64, n)
	for w := range served {
		served[w] = make([]float64, len(m.Tenants))
	}
	for i := range recs {
		if c := &recs[i]; c.hasFirst {
			if t := m.tenantOf(i); t > 0 {
				served[c.first/win][t-1] += float64(c.prompt) / m.Tenants[t-1].Weight
			}
		}
	}
	g.JainMin = 1
	var sum float64
	for _, xs := range served {
		var s, s2 float64
		all := true
		for _, x := range xs {
			s += x
			s2 += x * x
			all = all && x > 0
		}
		if !all {
			continue
		}
		j := s * s / (float64(len(xs)) * s2)
		g.JainMin = min(g.JainMin, j)
		sum += j
		g.Windows++
	}
	if g.Windows > 0 {
		g.JainMean = sum / float64(g.Windows)
	} else {
		g.JainMin = 0
	}
}

// writeGroups adds the per-class and per-tenant rows of the runs that have
// them to a report table.
func writeGroups(b *strings.Builder, runs []Result) {
	for _, p := range runs {
		g := p.Groups
		if g == nil {
			continue
		}
		fmt.Fprintf(b, "\n%gx %s by class and tenant (TTFT in ms; share of the prompt tokens served):\n", p.Speedup, p.Policy)
		for _, gr := range append(slices.Clone(g.Classes), g.Tenants...) {
			if gr.Requests == 0 {
				continue
			}
			fmt.Fprintf(b, "  %-20s requests %6d  completed %6d  rejected %6d  ttft mean %8.1f  p99 %8.1f  share %.3f\n",
				gr.Group, gr.Requests, gr.Completed, gr.Rejected, gr.TTFTMeanMs, gr.TTFTP99Ms, gr.Share)
		}
		if g.Windows > 0 {
			fmt.Fprintf(b, "  Jain's index of the tenants' served tokens ÷ weight: min %.3f, mean %.3f over %d windows\n", g.JainMin, g.JainMean, g.Windows)
		}
	}
}
