//go:build !unix

package router

func cpuNanos() int64 { return 0 }
