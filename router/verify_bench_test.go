package router

import (
	"testing"

	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/wire"
)

// BenchmarkVerifyEnd measures what checking one proxied request costs the
// router after its answer: the verifier's lock, the window's verdict and
// the decision ring's report (BenchmarkRelayUsage in wire/proxy measures
// reading the usage).
func BenchmarkVerifyEnd(b *testing.B) {
	r := &Router{verify: newVerifier(16, 0), decisions: newDecisionRing(1024, 100, nil)}
	r.cfg.Logger = quietLogger()
	p := &pending{}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		p.id = uint64(i)
		p.dec.Worker = wire.WorkerKey{Worker: uint64(i%16 + 1)}
		p.dec.Overlap = uint32(i % 64)
		c := r.newCheck(p)
		c.usage(int(p.dec.Overlap) * 16)
		r.verifyEnd(c)
	}
}

// BenchmarkDecisionRecord measures what keeping a decision in the ring
// costs the batcher per decision (a lock, the slot, four candidates'
// overlaps).
func BenchmarkDecisionRecord(b *testing.B) {
	d := newDecisionRing(1024, 100, quietLogger())
	p := &pending{local: make([]wire.BlockHash, 128)}
	for i := range 4 {
		p.ovs = append(p.ovs, sched.Overlap{Worker: wire.WorkerKey{Worker: uint64(i + 1)}, Device: uint32(10 * i)})
	}
	dec := sched.Decision{Worker: wire.WorkerKey{Worker: 2}, Overlap: 10}
	b.ReportAllocs()
	for b.Loop() {
		p.id++
		d.record(p, dec, ruleOf(p), true, 1)
	}
}
