//go:build invariants

package radix

// invariants makes every mutation end with CheckInvariants (and panic on a
// violation). Build with -tags invariants.
const invariants = true
