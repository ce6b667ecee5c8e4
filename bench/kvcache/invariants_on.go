//go:build invariants

package kvcache

// check panics on a broken invariant after every mutation when built with
// the "invariants" tag.
func (m *Manager) check() {
	if err := m.CheckInvariants(); err != nil {
		panic("kvcache: " + err.Error())
	}
}
