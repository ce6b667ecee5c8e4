//go:build !invariants

package shard

const invariantsEnabled = false
