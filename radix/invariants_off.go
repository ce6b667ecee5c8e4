//go:build !invariants

package radix

// invariants is off: build with -tags invariants to check the tree after
// every mutation.
const invariants = false
