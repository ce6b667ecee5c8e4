package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/kvroute/kvroute/router"
)

// verifyFlags are serve's flags of the engine-report check and the
// decision ring (router/verify.go, router/decisions.go).
type verifyFlags struct {
	repair       *time.Duration
	ring, sample *int
}

func addVerifyFlags(fs *flag.FlagSet) *verifyFlags {
	return &verifyFlags{
		repair: fs.Duration("verify-repair-interval", 5*time.Second, "least time between two dumps asked of a worker (through recovery) because its cached-token reports show a stale index or missing events"),
		ring:   fs.Int("decision-ring", 1024, "recent routing decisions kept for the admin listener's /debug/decisions"),
		sample: fs.Int("decision-sample", 100, "one decision in this many is decided with every candidate's cost for /debug/decisions and logged at debug level"),
	}
}

// apply validates the flags into rc.
func (v *verifyFlags) apply(rc *router.Config) error {
	if *v.repair <= 0 {
		return fmt.Errorf("--verify-repair-interval must be > 0 (got %v)", *v.repair)
	}
	if *v.ring < 1 || *v.ring > 1<<20 {
		return fmt.Errorf("--decision-ring must be in [1, 1048576] (got %d)", *v.ring)
	}
	if *v.sample < 1 {
		return fmt.Errorf("--decision-sample must be >= 1 (got %d)", *v.sample)
	}
	rc.VerifyRepairInterval, rc.DecisionRing, rc.DecisionSample = *v.repair, *v.ring, *v.sample
	return nil
}
