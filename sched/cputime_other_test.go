//go:build !unix

package sched

func cpuNanos() int64 { return 0 }
