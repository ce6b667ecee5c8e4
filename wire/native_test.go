package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"unsafe"
)

func TestBlockLayout(t *testing.T) {
	// The native decoder views (engine u64, local u64) pairs as []Block.
	if unsafe.Sizeof(Block{}) != nativeBlockSize || unsafe.Offsetof(Block{}.Local) != 8 {
		t.Fatalf("Block is %d bytes with Local at %d; the native format needs 16 and 8", unsafe.Sizeof(Block{}), unsafe.Offsetof(Block{}.Local))
	}
}

// alignedCopy returns msg copied to an 8-byte aligned buffer at offset shift.
func alignedCopy(msg []byte, shift int) []byte {
	words := make([]uint64, (len(msg)+shift+7)/8+1)
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
	return append(buf[shift:shift], msg...)
}

func TestNativeRoundTrip(t *testing.T) {
	want := sampleEvents()
	for n := range 10 { // LoRA names of every padding
		want = append(want, Event{Worker: WorkerKey{Worker: 2}, ID: uint64(100 + n), Kind: KindStored,
			LoRA: []byte("abcdefghij"[:n]), Blocks: []Block{{Engine: EngineHash(n), Local: BlockHash(n * n)}}})
	}
	want = append(want, realisticEvents(3)...)
	msg := AppendNative(nil, want)
	for _, mode := range []blockMode{blocksView, blocksCopy, blocksLoop} {
		for _, shift := range []int{0, 1, 4} {
			t.Run(fmt.Sprintf("mode=%d/shift=%d", mode, shift), func(t *testing.T) {
				buf := alignedCopy(msg, shift)
				var b Batch
				if err := decodeNative(&b, buf, mode); err != nil {
					t.Fatal(err)
				}
				checkEvents(t, b.Events, want)
				aliased := 0
				for _, e := range b.Events {
					if len(e.Blocks) > 0 && uintptr(unsafe.Pointer(&e.Blocks[0])) >= uintptr(unsafe.Pointer(&buf[0])) &&
						uintptr(unsafe.Pointer(&e.Blocks[0])) < uintptr(unsafe.Pointer(&buf[0]))+uintptr(len(buf)) {
						aliased++
					}
				}
				if wantView := mode == blocksView && shift == 0 && isLittleEndian; (aliased > 0) != wantView {
					t.Fatalf("%d events alias the message; views expected: %v", aliased, wantView)
				}
			})
		}
	}
}

func TestNativeMalformed(t *testing.T) {
	ev := []Event{{Worker: WorkerKey{Worker: 1}, ID: 1, Kind: KindStored, HasParent: true, Parent: 9, LoRA: []byte("ab"),
		Blocks: []Block{{Engine: 1, Local: 2}}}}
	msg := AppendNative(nil, ev)
	var b Batch
	if err := DecodeNative(&b, msg); err != nil {
		t.Fatal(err)
	}
	before := eventsString(b.Events)
	check := func(name string, m []byte) {
		t.Helper()
		err := DecodeNative(&b, m)
		if err == nil || !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err %v, want ErrMalformed", name, err)
		}
		if eventsString(b.Events) != before {
			t.Fatalf("%s changed the batch", name)
		}
	}
	for i := range len(msg) {
		check(fmt.Sprintf("prefix %d", i), msg[:i])
	}
	check("trailing bytes", append(append([]byte{}, msg...), make([]byte, 8)...))
	set := func(off int, v ...byte) []byte {
		m := append([]byte{}, msg...)
		copy(m[off:], v)
		return m
	}
	const e = nativeHeaderSize // offset of the first event
	check("magic", set(0, 'x'))
	check("version", set(2, 2))
	check("count", set(4, 2))
	check("huge count", set(4, 0xff, 0xff, 0xff, 0xff))
	check("kind 0", set(e, 0))
	check("kind 4", set(e, 4))
	check("tier", set(e+1, 4))
	check("flags", set(e+2, 2))
	check("reserved", set(e+3, 1))
	check("parent without flag", set(e+2, 0))
	check("parent on removed", set(e, byte(KindRemoved)))
	check("cleared with blocks", set(e, byte(KindCleared), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
	check("LoRA past the end", set(e+32, 0xff, 0xff, 0xff, 0x7f))
	check("blocks past the end", set(e+36, 0xff, 0xff, 0xff, 0xff))
	check("LoRA padding", set(e+nativeEventHeader+2, 1))
	huge := AppendNative(nil, nil)
	binary.LittleEndian.PutUint32(huge[4:], 1)
	huge = append(huge, make([]byte, nativeEventHeader)...)
	huge[e] = byte(KindRemoved)
	binary.LittleEndian.PutUint32(huge[e+36:], 1<<32-1)
	check("4G blocks in 48 bytes", huge)
}
