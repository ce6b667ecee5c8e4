//go:build unix

package node

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user + system) this process used so far:
// in BenchmarkRemoteLookup the requesters, the in-process nats-server and
// the serving index together. On a shared machine it moves far less than
// wall-clock throughput.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
