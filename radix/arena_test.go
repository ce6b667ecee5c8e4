package radix

import (
	"slices"
	"testing"

	"github.com/kvroute/kvroute/wire"
)

// TestBlockArenaChunks: block ids are dense and stable across chunks; every
// chunk but the last is full, the first grows by doubling from one record,
// and no chunk is ever reallocated once it is full size (growth never
// copies the arena).
func TestBlockArenaChunks(t *testing.T) {
	a := newBlockArena()
	if a.len() != 1 || cap(a.c[0]) != 1 {
		t.Fatalf("new arena: %d records, first chunk cap %d", a.len(), cap(a.c[0]))
	}
	n := 3*blockChunk + 5
	var full []*block // the first record of each full-size chunk when it was made
	for i := 1; i < n; i++ {
		if id := a.push(block{node: uint32(i), off: uint32(2 * i)}); id != uint32(i) {
			t.Fatalf("push %d returned id %d", i, id)
		}
		if last := a.c[len(a.c)-1]; cap(last) == blockChunk && len(full) < len(a.c) {
			full = append(full, &last[0])
		}
	}
	if a.len() != n || len(a.c) != 4 {
		t.Fatalf("%d records in %d chunks, want %d in 4", a.len(), len(a.c), n)
	}
	for i, ch := range a.c {
		if &ch[0] != full[i] {
			t.Fatalf("chunk %d was reallocated after reaching full size", i)
		}
		if i < len(a.c)-1 && (len(ch) != blockChunk || cap(ch) != blockChunk) {
			t.Fatalf("chunk %d: len %d cap %d, want %d", i, len(ch), cap(ch), blockChunk)
		}
	}
	for i := 1; i < n; i++ {
		if b := a.at(uint32(i)); b.node != uint32(i) || b.off != uint32(2*i) {
			t.Fatalf("record %d = %+v", i, b)
		}
	}
	if got, want := a.capBytes(), int64(4*blockChunk)*blockBytes; got != want {
		t.Fatalf("capBytes %d, want %d", got, want)
	}
	if f := a.flat(); len(f) != n || f[n-1].node != uint32(n-1) {
		t.Fatalf("flat: %d records", len(f))
	}
}

// TestCaptureAcrossBlockChunks captures a tree whose block records span
// many chunks while the rest of the build grows the arena by new chunks and
// a removal frees (and the next stores reuse) ids in chunks the capture
// began on: the image is the tree at BeginCapture.
func TestCaptureAcrossBlockChunks(t *testing.T) {
	wl := newWorkload(smallParams, 3)
	half := len(wl.build) / 2
	tr := New()
	for i := range wl.build[:half] {
		mustApply(t, tr, &wl.build[i])
	}
	if tr.blocks.len() < 4*blockChunk {
		t.Fatalf("only %d block records: the test needs several chunks", tr.blocks.len())
	}
	ref := tr.Clone()
	want := sortedDump(ref)
	chunks := len(tr.blocks.c)
	c := tr.BeginCapture()
	buildDuringCapture(tr, c, wl, half)
	if len(tr.blocks.c) <= chunks {
		t.Fatalf("the arena did not grow during the capture (%d chunks)", len(tr.blocks.c))
	}
	if st := c.Stats(); st.BarrierPages == 0 {
		t.Fatalf("the barrier copied no page: %+v", st)
	}
	img := c.Tree()
	checkImage(t, img, ref, want, tr)
	// The image grows on its own (its last chunk came back at its length).
	mustApply(t, img, &wl.build[half])
	if err := img.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestRunArenaPages: chunk addresses are page<<runPageShift | offset, each
// page holds chunks of one class, a class's first page grows by doubling
// from one chunk up to pageBlocks, every later page is made full size, and
// no page is reallocated once full size (growth never copies the arena);
// freed chunks are reused first.
func TestRunArenaPages(t *testing.T) {
	tr := New()
	for _, c := range []uint8{0, 5, 12, 19, 21} { // 1, 6, 96, 768 and 1,536 blocks
		size, full := runSize(c), pageBlocks(c)
		n := 3*full/size + 1 // chunks: three full pages and one more
		seen := map[uint32]bool{}
		fullAt := map[uint32]*wire.BlockHash{} // page → its first element once full size
		pages0 := len(tr.runs.loc)
		var addrs []uint32
		for range n {
			a := tr.allocRun(c)
			pg, off := a>>runPageShift, int(a&runOffMask)
			if seen[a] || off%size != 0 || off+size > len(tr.runs.loc[pg]) || int(pg) < pages0 {
				t.Fatalf("class %d: chunk %#x reused, misaligned or outside its page (len %d)", c, a, len(tr.runs.loc[pg]))
			}
			seen[a] = true
			addrs = append(addrs, a)
			for p := pages0; p < len(tr.runs.loc); p++ {
				pgs := tr.runs.loc[p]
				if cap(pgs) > full {
					t.Fatalf("class %d: page %d capacity %d > %d", c, p, cap(pgs), full)
				}
				if cap(pgs) == full {
					if f, ok := fullAt[uint32(p)]; ok && f != &pgs[:1][0] {
						t.Fatalf("class %d: page %d reallocated after reaching full size", c, p)
					}
					fullAt[uint32(p)] = &pgs[:1][0]
				}
			}
		}
		if pages := len(tr.runs.loc) - pages0; pages != 4 {
			t.Fatalf("class %d: %d chunks in %d pages, want 4", c, n, pages)
		}
		for p := pages0; p < len(tr.runs.loc)-1; p++ {
			if len(tr.runs.loc[p]) != full || len(tr.runs.ids[p]) != full {
				t.Fatalf("class %d: page %d holds %d blocks, want %d", c, p, len(tr.runs.loc[p]), full)
			}
		}
		// Free two chunks: the next allocations take them back, last freed first.
		tr.releaseRun(c, addrs[1])
		tr.releaseRun(c, addrs[n-1])
		if a, b := tr.allocRun(c), tr.allocRun(c); a != addrs[n-1] || b != addrs[1] {
			t.Fatalf("class %d: reallocated %#x, %#x; want %#x, %#x", c, a, b, addrs[n-1], addrs[1])
		}
		if int(tr.runs.live[c]) != n {
			t.Fatalf("class %d: live %d, want %d", c, tr.runs.live[c], n)
		}
	}
	var want int64
	for p := range tr.runs.loc {
		want += int64(cap(tr.runs.loc[p]))*8 + int64(cap(tr.runs.ids[p]))*4
	}
	if got := tr.runs.bytes(); got != want {
		t.Fatalf("bytes %d, want %d", got, want)
	}
}

// buildDuringCapture applies wl.build[half:] to tr while c steps, removing
// wl.keys[0] at the third step (its chunks freed and reused while the
// capture reads them), then the rest after the capture ends.
func buildDuringCapture(tr *Tree, c *Capture, wl *workload, half int) {
	next := half
	for step := 0; !c.Step(2048); step++ {
		if step == 3 {
			tr.RemoveDpRank(wl.keys[0])
		}
		for range 4 {
			if next < len(wl.build) {
				tr.Apply(&wl.build[next]) // parents of the removed key may be missing
				next++
			}
		}
	}
	for ; next < len(wl.build); next++ {
		tr.Apply(&wl.build[next])
	}
}

// checkImage checks a capture's image against ref, the tree's clone at
// BeginCapture (arenas and content, want its sortedDump), and both trees'
// invariants.
func checkImage(t *testing.T, img, ref *Tree, want []string, tr *Tree) {
	t.Helper()
	if err := sameArenas(img, ref); err != nil {
		t.Fatal(err)
	}
	if err := img.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sortedDump(img), want) {
		t.Fatal("image content differs from the tree at BeginCapture")
	}
	if err := tr.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}
