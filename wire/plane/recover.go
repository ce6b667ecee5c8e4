package plane

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/kvroute/kvroute/wire"
)

// The recovery protocol (version 1). A router that lost KV events of worker
// W, dp rank R after event id N sends a request on RecoverSubject(W) with a
// reply inbox; the worker answers with one or more reply messages on that
// inbox. Every field is little-endian.
//
//	request (24 bytes): "kr" | version u8 (1) | 0 u8 | dp u32 | worker u64 | after u64
//	reply:  "kR" | version u8 (1) | kind u8 | flags u8 (bit 0: last) | 0 u8 0 u8 0 u8
//	        | chunk u32 | dp u32 | worker u64 | at u64 | epoch u64 | body
//
// kind 1 (events): body is a native batch (wire.AppendNative) of the events
// with ids after+1 .. at, in order, carrying their ids; an empty batch when
// nothing is missing (after >= at).
// kind 2 (dump): after is older than the worker's ring (or newer than its
// last id: it restarted); body is a native batch of Stored events that
// rebuild the rank's whole cache, every storage tier it announces (each
// event's Tier), each block after its parent, consistent at event id at
// (their ID fields are at).
// kind 3 (error): body is a UTF-8 message (an unknown dp rank, a bad request).
//
// An answer is split into chunks numbered 0, 1, 2, ... so that no message
// exceeds the worker's bound (RecoverChunkBytes by default, under NATS's 1 MiB
// default max payload); the last has flag bit 0. A receiver that misses a
// chunk (a gap in the numbers, or a timeout before the last) discards the
// answer and asks again. epoch names the worker's engine incarnation (it
// changes on restart), so a router can tell ids that started over.
const (
	RecoverVersion     = 1
	RecoverRequestSize = 24
	RecoverReplyHeader = 40
	// RecoverChunkBytes is the default bound of one reply message: half of
	// NATS's default max payload (1 MiB), leaving room for headers.
	RecoverChunkBytes = 512 << 10
)

// Reply kinds.
const (
	RecoverEvents uint8 = 1
	RecoverDump   uint8 = 2
	RecoverError  uint8 = 3
)

// RecoverSubject returns the recovery subject of worker id:
// namespace.{ns}.component.{comp}.kv-recover.{id}.
func (s Subjects) RecoverSubject(id uint64) string {
	return s.Recover + "." + strconv.FormatUint(id, 10)
}

// RecoverRequest asks worker Worker's rank Dp for its events after id After.
type RecoverRequest struct {
	Worker wire.WorkerKey
	After  uint64
}

// AppendRecoverRequest appends the encoding of r to dst.
func AppendRecoverRequest(dst []byte, r RecoverRequest) []byte {
	dst = append(dst, 'k', 'r', RecoverVersion, 0)
	dst = binary.LittleEndian.AppendUint32(dst, r.Worker.Dp)
	dst = binary.LittleEndian.AppendUint64(dst, r.Worker.Worker)
	return binary.LittleEndian.AppendUint64(dst, r.After)
}

// DecodeRecoverRequest decodes a request; errors wrap wire.ErrMalformed.
func DecodeRecoverRequest(msg []byte) (RecoverRequest, error) {
	if len(msg) != RecoverRequestSize {
		return RecoverRequest{}, fmt.Errorf("%w: recover request of %d bytes, want %d", wire.ErrMalformed, len(msg), RecoverRequestSize)
	}
	if msg[0] != 'k' || msg[1] != 'r' || msg[2] != RecoverVersion || msg[3] != 0 {
		return RecoverRequest{}, fmt.Errorf("%w: recover request header % x, want 6b 72 %02x 00", wire.ErrMalformed, msg[:4], RecoverVersion)
	}
	return RecoverRequest{
		Worker: wire.WorkerKey{Worker: binary.LittleEndian.Uint64(msg[8:]), Dp: binary.LittleEndian.Uint32(msg[4:])},
		After:  binary.LittleEndian.Uint64(msg[16:]),
	}, nil
}

// RecoverReply is the header of one reply message.
type RecoverReply struct {
	Kind   uint8
	Last   bool   // the answer's final chunk
	Chunk  uint32 // 0, 1, 2, ...
	Worker wire.WorkerKey
	At     uint64 // the event id the answer is consistent at
	Epoch  uint64 // the worker's engine incarnation
}

// AppendRecoverReply appends a reply header and body to dst. body is a
// native batch (events, dump) or a message (error).
func AppendRecoverReply(dst []byte, h RecoverReply, body []byte) []byte {
	var flags byte
	if h.Last {
		flags = 1
	}
	dst = append(dst, 'k', 'R', RecoverVersion, h.Kind, flags, 0, 0, 0)
	dst = binary.LittleEndian.AppendUint32(dst, h.Chunk)
	dst = binary.LittleEndian.AppendUint32(dst, h.Worker.Dp)
	dst = binary.LittleEndian.AppendUint64(dst, h.Worker.Worker)
	dst = binary.LittleEndian.AppendUint64(dst, h.At)
	dst = binary.LittleEndian.AppendUint64(dst, h.Epoch)
	return append(dst, body...)
}

// DecodeRecoverReply decodes a reply's header and returns its body (a view
// of msg). Errors wrap wire.ErrMalformed. The body of an events or dump
// reply is decoded with wire.DecodeNative.
func DecodeRecoverReply(msg []byte) (RecoverReply, []byte, error) {
	if len(msg) < RecoverReplyHeader {
		return RecoverReply{}, nil, fmt.Errorf("%w: recover reply of %d bytes", wire.ErrMalformed, len(msg))
	}
	if msg[0] != 'k' || msg[1] != 'R' || msg[2] != RecoverVersion {
		return RecoverReply{}, nil, fmt.Errorf("%w: recover reply header % x, want 6b 52 %02x", wire.ErrMalformed, msg[:3], RecoverVersion)
	}
	h := RecoverReply{Kind: msg[3], Last: msg[4] == 1}
	switch {
	case h.Kind < RecoverEvents || h.Kind > RecoverError:
		return RecoverReply{}, nil, fmt.Errorf("%w: recover reply kind %d", wire.ErrMalformed, h.Kind)
	case msg[4] > 1 || msg[5] != 0 || msg[6] != 0 || msg[7] != 0:
		return RecoverReply{}, nil, fmt.Errorf("%w: recover reply flags % x", wire.ErrMalformed, msg[4:8])
	}
	h.Chunk = binary.LittleEndian.Uint32(msg[8:])
	h.Worker = wire.WorkerKey{Dp: binary.LittleEndian.Uint32(msg[12:]), Worker: binary.LittleEndian.Uint64(msg[16:])}
	h.At = binary.LittleEndian.Uint64(msg[24:])
	h.Epoch = binary.LittleEndian.Uint64(msg[32:])
	return h, msg[RecoverReplyHeader:], nil
}
