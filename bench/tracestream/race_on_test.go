//go:build race

package tracestream

const raceEnabled = true
