//go:build invariants

package shard

// invariantsEnabled makes Core check its approximate-mode bookkeeping after
// every mutation (O(entries) each: tests only). CI runs once with
// -tags invariants.
const invariantsEnabled = true
