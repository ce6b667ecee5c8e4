//go:build race || invariants

package tracestream

// slowChecks: -race or -tags invariants (radix then checks the whole tree
// after every mutation) make the full-trace replay check take minutes.
const slowChecks = true
