//go:build unix

package router

import "syscall"

// cpuNanos is the process's user+system CPU time: on a shared machine the
// wall time of a benchmark includes waiting for a core, the CPU time does
// not.
func cpuNanos() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
