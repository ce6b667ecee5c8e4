//go:build invariants

package replay

// invariants is true when the index, scheduler and block managers check
// their invariants after every mutation (O(size) each): tests shrink or skip
// the replays of real trace sizes.
const invariants = true
