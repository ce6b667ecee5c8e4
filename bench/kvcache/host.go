package kvcache

import "github.com/kvroute/kvroute/wire"

// The host tier: a second, larger LRU cache of blocks in host memory behind
// the device, filled by offloading (a block the device evicts is copied to
// the host first, as vLLM's CPU offloading and Dynamo's KVBM do) and read by
// onloading (a prompt's blocks found on the host after its device prefix are
// copied back instead of recomputed). Host copies are announced as Stored
// and Removed events with Tier host, so an index sees both tiers; the
// device's events are unchanged.
//
// Copies are inclusive: an onloaded block stays on the host too. The
// events keep the index exact (package radix's semantics): a block is
// offloaded only while its parent is held in some tier, before its device
// Removed; a host copy evicted while the device does not hold the block
// takes its host descendants with it silently, as the index drops a block
// left in no tier with everything below it (they are all host-only: a
// device block's parent is on the device).

// hostEnt is one host copy. Index 0 of host.ents is the LRU sentinel.
type hostEnt struct {
	engine, local, parent uint64
	hasParent             bool
	prev, next            uint32 // LRU (head = oldest) or free list (next)
	kid, sib, psib        uint32 // first child and sibling links among host copies
}

type host struct {
	capacity int
	ents     []hostEnt
	byHash   table // engine hash -> slot
	byParent table // parent engine hash -> first child slot
	free     uint32
	n        int
}

func newHost(capacity int) *host {
	h := &host{capacity: capacity, ents: make([]hostEnt, 1, capacity+1), byHash: newTable(capacity), byParent: newTable(capacity)}
	return h
}

// HostStats are the host tier's counters (plain data).
type HostStats struct {
	Offloaded uint64 // blocks copied to the host on device eviction
	Onloaded  uint64 // blocks copied back for a prompt
	Evicted   uint64 // host copies evicted (announced)
	Dropped   uint64 // host copies dropped with an evicted ancestor (not announced)
}

// HostHeld returns the blocks held on the host.
func (m *Manager) HostHeld(dst []HeldBlock) []HeldBlock {
	if m.host == nil {
		return dst
	}
	h := m.host
	for i := h.ents[0].next; i != 0; i = h.ents[i].next {
		e := &h.ents[i]
		dst = append(dst, HeldBlock{Engine: wire.EngineHash(e.engine), Local: wire.BlockHash(e.local), Parent: wire.EngineHash(e.parent), HasParent: e.hasParent})
	}
	return dst
}

// MatchTiers returns how many leading blocks of a prompt are on the device
// and how many further ones the host holds (0 without a host tier). It
// changes nothing.
func (m *Manager) MatchTiers(local []wire.BlockHash) (device, host int) {
	device = m.Match(local)
	if m.host == nil || device == len(local) {
		return device, 0
	}
	parent := m.cfg.Salt
	if device > 0 {
		parent = uint64(EngineHash(m.chainAt(local, device), local[device-1]))
	}
	for i := device; i < len(local); i++ {
		eh := uint64(EngineHash(parent, local[i]))
		if m.host.byHash.get(eh) == 0 {
			break
		}
		host++
		parent = eh
	}
	return device, host
}

// chainAt returns the engine hash of block n-2 (the parent of block n-1),
// the chain root for n == 1.
func (m *Manager) chainAt(local []wire.BlockHash, n int) uint64 {
	parent := m.cfg.Salt
	for i := 0; i < n-1; i++ {
		parent = uint64(EngineHash(parent, local[i]))
	}
	return parent
}

// Onload marks the host copies of blocks [from, to) of a prompt as just used
// (so the evictions its allocation causes do not take them) and counts them.
func (m *Manager) Onload(local []wire.BlockHash, from, to int) {
	if m.host == nil || from >= to {
		return
	}
	h := m.host
	parent := m.cfg.Salt
	for i := 0; i < to; i++ {
		eh := uint64(EngineHash(parent, local[i]))
		if i >= from {
			if j := h.byHash.get(eh); j != 0 {
				h.unlinkLRU(j)
				h.pushLRU(j)
				m.hostStats.Onloaded++
			}
		}
		parent = eh
	}
}

// offload copies evicted device block blk to the host (called by pop before
// the device Removed is announced).
func (m *Manager) offload(blk *block) {
	h := m.host
	if j := h.byHash.get(blk.engine); j != 0 {
		h.unlinkLRU(j)
		h.pushLRU(j) // already there: most recently used
		return
	}
	for h.n >= h.capacity {
		m.evictHost()
	}
	if blk.hasParent && m.cache.get(blk.parent) == 0 && h.byHash.get(blk.parent) == 0 {
		return // its parent is in no tier: the index could not place it
	}
	j := h.alloc()
	h.ents[j] = hostEnt{engine: blk.engine, local: blk.local, parent: blk.parent, hasParent: blk.hasParent}
	h.byHash.put(blk.engine, j)
	h.linkChild(j)
	h.pushLRU(j)
	h.n++
	m.hostStats.Offloaded++
	m.closeEvent()
	m.openEventTier(wire.KindStored, wire.TierHost, blk.hasParent, blk.parent)
	m.arena = append(m.arena, wire.Block{Engine: wire.EngineHash(blk.engine), Local: wire.BlockHash(blk.local)})
	m.spans[m.open].n++
	m.closeEvent()
}

// evictHost evicts the host LRU head, announcing it; if the device does not
// hold the block, its host descendants go with it unannounced.
func (m *Manager) evictHost() {
	h := m.host
	j := h.ents[0].next
	e := h.ents[j]
	if m.open < 0 || m.events[m.open].Kind != wire.KindRemoved || m.events[m.open].Tier != wire.TierHost {
		m.closeEvent()
		m.openEventTier(wire.KindRemoved, wire.TierHost, false, 0)
	}
	m.arena = append(m.arena, wire.Block{Engine: wire.EngineHash(e.engine)})
	m.spans[m.open].n++
	m.hostStats.Evicted++
	onDevice := m.cache.get(e.engine) != 0
	h.drop(j)
	if !onDevice {
		m.dropHostKids(e.engine)
	}
}

// dropHostKids drops every host copy below engine hash parent.
func (m *Manager) dropHostKids(parent uint64) {
	h := m.host
	for {
		k := h.byParent.get(parent)
		if k == 0 {
			return
		}
		eh := h.ents[k].engine
		h.drop(k)
		m.hostStats.Dropped++
		m.dropHostKids(eh)
	}
}

func (h *host) alloc() uint32 {
	if h.free != 0 {
		j := h.free
		h.free = h.ents[j].next
		return j
	}
	h.ents = append(h.ents, hostEnt{})
	return uint32(len(h.ents) - 1)
}

// drop removes slot j from every index and frees it.
func (h *host) drop(j uint32) {
	e := &h.ents[j]
	h.unlinkLRU(j)
	h.byHash.del(e.engine)
	h.unlinkChild(j)
	*e = hostEnt{next: h.free}
	h.free = j
	h.n--
}

func (h *host) pushLRU(j uint32) {
	tail := h.ents[0].prev
	h.ents[j].prev, h.ents[j].next = tail, 0
	h.ents[tail].next = j
	h.ents[0].prev = j
}

func (h *host) unlinkLRU(j uint32) {
	e := &h.ents[j]
	h.ents[e.prev].next = e.next
	h.ents[e.next].prev = e.prev
}

// linkChild puts j at the front of its parent's child list.
func (h *host) linkChild(j uint32) {
	e := &h.ents[j]
	if !e.hasParent {
		return
	}
	first := h.byParent.get(e.parent)
	e.sib, e.psib = first, 0
	if first != 0 {
		h.ents[first].psib = j
	}
	h.byParent.put(e.parent, j)
}

func (h *host) unlinkChild(j uint32) {
	e := &h.ents[j]
	if !e.hasParent {
		return
	}
	if e.psib != 0 {
		h.ents[e.psib].sib = e.sib
	} else if e.sib != 0 {
		h.byParent.put(e.parent, e.sib)
	} else {
		h.byParent.del(e.parent)
	}
	if e.sib != 0 {
		h.ents[e.sib].psib = e.psib
	}
}

// reset empties the host tier (Clear: the Cleared event drops every tier).
func (h *host) reset() {
	h.ents = h.ents[:1]
	h.ents[0] = hostEnt{}
	h.byHash.clear()
	h.byParent.clear()
	h.free, h.n = 0, 0
}
