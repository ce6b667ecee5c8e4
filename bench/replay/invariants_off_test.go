//go:build !invariants

package replay

// invariants: see invariants_on_test.go.
const invariants = false
