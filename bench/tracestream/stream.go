package tracestream

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kvroute/kvroute/bench/kvcache"
	"github.com/kvroute/kvroute/bench/trace"
	"github.com/kvroute/kvroute/wire"
)

// Partition assigns trace requests to workers.
type Partition uint8

// Partitions.
const (
	// RoundRobin sends request i (in trace order) to worker i mod W.
	RoundRobin Partition = iota
	// Random sends request i to worker splitmix64(Seed, i) mod W: a seeded
	// uniform draw per request, like Dynamo's partition_trace (whose
	// rand::StdRng stream it does not reproduce).
	Random
)

func (p Partition) String() string {
	switch p {
	case RoundRobin:
		return "round-robin"
	case Random:
		return "random"
	}
	return fmt.Sprintf("Partition(%d)", uint8(p))
}

// Config configures Build (plain data).
type Config struct {
	Workers   int // W > 0
	Capacity  int // blocks per worker's cache, > 0
	BlockSize int // engine block size B, > 0
	Partition Partition
	Seed      uint64 // Random partition seed
	HashSeed  uint64 // local hash seed; 0 means wire.Seed
	// A request holds its blocks for Hold + OutputLength*HoldPerOutputToken
	// after it arrives; 0 frees it right after its allocation.
	Hold               time.Duration
	HoldPerOutputToken time.Duration
	// WorkerBase is the WorkerKey.Worker of worker 0; worker w is WorkerBase+w
	// with Dp 0.
	WorkerBase uint64
	// KeepManagers keeps each worker's final kvcache.Manager in the Stream,
	// for inspection (memory: ~40 bytes per cache block per worker).
	KeepManagers bool
}

// OpKind is the kind of an Op.
type OpKind uint8

// Op kinds.
const (
	OpRequest OpKind = iota + 1 // an index lookup of a request's prompt
	OpEvent                     // a KV event to apply to the index
)

func (k OpKind) String() string {
	switch k {
	case OpRequest:
		return "request"
	case OpEvent:
		return "event"
	}
	return fmt.Sprintf("OpKind(%d)", uint8(k))
}

// Op is one operation of the stream. Its hashes or event blocks live in the
// Stream's arenas; read them with Stream.Hashes and Stream.Event. Plain,
// pointer-free data: the GC does not scan the op slice.
type Op struct {
	Time      time.Duration // the request's arrival
	Kind      OpKind
	EventKind wire.Kind // OpEvent: the event's kind
	HasParent bool      // OpEvent (stored): Parent is set
	Worker    uint32    // worker index: the request's worker, or the event's publisher
	Request   int32     // index in the trace of the request (that caused the event)
	// OpRequest: leading blocks of the prompt its worker had cached when it
	// arrived, i.e. the overlap an exact index must report for that worker
	// after applying every earlier op.
	Overlap uint32
	n       uint32 // hashes or blocks
	off     int    // into Stream.hashes or Stream.blocks
	ID      uint64 // OpEvent: event id, contiguous from 1 per worker
	Parent  wire.EngineHash
}

// Counts summarizes a stream (plain data).
type Counts struct {
	Requests      int // request ops (= trace requests)
	RequestBlocks int // local hashes over all request ops
	OverlapBlocks int // sum of request overlaps (blocks the workers reused)
	Rejected      int // requests larger than a worker's whole cache: no events
	ForcedFrees   int // held requests freed early because a new one did not fit
	Events        int // event ops
	Stored        int // stored events
	Removed       int // removed events
	StoredBlocks  int
	RemovedBlocks int
}

// BlockOps is the number of block operations an index performs to replay the
// stream: every request block looked up plus every event block applied.
func (c Counts) BlockOps() int { return c.RequestBlocks + c.StoredBlocks + c.RemovedBlocks }

// Stream is a precomputed replay. Immutable after Build: safe for concurrent
// readers. Slices returned by its methods are views valid as long as the
// Stream, and must not be modified.
type Stream struct {
	Ops      []Op
	Counts   Counts
	Managers []*kvcache.Manager // per worker, when Config.KeepManagers
	cfg      Config
	hashes   []wire.BlockHash
	blocks   []wire.Block
	span     time.Duration
}

// Config returns the configuration the stream was built with (HashSeed
// filled in).
func (s *Stream) Config() Config { return s.cfg }

// Span returns the time from the first to the last op.
func (s *Stream) Span() time.Duration { return s.span }

// WorkerKey returns the key of worker index w.
func (s *Stream) WorkerKey(w uint32) wire.WorkerKey {
	return wire.WorkerKey{Worker: s.cfg.WorkerBase + uint64(w)}
}

// Hashes returns the local hashes of an OpRequest's prompt (nil for events).
func (s *Stream) Hashes(op *Op) []wire.BlockHash {
	if op.Kind != OpRequest {
		return nil
	}
	return s.hashes[op.off : op.off+int(op.n) : op.off+int(op.n)]
}

// Event returns the KV event of an OpEvent; its Blocks is a view into the
// stream. It does not allocate.
func (s *Stream) Event(op *Op) wire.Event {
	ev := wire.Event{
		Worker: s.WorkerKey(op.Worker), ID: op.ID, Kind: op.EventKind, Tier: wire.TierDevice,
		HasParent: op.HasParent, Parent: op.Parent,
	}
	if op.Kind == OpEvent {
		ev.Blocks = s.blocks[op.off : op.off+int(op.n) : op.off+int(op.n)]
	}
	return ev
}

// pending is a held request waiting for its free time.
type pending struct {
	due time.Duration
	seq uint64
}

type workerState struct {
	m    *kvcache.Manager
	held []pending // min-heap by (due, seq)
}

// Build runs the trace through W block managers and returns the stream.
// Requests are processed in time order (trace order among equal times).
func Build(t *trace.Trace, cfg Config) (*Stream, error) {
	if cfg.Workers <= 0 || cfg.Capacity <= 0 || cfg.BlockSize <= 0 {
		return nil, fmt.Errorf("tracestream: workers %d, capacity %d and block size %d must be > 0",
			cfg.Workers, cfg.Capacity, cfg.BlockSize)
	}
	if cfg.Workers > 1<<31 || len(t.Requests) > 1<<31-1 {
		return nil, errors.New("tracestream: too many workers or requests")
	}
	if cfg.Partition > Random {
		return nil, fmt.Errorf("tracestream: unknown partition %v", cfg.Partition)
	}
	if cfg.HashSeed == 0 {
		cfg.HashSeed = wire.Seed
	}
	order := make([]int32, len(t.Requests))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortStableFunc(order, func(a, b int32) int {
		return cmp.Compare(t.Requests[a].Time, t.Requests[b].Time)
	})

	s := &Stream{cfg: cfg}
	workers := make([]workerState, cfg.Workers)
	for w := range workers {
		workers[w].m = kvcache.New(kvcache.Config{
			Capacity: cfg.Capacity, BlockSize: cfg.BlockSize, Worker: s.WorkerKey(uint32(w)),
		})
	}
	h := trace.NewHasher(cfg.BlockSize, cfg.HashSeed)
	for _, ri := range order {
		r := &t.Requests[ri]
		w := cfg.worker(int(ri))
		ws := &workers[w]
		for len(ws.held) > 0 && ws.held[0].due <= r.Time {
			ws.m.Free(ws.pop().seq)
		}
		off := len(s.hashes)
		s.hashes = h.Append(s.hashes, r)
		local := s.hashes[off:]
		overlap := ws.m.Match(local)
		s.Ops = append(s.Ops, Op{
			Time: r.Time, Kind: OpRequest, Worker: uint32(w), Request: ri,
			Overlap: uint32(overlap), off: off, n: uint32(len(local)),
		})
		s.Counts.Requests++
		s.Counts.RequestBlocks += len(local)
		s.Counts.OverlapBlocks += overlap

		seq := uint64(ri)
		_, err := ws.m.Allocate(seq, local, r.InputLength)
		for errors.Is(err, kvcache.ErrNoSpace) && len(ws.held) > 0 {
			ws.m.Free(ws.pop().seq)
			s.Counts.ForcedFrees++
			_, err = ws.m.Allocate(seq, local, r.InputLength)
		}
		switch {
		case errors.Is(err, kvcache.ErrNoSpace):
			s.Counts.Rejected++
		case err != nil:
			return nil, fmt.Errorf("tracestream: request %d (line %d): %w", ri, r.Line, err)
		default:
			hold := cfg.Hold + time.Duration(r.OutputLength)*cfg.HoldPerOutputToken
			if hold <= 0 {
				ws.m.Free(seq)
			} else {
				ws.push(pending{due: r.Time + hold, seq: seq})
			}
		}
		s.collect(ws.m, r.Time, uint32(w), ri)
	}
	if n := len(s.Ops); n > 0 {
		s.span = s.Ops[n-1].Time - s.Ops[0].Time
	}
	if cfg.KeepManagers {
		s.Managers = make([]*kvcache.Manager, len(workers))
		for w := range workers {
			s.Managers[w] = workers[w].m
		}
	}
	return s, nil
}

// collect moves m's outbox into the stream.
func (s *Stream) collect(m *kvcache.Manager, at time.Duration, w uint32, ri int32) {
	for _, ev := range m.Events() {
		off := len(s.blocks)
		s.blocks = append(s.blocks, ev.Blocks...)
		s.Ops = append(s.Ops, Op{
			Time: at, Kind: OpEvent, EventKind: ev.Kind, HasParent: ev.HasParent, Parent: ev.Parent,
			Worker: w, Request: ri, ID: ev.ID, off: off, n: uint32(len(ev.Blocks)),
		})
		s.Counts.Events++
		switch ev.Kind {
		case wire.KindStored:
			s.Counts.Stored++
			s.Counts.StoredBlocks += len(ev.Blocks)
		case wire.KindRemoved:
			s.Counts.Removed++
			s.Counts.RemovedBlocks += len(ev.Blocks)
		}
	}
	m.Reset()
}

// worker returns the worker of request i.
func (c *Config) worker(i int) int {
	if c.Partition == Random {
		return int(splitmix64(c.Seed+uint64(i)*0x9e3779b97f4a7c15) % uint64(c.Workers))
	}
	return i % c.Workers
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func less(a, b pending) bool { return a.due < b.due || a.due == b.due && a.seq < b.seq }

func (ws *workerState) push(p pending) {
	ws.held = append(ws.held, p)
	for i := len(ws.held) - 1; i > 0; {
		parent := (i - 1) / 2
		if !less(ws.held[i], ws.held[parent]) {
			break
		}
		ws.held[i], ws.held[parent] = ws.held[parent], ws.held[i]
		i = parent
	}
}

func (ws *workerState) pop() pending {
	top := ws.held[0]
	n := len(ws.held) - 1
	ws.held[0] = ws.held[n]
	ws.held = ws.held[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && less(ws.held[l], ws.held[m]) {
			m = l
		}
		if r < n && less(ws.held[r], ws.held[m]) {
			m = r
		}
		if m == i {
			break
		}
		ws.held[i], ws.held[m] = ws.held[m], ws.held[i]
		i = m
	}
	return top
}

func (c Counts) String() string {
	return fmt.Sprintf("requests=%d request_blocks=%d overlap_blocks=%d rejected=%d forced_frees=%d "+
		"events=%d stored=%d removed=%d stored_blocks=%d removed_blocks=%d block_ops=%d",
		c.Requests, c.RequestBlocks, c.OverlapBlocks, c.Rejected, c.ForcedFrees,
		c.Events, c.Stored, c.Removed, c.StoredBlocks, c.RemovedBlocks, c.BlockOps())
}
