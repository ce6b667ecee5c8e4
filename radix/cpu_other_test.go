//go:build !unix

package radix

import "testing"

func cpuNanos() int64 { return 0 }

func reportCPU(*testing.B, int64) {}
