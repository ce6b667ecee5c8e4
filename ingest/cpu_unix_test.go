//go:build unix

package ingest

import (
	"syscall"
	"testing"
	"time"
)

// cpuMeter measures the process's CPU time (user + system: the publisher,
// the in-process nats-server and the consumer together) over a benchmark.
// On a shared machine it moves far less than wall-clock throughput, and on
// a dedicated, saturated 2-vCPU box it is what bounds the throughput.
type cpuMeter struct{ start time.Duration }

func cpuNow() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func startCPU() cpuMeter { return cpuMeter{start: cpuNow()} }

// report adds the metric cpu-ns/event: process CPU time per event.
func (m cpuMeter) report(b *testing.B, events int) {
	if events > 0 {
		b.ReportMetric(float64(cpuNow()-m.start)/float64(events), "cpu-ns/event")
	}
}
