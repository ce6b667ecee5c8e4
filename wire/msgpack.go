package wire

import (
	"encoding/binary"
	"errors"
	"math"

	"github.com/tinylib/msgp/msgp"
)

// Shared msgpack readers. Each reads one value off the front of b in place
// (no allocation on success) and returns the rest.

var (
	errNegative  = errors.New("negative value")
	errTooLarge  = errors.New("value out of range")
	errShortList = errors.New("list longer than the bytes left")
	errTrailing  = errors.New("trailing bytes")
	errNotHash   = errors.New("hash is neither an integer nor bytes")
)

// readHash reads a block hash sent as an int64 (reinterpreted as uint64), a
// uint64, or bytes (the last 8 bytes, big-endian; shorter strings are
// zero-extended on the left).
func readHash(b []byte) (uint64, []byte, error) {
	// Inline the encodings engines send: a fixint, a full-width uint64 or
	// int64, and a bin8 digest (vLLM's sha256 hashes).
	if len(b) > 0 {
		switch c := b[0]; {
		case c <= 0x7f:
			return uint64(c), b[1:], nil
		case (c == 0xcf || c == 0xd3) && len(b) >= 9:
			return binary.BigEndian.Uint64(b[1:]), b[9:], nil
		case c == 0xc4 && len(b) >= 2 && b[1] >= 8 && len(b) >= 2+int(b[1]):
			end := 2 + int(b[1])
			return binary.BigEndian.Uint64(b[end-8:]), b[end:], nil
		}
	}
	switch msgp.NextType(b) {
	case msgp.UintType:
		return msgp.ReadUint64Bytes(b)
	case msgp.IntType:
		v, o, err := msgp.ReadInt64Bytes(b)
		return uint64(v), o, err
	case msgp.BinType:
		raw, o, err := msgp.ReadBytesZC(b)
		if err != nil {
			return 0, b, err
		}
		if len(raw) > 8 {
			raw = raw[len(raw)-8:]
		}
		var v uint64
		for _, c := range raw {
			v = v<<8 | uint64(c)
		}
		return v, o, nil
	case msgp.InvalidType:
		if len(b) == 0 {
			return 0, b, msgp.ErrShortBytes
		}
	}
	return 0, b, errNotHash
}

// readOptHash reads a hash or nil.
func readOptHash(b []byte) (v uint64, ok bool, o []byte, err error) {
	if msgp.IsNil(b) {
		return 0, false, b[1:], nil
	}
	v, o, err = readHash(b)
	return v, err == nil, o, err
}

// readToken reads one token id: a non-negative integer that fits in uint32.
// The common encodings (positive fixint, uint8/16/32) are read inline.
func readToken(b []byte) (uint32, []byte, error) {
	if len(b) > 0 {
		switch c := b[0]; {
		case c <= 0x7f:
			return uint32(c), b[1:], nil
		case c == 0xcc && len(b) >= 2:
			return uint32(b[1]), b[2:], nil
		case c == 0xcd && len(b) >= 3:
			return uint32(b[1])<<8 | uint32(b[2]), b[3:], nil
		case c == 0xce && len(b) >= 5:
			return uint32(b[1])<<24 | uint32(b[2])<<16 | uint32(b[3])<<8 | uint32(b[4]), b[5:], nil
		}
	}
	v, o, err := readUint(b)
	if err != nil {
		return 0, b, err
	}
	if v > math.MaxUint32 {
		return 0, b, errTooLarge
	}
	return uint32(v), o, nil
}

// readTokens fills dst with len(dst) token ids (readToken), the encodings
// token ids come in (fixint, uint16, uint8, uint32) read in the loop
// without a call per token.
func readTokens(dst []uint32, o []byte) ([]byte, error) {
	for i := range dst {
		if len(o) >= 5 {
			switch c := o[0]; {
			case c <= 0x7f:
				dst[i], o = uint32(c), o[1:]
				continue
			case c == 0xcd:
				dst[i], o = uint32(o[1])<<8|uint32(o[2]), o[3:]
				continue
			case c == 0xcc:
				dst[i], o = uint32(o[1]), o[2:]
				continue
			case c == 0xce:
				dst[i], o = binary.BigEndian.Uint32(o[1:]), o[5:]
				continue
			}
		}
		var err error
		if dst[i], o, err = readToken(o); err != nil {
			return o, err
		}
	}
	return o, nil
}

// readUint reads a non-negative integer (int or uint encoding).
func readUint(b []byte) (uint64, []byte, error) {
	if len(b) > 0 && b[0] <= 0x7f {
		return uint64(b[0]), b[1:], nil
	}
	if msgp.NextType(b) == msgp.UintType {
		return msgp.ReadUint64Bytes(b)
	}
	v, o, err := msgp.ReadInt64Bytes(b)
	if err != nil {
		return 0, b, err
	}
	if v < 0 {
		return 0, b, errNegative
	}
	return uint64(v), o, nil
}

// readOptString reads a str (or bin) view, or nil (returns a nil slice).
func readOptString(b []byte) ([]byte, []byte, error) {
	if msgp.IsNil(b) {
		return nil, b[1:], nil
	}
	if msgp.NextType(b) == msgp.BinType {
		return msgp.ReadBytesZC(b)
	}
	s, o, err := msgp.ReadStringZC(b)
	if err == nil && s == nil {
		s = o[:0] // an empty string is not nil
	}
	return s, o, err
}

// readListHeader reads an array header and checks that the bytes left can
// hold that many elements (each takes at least one byte), so that a lying
// header cannot make the caller reserve a huge amount of memory.
func readListHeader(b []byte) (int, []byte, error) {
	n, o, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return 0, b, err
	}
	if uint64(n) > uint64(len(o)) {
		return 0, b, errShortList
	}
	return int(n), o, nil
}

// readMapHeader is readListHeader for maps (two values per entry).
func readMapHeader(b []byte) (int, []byte, error) {
	n, o, err := msgp.ReadMapHeaderBytes(b)
	if err != nil {
		return 0, b, err
	}
	if 2*uint64(n) > uint64(len(o)) {
		return 0, b, errShortList
	}
	return int(n), o, nil
}

// appendUintArray writes vs as a msgpack array of unsigned integers.
func appendUintArray[T ~uint64](dst []byte, vs []T) []byte {
	dst = msgp.AppendArrayHeader(dst, uint32(len(vs)))
	for _, v := range vs {
		dst = msgp.AppendUint64(dst, uint64(v))
	}
	return dst
}
