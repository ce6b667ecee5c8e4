//go:build !race

package tracestream

const raceEnabled = false
