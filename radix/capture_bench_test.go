package radix

import "testing"

// BenchmarkApplyCapturing measures what an attached capture costs Apply
// beyond its page copies: the benchmark schedule applied to the benchmark
// fleet with no capture (detached), and with a capture begun whose pages
// have all been copied but which is still attached (copied), so every
// write still calls the barrier and finds nothing to copy.
func BenchmarkApplyCapturing(b *testing.B) {
	benchSetup(b)
	sc := bench.sched
	for _, mode := range []string{"detached", "copied"} {
		b.Run(mode, func(b *testing.B) {
			tr := bench.wl.tree(b, 0)
			for i := range sc.warm {
				if _, err := tr.Apply(&sc.warm[i]); err != nil {
					b.Fatal(err)
				}
			}
			if mode == "copied" {
				c := tr.BeginCapture()
				for i := range c.arenas() { // copy every page without finishing
					for a := c.arena(i); a.Pending() > 0; {
						a.Step(1 << 30)
					}
				}
				defer func() {
					for !c.Step(1 << 30) {
					}
				}()
			}
			applyLoop(b, tr, sc.events)
		})
	}
}
