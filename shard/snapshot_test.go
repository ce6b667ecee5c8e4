package shard

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/kvroute/kvroute/internal/cow"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/zeebo/xxh3"
	"golang.org/x/sys/unix"

	"github.com/kvroute/kvroute/radix"

	"github.com/kvroute/kvroute/wire"
)

// eventStrings is an event list's content, sorted: equal trees give equal
// strings whatever their slot and child order.
func eventStrings(evs []wire.Event) []string {
	var out []string
	for _, ev := range evs {
		s := fmt.Sprintf("%d/%d %v p=%v:%x", ev.Worker.Worker, ev.Worker.Dp, ev.Tier, ev.HasParent, ev.Parent)
		for _, b := range ev.Blocks {
			s += fmt.Sprintf(" %x:%x", b.Engine, b.Local)
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

func indexDump(t testing.TB, ix *Index) []string {
	t.Helper()
	evs, err := ix.Dump(nil)
	if err != nil {
		t.Fatal(err)
	}
	return eventStrings(evs)
}

// feed applies random events and approximate-mode decisions to ix (and to
// every other index given), returning the worker ids it used.
func feed(t testing.TB, seed uint64, n int, ixs ...*Index) {
	t.Helper()
	var keys []wire.WorkerKey
	for w := uint64(1); w <= 6; w++ {
		keys = append(keys, wire.WorkerKey{Worker: w}, wire.WorkerKey{Worker: w, Dp: 1})
	}
	g := newEventGen(seed, keys)
	g.tierPct = 25 // snapshots carry storage tiers
	var evs []wire.Event
	for range n {
		evs = g.event(evs[:0])
		for _, ix := range ixs {
			if err := ix.Apply(evs); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Approximate-mode workers 100.., decisions at increasing times.
	r := rand.New(rand.NewPCG(seed, 3))
	base := time.Unix(1_000_000, 0)
	for i := range 50 {
		local := make([]wire.BlockHash, 1+r.IntN(8))
		for j := range local {
			local[j] = wire.BlockHash(r.IntN(4)*100 + j + 1)
		}
		k := wire.WorkerKey{Worker: 100 + uint64(r.IntN(3))}
		for _, ix := range ixs {
			if err := ix.RecordDecisionAt(k, local, wire.SequenceHashes(nil, local), base.Add(time.Duration(i)*time.Second)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func approxBlocks(t testing.TB, ix *Index) int {
	t.Helper()
	st, err := ix.Stats(nil)
	if err != nil {
		t.Fatal(err)
	}
	return Sum(st).ApproxBlocks
}

func TestSnapshotRoundTrip(t *testing.T) {
	for _, shards := range []int{1, 3} {
		t.Run(fmt.Sprint("shards=", shards), func(t *testing.T) {
			ix := newTestIndex(t, Config{Shards: shards, BlockSize: 16})
			feed(t, 7, 400, ix)
			if err := ix.Flush(); err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := ix.Snapshot(&buf, 12345); err != nil {
				t.Fatal(err)
			}
			data := bytes.Clone(buf.Bytes())
			re := newTestIndex(t, Config{Shards: shards, BlockSize: 16})
			seq, err := re.Restore(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			if seq != 12345 {
				t.Fatalf("stream sequence %d, want 12345", seq)
			}
			if err := re.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
			want := indexDump(t, ix)
			if got := indexDump(t, re); !slices.Equal(got, want) || len(want) == 0 {
				t.Fatalf("restored dump differs (%d vs %d events)", len(got), len(want))
			}
			if !slices.ContainsFunc(want, func(s string) bool { return strings.Contains(s, " host ") }) {
				t.Fatal("no host-tier blocks in the snapshot: tiers not exercised")
			}
			for w := uint64(1); w <= 102; w++ {
				a, aok := ix.ShardOf(w)
				b, bok := re.ShardOf(w)
				if a != b || aok != bok {
					t.Fatalf("worker %d: shard %d %v, restored %d %v", w, a, aok, b, bok)
				}
			}
			na := approxBlocks(t, ix)
			if na == 0 || approxBlocks(t, re) != na {
				t.Fatalf("approximate-mode entries %d, restored %d", na, approxBlocks(t, re))
			}
			// Both expire their recorded blocks after the TTL.
			for _, x := range []*Index{ix, re} {
				if _, err := x.Tick(time.Now().Add(DefaultTTL + 200*time.Second)); err != nil {
					t.Fatal(err)
				}
				if n := approxBlocks(t, x); n != 0 {
					t.Fatalf("%d approximate-mode entries left after the TTL", n)
				}
			}
			if !slices.Equal(indexDump(t, ix), indexDump(t, re)) {
				t.Fatal("dumps differ after expiry")
			}
			// The restored index keeps working: the same events give the same trees.
			feed(t, 8, 100, ix, re)
			if !slices.Equal(indexDump(t, ix), indexDump(t, re)) {
				t.Fatal("dumps differ after more events")
			}
			info, err := InspectSnapshot(bytes.NewReader(data))
			if err != nil || !info.ChecksumsOK || info.Header.StreamSeq != 12345 || info.Header.BlockSize != 16 ||
				int(info.Header.Shards) != shards || info.Compressed != int64(len(data)) || info.Header.Entries == 0 {
				t.Fatalf("inspect: %+v %v", info, err)
			}
		})
	}
}

func TestRestoreRefuses(t *testing.T) {
	ix := newTestIndex(t, Config{Shards: 2, BlockSize: 16})
	feed(t, 9, 200, ix)
	var buf bytes.Buffer
	if err := ix.Snapshot(&buf, 1); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	if _, err := ix.Restore(bytes.NewReader(data)); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("restore into a fed index: %v", err)
	}
	if _, err := newTestIndex(t, Config{Shards: 3}).Restore(bytes.NewReader(data)); !errors.Is(err, ErrSnapshot) {
		t.Fatalf("restore into 3 shards: %v", err)
	}
	if _, err := newTestIndex(t, Config{Shards: 2, BlockSize: 32}).Restore(bytes.NewReader(data)); !errors.Is(err, ErrSnapshot) {
		t.Fatalf("restore at another block size: %v", err)
	}
}

// recompress rewrites a snapshot's compressed stream after edit changes the
// raw sections (the header is kept).
func recompress(t *testing.T, data []byte, edit func(raw []byte) []byte) []byte {
	t.Helper()
	dec, err := zstd.NewReader(bytes.NewReader(data[snapHeaderLen:]))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(dec)
	if err != nil {
		t.Fatal(err)
	}
	enc, _ := zstd.NewWriter(nil)
	return append(bytes.Clone(data[:snapHeaderLen]), enc.EncodeAll(edit(raw), nil)...)
}

// TestRestoreCorrupt: every kind of damage gives an ErrSnapshot error that
// says what is wrong, and leaves the index empty and usable.
func TestRestoreCorrupt(t *testing.T) {
	ix := newTestIndex(t, Config{Shards: 2})
	feed(t, 10, 300, ix)
	var buf bytes.Buffer
	if err := ix.Snapshot(&buf, 99); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	flip := func(i int) []byte { b := bytes.Clone(good); b[i] ^= 0x40; return b }
	cases := []struct {
		name, want string
		data       []byte
	}{
		{"bad magic", "not a kvroute snapshot", flip(0)},
		{"wrong version", "format version", func() []byte { b := bytes.Clone(good); b[8] = 9; return b }()},
		{"header byte", "header checksum mismatch", flip(30)},
		{"short header", "header", good[:40]},
		{"truncated", "", good[:len(good)-len(good)/3]},
		{"truncated end", "", good[:len(good)-1]},
		{"compressed byte", "", flip(snapHeaderLen + (len(good)-snapHeaderLen)/2)},
		{"trailing data", "after the last section", append(bytes.Clone(good), 0)},
		{"section checksum", "checksum mismatch", recompress(t, good, func(raw []byte) []byte { raw[len(raw)-1] ^= 1; return raw })},
		{"extra section data", "data after the last section", recompress(t, good, func(raw []byte) []byte { return append(raw, 7) })},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			re := newTestIndex(t, Config{Shards: 2})
			_, err := re.Restore(bytes.NewReader(c.data))
			if !errors.Is(err, ErrSnapshot) {
				t.Fatalf("err %v, want ErrSnapshot", err)
			}
			if c.want != "" && !bytes.Contains([]byte(err.Error()), []byte(c.want)) {
				t.Fatalf("err %q does not say %q", err, c.want)
			}
			t.Log(err)
			st, _ := re.Stats(nil)
			if s := Sum(st); s.Tree.Entries != 0 || s.ApproxBlocks != 0 || re.assign.Size() != 0 {
				t.Fatalf("index not empty after a failed restore: %+v", s.Tree)
			}
			if _, err := re.Restore(bytes.NewReader(good)); err != nil {
				t.Fatalf("restoring the good snapshot afterwards: %v", err)
			}
		})
	}
}

// TestCaptureConsistent: a capture holds exactly the writes queued before
// it, however many are queued after it while its reader takes the pages
// (or, with CaptureCopySteps, while the shard copies them in small steps).
func TestCaptureConsistent(t *testing.T) {
	for _, steps := range []bool{false, true} {
		ix := newTestIndex(t, Config{Shards: 2, CaptureStepBytes: 512, CaptureCopySteps: steps})
		ref := newTestIndex(t, Config{Shards: 2})
		feed(t, 11, 300, ix, ref)
		cp, err := ix.Capture(5)
		if err != nil {
			t.Fatal(err)
		}
		feed(t, 12, 300, ix) // queued behind the capture
		var buf bytes.Buffer
		if _, err := cp.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		st, err := cp.Stats()
		if err != nil {
			t.Fatal(err)
		}
		for s := range st {
			if st[s].Pages == 0 || (st[s].Steps < 2) != !steps {
				t.Fatalf("copy steps %v: shard %d captured %d pages in %d copy steps of 512 bytes", steps, s, st[s].Pages, st[s].Steps)
			}
		}
		t.Logf("copy steps %v: %+v", steps, st)
		re := newTestIndex(t, Config{Shards: 2})
		if _, err := re.Restore(&buf); err != nil {
			t.Fatal(err)
		}
		if want := indexDump(t, ref); !slices.Equal(indexDump(t, re), want) {
			t.Fatalf("copy steps %v: capture differs from the state at its queue position", steps)
		}
		if slices.Equal(indexDump(t, ix), indexDump(t, ref)) {
			t.Fatal("the writes after the capture were not applied")
		}
	}
}

// history applies random operations to a live Core (events with tiers,
// approximate-mode decisions, expiring ticks) and logs them, so that a twin
// fed the log is the live Core frozen at that point.
type history struct {
	t    *testing.T
	live *Core
	log  []func(*Core) // every operation applied to live, in order
	g    *eventGen
	r    *rand.Rand
	now  time.Duration
	evs  []wire.Event
}

func newHistory(t *testing.T, seed, stream uint64) *history {
	var keys []wire.WorkerKey
	for w := uint64(1); w <= 5; w++ {
		keys = append(keys, wire.WorkerKey{Worker: w}, wire.WorkerKey{Worker: w, Dp: 1})
	}
	h := &history{t: t, live: NewCore(CoreConfig{}), g: newEventGen(seed, keys), r: rand.New(rand.NewPCG(seed, stream))}
	h.g.tierPct = 20
	return h
}

// op applies one random operation to the live Core and logs it.
func (h *history) op() {
	var f func(*Core)
	switch p := h.r.IntN(10); {
	case p < 6:
		ev := slices.Clone(h.g.event(h.evs[:0]))
		f = func(c *Core) { c.Apply(ev) }
	case p < 9:
		local := make([]wire.BlockHash, 1+h.r.IntN(8))
		for j := range local {
			local[j] = wire.BlockHash(h.r.IntN(4)*100 + j + 1)
		}
		k := wire.WorkerKey{Worker: 100 + uint64(h.r.IntN(3))}
		h.now += time.Duration(h.r.IntN(3)) * time.Second
		at := h.now
		f = func(c *Core) {
			if err := c.RecordDecision(k, local, wire.SequenceHashes(nil, local), at); err != nil {
				h.t.Fatal(err)
			}
		}
	default:
		h.now += 10 * time.Second
		at := h.now
		f = func(c *Core) { c.Tick(at) }
	}
	h.log = append(h.log, f)
	f(h.live)
}

// twin returns a new Core fed every logged operation.
func (h *history) twin() *Core {
	twin := NewCore(CoreConfig{})
	for _, f := range h.log {
		f(twin)
	}
	return twin
}

// TestCaptureCopyOnWrite: a Core captured while events, decisions and
// expiries keep being applied between its copy steps (one approximate-mode
// entry per page, so every entry write meets the barrier) writes the very
// snapshot that a twin Core, fed the same operations up to the capture point
// and frozen there, writes; and that snapshot restores. Over random
// histories; with -tags invariants radix also checks each tree capture
// against a Clone taken at its start.
func TestCaptureCopyOnWrite(t *testing.T) {
	defer func(p int) { entryPageBytes = p }(entryPageBytes)
	entryPageBytes = 1
	for seed := range uint64(6) {
		h := newHistory(t, seed, 5)
		live, r, op := h.live, h.r, h.op
		barrier := 0
		for round := range 4 {
			for range 150 {
				op()
			}
			cc := live.startCapture(1 + r.IntN(4096))
			twin := h.twin()
			want := snapBytes(t, twin.freeze())
			steps := 0
			for !cc.step(live) {
				steps++
				for range r.IntN(4) {
					op()
				}
			}
			if live.cap != nil || live.ax.cw != nil || live.tree.Capturing() {
				t.Fatal("capture still attached after completion")
			}
			if got := snapBytes(t, cc.frozen()); !bytes.Equal(got, want) {
				t.Fatalf("seed %d round %d: capture differs from the twin frozen at the capture point", seed, round)
			}
			re := newTestIndex(t, Config{})
			if _, err := re.Restore(bytes.NewReader(want)); err != nil {
				t.Fatal(err)
			}
			if err := live.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
			barrier += cc.entries.Touched()
			t.Logf("seed %d round %d: %d steps, %d approximate-mode pages by barrier", seed, round, steps, cc.entries.Touched())
		}
		if barrier == 0 {
			t.Fatal("no approximate-mode entry was copied by the barrier")
		}
	}
}

// TestCaptureReader: a Core captured under events, decisions and expiries
// while a reader goroutine takes the pages it has not copied (capture.read,
// as Index.Capture does; one approximate-mode entry per page) writes the
// very snapshot that a twin frozen at the capture point writes, and the
// capture detaches once the reader is through. Under -race this also checks
// that the Core never writes a page the reader is copying.
func TestCaptureReader(t *testing.T) {
	defer func(p int) { entryPageBytes = p }(entryPageBytes)
	entryPageBytes = 1
	barrier := 0
	for seed := range uint64(6) {
		h := newHistory(t, seed, 6)
		live, op := h.live, h.op
		for round := range 4 {
			for range 300 {
				op()
			}
			twin := h.twin()
			want := snapBytes(t, twin.freeze())
			cc := live.startCapture(DefaultCaptureStepBytes)
			cc.reader = true
			bell := make(chan struct{}, 1)
			go cc.read(bell)
			steps := 0
			for !cc.readDone.Load() || !cc.complete(live) {
				op()
				steps++
			}
			if live.cap != nil || live.ax.cw != nil || live.tree.Capturing() {
				t.Fatal("capture still attached after completion")
			}
			<-bell
			if got := snapBytes(t, cc.frozen()); !bytes.Equal(got, want) {
				t.Fatalf("seed %d round %d: capture differs from the twin frozen at the capture point", seed, round)
			}
			if err := live.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
			barrier += cc.st.BarrierPages
			t.Logf("seed %d round %d: %d operations while capturing, %d of %d tree pages and %d entries by the barrier, %d waits for the reader",
				seed, round, steps, cc.tc.Stats().BarrierPages, cc.st.Pages, cc.entries.Touched(), cc.st.ReadWaits)
		}
	}
	if barrier == 0 {
		t.Fatal("the barrier never copied a page")
	}
}

// TestCapturePacing: under saturation a capture copies no more than the
// budget its events earned (perBlock bytes per block, the write barrier's
// copies included) plus one step, asks for no copy step smaller than
// minCopyStep, and still completes; the image equals a twin frozen at the
// capture point.
func TestCapturePacing(t *testing.T) {
	const perBlock, budget, workers, chain, tail = 64, 64 << 10, 32, 2048, 16
	r := rand.New(rand.NewPCG(21, 1))
	live, twin := NewCore(CoreConfig{}), NewCore(CoreConfig{})
	// Each worker holds a chain of its own blocks; churn removes a random
	// worker's tail and stores it again, writing all over the arenas.
	blockOf := func(w, i int) wire.Block {
		return wire.Block{Engine: wire.EngineHash(w<<32 | i + 1), Local: wire.BlockHash(uint64(w)<<40 | uint64(i) + 7)}
	}
	for w := range workers {
		ev := wire.Event{Worker: wire.WorkerKey{Worker: uint64(w)}, Kind: wire.KindStored}
		for i := range chain {
			ev.Blocks = append(ev.Blocks, blockOf(w, i))
		}
		live.Apply([]wire.Event{ev})
		twin.Apply([]wire.Event{ev})
	}
	churn := func() []wire.Event {
		w, at := r.IntN(workers), chain-tail
		k := wire.WorkerKey{Worker: uint64(w)}
		rm := wire.Event{Worker: k, Kind: wire.KindRemoved}
		st := wire.Event{Worker: k, Kind: wire.KindStored, HasParent: true, Parent: blockOf(w, at-1).Engine}
		for i := at; i < at+tail; i++ {
			rm.Blocks = append(rm.Blocks, blockOf(w, i))
			st.Blocks = append(st.Blocks, blockOf(w, i))
		}
		return []wire.Event{rm, st}
	}
	var evs []wire.Event
	want := snapBytes(t, twin.freeze())
	cc := live.startCapture(budget)
	cc.perBlock = perBlock
	blocks, steps, copySteps := 0, 0, 0
	for done := false; !done; steps++ {
		evs = churn()
		n := 0
		for _, ev := range evs {
			n += 1 + len(ev.Blocks)
		}
		live.Apply(evs)
		blocks += n
		if b := cc.pace(n); b > 0 {
			if b < minCopyStep || b > budget {
				t.Fatalf("copy step of %d bytes asked (min %d, budget %d)", b, minCopyStep, budget)
			}
			done = cc.stepBytes(live, b)
			copySteps++
		}
		// Steps copy whole pages: at most one page beyond what they were given.
		if stepped := int(cc.tc.Stats().SteppedBytes); !done && stepped > blocks*perBlock+radix.PageBytes {
			t.Fatalf("after %d blocks of events the steps copied %d bytes, budget %d", blocks, stepped, blocks*perBlock)
		}
		if steps > 1e6 {
			t.Fatal("capture never completed")
		}
	}
	total := cc.copied + cc.tc.CopiedBytes()
	if got := snapBytes(t, cc.frozen()); !bytes.Equal(got, want) {
		t.Fatal("paced capture differs from the twin frozen at the capture point")
	}
	if blocks*perBlock < total-budget || cc.st.Pages < 100 || copySteps < 5 {
		t.Fatalf("capture of %d bytes (%d pages) completed after %d blocks in %d copy steps: paced at %d bytes per block", total, cc.st.Pages, blocks, copySteps, perBlock)
	}
	t.Logf("%d bytes copied over %d event steps (%d blocks) and %d copy steps, %d of %d pages by the barrier", total, steps, blocks, copySteps, cc.st.BarrierPages, cc.st.Pages)
}

func snapBytes(t *testing.T, f *frozen) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := writeSnapshot(&buf, SnapshotHeader{StreamSeq: 1}, []*frozen{f}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestCaptureClosed(t *testing.T) {
	ix := newTestIndex(t, Config{})
	ix.Close()
	if _, err := ix.Capture(1); !errors.Is(err, ErrClosed) {
		t.Fatalf("capture after close: %v", err)
	}
	if _, err := ix.Restore(bytes.NewReader(nil)); !errors.Is(err, ErrClosed) {
		t.Fatalf("restore after close: %v", err)
	}
}

// FuzzReadSnapshot: arbitrary input never panics; what reads back is a set
// of valid trees.
func FuzzReadSnapshot(f *testing.F) {
	ix := newTestIndex(f, Config{Shards: 2})
	feed(f, 13, 30, ix)
	var buf bytes.Buffer
	if err := ix.Snapshot(&buf, 3); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	empty := newTestIndex(f, Config{})
	buf.Reset()
	empty.Snapshot(&buf, 0)
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		ds, _, err := readSnapshot(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrSnapshot) {
				t.Fatalf("error does not wrap ErrSnapshot: %v", err)
			}
			return
		}
		for _, d := range ds {
			if err := d.tree.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
			if err := d.ax.check(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// fleet builds radix's benchmark fleet (radix/workload_test.go, benchParams:
// 64 worker keys, 16 families, 32 conversations per family, ≈1.3M entries)
// as Stored events, generated the same way. Each worker hashes with its own
// seed (vLLM without PYTHONHASHSEED: kvcache.Config.Salt 0).
func fleet(seed uint64) []wire.Event { return fleetSalted(seed, 0) }

// fleetSalted is fleet with every worker's engine hashes derived from salt
// when it is not 0, so the same block has the same engine hash on every
// worker (engines that hash content with a shared seed: vLLM with
// PYTHONHASHSEED set, SGLang; kvcache.Config.Salt shared).
func fleetSalted(seed, salt uint64) []wire.Event {
	const workers, families, convs, famPerWorker, convPerFamily = 64, 16, 32, 10, 8
	r := rand.New(rand.NewPCG(seed, 7))
	between := func(lo, hi int) int { return lo + r.IntN(hi-lo+1) }
	famLen := make([]int, families)
	for f := range famLen {
		famLen[f] = between(32, 256)
	}
	convLen := make([][]int, families)
	for f := range convLen {
		convLen[f] = make([]int, convs)
		for c := range convLen[f] {
			convLen[f][c] = between(64, 512)
		}
	}
	skewed := func(n int) int { u := r.Float64(); return int(float64(n) * u * u) }
	mix := func(x uint64) uint64 {
		x += 0x9E3779B97F4A7C15
		x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
		x = (x ^ (x >> 27)) * 0x94D049BB133111EB
		return x ^ (x >> 31)
	}
	var out []wire.Event
	stored := func(k wire.WorkerKey, hasParent bool, parent wire.EngineHash, seq wire.SeqHash, kind, a, b, c, n int) (wire.EngineHash, wire.SeqHash) {
		ev := wire.Event{Worker: k, Kind: wire.KindStored, HasParent: hasParent, Parent: parent}
		for i := range n {
			h := wire.BlockHash(mix(uint64(kind)<<60 ^ uint64(a)<<44 ^ uint64(b)<<32 ^ uint64(c)<<20 ^ uint64(i)))
			if !hasParent && i == 0 {
				seq = wire.SeqHash(h)
			} else {
				seq = wire.ChainHash(seq, h)
			}
			ws := mix(k.Worker<<8 | uint64(k.Dp))
			if salt != 0 {
				ws = salt
			}
			ev.Blocks = append(ev.Blocks, wire.Block{Engine: wire.EngineHash(mix(uint64(seq) ^ ws)), Local: h})
		}
		out = append(out, ev)
		return ev.Blocks[n-1].Engine, seq
	}
	pick := func(n, of int) []int {
		m := map[int]bool{}
		for len(m) < n {
			m[skewed(of)] = true
		}
		ks := make([]int, 0, n)
		for k := range m {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		return ks
	}
	for w := range workers {
		k := wire.WorkerKey{Worker: uint64(1000 + w/2), Dp: uint32(w % 2)}
		for _, f := range pick(famPerWorker, families) {
			fe, fseq := stored(k, false, 0, 0, 1, f, 0, 0, famLen[f])
			for _, c := range pick(convPerFamily, convs) {
				held := max(1, convLen[f][c]*(1+r.IntN(4))/4)
				ce, cseq := stored(k, true, fe, fseq, 2, f, c, 0, held)
				if n := between(0, 128); n > 0 {
					stored(k, true, ce, cseq, 3, w, f, c, n)
				}
			}
		}
	}
	return out
}

// fleetIndex returns an Index holding the fleet.
func fleetIndex(tb testing.TB, cfg Config) *Index { return fleetIndexSalted(tb, cfg, 0) }

// fleetIndexSalted returns an Index holding fleetSalted(1, salt).
func fleetIndexSalted(tb testing.TB, cfg Config, salt uint64) *Index {
	ix := newTestIndex(tb, cfg)
	evs := fleetSalted(1, salt)
	for i := 0; i < len(evs); i += 64 {
		if err := ix.Apply(evs[i:min(len(evs), i+64)]); err != nil {
			tb.Fatal(err)
		}
	}
	if err := ix.Flush(); err != nil {
		tb.Fatal(err)
	}
	return ix
}

// BenchmarkSnapshot measures, on the benchmark fleet (≈1.3M entries, one
// shard): writing a snapshot (bytes per entry after compression), restoring
// it, a one-go arena copy, and a capture's longest step.
func BenchmarkSnapshot(b *testing.B) {
	ix := fleetIndex(b, Config{})
	var buf bytes.Buffer
	if err := ix.Snapshot(&buf, 1); err != nil {
		b.Fatal(err)
	}
	data := bytes.Clone(buf.Bytes())
	info, err := InspectSnapshot(bytes.NewReader(data))
	if err != nil {
		b.Fatal(err)
	}
	entries := float64(info.Header.Entries)
	b.Logf("%+v modes %v", info.Header, info.Shards[0].EngineModes)
	b.Run("write", func(b *testing.B) {
		for b.Loop() {
			buf.Reset()
			if err := ix.Snapshot(&buf, 1); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(data))/entries, "B/entry")
		b.ReportMetric(float64(info.Raw)/entries, "rawB/entry")
	})
	// The same fleet with engines hashing content with a shared seed: a
	// block's engine hash is the same on every worker holding it.
	b.Run("write-shared-seed", func(b *testing.B) {
		sx := fleetIndexSalted(b, Config{}, 0x5eed)
		var sbuf bytes.Buffer
		for b.Loop() {
			sbuf.Reset()
			if err := sx.Snapshot(&sbuf, 1); err != nil {
				b.Fatal(err)
			}
		}
		si, err := InspectSnapshot(bytes.NewReader(sbuf.Bytes()))
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("%+v modes %v", si.Header, si.Shards[0].EngineModes)
		b.ReportMetric(float64(si.Compressed)/float64(si.Header.Entries), "B/entry")
		b.ReportMetric(float64(si.Raw)/float64(si.Header.Entries), "rawB/entry")
	})
	b.Run("restore", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			re := newTestIndex(b, Config{})
			b.StartTimer()
			if _, err := re.Restore(bytes.NewReader(data)); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			re.Close()
			b.StartTimer()
		}
		b.ReportMetric(entries, "entries")
	})
	b.Run("clone", func(b *testing.B) {
		for b.Loop() {
			ix.runners[0].Do(func(c *Core) { c.tree.Clone() })
		}
	})
	// The stalls a capture causes on the shard's goroutine, measured there
	// as the Runner interleaves them (capture-stalls: event steps of fleet
	// churn, each followed by the copy step capture.pace makes due, until
	// the copy is complete), in wall time (which includes preemption by
	// other processes on a shared machine) and the thread's CPU time: the
	// capture's start, its longest copy step, and the longest event step
	// while it runs (write-barrier copies included) against the longest
	// without a capture. perBlock=256 is about the pacing before budgets (a
	// 256 KiB step after every 4 event steps of 256 blocks). reader is
	// Index.Capture's capture: no copy steps, a reader goroutine takes the
	// pages the shard has not copied (capture.read).
	churn := fleetChurn(fleet(1), 2)
	churnBlocks := make([]int, len(churn))
	for j, batch := range churn {
		for _, ev := range batch {
			churnBlocks[j] += 1 + len(ev.Blocks)
		}
	}
	for _, perBlock := range []int{0, 256, 64, 32, 16} {
		for _, pool := range []bool{true, false} {
			name := fmt.Sprintf("capture-stalls/perBlock=%d/pool=%v", perBlock, pool)
			if perBlock == 0 {
				name = fmt.Sprintf("capture-stalls/reader/pool=%v", pool)
			}
			b.Run(name, func(b *testing.B) {
				cow.SetPoolingForTesting(pool)
				defer cow.SetPoolingForTesting(true)
				captureStalls(b, ix, churn, churnBlocks, perBlock)
			})
		}
	}
}

// captureStalls is BenchmarkSnapshot/capture-stalls: captures at perBlock,
// each between two halves of as many event steps without a capture (the
// baseline, interleaved so that the machine's drift hits both alike: a
// baseline window only after the captures read 5–15% faster than one only
// before them, which the garbage collection of the previous capture's
// assembly slows), and followed by the assembly of the copied pages, as
// Capture.WriteTo does (off the shard in a real snapshot; it returns pooled
// page buffers; its thread CPU time is assembly-cpu-ms). perBlock 0 is
// Index.Capture's reader instead: a goroutine that takes the pages the
// shard has not copied and assembles them while the shard applies events
// (its thread CPU time is assembly-cpu-ms; read-waits counts the writes
// that waited for its copy of their page).
func captureStalls(b *testing.B, ix *Index, churn [][]wire.Event, churnBlocks []int, perBlock int) {
	var begin, copyStep, ev, base stall
	steps, barrier, pages, waits := 0, 0, 0, 0
	var secondHalf, firstQuarter, assembly time.Duration
	secondN, firstN, prevN := 0, 0, 1024
	for b.Loop() {
		var cc *capture
		assembled := make(chan time.Duration, 1)
		assemble := func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			c0 := threadCPU()
			if cc.reader {
				cc.read(make(chan struct{}, 1))
			} else {
				cc.frozen()
			}
			assembled <- threadCPU() - c0
		}
		ix.runners[0].Do(func(c *Core) {
			runtime.LockOSThread() // the thread CPU clock follows the goroutine
			defer runtime.UnlockOSThread()
			i := 0
			for range 16 { // warm up, untimed
				c.Apply(churn[i%len(churn)])
				i++
			}
			for range prevN / 2 { // half the baseline before, half after
				base.time(func() { c.Apply(churn[i%len(churn)]) })
				i++
			}
			begin.time(func() {
				cc = c.startCapture(DefaultCaptureStepBytes)
				if perBlock == 0 {
					cc.reader = true
					go assemble()
				}
			})
			cc.perBlock = max(perBlock, 1)
			n := 0
			for done := false; !done; n++ {
				ev.time(func() { c.Apply(churn[i%len(churn)]) })
				if cc.reader { // as the Runner does
					done = cc.readDone.Load() && cc.complete(c)
					i++
					continue
				}
				budget := cc.pace(churnBlocks[i%len(churn)])
				i++
				if budget > 0 { // as the Runner does under saturation
					copyStep.time(func() { done = cc.stepBytes(c, budget) })
					steps++
				}
			}
			for _, d := range ev.cpu[len(ev.cpu)-n/2:] {
				secondHalf += d
			}
			secondN += n / 2
			for _, d := range ev.cpu[len(ev.cpu)-n : len(ev.cpu)-n+n/4] {
				firstQuarter += d
			}
			firstN += n / 4
			prevN = n
			for range n / 2 {
				base.time(func() { c.Apply(churn[i%len(churn)]) })
				i++
			}
			barrier, pages = cc.st.BarrierPages, cc.st.Pages
			waits += cc.st.ReadWaits
		})
		if !cc.reader {
			assemble()
		}
		assembly += <-assembled
	}
	// A saturated shard's event throughput while capturing,
	// relative to without: CPU per event step without a capture
	// against CPU per event step plus the copy steps and the
	// start, amortized over the capture's event steps.
	during := sum(begin.cpu) + sum(copyStep.cpu) + sum(ev.cpu)
	perEvent := float64(sum(base.cpu)) / float64(len(base.cpu))
	b.ReportMetric(perEvent/(float64(during)/float64(len(ev.cpu))), "ingest-ratio")
	// The same over a fixed window of 4,096 event steps from each capture's
	// start (≈0.15–0.2 s of saturated ingest; every capture here ends
	// within it), so that captures of different lengths compare: a short
	// capture's cost is not spread over fewer steps.
	const window = 4096
	if len(ev.cpu) <= window*len(begin.cpu) {
		extra := (float64(during) - perEvent*float64(len(ev.cpu))) / float64(len(begin.cpu))
		b.ReportMetric(window*perEvent/(window*perEvent+extra), "ingest-ratio-4096steps")
	}
	// The capture's own CPU (start, steps, and what event steps
	// took beyond the mean without a capture: barrier copies, cache
	// misses), and the event steps it spanned, per capture.
	n := float64(len(begin.cpu))
	b.ReportMetric((float64(during)-perEvent*float64(len(ev.cpu)))/n/1e6, "copy-cpu-ms")
	b.ReportMetric(float64(len(ev.cpu))/n, "event-steps")
	begin.report(b, "begin")
	if len(copyStep.cpu) > 0 {
		copyStep.report(b, "step")
	}
	ev.report(b, "event")
	base.report(b, "event-nocapture")
	b.ReportMetric(float64(steps)/float64(b.N), "steps")
	b.ReportMetric(float64(barrier), "barrier-pages")
	b.ReportMetric(float64(assembly)/n/1e6, "assembly-cpu-ms")
	b.ReportMetric(float64(waits)/n, "read-waits")
	b.ReportMetric(float64(pages), "pages")
	mean := func(ds []time.Duration) float64 { return float64(sum(ds)) / float64(len(ds)) / 1e3 }
	b.ReportMetric(mean(ev.cpu), "µs-event-cpu-mean")
	b.ReportMetric(mean(base.cpu), "µs-event-nocapture-cpu-mean")
	b.ReportMetric(float64(secondHalf)/float64(secondN)/1e3, "µs-event-cpu-mean-2nd-half")
	b.ReportMetric(float64(firstQuarter)/float64(firstN)/1e3, "µs-event-cpu-mean-1st-quarter")
}

func sum(ds []time.Duration) (t time.Duration) {
	for _, d := range ds {
		t += d
	}
	return t
}

// stall records timed calls, in wall and thread CPU time.
type stall struct{ wall, cpu []time.Duration }

func (s *stall) time(f func()) {
	w0, c0 := time.Now(), threadCPU()
	f()
	s.wall, s.cpu = append(s.wall, time.Since(w0)), append(s.cpu, threadCPU()-c0)
}

// report reports the longest wall and CPU time and the CPU time's 99th and
// 99.9th percentiles.
func (s *stall) report(b *testing.B, name string) {
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	slices.Sort(s.wall)
	slices.Sort(s.cpu)
	b.ReportMetric(us(s.wall[len(s.wall)-1]), "µs-"+name+"-wall-max")
	b.ReportMetric(us(s.cpu[len(s.cpu)-1]), "µs-"+name+"-cpu-max")
	b.ReportMetric(us(s.cpu[len(s.cpu)*99/100]), "µs-"+name+"-cpu-p99")
	b.ReportMetric(us(s.cpu[len(s.cpu)*999/1000]), "µs-"+name+"-cpu-p99.9")
}

// fleetChurn returns batches of about DefaultStepBlocks blocks (one event
// step) that remove a fleet leaf event's blocks and store them again:
// writes spread over the fleet workers' engine tables, blocks and runs, as
// eviction and re-prefill do, so that a capture's write barrier meets pages
// all over the arenas. Each batch leaves the tree as it found it.
func fleetChurn(evs []wire.Event, seed uint64) [][]wire.Event {
	r := rand.New(rand.NewPCG(seed, 9))
	type key struct {
		w wire.WorkerKey
		h wire.EngineHash
	}
	parents := map[key]bool{}
	for _, ev := range evs {
		if ev.HasParent {
			parents[key{ev.Worker, ev.Parent}] = true
		}
	}
	var leaves []wire.Event
	for _, ev := range evs {
		if ev.HasParent && len(ev.Blocks) <= DefaultStepBlocks/2 && !parents[key{ev.Worker, ev.Blocks[len(ev.Blocks)-1].Engine}] {
			leaves = append(leaves, ev)
		}
	}
	var out [][]wire.Event
	for range 512 {
		var batch []wire.Event
		for n := 0; n < DefaultStepBlocks; {
			ev := leaves[r.IntN(len(leaves))]
			if slices.ContainsFunc(batch, func(e wire.Event) bool { return e.Worker == ev.Worker && e.Parent == ev.Parent }) {
				continue
			}
			rm := wire.Event{Worker: ev.Worker, Kind: wire.KindRemoved, Blocks: ev.Blocks}
			batch = append(batch, rm, ev)
			n += 2 * len(ev.Blocks)
		}
		out = append(out, batch)
	}
	return out
}

func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// BenchmarkMatchDuringSnapshots: Match latency and event throughput on the
// fleet index under fleet churn (fleetChurn: each batch evicts and re-stores
// fleet blocks all over the arenas), with no snapshots, with captures taken
// back to back (Capture then Wait: the shard's share of a snapshot), and
// with whole snapshots back to back (capture, then encode to io.Discard on
// another goroutine). Reports the longest stalls the captures caused on the
// shard (CaptureStats, wall time) over all of them.
func BenchmarkMatchDuringSnapshots(b *testing.B) {
	evs := fleet(1)
	churn := fleetChurn(evs, 3)
	for _, mode := range []string{"none", "captures", "snapshots"} {
		b.Run("mode="+mode, func(b *testing.B) {
			ix := fleetIndex(b, Config{})
			load := makeLoad(32, 256, 64)
			var stop atomic.Bool
			var wg sync.WaitGroup
			var writes atomic.Int64
			var snaps atomic.Int64
			var worst CaptureStats
			wg.Go(func() {
				for i := 0; !stop.Load(); i++ {
					ix.Apply(churn[i%len(churn)])
					writes.Add(int64(len(churn[i%len(churn)])))
				}
			})
			if mode != "none" {
				wg.Go(func() {
					for !stop.Load() {
						cp, err := ix.Capture(1)
						if err != nil {
							return
						}
						if mode == "snapshots" {
							if _, err := cp.WriteTo(io.Discard); err != nil {
								return
							}
						}
						st, err := cp.Stats()
						if err != nil {
							return
						}
						for _, s := range st {
							worst.Begin = max(worst.Begin, s.Begin)
							worst.LongestStep = max(worst.LongestStep, s.LongestStep)
							worst.LongestEventStep = max(worst.LongestEventStep, s.LongestEventStep)
							worst.BarrierPages = max(worst.BarrierPages, s.BarrierPages)
						}
						snaps.Add(1)
					}
				})
			}
			lat := latencies{s: make([]time.Duration, 0, 1<<16), rng: 88172645463325252}
			var ov []radix.Overlap
			i := 0
			for b.Loop() {
				h := load.probes[i%len(load.probes)]
				if i%2 == 0 {
					h = evsHashes(evs[i%len(evs)])
				}
				t0 := time.Now()
				ov, _ = ix.Match(ov[:0], h)
				lat.add(time.Since(t0))
				i++
			}
			stop.Store(true)
			wg.Wait()
			lat.report(b)
			b.ReportMetric(float64(slices.Max(lat.s).Nanoseconds()), "max-ns")
			b.ReportMetric(float64(writes.Load())/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(snaps.Load()), "snapshots")
			if mode != "none" {
				b.ReportMetric(float64(worst.Begin.Microseconds()), "µs-begin-max")
				b.ReportMetric(float64(worst.LongestStep.Microseconds()), "µs-step-max")
				b.ReportMetric(float64(worst.LongestEventStep.Microseconds()), "µs-event-step-max")
			}
		})
	}
}

func evsHashes(ev wire.Event) []wire.BlockHash {
	h := make([]wire.BlockHash, 0, len(ev.Blocks))
	for _, b := range ev.Blocks {
		h = append(h, b.Local)
	}
	return h
}

// TestRestoreVersion1: a version-1 snapshot (before storage tiers; its
// content is version-2 content without tier masks) still restores.
func TestRestoreVersion1(t *testing.T) {
	ix := newTestIndex(t, Config{Shards: 2, BlockSize: 16})
	keys := []wire.WorkerKey{{Worker: 1}, {Worker: 2}}
	g := newEventGen(11, keys)
	var evs []wire.Event
	for range 200 {
		evs = g.event(evs[:0])
		if err := ix.Apply(evs); err != nil {
			t.Fatal(err)
		}
	}
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := ix.Snapshot(&buf, 7); err != nil {
		t.Fatal(err)
	}
	data := bytes.Clone(buf.Bytes())
	binary.LittleEndian.PutUint16(data[8:], 1)
	binary.LittleEndian.PutUint64(data[72:], xxh3.Hash(data[:72]))
	re := newTestIndex(t, Config{Shards: 2, BlockSize: 16})
	if _, err := re.Restore(bytes.NewReader(data)); err != nil {
		t.Fatalf("version 1: %v", err)
	}
	if want := indexDump(t, ix); !slices.Equal(indexDump(t, re), want) || len(want) == 0 {
		t.Fatal("version-1 restore differs")
	}
}
