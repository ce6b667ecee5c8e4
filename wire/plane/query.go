package plane

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/kvroute/kvroute/wire"
)

// The index query protocol: a router started with --use-remote-indexer
// asks a serving index (`kvroute serve --serve-indexer` or `kvroute
// indexer`) on NATS request/reply, one request per batch of prompts. Every
// integer is little-endian.
//
//	request  = version:u8 kind:u8 flags:u16 model:str8 tenant:str8 body
//	query    body = n:u16 { blocks:u32 hash:u64 * blocks } * n
//	record   body = worker:u64 dp:u32 blocks:u32 local:u64*blocks seqs:u32 seq:u64*seqs
//	ping     body = (empty)
//	workers  body = (empty)
//	reply    = version:u8 status:u8 flags:u16 body
//	  ok, query: n:u16 { m:u16 { worker:u64 dp:u32 blocks:u32 tree:u32 [host:u32 disk:u32] } * m } * n
//	  ok, workers: as ok, query, with n = 1: every worker key with its
//	           tree size (blocks 0)
//	  ok, ping:  approx:u8 id:str8
//	  error:     msg:str16
//
// The flags fields are for extensions that change the body. FlagTiers on a
// query request asks for per-tier overlaps; on its reply it says that each
// overlap carries host and disk (wire.Overlap's: the further leading
// blocks held on the host, then in any tier) after tree, so that a remote
// router weighs tiers as a local one does. A decoder rejects flags it does
// not know, so an old serving index answers a new router with an error
// instead of a misparse (node.RemoteIndex then asks again without tiers).
const (
	QueryVersion = 1

	QueryMatch  QueryKind = 1 // look a batch of prompts up
	QueryRecord QueryKind = 2 // record a routing decision (approximate mode)
	QueryPing   QueryKind = 3 // who serves? (a second approximate-mode server refuses to start)
	// QueryWorkers asks for every worker key's tree size: a remote
	// router's tie-break between workers a request does not overlap.
	QueryWorkers QueryKind = 4

	ReplyOK    = 0
	ReplyError = 1

	// MaxQueryPrompts bounds the prompts of one query (the u16 count).
	MaxQueryPrompts = 1<<16 - 1
	// MaxQueryOverlaps bounds the overlaps of one prompt in a reply.
	MaxQueryOverlaps = 1<<16 - 1
)

// FlagTiers is the request and reply flag of per-tier overlaps (QueryMatch
// only).
const FlagTiers uint16 = 1 << 0

// QueryKind says what a query request asks.
type QueryKind uint8

// QueueGroup is the NATS queue group serving indexes subscribe in, so that
// each query reaches one of them (NATS picks at random): queries spread
// over the serving instances.
const QueueGroup = "kvroute-indexer"

// IndexSubject returns the subject of index queries in the namespace and
// component of s: "namespace.<ns>.component.<comp>.kv-indexer.query".
func IndexSubject(s Subjects) string {
	base := strings.TrimSuffix(s.Heartbeat, "workers.heartbeat")
	return base + "kv-indexer.query"
}

// Query is a decoded query request. Model and Tenant alias the decoded
// message; Hashes, Ends and Seq are reused by DecodeQuery. Not safe for
// concurrent use; the zero value is ready.
type Query struct {
	Kind   QueryKind
	Flags  uint16
	Model  []byte
	Tenant []byte
	// QueryMatch: prompt i's local hashes are Hashes[Ends[i-1]:Ends[i]].
	Hashes []wire.BlockHash
	Ends   []int
	// QueryRecord: the decision (Hashes are its local hashes).
	Worker wire.WorkerKey
	Seq    []wire.SeqHash
}

// Prompt returns the local hashes of prompt i of a QueryMatch.
func (q *Query) Prompt(i int) []wire.BlockHash {
	start := 0
	if i > 0 {
		start = q.Ends[i-1]
	}
	return q.Hashes[start:q.Ends[i]]
}

// Prompts is the number of prompts of a QueryMatch.
func (q *Query) Prompts() int { return len(q.Ends) }

var errQueryShort = errors.New("plane: index query truncated")

func appendStr8(dst []byte, s string) []byte {
	dst = append(dst, byte(len(s)))
	return append(dst, s...)
}

func appendHeader(dst []byte, kind QueryKind, model, tenant string) ([]byte, error) {
	return appendHeaderFlags(dst, kind, 0, model, tenant)
}

func appendHeaderFlags(dst []byte, kind QueryKind, flags uint16, model, tenant string) ([]byte, error) {
	if len(model) > 255 || len(tenant) > 255 {
		return dst, errors.New("plane: model and tenant names are limited to 255 bytes")
	}
	dst = append(dst, QueryVersion, byte(kind))
	dst = binary.LittleEndian.AppendUint16(dst, flags)
	dst = appendStr8(dst, model)
	return appendStr8(dst, tenant), nil
}

// AppendMatchQuery appends a QueryMatch request for prompts (local hashes,
// as the router computes them) of model and tenant (empty: any).
func AppendMatchQuery(dst []byte, model, tenant string, prompts [][]wire.BlockHash) ([]byte, error) {
	if len(prompts) > MaxQueryPrompts {
		return dst, fmt.Errorf("plane: %d prompts in one index query (at most %d)", len(prompts), MaxQueryPrompts)
	}
	dst, err := appendHeader(dst, QueryMatch, model, tenant)
	if err != nil {
		return dst, err
	}
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(prompts)))
	for _, p := range prompts {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(p)))
		for _, h := range p {
			dst = binary.LittleEndian.AppendUint64(dst, uint64(h))
		}
	}
	return dst, nil
}

// AppendMatchHeader starts a QueryMatch request of n prompts; append each
// prompt with AppendMatchPrompt. It is AppendMatchQuery without the slice
// of slices, for callers holding prompts elsewhere.
func AppendMatchHeader(dst []byte, model, tenant string, n int) ([]byte, error) {
	return AppendMatchHeaderFlags(dst, model, tenant, n, 0)
}

// AppendMatchHeaderFlags is AppendMatchHeader with request flags (0 or
// FlagTiers).
func AppendMatchHeaderFlags(dst []byte, model, tenant string, n int, flags uint16) ([]byte, error) {
	if n > MaxQueryPrompts {
		return dst, fmt.Errorf("plane: %d prompts in one index query (at most %d)", n, MaxQueryPrompts)
	}
	if flags&^FlagTiers != 0 {
		return dst, fmt.Errorf("plane: index query flags %#x unknown", flags)
	}
	dst, err := appendHeaderFlags(dst, QueryMatch, flags, model, tenant)
	if err != nil {
		return dst, err
	}
	return binary.LittleEndian.AppendUint16(dst, uint16(n)), nil
}

// AppendMatchPrompt appends one prompt's local hashes to a QueryMatch
// request begun with AppendMatchHeader.
func AppendMatchPrompt(dst []byte, hashes []wire.BlockHash) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(hashes)))
	for _, h := range hashes {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(h))
	}
	return dst
}

// AppendRecordQuery appends a QueryRecord request: worker was chosen for a
// prompt with these local and sequence hashes, which must come 1:1.
func AppendRecordQuery(dst []byte, model, tenant string, worker wire.WorkerKey, local []wire.BlockHash, seq []wire.SeqHash) ([]byte, error) {
	if len(local) != len(seq) {
		return dst, fmt.Errorf("plane: a decision's local and sequence hashes must come 1:1 (%d local, %d sequence)", len(local), len(seq))
	}
	dst, err := appendHeader(dst, QueryRecord, model, tenant)
	if err != nil {
		return dst, err
	}
	dst = binary.LittleEndian.AppendUint64(dst, worker.Worker)
	dst = binary.LittleEndian.AppendUint32(dst, worker.Dp)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(local)))
	for _, h := range local {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(h))
	}
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(seq)))
	for _, h := range seq {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(h))
	}
	return dst, nil
}

// AppendWorkersQuery appends a QueryWorkers request.
func AppendWorkersQuery(dst []byte) []byte {
	dst, _ = appendHeader(dst, QueryWorkers, "", "")
	return dst
}

// AppendPingQuery appends a QueryPing request.
func AppendPingQuery(dst []byte) []byte {
	dst, _ = appendHeader(dst, QueryPing, "", "")
	return dst
}

// DecodeQuery decodes a request into q, reusing q's slices. Model and
// Tenant alias src. Any malformed, truncated or over-long input, an unknown
// version, kind or flag, and a record whose local and sequence hashes do
// not come 1:1 are errors.
func DecodeQuery(src []byte, q *Query) error {
	q.Hashes, q.Ends, q.Seq = q.Hashes[:0], q.Ends[:0], q.Seq[:0]
	q.Model, q.Tenant, q.Worker = nil, nil, wire.WorkerKey{}
	if len(src) < 4 {
		return errQueryShort
	}
	if src[0] != QueryVersion {
		return fmt.Errorf("plane: index query version %d (this build speaks %d)", src[0], QueryVersion)
	}
	q.Kind = QueryKind(src[1])
	q.Flags = binary.LittleEndian.Uint16(src[2:])
	if q.Flags != 0 && (q.Kind != QueryMatch || q.Flags != FlagTiers) {
		return fmt.Errorf("plane: index query flags %#x not supported", q.Flags)
	}
	src = src[4:]
	var ok bool
	if q.Model, src, ok = str8(src); !ok {
		return errQueryShort
	}
	if q.Tenant, src, ok = str8(src); !ok {
		return errQueryShort
	}
	switch q.Kind {
	case QueryMatch:
		if len(src) < 2 {
			return errQueryShort
		}
		n := int(binary.LittleEndian.Uint16(src))
		src = src[2:]
		for range n {
			if q.Hashes, src, ok = hashes(q.Hashes, src); !ok {
				return errQueryShort
			}
			q.Ends = append(q.Ends, len(q.Hashes))
		}
	case QueryRecord:
		if len(src) < 12 {
			return errQueryShort
		}
		q.Worker = wire.WorkerKey{Worker: binary.LittleEndian.Uint64(src), Dp: binary.LittleEndian.Uint32(src[8:])}
		if q.Hashes, src, ok = hashes(q.Hashes, src[12:]); !ok {
			return errQueryShort
		}
		if len(src) < 4 {
			return errQueryShort
		}
		m := int(binary.LittleEndian.Uint32(src))
		src = src[4:]
		if m != len(q.Hashes) {
			return fmt.Errorf("plane: a decision's local and sequence hashes must come 1:1 (%d local, %d sequence)", len(q.Hashes), m)
		}
		if len(src) < 8*m {
			return errQueryShort
		}
		for i := range m {
			q.Seq = append(q.Seq, wire.SeqHash(binary.LittleEndian.Uint64(src[8*i:])))
		}
		src = src[8*m:]
	case QueryPing, QueryWorkers:
	default:
		return fmt.Errorf("plane: unknown index query kind %d", q.Kind)
	}
	if len(src) != 0 {
		return fmt.Errorf("plane: %d bytes after the index query", len(src))
	}
	return nil
}

func str8(src []byte) ([]byte, []byte, bool) {
	if len(src) < 1 || len(src) < 1+int(src[0]) {
		return nil, src, false
	}
	n := int(src[0])
	return src[1 : 1+n : 1+n], src[1+n:], true
}

// hashes appends a u32-counted array of u64 hashes to dst; it checks the
// count against the bytes left before growing dst.
func hashes(dst []wire.BlockHash, src []byte) ([]wire.BlockHash, []byte, bool) {
	if len(src) < 4 {
		return dst, src, false
	}
	n := uint64(binary.LittleEndian.Uint32(src))
	src = src[4:]
	if uint64(len(src)) < 8*n {
		return dst, src, false
	}
	for i := range int(n) {
		dst = append(dst, wire.BlockHash(binary.LittleEndian.Uint64(src[8*i:])))
	}
	return dst, src[8*n:], true
}

// QueryReply is a decoded reply. Overlaps and Ends are reused by
// DecodeQueryReply. Not safe for concurrent use; the zero value is ready.
type QueryReply struct {
	Status uint8
	Flags  uint16
	Err    string // ReplyError
	// QueryMatch: prompt i's overlaps are Overlaps[Ends[i-1]:Ends[i]].
	Overlaps []wire.Overlap
	Ends     []int
	// QueryPing: the serving instance.
	Approx bool
	ID     string
}

// Prompt returns the overlaps of prompt i.
func (r *QueryReply) Prompt(i int) []wire.Overlap {
	start := 0
	if i > 0 {
		start = r.Ends[i-1]
	}
	return r.Overlaps[start:r.Ends[i]]
}

// AppendReplyHeader begins an OK reply to a QueryMatch of n prompts; append
// each prompt's overlaps with AppendReplyPrompt.
func AppendReplyHeader(dst []byte, n int) []byte {
	return AppendReplyHeaderFlags(dst, n, 0)
}

// AppendReplyHeaderFlags is AppendReplyHeader with reply flags: FlagTiers
// when the request asked for tiers (then append each prompt with
// AppendReplyPromptFlags and the same flags).
func AppendReplyHeaderFlags(dst []byte, n int, flags uint16) []byte {
	dst = append(dst, QueryVersion, ReplyOK)
	dst = binary.LittleEndian.AppendUint16(dst, flags&FlagTiers)
	return binary.LittleEndian.AppendUint16(dst, uint16(n))
}

// AppendReplyPrompt appends one prompt's overlaps (at most
// MaxQueryOverlaps are sent; an index has far fewer worker keys).
func AppendReplyPrompt(dst []byte, ovs []wire.Overlap) []byte {
	return AppendReplyPromptFlags(dst, ovs, 0)
}

// AppendReplyPromptFlags is AppendReplyPrompt of a reply begun with flags:
// with FlagTiers each overlap also carries its host and disk blocks.
func AppendReplyPromptFlags(dst []byte, ovs []wire.Overlap, flags uint16) []byte {
	ovs = ovs[:min(len(ovs), MaxQueryOverlaps)]
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(ovs)))
	for _, o := range ovs {
		dst = binary.LittleEndian.AppendUint64(dst, o.Worker.Worker)
		dst = binary.LittleEndian.AppendUint32(dst, o.Worker.Dp)
		dst = binary.LittleEndian.AppendUint32(dst, o.Blocks)
		dst = binary.LittleEndian.AppendUint32(dst, o.TreeSize)
		if flags&FlagTiers != 0 {
			dst = binary.LittleEndian.AppendUint32(dst, o.Host)
			dst = binary.LittleEndian.AppendUint32(dst, o.Disk)
		}
	}
	return dst
}

// AppendPingReply appends the reply to a QueryPing.
func AppendPingReply(dst []byte, approx bool, id string) []byte {
	dst = append(dst, QueryVersion, ReplyOK, 0, 0)
	a := byte(0)
	if approx {
		a = 1
	}
	dst = append(dst, a)
	if len(id) > 255 {
		id = id[:255]
	}
	return appendStr8(dst, id)
}

// AppendErrorReply appends an error reply.
func AppendErrorReply(dst []byte, msg string) []byte {
	if len(msg) > 1<<16-1 {
		msg = msg[:1<<16-1]
	}
	dst = append(dst, QueryVersion, ReplyError, 0, 0)
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(msg)))
	return append(dst, msg...)
}

// DecodeQueryReply decodes a reply to a request of kind, reusing r's
// slices. An error reply decodes without error: see r.Status and r.Err.
func DecodeQueryReply(src []byte, kind QueryKind, r *QueryReply) error {
	r.Overlaps, r.Ends, r.Err, r.ID, r.Approx = r.Overlaps[:0], r.Ends[:0], "", "", false
	if len(src) < 4 {
		return errQueryShort
	}
	if src[0] != QueryVersion {
		return fmt.Errorf("plane: index reply version %d (this build speaks %d)", src[0], QueryVersion)
	}
	r.Status = src[1]
	r.Flags = binary.LittleEndian.Uint16(src[2:])
	if r.Flags != 0 && (kind != QueryMatch || r.Status != ReplyOK || r.Flags != FlagTiers) {
		return fmt.Errorf("plane: index reply flags %#x not supported", r.Flags)
	}
	src = src[4:]
	switch {
	case r.Status == ReplyError:
		if len(src) < 2 || len(src) != 2+int(binary.LittleEndian.Uint16(src)) {
			return errQueryShort
		}
		r.Err = string(src[2:])
		return nil
	case r.Status != ReplyOK:
		return fmt.Errorf("plane: index reply status %d unknown", r.Status)
	case kind == QueryPing:
		if len(src) < 1 {
			return errQueryShort
		}
		r.Approx = src[0] == 1
		id, rest, ok := str8(src[1:])
		if !ok || len(rest) != 0 {
			return errQueryShort
		}
		r.ID = string(id)
		return nil
	case kind == QueryMatch, kind == QueryWorkers:
	default:
		return fmt.Errorf("plane: a %d request has no reply body", kind)
	}
	if len(src) < 2 {
		return errQueryShort
	}
	n := int(binary.LittleEndian.Uint16(src))
	src = src[2:]
	size := 20
	if r.Flags&FlagTiers != 0 {
		size = 28
	}
	for range n {
		if len(src) < 2 {
			return errQueryShort
		}
		m := int(binary.LittleEndian.Uint16(src))
		src = src[2:]
		if len(src) < size*m {
			return errQueryShort
		}
		for j := range m {
			b := src[size*j:]
			o := wire.Overlap{
				Worker:   wire.WorkerKey{Worker: binary.LittleEndian.Uint64(b), Dp: binary.LittleEndian.Uint32(b[8:])},
				Blocks:   binary.LittleEndian.Uint32(b[12:]),
				TreeSize: binary.LittleEndian.Uint32(b[16:]),
			}
			if size == 28 {
				o.Host, o.Disk = binary.LittleEndian.Uint32(b[20:]), binary.LittleEndian.Uint32(b[24:])
			}
			r.Overlaps = append(r.Overlaps, o)
		}
		src = src[size*m:]
		r.Ends = append(r.Ends, len(r.Overlaps))
	}
	if len(src) != 0 {
		return fmt.Errorf("plane: %d bytes after the index reply", len(src))
	}
	return nil
}
