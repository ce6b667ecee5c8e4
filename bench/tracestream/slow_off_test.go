//go:build !race && !invariants

package tracestream

const slowChecks = false
