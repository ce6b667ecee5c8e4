package shard

import (
	"errors"
	"fmt"
	"time"

	"github.com/kvroute/kvroute/radix"
	"github.com/kvroute/kvroute/wire"
)

// Outcome classifies what happened to one applied KV event.
type Outcome uint8

// Event outcomes counted per kind in Counters.Events.
const (
	OutcomeOK            Outcome = iota // applied
	OutcomeParentMissing                // Stored whose parent block is unknown: dropped, reported as a Gap
	OutcomeBad                          // rejected in whole or part by the tree (radix.ErrBadEvent, ErrConflict, or any other error)
	NumOutcomes
)

func (o Outcome) String() string {
	switch o {
	case OutcomeOK:
		return "ok"
	case OutcomeParentMissing:
		return "parent_missing"
	case OutcomeBad:
		return "bad"
	}
	return "unknown"
}

// NumKinds is the size of the kind dimension of Counters.Events: index 0
// counts events whose Kind is not one of wire.KindStored, KindRemoved,
// KindCleared.
const NumKinds = int(wire.KindCleared) + 1

// Counters are one shard's monotonically increasing event and lookup counts,
// a plain value (the zero value is all zeros).
// They are plain fields owned by the shard's goroutine; Index.Stats copies
// them on that goroutine, so reading a copy needs no synchronization.
type Counters struct {
	// Events counts applied events by [wire.Kind][Outcome].
	Events [NumKinds][NumOutcomes]uint64
	// Blocks added to the tree by Stored events, removed by Removed,
	// Cleared and worker removal, named by Removed events but unknown to
	// the tree, and dropped from Stored events because they contradict
	// what the worker holds (radix.ErrConflict, counted as OutcomeBad).
	BlocksStored, BlocksRemoved, BlocksUnknown, BlocksConflicting uint64
	// GapsDropped counts gap notices lost because the outbox was full
	// (CoreConfig.MaxGaps); the events themselves are still counted.
	GapsDropped uint64
	// OverCapEvents and OverCapBlocks count Stored events refused whole
	// because they would take their worker key past its cap (SetCap), and
	// their blocks; each is also reported as a Gap with OverCap set.
	OverCapEvents, OverCapBlocks uint64
	// Lookups counts matched requests; LookupBatches the batches they came in.
	Lookups, LookupBatches uint64
	// EventBatches counts the event batches applied (one per Index.Apply
	// call per shard, or per Core.Apply call).
	EventBatches uint64

	// Approximate mode: decisions recorded, blocks newly recorded, blocks
	// whose TTL was refreshed, blocks removed by expiry and by the size cap.
	Decisions, BlocksRecorded, BlocksRefreshed, BlocksExpired, BlocksPruned uint64
}

// Add adds o's counts into c.
func (c *Counters) Add(o *Counters) {
	for k := range c.Events {
		for j := range c.Events[k] {
			c.Events[k][j] += o.Events[k][j]
		}
	}
	c.BlocksStored += o.BlocksStored
	c.BlocksRemoved += o.BlocksRemoved
	c.BlocksUnknown += o.BlocksUnknown
	c.BlocksConflicting += o.BlocksConflicting
	c.GapsDropped += o.GapsDropped
	c.OverCapEvents += o.OverCapEvents
	c.OverCapBlocks += o.OverCapBlocks
	c.Lookups += o.Lookups
	c.LookupBatches += o.LookupBatches
	c.EventBatches += o.EventBatches
	c.Decisions += o.Decisions
	c.BlocksRecorded += o.BlocksRecorded
	c.BlocksRefreshed += o.BlocksRefreshed
	c.BlocksExpired += o.BlocksExpired
	c.BlocksPruned += o.BlocksPruned
}

// Gap (a plain value) reports a Stored event dropped because its parent block was unknown to
// the worker's tree: the router's view of that worker has a hole from here on
// and the caller should recover it (re-sync the worker or wait for its blocks
// to be evicted).
type Gap struct {
	Worker  wire.WorkerKey
	EventID uint64          // the dropped event's ID (0 if the transport has none)
	Parent  wire.EngineHash // the missing parent
	// OverCap: the event was refused because the worker key holds its cap
	// of blocks (SetCap): the worker lies about its capacity or the index
	// missed removals; a dump (Index.Replace) repairs the latter.
	OverCap bool
}

// ErrLengthMismatch is returned (wrapped, with both lengths) by
// RecordDecision when the local and sequence hash slices differ in length.
var ErrLengthMismatch = errors.New("shard: local and sequence hash slices differ in length")

// Approximate-mode defaults.
const (
	DefaultTTL         = 120 * time.Second
	DefaultMaxBlocks   = 1 << 20
	DefaultPruneTarget = 0.8
	DefaultMaxGaps     = 1024
)

// ApproxConfig configures approximate mode, in which the router records its
// own routing decisions instead of consuming KV events. It is a plain value;
// zero fields take the defaults, so the zero value is valid.
type ApproxConfig struct {
	// TTL of a recorded block, refreshed whenever a decision routes the
	// block to the same worker again. Default DefaultTTL (120 s).
	TTL time.Duration
	// MaxBlocks caps the recorded (worker, block) entries; exceeding it
	// prunes down to MaxBlocks*PruneTarget, earliest expiry first and,
	// among equal expiries, deepest block first. Default DefaultMaxBlocks
	// (2^20). In an Index the cap is split evenly across shards.
	MaxBlocks int
	// PruneTarget is the fraction of MaxBlocks pruning stops at, in (0, 1].
	// Default DefaultPruneTarget (0.8).
	PruneTarget float64
}

func (c ApproxConfig) withDefaults() ApproxConfig {
	if c.TTL <= 0 {
		c.TTL = DefaultTTL
	}
	if c.MaxBlocks <= 0 {
		c.MaxBlocks = DefaultMaxBlocks
	}
	if c.PruneTarget <= 0 || c.PruneTarget > 1 {
		c.PruneTarget = DefaultPruneTarget
	}
	return c
}

// CoreConfig configures a Core. It is a plain value; the zero value is valid.
type CoreConfig struct {
	Approx ApproxConfig
	// MaxGaps bounds the gap outbox; further gaps are counted in
	// Counters.GapsDropped until Gaps drains it. Default DefaultMaxGaps.
	MaxGaps int
}

// Core is one shard's synchronous, deterministic state: a radix.Tree holding
// the shard's workers, the approximate-mode TTL bookkeeping, the shard's
// counters and its gap outbox. It starts no goroutines, takes no locks and
// reads no clock: time is an argument (a time.Duration on the caller's
// monotonic clock, measured from an epoch of its choosing).
//
// Core is not goroutine-safe: one goroutine (a Runner, or a test) owns it.
// Its zero value is not usable; create it with NewCore. Slices it returns
// are appended to the caller's dst and stay valid until the caller reuses
// them, except where a method says otherwise.
type Core struct {
	tree    *radix.Tree
	caps    map[uint64]uint32 // blocks per worker key, by worker (SetCap)
	maxGaps int
	cnt     Counters
	gaps    []Gap
	ax      approx
	cap     *capture // the snapshot capture in progress, if any (snapshot.go)
}

// NewCore returns an empty Core.
func NewCore(cfg CoreConfig) *Core {
	c := &Core{tree: radix.New(), maxGaps: cfg.MaxGaps}
	if c.maxGaps <= 0 {
		c.maxGaps = DefaultMaxGaps
	}
	c.ax.init(cfg.Approx.withDefaults())
	return c
}

// Apply applies a batch of events in order. Every event is counted by kind
// and outcome; a Stored event with a missing parent is dropped and reported
// in the gap outbox (see Gaps). Apply does not retain events or their slices.
func (c *Core) Apply(events []wire.Event) {
	c.cnt.EventBatches++
	for i := range events {
		c.applyEvent(&events[i])
	}
}

// ApplyEvent applies one event (counted as by Apply) and returns the tree's
// result and error.
func (c *Core) ApplyEvent(ev *wire.Event) (radix.Result, error) {
	return c.applyEvent(ev)
}

func (c *Core) applyEvent(ev *wire.Event) (radix.Result, error) {
	if ev.Kind == wire.KindStored && len(c.caps) > 0 {
		if capa, ok := c.caps[ev.Worker.Worker]; ok && uint64(c.tree.TreeSize(ev.Worker))+uint64(len(ev.Blocks)) > uint64(capa) {
			return c.overCap(ev)
		}
	}
	if ev.Kind == wire.KindCleared {
		c.ax.dropWorker(ev.Worker.Worker, nil)
	}
	res, err := c.tree.Apply(ev)
	k := ev.Kind
	if int(k) >= NumKinds {
		k = 0
	}
	switch {
	case err == nil:
		c.cnt.Events[k][OutcomeOK]++
	case errors.Is(err, radix.ErrParentMissing):
		c.cnt.Events[k][OutcomeParentMissing]++
		c.addGap(Gap{Worker: ev.Worker, EventID: ev.ID, Parent: ev.Parent})
	default:
		c.cnt.Events[k][OutcomeBad]++
	}
	c.cnt.BlocksStored += uint64(res.Stored)
	c.cnt.BlocksRemoved += uint64(res.Removed)
	c.cnt.BlocksUnknown += uint64(res.Unknown)
	c.cnt.BlocksConflicting += uint64(res.Conflicts)
	return res, err
}

// ErrOverCap is returned by ApplyEvent for a Stored event refused by the
// worker's cap (SetCap).
var ErrOverCap = errors.New("shard: worker key at its block cap")

func (c *Core) overCap(ev *wire.Event) (radix.Result, error) {
	c.cnt.OverCapEvents++
	c.cnt.OverCapBlocks += uint64(len(ev.Blocks))
	c.addGap(Gap{Worker: ev.Worker, EventID: ev.ID, Parent: ev.Parent, OverCap: true})
	return radix.Result{}, ErrOverCap
}

// SetCap bounds the blocks the tree holds for each dp rank of worker:
// a Stored event that would take a rank past blocks is refused whole
// (counted, reported as a Gap with OverCap). 0 removes the bound.
func (c *Core) SetCap(worker uint64, blocks uint32) {
	if blocks == 0 {
		delete(c.caps, worker)
		return
	}
	if c.caps == nil {
		c.caps = make(map[uint64]uint32)
	}
	c.caps[worker] = blocks
}

func (c *Core) addGap(g Gap) {
	if len(c.gaps) >= c.maxGaps {
		c.cnt.GapsDropped++
		return
	}
	c.gaps = append(c.gaps, g)
}

// Gaps appends the pending gap notices to dst, oldest first, and empties the
// outbox.
func (c *Core) Gaps(dst []Gap) []Gap {
	dst = append(dst, c.gaps...)
	c.gaps = c.gaps[:0]
	return dst
}

// Match appends to dst the overlap of every worker of this shard that holds
// at least the first of hashes (see radix.Tree.Match).
func (c *Core) Match(dst []radix.Overlap, hashes []wire.BlockHash) []radix.Overlap {
	c.cnt.Lookups++
	return c.tree.Match(dst, hashes)
}

// Workers appends every worker key of this shard with its tree size.
func (c *Core) Workers(dst []radix.Overlap) []radix.Overlap { return c.tree.Workers(dst) }

// TreeSize returns the number of blocks the tree holds for k.
func (c *Core) TreeSize(k wire.WorkerKey) uint32 { return c.tree.TreeSize(k) }

// RemoveWorker removes every dp rank of worker (tree and approximate-mode
// state) and returns the number of blocks the tree removed.
func (c *Core) RemoveWorker(worker uint64) int {
	c.ax.dropWorker(worker, nil)
	c.assertApprox()
	n := c.tree.RemoveWorker(worker)
	c.cnt.BlocksRemoved += uint64(n)
	return n
}

// RemoveDpRank removes one worker key (tree and approximate-mode state) and
// returns the number of blocks the tree removed.
func (c *Core) RemoveDpRank(k wire.WorkerKey) int {
	c.ax.dropWorker(k.Worker, &k.Dp)
	c.assertApprox()
	n := c.tree.RemoveDpRank(k)
	c.cnt.BlocksRemoved += uint64(n)
	return n
}

// Dump appends Stored events that rebuild an equal tree (radix.Tree.Dump);
// their Blocks are freshly allocated and owned by the caller.
// Approximate-mode TTLs are not part of a dump.
func (c *Core) Dump(dst []wire.Event) []wire.Event { return c.tree.Dump(dst) }

// Counters returns a copy of the shard's counters.
func (c *Core) Counters() Counters { return c.cnt }

// TreeStats returns the tree's size statistics.
func (c *Core) TreeStats() radix.Stats { return c.tree.Stats() }

// ApproxBlocks returns the number of (worker, block) entries recorded in
// approximate mode.
func (c *Core) ApproxBlocks() int { return c.ax.n }

// CheckInvariants checks the tree's invariants and the consistency of the
// approximate-mode bookkeeping (expiry order, per-worker indexes, free list).
func (c *Core) CheckInvariants() error {
	if err := c.tree.CheckInvariants(); err != nil {
		return err
	}
	if err := c.ax.check(); err != nil {
		return fmt.Errorf("shard: approx: %w", err)
	}
	return nil
}
