//go:build chaos

package cluster

import "testing"

// The long run of the kill scenario, for make chaos: more families and
// follow-ups per quality phase, more clients, and more traffic between the
// kills. It prints a `chaos: cluster-kills-long ...` line.
func TestChaosClusterKills(t *testing.T) {
	runKills(t, scenario{name: "cluster-kills-long", families: 8, follow: 10, clients: 3, between: 300})
}
