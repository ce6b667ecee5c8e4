//go:build unix

package radix

import (
	"syscall"
	"testing"
)

// cpuNanos returns the process's CPU time (user + system) in ns. On the
// shared 2-vCPU machine a benchmark's CPU time per op moves far less than its
// wall-clock time, which counts the waits for a core.
func cpuNanos() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// reportCPU adds cpu-ns/op: the CPU time since start over b.N.
func reportCPU(b *testing.B, start int64) {
	if c := cpuNanos() - start; c > 0 && start > 0 && b.N > 0 {
		b.ReportMetric(float64(c)/float64(b.N), "cpu-ns/op")
	}
}
