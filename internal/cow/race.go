//go:build race

package cow

// raceEnabled selects the reader's blocking handshake (see Slice), which
// the race detector can check.
const raceEnabled = true
