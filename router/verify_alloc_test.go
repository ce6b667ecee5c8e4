//go:build !race

package router

import (
	"testing"

	"github.com/kvroute/kvroute/wire"
)

// A proxied request's check allocates nothing once its rank is known.
func TestVerifyEndAllocs(t *testing.T) {
	r := &Router{verify: newVerifier(16, 0), decisions: newDecisionRing(1024, 100, nil)}
	r.cfg.Logger = quietLogger()
	p := &pending{}
	p.dec.Worker = wire.WorkerKey{Worker: 3}
	i := 0
	check := func() {
		i++
		p.id, p.dec.Overlap = uint64(i), uint32(i%8)
		c := r.newCheck(p)
		c.usage(i % 8 * 16)
		r.verifyEnd(c)
	}
	check()
	if a := testing.AllocsPerRun(200, check); a != 0 {
		t.Errorf("newCheck + verifyEnd: %v allocs, want 0", a)
	}
}
