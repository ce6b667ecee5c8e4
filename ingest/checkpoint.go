package ingest

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/zeebo/xxh3"

	"github.com/kvroute/kvroute/wire"
)

// SourceKey is the event-id tracking of one worker key on one NATS source:
// the last event id whose effects the sink has.
type SourceKey struct {
	Source Source // SourceNATSDynamo or SourceNATSNative
	Worker wire.WorkerKey
	Last   uint64
}

// Checkpoint runs fn while no NATS event is being handed to the sink (it
// holds every NATS pipe, as Resync does), with the NATS sources' tracked
// event ids. Called from Config.AfterApply, right where
// shard.Index.Capture(seq) is exact, a Capture started inside fn and the ids
// fn gets describe the same point of the stream: a node that restores both
// (Config.Tracked) resumes the stream with the tracking it had, so the
// replayed events are checked in order instead of each worker key being a
// first sighting (which asks every worker for a full dump). fn must be short.
func (in *Ingest) Checkpoint(fn func(tracked []SourceKey)) {
	pipes, unlock := in.holdNATSPipes()
	defer unlock()
	var keys []SourceKey
	for _, p := range pipes {
		if p == nil {
			continue
		}
		for k, id := range p.tr.last {
			keys = append(keys, SourceKey{Source: p.src, Worker: k, Last: id})
		}
	}
	fn(keys)
}

// seed sets p's tracking from the keys of its source (Config.Tracked).
func (p *pipe) seed(keys []SourceKey) {
	if !p.trackIDs {
		return
	}
	for _, k := range keys {
		if k.Source == p.src && k.Last != 0 {
			p.tr.last[k.Worker] = k.Last
		}
	}
}

// Tracking state encoding (AppendTracking, DecodeTracking), little endian:
//
//	magic "KVRTRK", version u8 (1), reserved u8, keys uvarint, keys ×
//	(source u8, worker uvarint, dp rank uvarint, last id uvarint), xxh3 of
//	everything before it (u64)
const (
	trackMagic   = "KVRTRK"
	trackVersion = 1
)

// ErrTracking wraps every DecodeTracking error.
var ErrTracking = errors.New("ingest: bad tracking state")

// AppendTracking appends the encoding of keys to dst (a compact, versioned,
// checksummed record stored beside an index snapshot).
func AppendTracking(dst []byte, keys []SourceKey) []byte {
	start := len(dst)
	dst = append(dst, trackMagic...)
	dst = append(dst, trackVersion, 0)
	dst = binary.AppendUvarint(dst, uint64(len(keys)))
	for _, k := range keys {
		dst = append(dst, byte(k.Source))
		dst = binary.AppendUvarint(dst, k.Worker.Worker)
		dst = binary.AppendUvarint(dst, uint64(k.Worker.Dp))
		dst = binary.AppendUvarint(dst, k.Last)
	}
	return binary.LittleEndian.AppendUint64(dst, xxh3.Hash(dst[start:]))
}

// DecodeTracking decodes what AppendTracking wrote, verifying its checksum.
func DecodeTracking(b []byte) ([]SourceKey, error) {
	if len(b) < len(trackMagic)+2+1+8 {
		return nil, fmt.Errorf("%w: %d bytes", ErrTracking, len(b))
	}
	body, sum := b[:len(b)-8], binary.LittleEndian.Uint64(b[len(b)-8:])
	if string(body[:len(trackMagic)]) != trackMagic {
		return nil, fmt.Errorf("%w: magic %q", ErrTracking, body[:len(trackMagic)])
	}
	if v := body[len(trackMagic)]; v != trackVersion {
		return nil, fmt.Errorf("%w: version %d, this build reads %d", ErrTracking, v, trackVersion)
	}
	if got := xxh3.Hash(body); got != sum {
		return nil, fmt.Errorf("%w: checksum %016x, recorded %016x", ErrTracking, got, sum)
	}
	r := body[len(trackMagic)+2:]
	next := func() (uint64, bool) {
		v, n := binary.Uvarint(r)
		if n <= 0 {
			return 0, false
		}
		r = r[n:]
		return v, true
	}
	n, ok := next()
	if !ok || n > uint64(len(r))/4 {
		return nil, fmt.Errorf("%w: key count", ErrTracking)
	}
	keys := make([]SourceKey, 0, n)
	for i := uint64(0); i < n; i++ {
		if len(r) == 0 {
			return nil, fmt.Errorf("%w: truncated at key %d", ErrTracking, i)
		}
		src := Source(r[0])
		r = r[1:]
		w, ok1 := next()
		rank, ok2 := next()
		last, ok3 := next()
		if !ok1 || !ok2 || !ok3 || rank > 1<<32-1 {
			return nil, fmt.Errorf("%w: key %d", ErrTracking, i)
		}
		if src != SourceNATSDynamo && src != SourceNATSNative {
			return nil, fmt.Errorf("%w: key %d has source %d", ErrTracking, i, src)
		}
		keys = append(keys, SourceKey{Source: src, Worker: wire.WorkerKey{Worker: w, Dp: uint32(rank)}, Last: last})
	}
	if len(r) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrTracking, len(r))
	}
	return keys, nil
}
