package kvcache

// ClearSilently empties the cache and ends every sequence as Clear does,
// but announces nothing and takes no event id: a fault of the simulated
// fleet (an engine whose cache is lost without its events), which only the
// engine's cached-token reports reveal to a router.
func (m *Manager) ClearSilently() {
	m.drop()
	m.stats.Clears++
	m.check()
}
