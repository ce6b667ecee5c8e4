package shard

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/zeebo/xxh3"

	"github.com/kvroute/kvroute/internal/cow"
	"github.com/kvroute/kvroute/radix"
	"github.com/kvroute/kvroute/wire"
)

// Snapshot file format (docs/decisions/0011-snapshot-format.md has the measurements):
//
//	header, 80 bytes, uncompressed, little endian:
//	  magic "KVRSNAP\x00", version u16, flags u16 (0), block size u32,
//	  shards u32, reserved u32, stream sequence u64, then totals over all
//	  shards: nodes, blocks, entries, workers, approximate-mode entries
//	  (u64 each), xxh3 of the preceding 72 bytes (u64)
//	one zstd stream holding, per shard in shard order, a section:
//	  shard id (uvarint), the tree (radix.Tree.WriteContent), the
//	  approximate-mode section, xxh3 of the section's bytes (u64)
//	approximate-mode section: workers AW (uvarint), AW × (worker id, dp
//	  rank); entries M, M × (worker index, sequence hash u64, TTL left in
//	  ns, depth) in expiry order (uvarints unless marked)
const (
	snapMagic = "KVRSNAP\x00"
	// SnapVersion is the snapshot format version written. Version 2 adds
	// storage tiers (the tier mask in the high bits of radix's per-run mode
	// byte); version 1 content is version 2 content without tiers, so both
	// are read.
	SnapVersion   = 2
	snapVersionV1 = 1
	snapHeaderLen = 80
)

// Snapshot errors; every decoding error wraps ErrSnapshot.
var (
	ErrSnapshot = errors.New("shard: bad snapshot")
	// ErrNotEmpty: Restore needs a fresh Index (no worker seen yet).
	ErrNotEmpty = errors.New("shard: restore needs an empty index")
)

// SnapshotHeader is a snapshot's header: a plain value.
type SnapshotHeader struct {
	Version   uint16
	BlockSize uint32 // the engines' block size, 0 if the Index was not told
	Shards    uint32
	StreamSeq uint64 // the last applied stream sequence, as passed to Capture
	// Totals over every shard.
	Nodes, Blocks, Entries, Workers, ApproxEntries uint64
}

func (h *SnapshotHeader) marshal() []byte {
	b := make([]byte, 0, snapHeaderLen)
	b = append(b, snapMagic...)
	b = binary.LittleEndian.AppendUint16(b, h.Version)
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = binary.LittleEndian.AppendUint32(b, h.BlockSize)
	b = binary.LittleEndian.AppendUint32(b, h.Shards)
	b = binary.LittleEndian.AppendUint32(b, 0)
	for _, v := range []uint64{h.StreamSeq, h.Nodes, h.Blocks, h.Entries, h.Workers, h.ApproxEntries} {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return binary.LittleEndian.AppendUint64(b, xxh3.Hash(b))
}

func snapErr(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrSnapshot}, a...)...)
}

// ReadSnapshotHeader reads and checks a snapshot's header.
func ReadSnapshotHeader(r io.Reader) (SnapshotHeader, error) {
	var h SnapshotHeader
	b := make([]byte, snapHeaderLen)
	if n, err := io.ReadFull(r, b); err != nil {
		return h, snapErr("header: read %d of %d bytes: %v", n, snapHeaderLen, err)
	}
	if string(b[:8]) != snapMagic {
		return h, snapErr("not a kvroute snapshot (magic %q)", b[:8])
	}
	h.Version = binary.LittleEndian.Uint16(b[8:])
	if h.Version != SnapVersion && h.Version != snapVersionV1 {
		return h, snapErr("format version %d, this build reads versions %d and %d", h.Version, snapVersionV1, SnapVersion)
	}
	if got, want := xxh3.Hash(b[:72]), binary.LittleEndian.Uint64(b[72:]); got != want {
		return h, snapErr("header checksum mismatch (%016x, header says %016x)", got, want)
	}
	if f := binary.LittleEndian.Uint16(b[10:]); f != 0 {
		return h, snapErr("unknown header flags %#x", f)
	}
	h.BlockSize = binary.LittleEndian.Uint32(b[12:])
	h.Shards = binary.LittleEndian.Uint32(b[16:])
	u := func(i int) uint64 { return binary.LittleEndian.Uint64(b[24+8*i:]) }
	h.StreamSeq, h.Nodes, h.Blocks, h.Entries, h.Workers, h.ApproxEntries = u(0), u(1), u(2), u(3), u(4), u(5)
	if h.Shards == 0 || h.Shards > 1<<16 {
		return h, snapErr("%d shards", h.Shards)
	}
	return h, nil
}

// frozen is one shard's state captured at a consistent point: an
// independent tree and a copy of the approximate-mode entries.
type frozen struct {
	tree    *radix.Tree
	entries []aEntry         // approx.entries copy: a list from entries[0]
	keys    []wire.WorkerKey // approx worker index → key
	now     time.Duration
	nApprox int
}

// capture freezes a Core by copy-on-write: begun at a point of the event
// queue on the Core's goroutine (startCapture), it takes the tree's arenas
// (radix.Capture) and the approximate-mode entries (a cow.Slice) page by
// page. The Core's goroutine copies each page before its first write to it;
// the other pages are either read straight from the Core's arrays by a
// reader goroutine (read: Index.Capture's captures) or copied by the Core's
// goroutine in bounded steps between event steps (step: freeze, and a
// capture the next one finishes first). The frozen state is complete once
// every page is taken.
type capture struct {
	f       frozen
	tc      *radix.Capture
	entries cow.Slice[aEntry]
	budget  int // bytes per copy step
	done    bool
	wt      *waiter // arrived at when done (and by the reader, if any), if set

	// reader is set when a reader goroutine (read) takes the pages the
	// Core's goroutine has not copied; readDone once it has them all.
	reader   bool
	readDone atomic.Bool

	// Pacing (pace): a saturated shard copies perBlock bytes per block of
	// event work applied; earned is that credit so far, copied (the
	// entries' copies; the tree's are tc.CopiedBytes) what the steps and
	// the write barrier used of it.
	perBlock, earned, copied int

	// Measured by the Runner while the capture is in progress (see
	// CaptureStats).
	st CaptureStats
}

// CaptureStats describes one shard's part of a capture (a plain value).
// Durations are wall time on the shard's goroutine, so they include any
// preemption of its thread by the OS.
type CaptureStats struct {
	// Begin is the capture's start at its queue position (the scalar state
	// and the worker table, copied at once).
	Begin time.Duration
	// Steps is the number of background copy steps (at most
	// Config.CaptureStepBytes each) and LongestStep the longest.
	Steps       int
	LongestStep time.Duration
	// EventSteps counts the event steps applied while the capture was in
	// progress; LongestEventStep is the longest of them, write-barrier
	// page copies included.
	EventSteps       int
	LongestEventStep time.Duration
	// Pages is the tree's arena pages at the start (radix.PageBytes each);
	// BarrierPages those copied by the write barrier rather than by steps
	// or the reader. ReadWaits counts the writes that waited for the
	// reader's copy of their page (cow.Slice.ReadWaits: race-detector
	// builds only; otherwise the shard never waits for the reader).
	Pages, BarrierPages, ReadWaits int
}

// entryPageBytes is the copy-on-write page of the approximate-mode entries
// (radix.PageBytes; tests shrink it).
var entryPageBytes = radix.PageBytes

// startCapture begins a capture of the Core as it is now; the Core must not
// be capturing already (c.cap == nil).
func (c *Core) startCapture(budget int) *capture {
	cc := &capture{budget: budget}
	cc.tc = c.tree.BeginCapture()
	a := &c.ax
	cc.f.now, cc.f.nApprox = a.now, a.n
	cc.f.keys = make([]wire.WorkerKey, len(a.workers))
	for i := range a.workers {
		cc.f.keys[i] = a.workers[i].key
	}
	cc.entries.Begin(a.entries, entryPageBytes)
	cc.entries.CountInto(&cc.copied)
	cc.perBlock = DefaultCaptureBytesPerBlock
	a.cw = &cc.entries
	c.cap = cc
	return cc
}

// minCopyStep is the least copy step pace asks for between event steps:
// smaller steps would cost more in hand-offs than they copy.
const minCopyStep = 32 << 10

// pace credits the capture with the copy budget of blocks blocks of event
// work (an event counts as one block at least, as Runner.step counts them)
// and returns the budget of the copy step due now, 0 if none: the credit
// the steps and the write barrier have not used yet, at most a step's
// budget. Pages the events' writes copied first are paid from the same
// credit, so while the barrier copies a lot (right after the start) the
// steps wait.
func (cc *capture) pace(blocks int) int {
	if cc.done { // finished by a Capture's step work: cc may be the encoder's now
		return 0
	}
	cc.earned += blocks * cc.perBlock
	credit := cc.earned - cc.copied - cc.tc.CopiedBytes()
	if credit < min(minCopyStep, cc.budget) {
		return 0
	}
	return min(credit, cc.budget)
}

// step copies about a step's budget of bytes; true when the capture is
// complete (the caller then records its figures and calls arrive).
func (cc *capture) step(c *Core) bool { return cc.stepBytes(c, cc.budget) }

// stepBytes is step with the given budget.
func (cc *capture) stepBytes(c *Core, budget int) bool {
	if cc.done {
		return true
	}
	if !cc.tc.Step(budget) {
		return false
	}
	cc.entries.Step(budget)
	return cc.complete(c)
}

// complete detaches the capture from c once every page is taken (copied,
// or read by the reader) and reports whether it has; on the Core's
// goroutine.
func (cc *capture) complete(c *Core) bool {
	if cc.done {
		return true
	}
	if !cc.entries.Done() || !cc.tc.Complete() {
		return false
	}
	cc.done = true
	if c.ax.cw == &cc.entries {
		c.ax.cw = nil
	}
	if c.cap == cc {
		c.cap = nil
	}
	st := cc.tc.Stats()
	cc.st.Pages, cc.st.BarrierPages = st.Pages, st.BarrierPages+cc.entries.Touched()
	cc.st.ReadWaits = st.ReadWaits + cc.entries.ReadWaits()
	return true
}

// read takes, on a goroutine of its own started after startCapture, every
// page the Core's goroutine has not copied, reading it from the Core's
// arrays (cow's per-page handshake), and assembles the frozen state; then
// rings bell so that the Core's goroutine detaches the capture (complete),
// and arrives at the waiter.
func (cc *capture) read(bell chan struct{}) {
	cc.f.tree = cc.tc.Tree()
	cc.f.entries = cc.entries.Result()
	cc.readDone.Store(true)
	signal(bell)
	cc.arrive()
}

// frozen assembles the copied pages into the frozen state (O(state)), on
// the goroutine that writes the snapshot, after the capture completed.
func (cc *capture) frozen() *frozen {
	if cc.f.tree == nil {
		cc.f.tree = cc.tc.Tree()
		cc.f.entries = cc.entries.Result()
		cc.tc = nil
	}
	return &cc.f
}

// arrive tells the Capture's waiter that this shard's copy is complete:
// the last write to cc on the shard's goroutine.
func (cc *capture) arrive() {
	if cc.wt != nil {
		cc.wt.arrive()
	}
}

// freeze captures the Core in one go (tests, and Cores without a Runner).
func (c *Core) freeze() *frozen {
	if prev := c.cap; prev != nil {
		for !prev.step(c) {
		}
		prev.arrive()
	}
	cc := c.startCapture(1 << 30)
	for !cc.step(c) {
	}
	return cc.frozen()
}

// hashWriter feeds the section checksum and the compressor.
type hashWriter struct {
	h   *xxh3.Hasher
	w   io.Writer
	raw int64
}

func (hw *hashWriter) Write(p []byte) (int, error) {
	hw.h.Write(p)
	hw.raw += int64(len(p))
	return hw.w.Write(p)
}

type countWriter struct {
	w io.Writer
	n int64
}

func (cw *countWriter) Write(p []byte) (int, error) {
	n, err := cw.w.Write(p)
	cw.n += int64(n)
	return n, err
}

// writeSnapshot writes a snapshot of the frozen shards to w and returns the
// bytes written.
func writeSnapshot(w io.Writer, hdr SnapshotHeader, shards []*frozen) (int64, error) {
	hdr.Version, hdr.Shards = SnapVersion, uint32(len(shards))
	for _, f := range shards {
		st := f.tree.Stats()
		hdr.Nodes += uint64(st.Nodes)
		hdr.Blocks += uint64(st.Blocks)
		hdr.Entries += uint64(st.Entries)
		hdr.Workers += uint64(st.Workers)
		hdr.ApproxEntries += uint64(f.nApprox)
	}
	cw := &countWriter{w: w}
	if _, err := cw.Write(hdr.marshal()); err != nil {
		return cw.n, err
	}
	enc, err := zstd.NewWriter(cw, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return cw.n, err
	}
	hw := &hashWriter{h: xxh3.New(), w: enc}
	bw := bufio.NewWriterSize(hw, 64<<10)
	var sum [8]byte
	for i, f := range shards {
		bw.Write(binary.AppendUvarint(nil, uint64(i)))
		if _, err := f.tree.WriteContent(bw); err != nil {
			enc.Close()
			return cw.n, err
		}
		f.writeApprox(bw)
		if err := bw.Flush(); err != nil {
			enc.Close()
			return cw.n, err
		}
		binary.LittleEndian.PutUint64(sum[:], hw.h.Sum64())
		hw.h.Reset()
		if _, err := enc.Write(sum[:]); err != nil {
			enc.Close()
			return cw.n, err
		}
	}
	if err := enc.Close(); err != nil {
		return cw.n, err
	}
	return cw.n, nil
}

func (f *frozen) writeApprox(w *bufio.Writer) {
	var b []byte
	put := func(v uint64) { b = binary.AppendUvarint(b[:0], v); w.Write(b) }
	dense := make([]int32, len(f.keys))
	for i := range dense {
		dense[i] = -1
	}
	var used []wire.WorkerKey
	for e := f.entries[0].next; e != 0; e = f.entries[e].next {
		if wi := f.entries[e].worker; dense[wi] < 0 {
			dense[wi] = int32(len(used))
			used = append(used, f.keys[wi])
		}
	}
	put(uint64(len(used)))
	for _, k := range used {
		put(k.Worker)
		put(uint64(k.Dp))
	}
	put(uint64(f.nApprox))
	for e := f.entries[0].next; e != 0; e = f.entries[e].next {
		en := &f.entries[e]
		put(uint64(dense[en.worker]))
		b = binary.LittleEndian.AppendUint64(b[:0], uint64(en.seq))
		w.Write(b)
		put(uint64(max(0, en.expiry-f.now)))
		put(uint64(en.depth))
	}
}

// hashReader reads the decompressed stream, hashing the bytes consumed.
type hashReader struct {
	r                 io.Reader
	buf               []byte
	pos, end, hashed  int
	h                 *xxh3.Hasher
	consumedBeforeBuf int64
	err               error
}

func (hr *hashReader) fill() error {
	if hr.err != nil {
		return hr.err
	}
	hr.h.Write(hr.buf[hr.hashed:hr.end])
	hr.consumedBeforeBuf += int64(hr.end)
	hr.pos, hr.end, hr.hashed = 0, 0, 0
	for hr.end == 0 {
		n, err := hr.r.Read(hr.buf)
		hr.end = n
		if err != nil {
			hr.err = err
			if n == 0 {
				return err
			}
		}
	}
	return nil
}

func (hr *hashReader) ReadByte() (byte, error) {
	if hr.pos == hr.end {
		if err := hr.fill(); err != nil {
			return 0, err
		}
	}
	b := hr.buf[hr.pos]
	hr.pos++
	return b, nil
}

func (hr *hashReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if hr.pos == hr.end {
		if err := hr.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, hr.buf[hr.pos:hr.end])
	hr.pos += n
	return n, nil
}

// sum returns the hash of the bytes consumed since the last sum and starts
// a new one (the bytes read before the next call to sum are not hashed when
// skip is called first).
func (hr *hashReader) sum() uint64 {
	hr.h.Write(hr.buf[hr.hashed:hr.pos])
	hr.hashed = hr.pos
	s := hr.h.Sum64()
	hr.h.Reset()
	return s
}

func (hr *hashReader) skip() { hr.hashed = hr.pos; hr.h.Reset() }

func (hr *hashReader) consumed() int64 { return hr.consumedBeforeBuf + int64(hr.pos) }

type countReader struct {
	r io.Reader
	n int64
}

func (cr *countReader) Read(p []byte) (int, error) {
	n, err := cr.r.Read(p)
	cr.n += int64(n)
	return n, err
}

// decoded is one shard's state read from a snapshot, not yet installed.
type decoded struct {
	tree    *radix.Tree
	content radix.ContentStats
	ax      approx // ttl and caps unset; expiries relative to 0
}

// SnapshotInfo describes a snapshot read in full (a plain value).
type SnapshotInfo struct {
	Header SnapshotHeader
	// Per shard: the tree's counts, and the approximate-mode entries.
	Shards []radix.ContentStats
	Approx []int
	// Compressed is the file's size in bytes; Raw the decompressed size of
	// the sections (the header excluded).
	Compressed, Raw int64
	// ChecksumsOK is true when the header's and every section's checksums
	// matched (ReadSnapshot returns an error otherwise).
	ChecksumsOK bool
}

// readSnapshot reads and verifies a whole snapshot.
func readSnapshot(r io.Reader) ([]decoded, SnapshotInfo, error) {
	var info SnapshotInfo
	cr := &countReader{r: r}
	hdr, err := ReadSnapshotHeader(cr)
	if err != nil {
		return nil, info, err
	}
	info.Header = hdr
	dec, err := zstd.NewReader(cr, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(64<<20))
	if err != nil {
		return nil, info, err
	}
	defer dec.Close()
	hr := &hashReader{r: dec, buf: make([]byte, 64<<10), h: xxh3.New()}
	var out []decoded
	var tot SnapshotHeader
	for i := range int(hdr.Shards) {
		id, err := binary.ReadUvarint(hr)
		if err != nil {
			return nil, info, snapErr("section %d: %v", i, noEOF(err))
		}
		if id != uint64(i) {
			return nil, info, snapErr("section %d names shard %d", i, id)
		}
		t, cst, err := radix.ReadContent(hr)
		if err != nil {
			return nil, info, snapErr("shard %d: %v", i, err)
		}
		d := decoded{tree: t, content: cst}
		if err := d.readApprox(hr); err != nil {
			return nil, info, snapErr("shard %d: approximate-mode section: %v", i, err)
		}
		got := hr.sum()
		var b [8]byte
		if _, err := io.ReadFull(hr, b[:]); err != nil {
			return nil, info, snapErr("shard %d: checksum: %v", i, noEOF(err))
		}
		hr.skip()
		if want := binary.LittleEndian.Uint64(b[:]); got != want {
			return nil, info, snapErr("shard %d: checksum mismatch (content %016x, stored %016x)", i, got, want)
		}
		tot.Nodes += uint64(cst.Nodes)
		tot.Blocks += uint64(cst.Blocks)
		tot.Entries += uint64(cst.Entries)
		tot.Workers += uint64(cst.Workers)
		tot.ApproxEntries += uint64(d.ax.n)
		info.Shards = append(info.Shards, cst)
		info.Approx = append(info.Approx, d.ax.n)
		out = append(out, d)
	}
	if _, err := hr.ReadByte(); err != io.EOF {
		if err == nil {
			return nil, info, snapErr("data after the last section")
		}
		return nil, info, snapErr("after the last section: %v", err)
	}
	if tot.Nodes != hdr.Nodes || tot.Blocks != hdr.Blocks || tot.Entries != hdr.Entries || tot.Workers != hdr.Workers || tot.ApproxEntries != hdr.ApproxEntries {
		return nil, info, snapErr("sections hold %+v, header says %+v", tot, hdr)
	}
	// Anything after the zstd stream is refused too.
	if n, _ := io.Copy(io.Discard, io.LimitReader(cr, 1)); n != 0 {
		return nil, info, snapErr("data after the compressed stream")
	}
	info.Compressed, info.Raw, info.ChecksumsOK = cr.n, hr.consumed(), true
	return out, info, nil
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

func (d *decoded) readApprox(r radix.ContentReader) error {
	var err error
	get := func(limit uint64) uint64 {
		if err != nil {
			return 0
		}
		var v uint64
		if v, err = binary.ReadUvarint(r); err != nil {
			err = noEOF(err)
			return 0
		}
		if v > limit {
			err = fmt.Errorf("value %d exceeds %d", v, limit)
			return 0
		}
		return v
	}
	a := &d.ax
	a.init(ApproxConfig{}.withDefaults())
	nw := get(1 << 20)
	wis := make([]uint32, 0, min(nw, 1024))
	for range nw {
		k := wire.WorkerKey{Worker: get(^uint64(0)), Dp: uint32(get(1<<32 - 1))}
		if err != nil {
			return err
		}
		if _, dup := a.byKey[k]; dup {
			return fmt.Errorf("worker %d/%d listed twice", k.Worker, k.Dp)
		}
		wis = append(wis, a.worker(k))
	}
	m := get(1 << 32)
	var prev time.Duration
	var b [8]byte
	for i := range m {
		wi := get(uint64(len(wis)))
		if err == nil && wi == uint64(len(wis)) {
			err = fmt.Errorf("entry %d: worker index %d of %d", i, wi, len(wis))
		}
		if err == nil {
			_, err = io.ReadFull(r, b[:])
			err = noEOF(err)
		}
		left := time.Duration(get(1 << 62))
		depth := get(1<<32 - 1)
		if err != nil {
			return err
		}
		if left < prev {
			return fmt.Errorf("entry %d: not in expiry order", i)
		}
		if depth == 0 {
			return fmt.Errorf("entry %d: depth 0", i)
		}
		prev = left
		seq := wire.SeqHash(binary.LittleEndian.Uint64(b[:]))
		w := &a.workers[wis[wi]]
		if _, dup := w.m[seq]; dup {
			return fmt.Errorf("entry %d: worker %d/%d has sequence hash %016x twice", i, w.key.Worker, w.key.Dp, seq)
		}
		e := a.alloc()
		a.entries[e] = aEntry{seq: seq, expiry: left, worker: wis[wi], depth: uint32(depth)}
		a.pushBack(e)
		w.m[seq] = e
		a.n++
	}
	for _, wi := range wis {
		if len(a.workers[wi].m) == 0 {
			return fmt.Errorf("worker %d/%d listed without entries", a.workers[wi].key.Worker, a.workers[wi].key.Dp)
		}
	}
	return nil
}

// install replaces the Core's (empty) state with d, shifting approximate-mode
// expiries to now.
func (c *Core) install(d *decoded, now time.Duration) {
	ax := d.ax
	ax.ttl, ax.max, ax.target = c.ax.ttl, c.ax.max, c.ax.target
	ax.now = max(now, c.ax.now)
	for i := 1; i < len(ax.entries); i++ {
		ax.entries[i].expiry += ax.now
	}
	c.tree, c.ax = d.tree, ax
	if ax.n > ax.max {
		c.prune()
	}
}

// InspectSnapshot reads a whole snapshot, verifying every checksum and
// rebuilding every shard's tree (then dropping it), and describes it.
func InspectSnapshot(r io.Reader) (SnapshotInfo, error) {
	_, info, err := readSnapshot(r)
	return info, err
}

// DefaultCaptureStepBytes bounds the bytes a shard copies per capture step
// (Config.CaptureStepBytes): events and lookups are served between steps.
// 256 KiB is ≈0.1 ms of copying (docs/decisions/0012-copy-on-write-captures.md).
const DefaultCaptureStepBytes = 256 << 10

// DefaultCaptureBytesPerBlock is the copy budget a saturated shard earns
// per block of event work while a capture is in progress
// (Config.CaptureBytesPerBlock; docs/decisions/0012-copy-on-write-captures.md
// has the measurements).
const DefaultCaptureBytesPerBlock = 32

// Capture is a consistent snapshot of every shard in progress or taken: each
// shard freezes its state at its position in its event queue and copies it
// by copy-on-write while it goes on applying events and answering lookups.
// Write it out (WriteTo) on any goroutine; the shards go on.
type Capture struct {
	ix     *Index
	seq    uint64
	shards []*capture
	wt     *waiter
	once   sync.Once
	err    error
}

// Capture starts a snapshot of every shard at its current event-queue
// position and returns without waiting: each shard applies the writes
// queued before the call, then begins a copy-on-write capture of its tree
// and approximate-mode state (O(workers)) and goes on at once with the
// writes queued behind it. Until the copy is complete, each write first
// copies the pages it is about to change (radix.PageBytes each), and the
// shard copies the rest in steps of at most Config.CaptureStepBytes between
// event steps (while events are queued, paced at
// Config.CaptureBytesPerBlock bytes per block applied, the barrier's copies
// included), so neither queue waits for more than a step. A shard still
// copying an earlier capture finishes that one first (in steps, serving
// lookups; the writes behind wait). streamSeq is recorded as the last
// applied stream sequence: for it to be exact, call Capture from the
// goroutine that calls Apply, right after applying that sequence. The
// copies cost as much memory as the index until the Capture is written and
// dropped.
func (ix *Index) Capture(streamSeq uint64) (*Capture, error) {
	if ix.closed.Load() {
		return nil, ErrClosed
	}
	n := len(ix.runners)
	// Each shard arrives at wt once detached, its reader (if any) once it
	// has assembled the shard's frozen state.
	reader := !ix.cfg.CaptureCopySteps
	arrivals := n
	if reader {
		arrivals = 2 * n
	}
	cp := &Capture{ix: ix, seq: streamSeq, shards: make([]*capture, n), wt: newWaiter(arrivals)}
	budget := ix.cfg.CaptureStepBytes
	if budget <= 0 {
		budget = DefaultCaptureStepBytes
	}
	perBlock := ix.cfg.CaptureBytesPerBlock
	if perBlock <= 0 {
		perBlock = DefaultCaptureBytesPerBlock
	}
	for s, r := range ix.runners {
		w := ix.works.get()
		w.kind = wkStep
		w.stepFn = func(c *Core) bool {
			if prev := c.cap; prev != nil {
				if prev.step(c) {
					prev.arrive()
				}
				return false // begin once the earlier capture is complete
			}
			t0 := time.Now()
			cc := c.startCapture(budget)
			cc.wt, cc.perBlock, cc.reader = cp.wt, perBlock, reader
			cp.shards[s] = cc
			if reader {
				go cc.read(r.bell)
			}
			cc.st.Begin = time.Since(t0)
			return true
		}
		if err := r.pushWork(w); err != nil {
			return nil, err
		}
	}
	return cp, nil
}

// Wait waits until every shard has captured its state.
func (cp *Capture) Wait() error {
	cp.once.Do(func() { cp.err = cp.wt.wait(cp.ix.stopped) })
	return cp.err
}

// Stats returns, after Wait, each shard's capture figures: how long it kept
// its queues waiting at the start, in its longest copy step and in its
// longest event step meanwhile.
func (cp *Capture) Stats() ([]CaptureStats, error) {
	if err := cp.Wait(); err != nil {
		return nil, err
	}
	out := make([]CaptureStats, len(cp.shards))
	for i, cc := range cp.shards {
		out[i] = cc.st
	}
	return out, nil
}

// WriteTo waits for the capture and writes the snapshot to w (the header,
// then one zstd stream with a checksummed section per shard), streaming: it
// holds no whole-snapshot buffer. It returns the bytes written.
func (cp *Capture) WriteTo(w io.Writer) (int64, error) {
	if err := cp.Wait(); err != nil {
		return 0, err
	}
	fs := make([]*frozen, len(cp.shards))
	for i, cc := range cp.shards {
		fs[i] = cc.frozen()
	}
	return writeSnapshot(w, SnapshotHeader{BlockSize: uint32(cp.ix.cfg.BlockSize), StreamSeq: cp.seq}, fs)
}

// Snapshot captures every shard (see Capture) and writes the snapshot to w.
func (ix *Index) Snapshot(w io.Writer, streamSeq uint64) error {
	cp, err := ix.Capture(streamSeq)
	if err != nil {
		return err
	}
	_, err = cp.WriteTo(w)
	return err
}

// Restore reads a snapshot written by Snapshot into a fresh Index (no worker
// seen yet; ErrNotEmpty otherwise) with the same number of shards, and
// returns its stream sequence. The whole snapshot is read and verified
// before anything is installed: on any error the Index is left unchanged.
// Approximate-mode entries keep the TTL they had left. Each restored worker
// is assigned to the shard it was on. Call it before feeding the Index.
func (ix *Index) Restore(r io.Reader) (uint64, error) {
	if ix.closed.Load() {
		return 0, ErrClosed
	}
	if ix.assign.Size() != 0 {
		return 0, ErrNotEmpty
	}
	ds, info, err := readSnapshot(r)
	if err != nil {
		return 0, err
	}
	h := info.Header
	if int(h.Shards) != len(ix.runners) {
		return 0, fmt.Errorf("%w: snapshot has %d shards, the index %d", ErrSnapshot, h.Shards, len(ix.runners))
	}
	if h.BlockSize != 0 && ix.cfg.BlockSize != 0 && int(h.BlockSize) != ix.cfg.BlockSize {
		return 0, fmt.Errorf("%w: snapshot block size %d, the index's %d", ErrSnapshot, h.BlockSize, ix.cfg.BlockSize)
	}
	// Worker ids per shard, read before the shards own the trees.
	workerIDs := make([]map[uint64]bool, len(ds))
	for s := range ds {
		workerIDs[s] = map[uint64]bool{}
		for _, o := range ds[s].tree.Workers(nil) {
			workerIDs[s][o.Worker.Worker] = true
		}
		for k := range ds[s].ax.byKey {
			workerIDs[s][k.Worker] = true
		}
	}
	now := time.Since(ix.epoch)
	notEmpty := make([]bool, len(ix.runners))
	if err := ix.ordered(func(s int, c *Core) {
		if c.tree.Stats().Entries != 0 || c.ax.n != 0 {
			notEmpty[s] = true
			return
		}
		c.install(&ds[s], now)
	}); err != nil {
		return 0, err
	}
	if slices.Contains(notEmpty, true) {
		return 0, fmt.Errorf("%w: a shard received work during the restore", ErrNotEmpty)
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for s := range ds {
		for w := range workerIDs[s] {
			if _, ok := ix.assign.Load(w); ok {
				continue
			}
			ix.assign.Store(w, assignment{shard: int32(s), live: true})
			ix.mu.load[s]++
		}
	}
	return h.StreamSeq, nil
}
