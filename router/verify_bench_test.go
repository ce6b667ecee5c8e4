package router

import (
	"testing"

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
