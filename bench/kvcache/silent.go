package kvcache

// ClearSilently empties the cache and ends every sequence as Clear does,
// but announces nothing and takes no event id: a fault of the simulated
// fleet (an engine whose cache is lost without its events), which only the
// engine's cached-token reports reveal to a router.
func (m *Manager) ClearSilently() {
	m.closeEvent()
	for i := range m.seqs {
		m.seqs[i].blocks = m.seqs[i].blocks[:0]
	}
	m.spare = m.spare[:0]
	for i := len(m.seqs) - 1; i >= 0; i-- {
		m.spare = append(m.spare, uint32(i))
	}
	m.seqIdx.clear()
	m.resetBlocks()
	if m.host != nil {
		m.host.reset()
	}
	m.stats.Clears++
	m.check()
}
