package sched

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Policy is how a worker is chosen among the candidates (the non-busy,
// eligible dp ranks). Every policy books the request's load on the chosen
// rank and obeys busy detection and the waiting queue. The zero value is
// PolicyKV.
type Policy uint8

// Selection policies.
const (
	// PolicyKV minimizes the KV-aware cost (see Config.CreditCost) with
	// temperature sampling. The default.
	PolicyKV Policy = iota
	// PolicyRoundRobin takes the candidates in slot order, one after another.
	PolicyRoundRobin
	// PolicyRandom takes a candidate uniformly at random (seeded).
	PolicyRandom
	// PolicyLeastLoaded takes the lowest active blocks + active prefill
	// blocks, ignoring the request's overlap; ties are broken at random.
	PolicyLeastLoaded
)

var policyNames = [...]string{"kv", "round-robin", "random", "least-loaded"}

func (p Policy) String() string {
	if int(p) < len(policyNames) {
		return policyNames[p]
	}
	return fmt.Sprintf("Policy(%d)", p)
}

// ParsePolicy parses "kv", "round-robin", "random" or "least-loaded".
func ParsePolicy(s string) (Policy, error) {
	for i, n := range policyNames {
		if n == s {
			return Policy(i), nil
		}
	}
	return 0, fmt.Errorf("sched: unknown policy %q (want kv, round-robin, random or least-loaded)", s)
}

// QueuePolicy orders the requests waiting while every eligible worker is
// busy. The zero value is QueueFCFS.
type QueuePolicy uint8

// Queue policies.
const (
	// QueueFCFS admits the oldest waiting request first. The default.
	QueueFCFS QueuePolicy = iota
	// QueueLCFS admits the newest waiting request first.
	QueueLCFS
	// QueueWSPT admits the request with the fewest uncached prompt tokens
	// first (shortest processing time), oldest first among equals. The
	// uncached tokens are ISL − (largest device overlap × block size),
	// computed when the request is queued.
	QueueWSPT
)

var queuePolicyNames = [...]string{"fcfs", "lcfs", "wspt"}

func (q QueuePolicy) String() string {
	if int(q) < len(queuePolicyNames) {
		return queuePolicyNames[q]
	}
	return fmt.Sprintf("QueuePolicy(%d)", q)
}

// ParseQueuePolicy parses "fcfs", "lcfs" or "wspt".
func ParseQueuePolicy(s string) (QueuePolicy, error) {
	for i, n := range queuePolicyNames {
		if n == s {
			return QueuePolicy(i), nil
		}
	}
	return 0, fmt.Errorf("sched: unknown queue policy %q (want fcfs, lcfs or wspt)", s)
}

// Config configures a Scheduler. Its zero value is not usable (BlockSize 0 is
// rejected and a zero Weight turns the prefill term off): start from
// DefaultConfig and change fields. A Config is a plain value, safe to copy.
type Config struct {
	// BlockSize is the engines' KV block size in tokens. Must be > 0.
	BlockSize int

	// Policy chooses among candidates. Default PolicyKV.
	Policy Policy

	// Weight is w in the default cost w × prefill_blocks + decode_blocks
	// (--kv-overlap-score-weight). Default 8 (Dynamo's is 1, in the same
	// units; see doc.go, "Defaults"). 0 ignores prefill load.
	Weight float64
	// CacheAffinity (≥ 1) credits each cached block of the default form
	// (device + HostHitWeight × host + DiskHitWeight × disk) this many
	// blocks of prefill instead of 1: the prefill term becomes
	// (active prefill tokens + uncached tokens) / BlockSize −
	// (CacheAffinity − 1) × cached. A hit saves more than its own prefill
	// (the cache stays on one rank, the fleet computes less later), so a
	// request leaves its cache only for a rank whose prefill load is lower
	// by CacheAffinity × its cached blocks. Default 4 (doc.go, "Cache
	// affinity"); 1, or less, is Dynamo's cost.
	CacheAffinity float64
	// Temperature > 0 samples a softmax over range-normalized costs instead
	// of taking the argmin (--router-temperature). Default 0.
	Temperature float64

	// CreditCost selects the credit form of the cost:
	//   PrefillLoadScale × max(0, raw_prefill_blocks − OverlapCredit × device
	//     − HostHitWeight × host − DiskHitWeight × disk) + decode_blocks
	// with raw_prefill_blocks = (active prefill tokens + ISL) / BlockSize.
	// Default false (the w × prefill_blocks + decode_blocks form).
	CreditCost       bool
	PrefillLoadScale float64 // default 1
	OverlapCredit    float64 // default 1
	// HostHitWeight and DiskHitWeight weigh the host- and disk-tier blocks
	// beyond the device prefix in both forms (the default form's cached
	// blocks = device + HostHitWeight × host + DiskHitWeight × disk).
	HostHitWeight float64 // default 0.75
	DiskHitWeight float64 // default 0.25

	// AssumeKVReuse (--router-assume-kv-reuse, default true) counts a block
	// shared by several active requests on one rank once. When false, every
	// booked request's blocks get fresh random hashes from the scheduler's
	// seeded RNG, so nothing is deduplicated.
	AssumeKVReuse bool

	// ChainedHashes asserts that every block list given (Request.Blocks,
	// AddRequest's blocks) is a prompt's chained sequence hashes from its
	// first block, as wire.SequenceHashes makes them: a hash determines its
	// position and every hash before it, so whoever holds a block holds its
	// whole prefix. The router sets it. The block index then keeps one
	// table cell per request's stretch of unshared blocks instead of one
	// per block (doc.go § Block index); decisions are the same. Default
	// false: arbitrary hash lists (tests, other callers) keep a cell per
	// block. With lists that break the assertion, held-block counts may
	// miss blocks; the index stays consistent.
	ChainedHashes bool

	// Expiry force-frees requests booked longer ago than this, on Tick.
	// Default 300 s; ≤ 0 disables expiry.
	Expiry time.Duration

	// BusyDecodeFrac marks a dp rank busy when its decode blocks
	// (max of the router's active blocks and the engine's reported used
	// blocks) exceed BusyDecodeFrac × its total KV blocks. Default 1.0
	// (Dynamo's --active-decode-blocks-threshold is off until set; see
	// doc.go, "Defaults", for what each costs); ≤ 0 disables the check;
	// ranks with unknown total blocks never trip it.
	BusyDecodeFrac float64
	// BusyPrefillTokens marks a dp rank busy when its active prefill tokens
	// exceed it. Default 0 = disabled.
	BusyPrefillTokens int64
	// BusyPrefillFrac marks a dp rank busy when its active prefill tokens
	// exceed BusyPrefillFrac × its max batched tokens. Default 0 = disabled;
	// ranks with unknown max batched tokens never trip it.
	BusyPrefillFrac float64

	// QueuePolicy orders the waiting queue. Default QueueFCFS.
	QueuePolicy QueuePolicy
	// QueueDepth bounds the waiting queue (--max-workers-busy-queue-depth).
	// When it is full a request that finds every eligible worker busy is
	// rejected and an AllWorkersBusy effect is emitted. 0 rejects at once.
	// Default 1024 (a guess sized to a few batches of a busy frontend; the
	// service flag sets it).
	QueueDepth int
	// QueueAffinity is cache-aware dispatch from the waiting queue, under
	// PolicyKV (--queue-affinity): when a rank frees, the first
	// QueueAffinity unrestricted waiting requests in queue order compete
	// for it and the one whose cached prefix favours it most goes first
	// (doc.go, "Cache-aware dispatch"). ≤ 1: strict queue order. Default 32.
	QueueAffinity int
	// QueueAffinityMaxWait bounds the unfairness of cache-aware dispatch
	// (--queue-affinity-max-wait): a request that has waited this long is
	// admitted before any later one (strict queue order among such aged
	// requests). Default 10 s (doc.go, "Cache-aware dispatch").
	QueueAffinityMaxWait time.Duration
	// QueueAffinityHold leaves an available rank idle rather than admit to
	// it a request with more cached on a busy rank (every candidate's
	// advantage negative), for as long as the oldest such request has
	// waited less than QueueAffinityHold: the requests wait for their
	// ranks (extended by QueueAffinityHoldPerBlock). A new request with more
	// cached on a busy rank than on any other queues for it. Default 3 s
	// (doc.go, "Cache affinity"); 0: work-conserving dispatch.
	QueueAffinityHold time.Duration
	// QueueAffinityTail shortens the aging bound of cache-aware dispatch
	// under overload: a request that has waited QueueAffinityTail times the
	// mean wait of the recent admissions from the queue (about the last 64),
	// and at least QueueAffinityHold, goes before any later one, as at
	// QueueAffinityMaxWait. Default 2 (doc.go, "Cache affinity"); 0: off
	// (the bound is QueueAffinityMaxWait).
	QueueAffinityTail float64
	// QueueAffinityHoldPerBlock extends the aging bound of cache-aware
	// dispatch (QueueAffinityTail's, or QueueAffinityMaxWait) for a request
	// whose cache is on a busy rank by this much per block of the saving:
	// how many more of its blocks a busy rank holds than the best available
	// one (tiers weighed as in the cost). A request that would recompute a
	// long prefix elsewhere waits longer for it than one that would lose a
	// few blocks; never beyond QueueAffinityMaxWait. The same extension
	// applies to QueueAffinityHold, counted on the window's first (oldest)
	// candidate. Default
	// 4 ms (doc.go, "Cache affinity"; a 500-block saving waits 2 s more);
	// 0: off.
	QueueAffinityHoldPerBlock time.Duration
	// RejectionWindow is how long Throttled reports true after an
	// AllWorkersBusy event (--all-workers-busy-rejection-window). Default 5 s.
	RejectionWindow time.Duration
	// MaxQueueWait bounds the predicted wait in the queue (--max-queue-wait):
	// a request that finds every eligible worker busy is rejected
	// (ReasonQueueWait, no AllWorkersBusy) with a probability rising from 0
	// when its predicted wait is half of MaxQueueWait to 1 when it is
	// MaxQueueWait (or when the queue would be full), predicted from the
	// queue's measured drain rate (see QueueWait). Default 0: off, the
	// reference behaviour (the service flag's default is 2 s).
	MaxQueueWait time.Duration

	// ClassAging bounds how long a standard request waits behind critical
	// ones: one that has waited this long goes first (oldest first), for
	// at most ClassAgingShare of the admissions while critical requests
	// wait. Default 10 s; 0: strict priority.
	ClassAging time.Duration
	// ClassAgingShare is the share of the admissions from the queue that
	// aged standard requests may take while critical ones wait: a floor
	// for the standard class, not a takeover when critical and standard
	// together exceed the fleet. Default 0.1; 1: every aged request goes
	// first.
	ClassAgingShare float64
	// ClassHeadroom is the share of every rank's busy limits (decode
	// blocks, prefill tokens) kept for critical requests: a standard or
	// sheddable request sees a rank busy at 1 − ClassHeadroom of them.
	// Such requests are decided by the scan rather than the plain-rank
	// heap. Default 0: none.
	ClassHeadroom float64
	// TenantQuantum is the prompt tokens a tenant of weight 1 may have
	// admitted per turn of deficit round robin among the tenants waiting
	// in a class. Default 4096 (a turn admits about one long prompt); 0
	// is the default.
	TenantQuantum int
	// SessionTTL is how long a session stays bound to the rank that served
	// its last turn (Request.Session; --session-ttl). Default 0: sessions
	// are ignored.
	SessionTTL time.Duration

	// DisaggPolicy says when DecidePD, in a fleet with prefill ranks,
	// serves a request on its decode rank alone instead of prefilling it
	// remotely (--disagg-policy; doc.go, "Disaggregated prefill and
	// decode"). Default DisaggISL.
	DisaggPolicy DisaggPolicy
	// DisaggMinUncachedTokens is the ISL rule's threshold
	// (--disagg-min-uncached-tokens): a prompt with fewer tokens not cached
	// on its decode rank is computed there. Default 512.
	DisaggMinUncachedTokens uint32
	// TransferWeight is the weight of the decode leg's "prefill" term, the
	// prompt's blocks the decode rank would pull (those it does not hold):
	// the decode cost is TransferWeight × blocks to pull + decode blocks.
	// Default 1: a block to pull weighs as a block held, so load comes
	// first (Weight, 8, would make the choice cache-first).
	TransferWeight float64
	// RunningWeight adds RunningWeight × the requests booked on a rank to
	// the decode leg's cost (DecidePD), so running requests count toward a
	// decode rank's load beside its active blocks. 0, the default, leaves
	// them out and keeps decode legs on the plain-rank heap; > 0 scans every
	// rank for a decode leg (the heap's key has no request count).
	RunningWeight float64
}

// DefaultConfig returns the defaults documented on Config's fields, with
// BlockSize 16.
func DefaultConfig() Config {
	return Config{
		BlockSize:                 16,
		Policy:                    PolicyKV,
		Weight:                    8,
		CacheAffinity:             4,
		Temperature:               0,
		PrefillLoadScale:          1,
		OverlapCredit:             1,
		HostHitWeight:             0.75,
		DiskHitWeight:             0.25,
		AssumeKVReuse:             true,
		Expiry:                    300 * time.Second,
		BusyDecodeFrac:            1.0,
		QueuePolicy:               QueueFCFS,
		QueueDepth:                1024,
		QueueAffinity:             32,
		QueueAffinityMaxWait:      10 * time.Second,
		QueueAffinityHold:         3 * time.Second,
		QueueAffinityTail:         2,
		QueueAffinityHoldPerBlock: 4 * time.Millisecond,
		RejectionWindow:           5 * time.Second,
		ClassAging:                10 * time.Second,
		ClassAgingShare:           0.1,
		TenantQuantum:             4096,
		DisaggPolicy:              DisaggISL,
		DisaggMinUncachedTokens:   512,
		TransferWeight:            1,
	}
}

// ErrConfig is wrapped by every error Config.Validate returns.
var ErrConfig = errors.New("sched: invalid config")

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	finite := func(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
	switch {
	case c.BlockSize <= 0:
		return bad("block size %d must be > 0", c.BlockSize)
	case int(c.Policy) >= len(policyNames):
		return bad("policy %d", c.Policy)
	case int(c.QueuePolicy) >= len(queuePolicyNames):
		return bad("queue policy %d", c.QueuePolicy)
	case !finite(c.Weight) || c.Weight < 0:
		return bad("weight %v must be finite and ≥ 0", c.Weight)
	case !finite(c.CacheAffinity) || c.CacheAffinity < 0:
		return bad("cache affinity %v must be finite and ≥ 0", c.CacheAffinity)
	case !finite(c.Temperature) || c.Temperature < 0:
		return bad("temperature %v must be finite and ≥ 0", c.Temperature)
	case !finite(c.PrefillLoadScale) || !finite(c.OverlapCredit) || !finite(c.HostHitWeight) || !finite(c.DiskHitWeight):
		return bad("credit-form weights must be finite")
	case !finite(c.BusyDecodeFrac) || !finite(c.BusyPrefillFrac):
		return bad("busy fractions must be finite")
	case c.BusyPrefillTokens < 0:
		return bad("busy prefill tokens %d must be ≥ 0", c.BusyPrefillTokens)
	case c.QueueDepth < 0:
		return bad("queue depth %d must be ≥ 0", c.QueueDepth)
	case c.QueueAffinity < 0:
		return bad("queue affinity %d must be ≥ 0", c.QueueAffinity)
	case c.QueueAffinityHold < 0:
		return bad("queue affinity hold %v must be ≥ 0", c.QueueAffinityHold)
	case !finite(c.QueueAffinityTail) || c.QueueAffinityTail < 0:
		return bad("queue affinity tail %v must be finite and ≥ 0", c.QueueAffinityTail)
	case c.QueueAffinityHoldPerBlock < 0:
		return bad("queue affinity hold per block %v must be ≥ 0", c.QueueAffinityHoldPerBlock)
	case c.QueueAffinityMaxWait < 0:
		return bad("queue affinity max wait %v must be ≥ 0", c.QueueAffinityMaxWait)
	case c.RejectionWindow < 0:
		return bad("rejection window %v must be ≥ 0", c.RejectionWindow)
	case c.MaxQueueWait < 0:
		return bad("max queue wait %v must be ≥ 0", c.MaxQueueWait)
	case c.ClassAging < 0:
		return bad("class aging %v must be ≥ 0", c.ClassAging)
	case !finite(c.ClassHeadroom) || c.ClassHeadroom < 0 || c.ClassHeadroom >= 1:
		return bad("class headroom %v must be in [0, 1)", c.ClassHeadroom)
	case !finite(c.ClassAgingShare) || c.ClassAgingShare < 0 || c.ClassAgingShare > 1:
		return bad("class aging share %v must be in [0, 1]", c.ClassAgingShare)
	case c.TenantQuantum < 0:
		return bad("tenant quantum %d must be ≥ 0", c.TenantQuantum)
	case c.SessionTTL < 0:
		return bad("session ttl %v must be ≥ 0", c.SessionTTL)
	case int(c.DisaggPolicy) >= len(disaggPolicyNames):
		return bad("disaggregation policy %d", c.DisaggPolicy)
	case !finite(c.TransferWeight) || c.TransferWeight < 0:
		return bad("transfer weight %v must be finite and ≥ 0", c.TransferWeight)
	case !finite(c.RunningWeight) || c.RunningWeight < 0:
		return bad("running weight %v must be finite and ≥ 0", c.RunningWeight)
	}
	return nil
}
