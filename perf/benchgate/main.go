// Command benchgate reads a benchstat comparison in CSV form (benchstat
// -format csv old=... new=...) on stdin and exits 1 if any benchmark
// regressed by more than -margin with p < -alpha, printing each
// regression; it exits 0 otherwise, and 2 on unreadable input. It is the
// verdict step of `make bench-gate` (perf/bench-gate.sh).
//
// Worse means larger for time and memory units (sec/op, ns/op, B/op,
// allocs/op and any unit ending in /op) and smaller for rates (units ending
// in /s). A metric that was 0 and is now above 0 (a hot path that starts to
// allocate) is a regression whatever the margin. Other units are ignored.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	margin := flag.Float64("margin", 0.05, "relative change beyond which a significant change is a regression (0.05 = 5%)")
	alpha := flag.Float64("alpha", 0.05, "significance level: only changes with benchstat's p below it count")
	flag.Parse()
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchgate:", err)
		os.Exit(2)
	}
	regs, compared, err := Regressions(in, *margin, *alpha)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchgate:", err)
		os.Exit(2)
	}
	if compared == 0 {
		fmt.Fprintln(os.Stderr, "benchgate: no benchmark was compared (nothing in both old and new)")
		os.Exit(2)
	}
	for _, r := range regs {
		fmt.Println("REGRESSION", r)
	}
	if len(regs) > 0 {
		fmt.Printf("benchgate: %d of %d gated metrics regressed by more than %.0f%% (p < %g)\n", len(regs), compared, *margin*100, *alpha)
		os.Exit(1)
	}
	fmt.Printf("benchgate: %d gated metrics, no regression beyond %.0f%% (p < %g)\n", compared, *margin*100, *alpha)
}
