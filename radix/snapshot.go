package radix

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"

	"github.com/kvroute/kvroute/wire"
)

// Snapshots: a chunked arena copy (Copier) that lets the owner freeze a
// consistent copy of the tree in bounded steps, and a compact encoding of a
// tree's content (WriteContent / ReadContent). Framing, checksums and
// compression belong to the caller (package shard).

// Copier copies a tree's arenas into another Tree in bounded steps. The
// source must not be mutated until Step reports done; the destination is a
// complete, independent Tree from then on.
type Copier struct {
	src, dst *Tree
	segs     []copySeg
	i, pos   int // current segment and element
}

type copySeg struct {
	n, size int // elements, bytes per element
	fn      func(lo, hi int)
}

// segOf copies src into *dst (reusing its capacity), allocating on the first
// chunk.
func segOf[T any](dst *[]T, src []T, size int) copySeg {
	return copySeg{n: len(src), size: size, fn: func(lo, hi int) {
		if lo == 0 {
			if cap(*dst) >= len(src) {
				*dst = (*dst)[:len(src)]
			} else {
				*dst = make([]T, len(src))
			}
		}
		copy((*dst)[lo:hi], src[lo:hi])
	}}
}

// CopyTo starts copying t into dst, reusing dst's slices where their
// capacity suffices (so a dst kept from the previous snapshot allocates
// nothing). Call Step until it returns true; t must not change meanwhile.
func (t *Tree) CopyTo(dst *Tree) *Copier {
	if t.nodes == nil {
		t.init()
	}
	old := *dst
	*dst = Tree{
		w: t.w, freeNode: t.freeNode, liveNodes: t.liveNodes,
		freeBlock: t.freeBlock, liveBlocks: t.liveBlocks, maxRun: t.maxRun,
		sparse: t.sparse, spFree: t.spFree,
		nodes: old.nodes, sets: old.sets, blocks: old.blocks, runs: old.runs, sp: old.sp,
		children: childTable{e: old.children.e, count: t.children.count},
		slotOf:   make(map[wire.WorkerKey]uint32, len(t.slotOf)),
	}
	dst.runs.runMeta = t.runs.runMeta
	for k, v := range t.slotOf {
		dst.slotOf[k] = v
	}
	dst.freeSlots = append([]uint32(nil), t.freeSlots...)
	dst.slots = make([]slotRec, len(t.slots))
	cp := &Copier{src: t, dst: dst}
	cp.segs = append(cp.segs,
		segOf(&dst.nodes, t.nodes, int(nodeBytes)),
		segOf(&dst.sets, t.sets, 8),
		segOf(&dst.sp, t.sp, 8),
		segOf(&dst.children.e, t.children.e, 16))
	dst.blocks.c = make([][]block, len(t.blocks.c))
	for i, ch := range t.blocks.c {
		if i < len(old.blocks.c) {
			dst.blocks.c[i] = old.blocks.c[i]
		}
		cp.segs = append(cp.segs, segOf(&dst.blocks.c[i], ch, int(blockBytes)))
	}
	dst.runs.loc = make([][]wire.BlockHash, len(t.runs.loc))
	dst.runs.ids = make([][]uint32, len(t.runs.ids))
	for p := range t.runs.loc {
		if p < len(old.runs.loc) {
			dst.runs.loc[p], dst.runs.ids[p] = old.runs.loc[p], old.runs.ids[p]
		}
		cp.segs = append(cp.segs, segOf(&dst.runs.loc[p], t.runs.loc[p], 8), segOf(&dst.runs.ids[p], t.runs.ids[p], 4))
	}
	if t.tiers != nil {
		dst.tiers = old.tiers
		dst.act = make([]uint64, len(t.act))
		cp.segs = append(cp.segs, segOf(&dst.tiers, t.tiers, 8))
	}
	for s := range t.slots {
		src, d := &t.slots[s], &dst.slots[s]
		d.key, d.live, d.size, d.eng.count = src.key, src.live, src.size, src.eng.count
		if src.eng.e != nil {
			cp.segs = append(cp.segs, segOf(&d.eng.ctrl, src.eng.ctrl, 1), segOf(&d.eng.e, src.eng.e, 12))
			dst.pool.live += src.eng.bytes()
		}
	}
	return cp
}

// Step copies about budget bytes (at least one element) and reports whether
// the copy is complete.
func (cp *Copier) Step(budget int) bool {
	for cp.i < len(cp.segs) {
		sg := &cp.segs[cp.i]
		if sg.n == 0 {
			sg.fn(0, 0)
			cp.i++
			continue
		}
		k := max(1, budget/sg.size)
		hi := min(sg.n, cp.pos+k)
		sg.fn(cp.pos, hi)
		budget -= (hi - cp.pos) * sg.size
		cp.pos = hi
		if hi == sg.n {
			cp.i, cp.pos = cp.i+1, 0
		}
		if budget <= 0 {
			break
		}
	}
	return cp.i == len(cp.segs)
}

// Clone returns an independent copy of t in one go.
func (t *Tree) Clone() *Tree {
	dst := &Tree{}
	cp := t.CopyTo(dst)
	for !cp.Step(1 << 30) {
	}
	return dst
}

// Engine-hash modes of one (worker, node) run in the content encoding.
const (
	engLiteral = 0 // the run's engine hashes follow, 8 bytes each
	engSeq     = 1 // engine hash = the block's sequence hash (approximate mode, Dynamo's convention)
	engFirst   = 2 // the same engine hashes as the node's first worker (engines that hash content alike)
	engModes   = 3 // the mode is the low 2 bits of the mode byte
)

// The mode byte's high bits hold the run's tier mask (bit k = wire.Tier k)
// shifted by tierShift, 0 for device only, so content without tiers encodes
// as before tiers existed.
const tierShift = 2

// Content limits a decoder enforces before allocating.
const (
	maxSnapWorkers = 1 << 20
	maxSnapRun     = 1 << 31
)

// ErrCorrupt is wrapped by every ReadContent error caused by the input.
var ErrCorrupt = errors.New("radix: corrupt snapshot content")

// ContentStats counts what a content encoding holds.
type ContentStats struct {
	Workers, Nodes, Blocks, Entries int
	// EngineModes counts (worker, node) runs by engine-hash encoding:
	// literal, sequence hash, same as the node's first worker.
	EngineModes [3]int
}

// WriteContent writes t's content to w (buffer w: it is written in small
// pieces) and returns what it wrote. The encoding, every integer a uvarint
// unless said otherwise:
//
//	workers W, then W × (worker id, dp rank)          dense indexes 0..W-1 in slot order
//	nodes N, blocks B, entries E
//	root's child count
//	N × node in preorder: child count, run length n, worker set (⌈W/8⌉
//	    bytes, bit d = worker d), n × local hash (8 bytes LE)
//	W × for each node holding worker d, in preorder: mode byte (engine
//	    mode in the low 2 bits, the tier mask above them, 0 = device only),
//	    and for mode literal n × engine hash (8 bytes LE)
//
// Parents are implicit in preorder with child counts. Per-worker engine
// hashes in block order, rather than per-block events, keep the structure
// written once however many workers share it.
func (t *Tree) WriteContent(w io.Writer) (ContentStats, error) {
	var st ContentStats
	if t.nodes == nil {
		t.init()
	}
	e := encoder{w: w}
	dense := make([]int, len(t.slots))
	var live []uint32
	for s := range t.slots {
		dense[s] = -1
		if t.slots[s].live {
			dense[s] = len(live)
			live = append(live, uint32(s))
		}
	}
	W := len(live)
	e.uvarint(uint64(W))
	for _, s := range live {
		k := t.slots[s].key
		e.uvarint(k.Worker)
		e.uvarint(uint64(k.Dp))
	}
	// Preorder and each block's sequence hash.
	order := make([]uint32, 0, t.liveNodes-1)
	seqOf := make([]wire.SeqHash, t.blocks.len())
	stack := []uint32{}
	for c := t.nodes[rootID].first; c != 0; c = t.nodes[c].next {
		stack = append(stack, c)
	}
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		order = append(order, x)
		p := t.nodes[x].parent
		var prev wire.SeqHash
		if p != rootID {
			_, pids := t.runOf(p)
			prev = seqOf[pids[len(pids)-1]]
		}
		loc, ids := t.runOf(x)
		for i, id := range ids {
			if p == rootID && i == 0 {
				prev = wire.SeqHash(loc[0])
			} else {
				prev = wire.ChainHash(prev, loc[i])
			}
			seqOf[id] = prev
		}
		for c := t.nodes[x].first; c != 0; c = t.nodes[c].next {
			stack = append(stack, c)
		}
	}
	st.Workers, st.Nodes, st.Blocks = W, len(order), t.liveBlocks
	for _, s := range live {
		st.Entries += int(t.slots[s].eng.count)
	}
	e.uvarint(uint64(st.Nodes))
	e.uvarint(uint64(st.Blocks))
	e.uvarint(uint64(st.Entries))
	e.uvarint(uint64(t.nodes[rootID].nchild))
	setBytes := make([]byte, (W+7)/8)
	wbuf := make([]uint64, t.w)
	for _, x := range order {
		nd := &t.nodes[x]
		e.uvarint(uint64(nd.nchild))
		e.uvarint(uint64(nd.n))
		clear(setBytes)
		for wi, word := range t.setWords(x, wbuf) {
			for word != 0 {
				d := dense[wi*64+bits.TrailingZeros64(word)]
				word &= word - 1
				setBytes[d>>3] |= 1 << (d & 7)
			}
		}
		e.bytes(setBytes)
		loc, _ := t.runOf(x)
		for _, h := range loc {
			e.u64(uint64(h))
		}
	}
	engineOf := make([]wire.EngineHash, t.blocks.len())
	for d, s := range live {
		eng := &t.slots[s].eng
		for i := range eng.e {
			if en := &eng.e[i]; en.val != 0 {
				engineOf[en.val] = en.key()
			}
		}
		for _, x := range order {
			if !t.has(x, s) {
				continue
			}
			_, ids := t.runOf(x)
			mode := t.engineMode(x, s, ids, engineOf, seqOf)
			st.EngineModes[mode]++
			tm := t.maskOf(x, s)
			if tm == devBit {
				tm = 0
			}
			e.byte(byte(mode) | tm<<tierShift)
			if mode == engLiteral {
				for _, id := range ids {
					e.u64(uint64(engineOf[id]))
				}
			}
		}
		_ = d
	}
	return st, e.err
}

func (t *Tree) engineMode(x, s uint32, ids []uint32, engineOf []wire.EngineHash, seqOf []wire.SeqHash) int {
	seq := true
	for _, id := range ids {
		if uint64(engineOf[id]) != uint64(seqOf[id]) {
			seq = false
			break
		}
	}
	if seq {
		return engSeq
	}
	f := t.firstMember(x)
	if f == s {
		return engLiteral
	}
	feng := &t.slots[f].eng
	for _, id := range ids {
		if feng.get(engineOf[id]) != id {
			return engLiteral
		}
	}
	return engFirst
}

func (t *Tree) firstMember(x uint32) uint32 {
	if t.sparse {
		if h0, h1 := spHdr(t.sets, int(x)); spN(h1) > 0 {
			wi, w := t.spPair(h0, h1, 0)
			return wi*64 + uint32(bits.TrailingZeros64(w))
		}
		return 0
	}
	for i, w := range t.setOf(x) {
		if w != 0 {
			return uint32(i*64 + bits.TrailingZeros64(w))
		}
	}
	return 0
}

type encoder struct {
	w   io.Writer
	buf [binary.MaxVarintLen64]byte
	err error
}

func (e *encoder) bytes(b []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(b)
	}
}

func (e *encoder) uvarint(v uint64) { e.bytes(binary.AppendUvarint(e.buf[:0], v)) }
func (e *encoder) u64(v uint64)     { e.bytes(binary.LittleEndian.AppendUint64(e.buf[:0], v)) }
func (e *encoder) byte(b byte)      { e.buf[0] = b; e.bytes(e.buf[:1]) }

// ContentReader is what ReadContent reads from (a bufio.Reader will do).
type ContentReader interface {
	io.Reader
	io.ByteReader
}

type decoder struct {
	r   ContentReader
	err error
	b8  [8]byte
}

func (d *decoder) fail(format string, a ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, a...)...)
	}
}

func (d *decoder) ioErr(err error) {
	if d.err == nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		d.err = fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
}

func (d *decoder) uvarint(what string, limit uint64) uint64 {
	if d.err != nil {
		return 0
	}
	v, err := binary.ReadUvarint(d.r)
	if err != nil {
		d.ioErr(err)
		return 0
	}
	if v > limit {
		d.fail("%s %d exceeds %d", what, v, limit)
		return 0
	}
	return v
}

func (d *decoder) u64() uint64 {
	if d.err != nil {
		return 0
	}
	if _, err := io.ReadFull(d.r, d.b8[:]); err != nil {
		d.ioErr(err)
		return 0
	}
	return binary.LittleEndian.Uint64(d.b8[:])
}

func (d *decoder) readByte() byte {
	if d.err != nil {
		return 0
	}
	b, err := d.r.ReadByte()
	if err != nil {
		d.ioErr(err)
	}
	return b
}

// ReadContent decodes what WriteContent wrote into a new Tree, rebuilding it
// through Apply (so a decoded tree satisfies every invariant whatever the
// input), and checks the counts it declares. Errors wrap ErrCorrupt (or are
// the reader's own errors, wrapped); on error no tree is returned. Counts
// are checked against limits before anything proportional is allocated:
// allocation grows with the bytes actually read.
func ReadContent(r ContentReader) (*Tree, ContentStats, error) {
	var st ContentStats
	d := &decoder{r: r}
	W := int(d.uvarint("workers", maxSnapWorkers))
	keys := make([]wire.WorkerKey, 0, min(W, 1024))
	seen := map[wire.WorkerKey]bool{}
	for range W {
		k := wire.WorkerKey{Worker: d.uvarint("worker id", ^uint64(0)), Dp: uint32(d.uvarint("dp rank", 1<<32-1))}
		if d.err != nil {
			return nil, st, d.err
		}
		if seen[k] {
			d.fail("worker %d/%d listed twice", k.Worker, k.Dp)
			return nil, st, d.err
		}
		seen[k] = true
		keys = append(keys, k)
	}
	N := int(d.uvarint("nodes", 1<<32-2))
	B := int(d.uvarint("blocks", 1<<32-2))
	E := int(d.uvarint("entries", 1<<40))
	setLen := (W + 7) / 8
	// Structure, in preorder.
	type dnode struct {
		parent int32 // preorder index, -1 = root
		off, n uint32
	}
	var nodes []dnode
	var sets []byte
	var locals []wire.BlockHash
	var seqs []wire.SeqHash
	type open struct {
		x    int32
		left uint64
	}
	stack := []open{{x: -1, left: d.uvarint("root children", uint64(N))}}
	for d.err == nil && len(stack) > 0 {
		top := &stack[len(stack)-1]
		if top.left == 0 {
			stack = stack[:len(stack)-1]
			continue
		}
		top.left--
		if len(nodes) == N {
			d.fail("more nodes than the %d declared", N)
			break
		}
		parent := top.x
		nchild := d.uvarint("child count", uint64(N))
		n := d.uvarint("run length", maxSnapRun)
		if d.err != nil {
			break
		}
		if n == 0 {
			d.fail("node %d has an empty run", len(nodes))
			break
		}
		if uint64(len(locals))+n > uint64(B) {
			d.fail("runs hold more than the %d blocks declared", B)
			break
		}
		x := int32(len(nodes))
		nodes = append(nodes, dnode{parent: parent, off: uint32(len(locals)), n: uint32(n)})
		base := len(sets)
		for range setLen {
			sets = append(sets, d.readByte())
		}
		set := sets[base:]
		empty := true
		for i, b := range set {
			if b != 0 {
				empty = false
			}
			if parent >= 0 && b&^sets[int(parent)*setLen+i] != 0 {
				d.fail("node %d holds workers its parent does not", x)
			}
		}
		if W%8 != 0 && setLen > 0 && set[setLen-1]>>(W%8) != 0 {
			d.fail("node %d names a worker beyond %d", x, W)
		}
		if empty {
			d.fail("node %d has no workers", x)
		}
		var prev wire.SeqHash
		if parent >= 0 {
			p := nodes[parent]
			prev = seqs[p.off+p.n-1]
		}
		for i := range n {
			h := wire.BlockHash(d.u64())
			if d.err != nil {
				break // truncated: a declared run must not be filled from nothing
			}
			if parent < 0 && i == 0 {
				prev = wire.SeqHash(h)
			} else {
				prev = wire.ChainHash(prev, h)
			}
			locals = append(locals, h)
			seqs = append(seqs, prev)
		}
		stack = append(stack, open{x: x, left: nchild})
	}
	if d.err == nil && (len(nodes) != N || len(locals) != B) {
		d.fail("%d nodes and %d blocks, %d and %d declared", len(nodes), len(locals), N, B)
	}
	if d.err != nil {
		return nil, st, d.err
	}
	// Engine hashes, worker by worker, applied as one Stored event per
	// (worker, node) run.
	t := New()
	firstEng := make([]wire.EngineHash, len(locals))
	lastEng := make([]wire.EngineHash, len(nodes))
	var blks []wire.Block
	entries := 0
	for wi, k := range keys {
		byteI, bit := wi>>3, byte(1)<<(wi&7)
		for x := range nodes {
			set := sets[x*setLen : (x+1)*setLen]
			if set[byteI]&bit == 0 {
				continue
			}
			first := true
			for i := range byteI {
				if set[i] != 0 {
					first = false
				}
			}
			if set[byteI]&(bit-1) != 0 {
				first = false
			}
			nd := nodes[x]
			blks = blks[:0]
			mb := d.readByte()
			if d.err != nil {
				return nil, st, d.err
			}
			mode, tm := mb&engModes, mb>>tierShift
			if tm == 0 {
				tm = devBit
			}
			if mode > engFirst || (mode == engFirst && first) || tm >= 1<<numTiers {
				d.fail("worker %d, node %d: bad engine mode %d", wi, x, mb)
				return nil, st, d.err
			}
			st.EngineModes[mode]++
			for i := nd.off; i < nd.off+nd.n; i++ {
				var eh wire.EngineHash
				switch mode {
				case engLiteral:
					eh = wire.EngineHash(d.u64())
				case engSeq:
					eh = wire.EngineHash(seqs[i])
				case engFirst:
					eh = firstEng[i]
				}
				if first {
					firstEng[i] = eh
				}
				blks = append(blks, wire.Block{Engine: eh, Local: locals[i]})
			}
			if d.err != nil {
				return nil, st, d.err
			}
			ev := wire.Event{Worker: k, Kind: wire.KindStored, Blocks: blks}
			if nd.parent >= 0 {
				ev.HasParent, ev.Parent = true, lastEng[nd.parent]
			}
			for tier := range wire.Tier(numTiers) {
				if tm&tierBit(tier) == 0 {
					continue
				}
				ev.Tier = tier
				res, err := t.Apply(&ev)
				if err != nil || res.Stored != len(blks) {
					d.fail("worker %d/%d, node %d, tier %v: rebuilding stored %d of %d blocks: %v", k.Worker, k.Dp, x, tier, res.Stored, len(blks), err)
					return nil, st, d.err
				}
			}
			entries += len(blks)
			lastEng[x] = blks[len(blks)-1].Engine
		}
	}
	got := t.Stats()
	if entries != E || got.Entries != E || got.Nodes != N || got.Blocks != B || got.Workers != W {
		d.fail("rebuilt tree has %d nodes, %d blocks, %d entries, %d workers; declared %d, %d, %d, %d (not canonical)",
			got.Nodes, got.Blocks, got.Entries, got.Workers, N, B, E, W)
		return nil, st, d.err
	}
	st.Workers, st.Nodes, st.Blocks, st.Entries = W, N, B, E
	return t, st, nil
}
