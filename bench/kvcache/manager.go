package kvcache

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/zeebo/xxh3"

	"github.com/kvroute/kvroute/wire"
)

// EngineSeed seeds the engine block hash; it differs from wire.Seed so engine
// hashes never coincide with the router's local or sequence hashes.
const EngineSeed uint64 = 0x656e67696e65 // "engine"

// Errors.
var (
	ErrNoSpace     = errors.New("kvcache: not enough free blocks")
	ErrUnknownSeq  = errors.New("kvcache: unknown sequence")
	ErrSeqExists   = errors.New("kvcache: sequence already allocated")
	ErrShortHashes = errors.New("kvcache: fewer local hashes than full blocks")
	ErrShrink      = errors.New("kvcache: token count below the sequence's")
)

// Config configures a Manager (plain data, copied by New).
type Config struct {
	Capacity  int            // blocks in the cache (> 0)
	BlockSize int            // tokens per block (> 0)
	Worker    wire.WorkerKey // stamped on every event
	// Salt is the root of the engine hash chain (the "parent" of a first
	// block), like vLLM's per-process NONE_HASH. 0 derives it from Worker, so
	// the same prefix has different engine hashes on different workers and a
	// router must resolve engine hashes per worker.
	Salt uint64
	// HostCapacity > 0 adds a host tier of that many blocks behind the
	// device (see host.go): evicted blocks are offloaded to it and
	// announced with Tier host.
	HostCapacity int
}

// Stats are a Manager's cumulative counters (plain data).
type Stats struct {
	Allocations   uint64 // successful Allocate calls
	Grows         uint64 // successful Grow calls
	NoSpace       uint64 // Allocate/Grow calls that failed with ErrNoSpace
	Frees         uint64 // Free calls that found their sequence
	Preemptions   uint64 // Preempt calls that found their sequence
	Clears        uint64
	ReusedBlocks  uint64 // full blocks taken from the cache instead of computed
	StoredBlocks  uint64 // blocks announced in Stored events
	RemovedBlocks uint64 // blocks announced in Removed events (evictions)
}

// HeldBlock is one cached block as listed by Held (plain data).
type HeldBlock struct {
	Engine    wire.EngineHash
	Local     wire.BlockHash
	Parent    wire.EngineHash // engine hash of the previous block; Salt-rooted chains have HasParent false
	HasParent bool
	Refs      int // sequences using it; 0 = free, kept for reuse until evicted
}

// block is one physical KV block. Index 0 of Manager.blocks is the sentinel
// of the free queue. Pointer-free.
type block struct {
	engine    uint64
	local     uint64
	parent    uint64
	prev      uint32 // free-queue links, valid while refs == 0
	next      uint32
	refs      int32
	hashed    bool // full and registered in the cache map
	hasParent bool
}

// seq is one running sequence.
type seq struct {
	id     uint64
	blocks []uint32 // physical blocks, in position order; capacity is reused
	tokens int
	full   int    // leading blocks that are full and hashed: tokens/BlockSize
	last   uint64 // engine hash of block full-1 (the chain state), Salt when full == 0
}

// plan is the scratch for one allocation: the engine hash of a new full
// block and the cached block that already holds it (0 = none).
type plan struct {
	engine uint64
	target uint32
}

// Manager is one worker's KV block manager, run the way vLLM's prefix-caching
// block pool runs: Capacity blocks of BlockSize tokens; a block that becomes
// full gets an engine hash chained on its parent's and is announced in a
// Stored event; a sequence reuses every full block whose engine hash is
// already cached; blocks are reference counted, and blocks nobody uses stay
// cached in a free queue (LRU, head evicted first) until a new block is
// needed, when the head's eviction is announced in a Removed event. Finished
// sequences release their blocks tail-first, so a sequence's deepest block is
// evicted before its prefix.
//
// Differences from vLLM, deliberate so the event stream describes the cache
// exactly: an engine hash is held by at most one block (a sequence that fills
// a block already cached adopts the cached one instead of keeping a
// duplicate, as vLLM v0's block manager did; vLLM v1 keeps duplicates and
// announces their removal while a copy remains); Clear also drops the running
// sequences (vLLM resets the prefix cache only when idle); and the engine hash
// is computed over the block's local hash rather than its tokens, which names
// the same content without hashing it twice.
//
// Events accumulate in an outbox (Events) until Reset; their ids are
// contiguous from 1 per Manager. Allocate, Grow, Free and Preempt do not
// allocate in steady state.
//
// Not goroutine-safe. The zero value is not usable; use New.
type Manager struct {
	cfg    Config
	blocks []block
	free   int // blocks in the free queue (refs == 0)
	cache  table
	seqIdx table // seq id -> 1 + index in seqs
	seqs   []seq
	spare  []uint32 // indices of unused seqs entries
	plan   []plan

	events    []wire.Event
	spans     []span // Blocks of events[i] is arena[spans[i]]
	arena     []wire.Block
	nextID    uint64
	open      int   // index of the event being built, -1 if none
	host      *host // nil without a host tier
	hostStats HostStats

	stats Stats
}

type span struct{ off, n int }

// New returns an empty Manager.
func New(cfg Config) *Manager {
	if cfg.Capacity <= 0 || cfg.BlockSize <= 0 {
		panic(fmt.Sprintf("kvcache: capacity %d and block size %d must be > 0", cfg.Capacity, cfg.BlockSize))
	}
	if cfg.Capacity >= 1<<31 {
		panic("kvcache: capacity must be < 2^31")
	}
	if cfg.Salt == 0 {
		var b [12]byte
		binary.LittleEndian.PutUint64(b[:8], cfg.Worker.Worker)
		binary.LittleEndian.PutUint32(b[8:], cfg.Worker.Dp)
		cfg.Salt = xxh3.HashSeed(b[:], EngineSeed)
	}
	m := &Manager{
		cfg:    cfg,
		blocks: make([]block, cfg.Capacity+1),
		cache:  newTable(cfg.Capacity),
		seqIdx: newTable(64),
		nextID: 1,
		open:   -1,
	}
	if cfg.HostCapacity > 0 {
		m.host = newHost(cfg.HostCapacity)
		m.host.ents[0].next, m.host.ents[0].prev = 0, 0
	}
	m.resetBlocks()
	return m
}

// HostStats returns the host tier's counters.
func (m *Manager) HostStats() HostStats { return m.hostStats }

// resetBlocks empties every block and queues them all, in index order.
func (m *Manager) resetBlocks() {
	clear(m.blocks)
	m.blocks[0].next, m.blocks[0].prev = 0, 0
	for i := 1; i < len(m.blocks); i++ {
		m.pushBack(uint32(i))
	}
	m.free = len(m.blocks) - 1
	m.cache.clear()
}

// Config returns the configuration, with Salt filled in.
func (m *Manager) Config() Config { return m.cfg }

// EngineHash returns the engine hash of a block with the given local hash
// whose parent block has engine hash parent (use Config().Salt for a first
// block): xxh3-64 with EngineSeed of le(parent) || le(local).
func EngineHash(parent uint64, local wire.BlockHash) wire.EngineHash {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], parent)
	binary.LittleEndian.PutUint64(b[8:], uint64(local))
	return wire.EngineHash(xxh3.HashSeed(b[:], EngineSeed))
}

// Usage returns the blocks in use by sequences and the capacity (vLLM's KV
// usage is used/total). Cached blocks nobody uses count as free.
func (m *Manager) Usage() (used, total int) {
	return m.cfg.Capacity - m.free, m.cfg.Capacity
}

// Stats returns the cumulative counters.
func (m *Manager) Stats() Stats { return m.stats }

// Cached returns the number of cached blocks (used or free).
func (m *Manager) Cached() int { return m.cache.n }

// Sequences returns the number of running sequences.
func (m *Manager) Sequences() int { return m.seqIdx.n }

// Match returns how many leading blocks of a prompt with these local hashes
// are cached. It changes nothing (no LRU touch).
func (m *Manager) Match(local []wire.BlockHash) int {
	parent := m.cfg.Salt
	for i, l := range local {
		h := uint64(EngineHash(parent, l))
		if m.cache.get(h) == 0 {
			return i
		}
		parent = h
	}
	return len(local)
}

// Allocate starts sequence id with its first tokens tokens, whose full blocks
// have local hashes local[:tokens/BlockSize] (longer local is fine: a
// chunked prefill passes the whole prompt's hashes and a partial count). It
// reuses every full block already cached (the cached prefix), allocates the
// rest, including a partial last block, evicting free cached blocks LRU-first
// (Removed), and announces the newly filled blocks (Stored). It returns the
// number of reused blocks. On error nothing changes and no event is emitted:
// ErrSeqExists, ErrShortHashes, or ErrNoSpace when the free blocks cannot
// hold the sequence.
func (m *Manager) Allocate(id uint64, local []wire.BlockHash, tokens int) (reused int, err error) {
	if m.seqIdx.get(id) != 0 {
		return 0, ErrSeqExists
	}
	if tokens/m.cfg.BlockSize > len(local) {
		return 0, ErrShortHashes
	}
	s := m.newSeq(id)
	reused, err = m.extend(s, local, tokens)
	if err != nil {
		m.dropSeq(id)
		return 0, err
	}
	m.stats.Allocations++
	m.check()
	return reused, nil
}

// Grow extends sequence id to tokens tokens (a prefill chunk or decoded
// tokens), local holding the local hashes of at least its first
// tokens/BlockSize blocks (earlier ones are not re-read). Blocks that become
// full are announced (Stored), or replaced by the cached block of the same
// hash. It returns the number of reused blocks. On error nothing changes:
// ErrUnknownSeq, ErrShrink, ErrShortHashes, ErrNoSpace.
func (m *Manager) Grow(id uint64, local []wire.BlockHash, tokens int) (reused int, err error) {
	i := m.seqIdx.get(id)
	if i == 0 {
		return 0, ErrUnknownSeq
	}
	s := &m.seqs[i-1]
	if tokens < s.tokens {
		return 0, ErrShrink
	}
	if tokens/m.cfg.BlockSize > len(local) {
		return 0, ErrShortHashes
	}
	reused, err = m.extend(s, local, tokens)
	if err != nil {
		return 0, err
	}
	m.stats.Grows++
	m.check()
	return reused, nil
}

// Tokens returns the token count of sequence id, and whether it exists.
func (m *Manager) Tokens(id uint64) (int, bool) {
	i := m.seqIdx.get(id)
	if i == 0 {
		return 0, false
	}
	return m.seqs[i-1].tokens, true
}

// extend brings s to tokens tokens. It plans first and mutates only when the
// plan fits, so a failure leaves everything as it was.
func (m *Manager) extend(s *seq, local []wire.BlockHash, tokens int) (int, error) {
	bs := m.cfg.BlockSize
	newFull := tokens / bs
	need := (tokens + bs - 1) / bs
	have := len(s.blocks)

	// Plan positions [s.full, newFull): hash each new full block and look
	// for a cached copy. Cached copies are adopted; our own partial block at
	// such a position (only have-1 can be one) is released.
	m.plan = m.plan[:0]
	parent := s.last
	pops, adoptFree, released, reused := 0, 0, 0, 0
	for i := s.full; i < newFull; i++ {
		h := uint64(EngineHash(parent, local[i]))
		t := m.cache.get(h)
		if t != 0 {
			reused++
			if m.blocks[t].refs == 0 {
				adoptFree++
			}
			if i < have {
				released++
			}
		} else if i >= have {
			pops++
		}
		m.plan = append(m.plan, plan{h, t})
		parent = h
	}
	pops += max(0, need-max(have, newFull)) // a new partial last block
	if pops > m.free-adoptFree+released {
		m.stats.NoSpace++
		return 0, ErrNoSpace
	}

	// 1. Take the adopted blocks out of the free queue first, so the pops
	// below cannot evict them.
	for _, p := range m.plan {
		if p.target != 0 {
			m.ref(p.target)
		}
	}
	// 2. Release own partial blocks replaced by an adopted copy. They hold
	// no hash, so they go to the head: reused before any cached block.
	for i := s.full; i < min(have, newFull); i++ {
		if p := m.plan[i-s.full]; p.target != 0 {
			m.unrefFront(s.blocks[i])
			s.blocks[i] = p.target
		}
	}
	// 3. New positions: adopted blocks, or blocks popped from the free
	// queue head, evicting what they cached (one Removed event).
	for i := have; i < need; i++ {
		if i < newFull {
			if p := m.plan[i-s.full]; p.target != 0 {
				s.blocks = append(s.blocks, p.target)
				continue
			}
		}
		s.blocks = append(s.blocks, m.pop())
	}
	m.closeEvent()
	// 4. Announce the newly filled blocks that were not adopted, one Stored
	// event per run of consecutive ones.
	parent = s.last
	for i := s.full; i < newFull; i++ {
		p := m.plan[i-s.full]
		if p.target != 0 {
			m.closeEvent()
		} else {
			b := s.blocks[i]
			m.store(b, p.engine, uint64(local[i]), parent, i > 0)
		}
		parent = p.engine
	}
	m.closeEvent()
	s.full, s.last, s.tokens = newFull, parent, tokens
	m.stats.ReusedBlocks += uint64(reused)
	return reused, nil
}

// ref adds a user to block b, taking it out of the free queue if it was free.
func (m *Manager) ref(b uint32) {
	blk := &m.blocks[b]
	if blk.refs == 0 {
		m.unlink(b)
		m.free--
	}
	blk.refs++
}

// unref drops a user of block b; a block nobody uses joins the free queue
// tail (most recently used: evicted last).
func (m *Manager) unref(b uint32) {
	blk := &m.blocks[b]
	blk.refs--
	if blk.refs == 0 {
		m.pushBack(b)
		m.free++
	}
}

// unrefFront is unref for a block without a hash: it joins the head.
func (m *Manager) unrefFront(b uint32) {
	blk := &m.blocks[b]
	blk.refs--
	if blk.refs == 0 {
		m.pushFront(b)
		m.free++
	}
}

// pop takes the free queue head for a new block, evicting its content.
func (m *Manager) pop() uint32 {
	b := m.blocks[0].next
	m.unlink(b)
	m.free--
	blk := &m.blocks[b]
	if blk.hashed {
		if m.host != nil {
			m.offload(blk) // copied before the device copy goes
		}
		m.cache.del(blk.engine)
		m.appendBlock(wire.KindRemoved, false, 0, wire.Block{Engine: wire.EngineHash(blk.engine)})
		m.stats.RemovedBlocks++
	}
	*blk = block{refs: 1}
	return b
}

// store registers block b as full with hash engine and announces it.
func (m *Manager) store(b uint32, engine, local, parent uint64, hasParent bool) {
	if !hasParent {
		parent = 0 // the chain root (Salt) is not a block
	}
	blk := &m.blocks[b]
	blk.engine, blk.local, blk.parent, blk.hasParent, blk.hashed = engine, local, parent, hasParent, true
	m.cache.put(engine, b)
	m.appendBlock(wire.KindStored, hasParent, parent,
		wire.Block{Engine: wire.EngineHash(engine), Local: wire.BlockHash(local)})
	m.stats.StoredBlocks++
}

func (m *Manager) unlink(b uint32) {
	blk := &m.blocks[b]
	m.blocks[blk.prev].next = blk.next
	m.blocks[blk.next].prev = blk.prev
	blk.prev, blk.next = 0, 0
}

func (m *Manager) pushBack(b uint32) {
	tail := m.blocks[0].prev
	m.blocks[b].prev, m.blocks[b].next = tail, 0
	m.blocks[tail].next = b
	m.blocks[0].prev = b
}

func (m *Manager) pushFront(b uint32) {
	head := m.blocks[0].next
	m.blocks[b].prev, m.blocks[b].next = 0, head
	m.blocks[head].prev = b
	m.blocks[0].next = b
}

// Free ends sequence id (finished or aborted), releasing its blocks
// tail-first so its deepest block is evicted first. Blocks stay cached until
// evicted; nothing is announced. It reports whether the sequence existed.
func (m *Manager) Free(id uint64) bool {
	if !m.release(id) {
		return false
	}
	m.stats.Frees++
	m.check()
	return true
}

// Preempt is Free for a sequence preempted by recomputation (vLLM frees its
// blocks like a finished one); it is counted apart.
func (m *Manager) Preempt(id uint64) bool {
	if !m.release(id) {
		return false
	}
	m.stats.Preemptions++
	m.check()
	return true
}

func (m *Manager) release(id uint64) bool {
	i := m.seqIdx.get(id)
	if i == 0 {
		return false
	}
	s := &m.seqs[i-1]
	for j := len(s.blocks) - 1; j >= 0; j-- {
		m.unref(s.blocks[j])
	}
	m.dropSeq(id)
	return true
}

func (m *Manager) newSeq(id uint64) *seq {
	var i uint32
	if n := len(m.spare); n > 0 {
		i, m.spare = m.spare[n-1], m.spare[:n-1]
	} else {
		m.seqs = append(m.seqs, seq{})
		i = uint32(len(m.seqs) - 1)
	}
	s := &m.seqs[i]
	*s = seq{id: id, blocks: s.blocks[:0], last: m.cfg.Salt}
	m.seqIdx.put(id, i+1)
	return s
}

func (m *Manager) dropSeq(id uint64) {
	i := m.seqIdx.get(id) - 1
	m.seqIdx.del(id)
	m.seqs[i].blocks = m.seqs[i].blocks[:0]
	m.spare = append(m.spare, i)
}

// Clear empties the cache and ends every sequence (as an engine restart, or
// vLLM's reset_prefix_cache when idle, does), then announces Cleared.
func (m *Manager) Clear() {
	m.drop()
	m.openEvent(wire.KindCleared, false, 0)
	m.closeEvent()
	m.stats.Clears++
	m.check()
}

// drop empties the cache and ends every sequence, announcing nothing.
func (m *Manager) drop() {
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
}

// Held appends to dst every cached block, used or free, in physical block
// order, and returns it.
func (m *Manager) Held(dst []HeldBlock) []HeldBlock {
	for i := 1; i < len(m.blocks); i++ {
		b := &m.blocks[i]
		if b.hashed {
			dst = append(dst, HeldBlock{
				Engine: wire.EngineHash(b.engine), Local: wire.BlockHash(b.local),
				Parent: wire.EngineHash(b.parent), HasParent: b.hasParent, Refs: int(b.refs),
			})
		}
	}
	return dst
}

// Events returns the events emitted since the last Reset, in order. The
// slice and the events' Blocks are valid until Reset.
func (m *Manager) Events() []wire.Event {
	m.closeEvent()
	for i := range m.events {
		sp := m.spans[i]
		m.events[i].Blocks = m.arena[sp.off : sp.off+sp.n : sp.off+sp.n]
	}
	return m.events
}

// Reset empties the outbox, keeping its storage. Event ids continue.
func (m *Manager) Reset() {
	m.closeEvent()
	clear(m.events) // drop Blocks views into the arena
	m.events, m.spans, m.arena = m.events[:0], m.spans[:0], m.arena[:0]
}

// NextEventID returns the id the next event will get.
func (m *Manager) NextEventID() uint64 { return m.nextID }

func (m *Manager) openEvent(kind wire.Kind, hasParent bool, parent uint64) {
	m.openEventTier(kind, wire.TierDevice, hasParent, parent)
}

func (m *Manager) openEventTier(kind wire.Kind, tier wire.Tier, hasParent bool, parent uint64) {
	m.events = append(m.events, wire.Event{
		Worker: m.cfg.Worker, ID: m.nextID, Kind: kind, Tier: tier,
		HasParent: hasParent, Parent: wire.EngineHash(parent),
	})
	m.spans = append(m.spans, span{off: len(m.arena)})
	m.nextID++
	m.open = len(m.events) - 1
}

// appendBlock adds a block to the open event, first opening a new one when
// none is open or the open one is of another kind.
func (m *Manager) appendBlock(kind wire.Kind, hasParent bool, parent uint64, b wire.Block) {
	if m.open < 0 || m.events[m.open].Kind != kind || m.events[m.open].Tier != wire.TierDevice {
		m.closeEvent()
		m.openEvent(kind, hasParent, parent)
	}
	m.arena = append(m.arena, b)
	m.spans[m.open].n++
}

func (m *Manager) closeEvent() { m.open = -1 }
