package plane

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/kvroute/kvroute/wire"
)

// Replica sync (--router-replica-sync): every router replica publishes the
// bookings its scheduler makes, in batches, on SyncSubject, and applies the
// other replicas' to its own scheduler. A message is
//
//	version   byte (SyncVersion)
//	flags     byte (bit 0: the replica is leaving; drop its bookings)
//	router    uvarint length + bytes (the replica's --router-id, ≤ MaxSyncRouterLen)
//	instance  8 bytes little-endian (drawn at start: a restart under the same id is a new instance)
//	seq       uvarint (message number of this instance, from 1; a gap means messages were lost)
//	count     uvarint (items)
//	items     count × item
//
// and an item is a kind byte followed by
//
//	SyncBook:        id, worker, dp, isl, overlap, prefill tokens (uvarints),
//	                 block count (uvarint), blocks (8 bytes little-endian each)
//	SyncPrefillDone: id (uvarint)
//	SyncFree:        id (uvarint)
//	SyncSession:     session, worker, dp, blocks (uvarints)
//
// A replica that does not know SyncSession refuses the whole message, so
// replicas are upgraded before clients send session headers.
//
// A message with no items is a heartbeat: a replica publishes at least one
// per SyncExpiry/3, and the others drop all of a replica's bookings when
// they have heard nothing from it for SyncExpiry.

// SyncVersion is the version byte of replica-sync messages.
const SyncVersion = 1

// MaxSyncRouterLen bounds the router id in a sync message.
const MaxSyncRouterLen = 256

// SyncKind is the kind of one replica-sync item.
type SyncKind uint8

// Replica-sync item kinds.
const (
	// SyncBook: a request was routed and its load booked on Worker.
	SyncBook SyncKind = iota + 1
	// SyncPrefillDone: the request's first token came back.
	SyncPrefillDone
	// SyncFree: the request ended.
	SyncFree
	// SyncSession: a session (ID) was bound to Worker by its latest turn
	// of ISL prompt blocks.
	SyncSession
)

const syncLeaving = 1

// SyncSubject returns the subject of replica sync in the namespace and
// component of s: "namespace.<ns>.component.<comp>.router.sync".
func SyncSubject(s Subjects) string {
	base := strings.TrimSuffix(s.Heartbeat, "workers.heartbeat")
	return base + "router.sync"
}

// SyncHeader is the header of a sync message.
type SyncHeader struct {
	Router   string
	Instance uint64
	Seq      uint64
	Leaving  bool
}

// SyncItem is one decoded item. Blocks is set for SyncBook only.
type SyncItem struct {
	Kind          SyncKind
	ID            uint64
	Worker        wire.WorkerKey
	ISL           uint32
	Overlap       uint32
	PrefillTokens uint32
	Blocks        []wire.SeqHash
}

// SyncMessage is a decoded sync message. Items and their Blocks are owned
// by the message (nothing aliases the decoded bytes).
type SyncMessage struct {
	SyncHeader
	Items []SyncItem
}

// SyncWriter accumulates items for the next message. The zero value is
// ready; it is not safe for concurrent use. Appending allocates nothing
// once its buffer has grown to the usual batch size.
type SyncWriter struct {
	body []byte
	n    int
}

// Book appends a SyncBook item.
func (w *SyncWriter) Book(id uint64, k wire.WorkerKey, isl, overlap, prefillTokens uint32, blocks []wire.SeqHash) {
	b := append(w.body, byte(SyncBook))
	b = binary.AppendUvarint(b, id)
	b = binary.AppendUvarint(b, k.Worker)
	b = binary.AppendUvarint(b, uint64(k.Dp))
	b = binary.AppendUvarint(b, uint64(isl))
	b = binary.AppendUvarint(b, uint64(overlap))
	b = binary.AppendUvarint(b, uint64(prefillTokens))
	b = binary.AppendUvarint(b, uint64(len(blocks)))
	for _, h := range blocks {
		b = binary.LittleEndian.AppendUint64(b, uint64(h))
	}
	w.body = b
	w.n++
}

// Session appends a SyncSession item: session's latest turn, of blocks
// prompt blocks, went to k.
func (w *SyncWriter) Session(session uint64, k wire.WorkerKey, blocks uint32) {
	b := append(w.body, byte(SyncSession))
	b = binary.AppendUvarint(b, session)
	b = binary.AppendUvarint(b, k.Worker)
	b = binary.AppendUvarint(b, uint64(k.Dp))
	w.body = binary.AppendUvarint(b, uint64(blocks))
	w.n++
}

// Op appends a SyncPrefillDone or SyncFree item.
func (w *SyncWriter) Op(kind SyncKind, id uint64) {
	w.body = binary.AppendUvarint(append(w.body, byte(kind)), id)
	w.n++
}

// Items is the number of items appended since the last Reset.
func (w *SyncWriter) Items() int { return w.n }

// Size is the encoded size of the items appended since the last Reset.
func (w *SyncWriter) Size() int { return len(w.body) }

// Reset empties the writer, keeping its buffer.
func (w *SyncWriter) Reset() { w.body, w.n = w.body[:0], 0 }

// AppendMessage appends a message with header h and the writer's items
// to dst. It does not reset the writer.
func (w *SyncWriter) AppendMessage(dst []byte, h SyncHeader) []byte {
	return append(appendSyncHeader(dst, h, w.n), w.body...)
}

func appendSyncHeader(dst []byte, h SyncHeader, n int) []byte {
	var flags byte
	if h.Leaving {
		flags |= syncLeaving
	}
	dst = append(dst, SyncVersion, flags)
	dst = binary.AppendUvarint(dst, uint64(len(h.Router)))
	dst = append(dst, h.Router...)
	dst = binary.LittleEndian.AppendUint64(dst, h.Instance)
	dst = binary.AppendUvarint(dst, h.Seq)
	return binary.AppendUvarint(dst, uint64(n))
}

// ErrBadSync is wrapped by every DecodeSync error.
var ErrBadSync = errors.New("plane: bad replica-sync message")

type syncReader struct {
	b   []byte
	err error
}

func (r *syncReader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = fmt.Errorf("%w: truncated %s", ErrBadSync, what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *syncReader) u32(what string) uint32 {
	v := r.uvarint(what)
	if v > 1<<32-1 && r.err == nil {
		r.err = fmt.Errorf("%w: %s %d out of range", ErrBadSync, what, v)
	}
	return uint32(v)
}

// DecodeSync decodes a sync message into m, replacing its contents.
func DecodeSync(data []byte, m *SyncMessage) error {
	*m = SyncMessage{Items: m.Items[:0]}
	if len(data) < 2 {
		return fmt.Errorf("%w: %d bytes", ErrBadSync, len(data))
	}
	if data[0] != SyncVersion {
		return fmt.Errorf("%w: version %d, want %d", ErrBadSync, data[0], SyncVersion)
	}
	if data[1]&^syncLeaving != 0 {
		return fmt.Errorf("%w: unknown flags %#x", ErrBadSync, data[1])
	}
	m.Leaving = data[1]&syncLeaving != 0
	r := syncReader{b: data[2:]}
	n := r.uvarint("router length")
	if r.err != nil {
		return r.err
	}
	if n > MaxSyncRouterLen || n > uint64(len(r.b)) {
		return fmt.Errorf("%w: router id of %d bytes", ErrBadSync, n)
	}
	m.Router = string(r.b[:n])
	r.b = r.b[n:]
	if len(r.b) < 8 {
		return fmt.Errorf("%w: truncated instance", ErrBadSync)
	}
	m.Instance = binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	m.Seq = r.uvarint("seq")
	count := r.uvarint("count")
	if r.err != nil {
		return r.err
	}
	if count > uint64(len(r.b))/2 { // every item takes at least 2 bytes
		return fmt.Errorf("%w: %d items in %d bytes", ErrBadSync, count, len(r.b))
	}
	for range count {
		if len(r.b) == 0 {
			return fmt.Errorf("%w: truncated item", ErrBadSync)
		}
		it := SyncItem{Kind: SyncKind(r.b[0])}
		r.b = r.b[1:]
		it.ID = r.uvarint("id")
		switch it.Kind {
		case SyncBook:
			it.Worker.Worker = r.uvarint("worker")
			it.Worker.Dp = r.u32("dp rank")
			it.ISL = r.u32("isl")
			it.Overlap = r.u32("overlap")
			it.PrefillTokens = r.u32("prefill tokens")
			nb := r.uvarint("block count")
			if r.err != nil {
				return r.err
			}
			if nb > uint64(len(r.b))/8 {
				return fmt.Errorf("%w: %d blocks in %d bytes", ErrBadSync, nb, len(r.b))
			}
			it.Blocks = make([]wire.SeqHash, nb)
			for j := range it.Blocks {
				it.Blocks[j] = wire.SeqHash(binary.LittleEndian.Uint64(r.b[8*j:]))
			}
			r.b = r.b[8*nb:]
		case SyncSession:
			it.Worker.Worker = r.uvarint("worker")
			it.Worker.Dp = r.u32("dp rank")
			it.ISL = r.u32("session blocks")
		case SyncPrefillDone, SyncFree:
		default:
			return fmt.Errorf("%w: unknown item kind %d", ErrBadSync, it.Kind)
		}
		if r.err != nil {
			return r.err
		}
		m.Items = append(m.Items, it)
	}
	if len(r.b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrBadSync, len(r.b))
	}
	return nil
}

// AppendSync encodes m (the inverse of DecodeSync).
func AppendSync(dst []byte, m *SyncMessage) []byte {
	var w SyncWriter
	for _, it := range m.Items {
		switch it.Kind {
		case SyncBook:
			w.Book(it.ID, it.Worker, it.ISL, it.Overlap, it.PrefillTokens, it.Blocks)
		case SyncSession:
			w.Session(it.ID, it.Worker, it.ISL)
		default:
			w.Op(it.Kind, it.ID)
		}
	}
	return w.AppendMessage(dst, m.SyncHeader)
}
