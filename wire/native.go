package wire

import (
	"encoding/binary"
	"fmt"
	"unsafe"
)

// The kvroute native batch: fixed-width little-endian fields, every field at
// an offset that is a multiple of its size and every event 8-byte aligned
// relative to the message start, so that on little-endian hosts an event's
// block array can be used in place when the message buffer is 8-byte aligned.
//
//	message: "kv" | version u8 (1) | flags u8 (0) | event count u32 | events
//	event:   kind u8 | tier u8 | flags u8 (bit 0: has parent) | 0 u8 | dp u32
//	         | worker u64 | event id u64 | parent u64 (0 without the flag)
//	         | LoRA length u32 | block count u32
//	         | LoRA bytes, zero-padded to a multiple of 8
//	         | blocks: (engine hash u64, local hash u64) × block count
const (
	nativeVersion     = 1
	nativeHeaderSize  = 8
	nativeEventHeader = 40
	nativeBlockSize   = 16 // = unsafe.Sizeof(Block{})
)

// blockMode is how the native decoder fills Event.Blocks.
type blockMode uint8

const (
	blocksView blockMode = iota // alias the message (little-endian host, aligned buffer); else as blocksCopy
	blocksCopy                  // memmove into the batch's storage (little-endian host); else as blocksLoop
	blocksLoop                  // decode field by field into the batch's storage
)

// nativeMode is the default: a view costs O(1) per event where a copy costs
// O(blocks); see BenchmarkDecodeNative for the measured difference.
const nativeMode = blocksView

// AppendNative appends events as one native batch to dst.
func AppendNative(dst []byte, events []Event) []byte {
	dst = append(dst, 'k', 'v', nativeVersion, 0)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(events)))
	for i := range events {
		e := &events[i]
		var flags byte
		parent := uint64(0)
		if e.HasParent {
			flags, parent = 1, uint64(e.Parent)
		}
		dst = append(dst, byte(e.Kind), byte(e.Tier), flags, 0)
		dst = binary.LittleEndian.AppendUint32(dst, e.Worker.Dp)
		dst = binary.LittleEndian.AppendUint64(dst, e.Worker.Worker)
		dst = binary.LittleEndian.AppendUint64(dst, e.ID)
		dst = binary.LittleEndian.AppendUint64(dst, parent)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(e.LoRA)))
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(e.Blocks)))
		dst = append(dst, e.LoRA...)
		dst = append(dst, zeros[:pad8(len(e.LoRA))-len(e.LoRA)]...)
		for _, bl := range e.Blocks {
			dst = binary.LittleEndian.AppendUint64(dst, uint64(bl.Engine))
			dst = binary.LittleEndian.AppendUint64(dst, uint64(bl.Local))
		}
	}
	return dst
}

func pad8(n int) int { return (n + 7) &^ 7 }

var zeros [8]byte

// DecodeNative decodes a native batch and appends its events to b. Any
// malformation (bad magic or version, a field out of range, a length past the
// end, trailing bytes) fails the whole message and leaves b unchanged. When
// the host is little-endian and msg is 8-byte aligned, Events[i].Blocks alias
// msg instead of the batch's storage.
func DecodeNative(b *Batch, msg []byte) error {
	return decodeNative(b, msg, nativeMode)
}

func decodeNative(b *Batch, msg []byte, mode blockMode) error {
	m := b.mark()
	if err := decodeNativeEvents(b, msg, mode); err != nil {
		b.rollback(m)
		return err
	}
	return nil
}

func decodeNativeEvents(b *Batch, msg []byte, mode blockMode) error {
	if len(msg) < nativeHeaderSize {
		return malformed(fmt.Sprintf("native batch of %d bytes", len(msg)), nil)
	}
	if msg[0] != 'k' || msg[1] != 'v' || msg[2] != nativeVersion || msg[3] != 0 {
		return malformed(fmt.Sprintf("native batch header % x, want 6b 76 %02x 00", msg[:4], nativeVersion), nil)
	}
	count := binary.LittleEndian.Uint32(msg[4:])
	rest := msg[nativeHeaderSize:]
	if uint64(count)*nativeEventHeader > uint64(len(rest)) {
		return malformed(fmt.Sprintf("native batch of %d events in %d bytes", count, len(rest)), nil)
	}
	view := mode == blocksView && isLittleEndian
	copyMem := mode <= blocksCopy && isLittleEndian
	off := nativeHeaderSize
	for i := range int(count) {
		if len(msg)-off < nativeEventHeader {
			return malformed(fmt.Sprintf("native event %d: truncated header", i), nil)
		}
		h := msg[off : off+nativeEventHeader]
		kind, tier, flags := Kind(h[0]), Tier(h[1]), h[2]
		parent := binary.LittleEndian.Uint64(h[24:])
		loraLen := uint64(binary.LittleEndian.Uint32(h[32:]))
		n := uint64(binary.LittleEndian.Uint32(h[36:]))
		switch {
		case kind < KindStored || kind > KindCleared:
			return malformed(fmt.Sprintf("native event %d: kind %d", i, kind), nil)
		case tier > TierExternal:
			return malformed(fmt.Sprintf("native event %d: tier %d", i, tier), nil)
		case flags > 1 || h[3] != 0:
			return malformed(fmt.Sprintf("native event %d: flags %#x %#x", i, flags, h[3]), nil)
		case flags == 1 && kind != KindStored:
			return malformed(fmt.Sprintf("native event %d: parent on a %s event", i, kind), nil)
		case flags == 0 && parent != 0:
			return malformed(fmt.Sprintf("native event %d: parent without its flag", i), nil)
		case kind == KindCleared && n != 0:
			return malformed(fmt.Sprintf("native event %d: cleared with %d blocks", i, n), nil)
		}
		off += nativeEventHeader
		loraEnd := uint64(off) + (loraLen+7)&^7
		blocksEnd := loraEnd + n*nativeBlockSize // < 2^37: no overflow
		if blocksEnd > uint64(len(msg)) {
			return malformed(fmt.Sprintf("native event %d: %d LoRA bytes and %d blocks past the end", i, loraLen, n), nil)
		}
		ev := Event{
			Worker:    WorkerKey{Worker: binary.LittleEndian.Uint64(h[8:]), Dp: binary.LittleEndian.Uint32(h[4:])},
			ID:        binary.LittleEndian.Uint64(h[16:]),
			Kind:      kind,
			Tier:      tier,
			HasParent: flags == 1,
			Parent:    EngineHash(parent),
		}
		if loraLen > 0 {
			ev.LoRA = msg[off : off+int(loraLen) : off+int(loraLen)]
			for _, c := range msg[off+int(loraLen) : loraEnd] {
				if c != 0 {
					return malformed(fmt.Sprintf("native event %d: LoRA padding not zero", i), nil)
				}
			}
		}
		off = int(loraEnd)
		if n > 0 {
			raw := msg[off:blocksEnd]
			switch {
			case view && uintptr(unsafe.Pointer(unsafe.SliceData(raw)))%8 == 0:
				ev.Blocks = unsafe.Slice((*Block)(unsafe.Pointer(unsafe.SliceData(raw))), n)
			case copyMem:
				at := b.growBlocks(int(n))
				dst := b.blocks[at : at+int(n)]
				copy(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(dst))), len(raw)), raw)
				ev.Blocks = b.blocksAt(at, int(n))
			default:
				at := b.growBlocks(int(n))
				dst := b.blocks[at : at+int(n)]
				for j := range dst {
					dst[j] = Block{
						Engine: EngineHash(binary.LittleEndian.Uint64(raw[16*j:])),
						Local:  BlockHash(binary.LittleEndian.Uint64(raw[16*j+8:])),
					}
				}
				ev.Blocks = b.blocksAt(at, int(n))
			}
			off = int(blocksEnd)
		}
		b.Events = append(b.Events, ev)
	}
	if off != len(msg) {
		return malformed(fmt.Sprintf("native batch: %d trailing bytes", len(msg)-off), nil)
	}
	return nil
}
