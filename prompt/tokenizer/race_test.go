//go:build race

package tokenizer

// raceEnabled shortens the slow generic-path checks under -race.
const raceEnabled = true
