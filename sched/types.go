package sched

import (
	"time"

	"github.com/kvroute/kvroute/wire"
)

// Overlap is what the index reports for one worker (dp rank) and one request:
// how many of the request's leading blocks it holds per tier, and the size of
// its cached tree. A worker in the table but absent from a request's overlaps
// has overlap 0 and the tree size last given to SetTreeSize (0 if never).
// A plain value, safe to copy; the zero value is "no overlap".
type Overlap struct {
	Worker wire.WorkerKey
	// Device is the number of leading blocks matched in the device (GPU)
	// tier: the overlap of the default cost.
	Device uint32
	// Host and Disk are the blocks matched beyond the device prefix in the
	// host tier, then in the disk and external tiers (radix.Overlap). Both
	// forms of the cost weigh them (Config.HostHitWeight, DiskHitWeight).
	Host, Disk uint32
	// TreeSize is the number of blocks the worker holds in the index; ties
	// in cost go to the smaller tree.
	TreeSize uint32
}

// Override holds per-request settings that replace the Config's. A plain
// value; its zero value overrides nothing. Allowed is read during the call.
type Override struct {
	// Weight replaces Config.Weight (or Config.PrefillLoadScale in the
	// credit form) when WeightSet.
	Weight    float64
	WeightSet bool
	// Temperature replaces Config.Temperature when TemperatureSet.
	Temperature    float64
	TemperatureSet bool
	// Pinned restricts the request to one dp rank when PinnedSet. It takes
	// precedence over Allowed. The rank still has to be non-busy (or the
	// request waits), and an unknown rank rejects the request.
	Pinned    wire.WorkerKey
	PinnedSet bool
	// Allowed, when non-empty, restricts the candidates to these dp ranks;
	// unknown keys are ignored. The scheduler copies what it keeps.
	Allowed []wire.WorkerKey
}

// Request is one request to route. A plain value; the zero value is an
// empty prompt with id 0.
//
// Blocks and Override.Allowed are read during the call only; a request that
// has to wait is copied into scheduler-owned storage.
type Request struct {
	// ID is the caller's identifier, unique among the active and waiting
	// requests (the service maps its string request ids to these).
	ID uint64
	// ISL is the prompt length in tokens.
	ISL uint32
	// Blocks are the sequence hashes (wire.SequenceHashes) of the prompt's
	// full blocks, in order. The active-block read model relies on their
	// chaining: a hash no rank holds ends the search, since no later hash of
	// the same prompt can be held either.
	Blocks []wire.SeqHash
	// ExpectedPrefill is the predicted prefill duration, 0 if unknown. With
	// it, the request's prefill load decays linearly while it is the oldest
	// in prefill on its rank.
	ExpectedPrefill time.Duration
	Override        Override
	// Tenant is the request's tenant, a small dense id the caller assigns
	// (0: the default tenant); waiting requests are shared fairly between
	// tenants by prompt tokens (SetTenant's weights; doc.go, "Classes,
	// tenants and sessions").
	Tenant uint32
	// Class is the request's priority class (the zero value is standard).
	Class Class
	// Session identifies the conversation the request belongs to (0: none).
	// With Config.SessionTTL > 0 the rank that served the session's last
	// turn is credited the blocks of that turn as cached.
	Session uint64
}

// PrefillLoadHint is the prefill load a booking adds, computed once by the
// caller: InitialEffectiveTokens = ISL − overlap × block size (clamped at 0)
// and the optional expected prefill duration (0 = unknown). The sequence core
// applies it as is. A zero InitialEffectiveTokens adds no prefill load.
// A plain value; the zero value adds nothing.
type PrefillLoadHint struct {
	InitialEffectiveTokens uint32
	ExpectedDuration       time.Duration
}

// Outcome is what became of a request in Decide (0: none).
type Outcome uint8

// Outcomes.
const (
	// Routed: Worker was chosen and the request's load is booked there.
	Routed Outcome = iota + 1
	// Queued: every eligible worker is busy; the request waits and will come
	// out of the outbox as an EffectAdmitted (or EffectRejected).
	Queued
	// Rejected: see Reason.
	Rejected
)

func (o Outcome) String() string {
	switch o {
	case Routed:
		return "routed"
	case Queued:
		return "queued"
	case Rejected:
		return "rejected"
	}
	return "none"
}

// Reason says why a request was rejected (ReasonNone otherwise).
type Reason uint8

// Rejection reasons.
const (
	ReasonNone Reason = iota
	// ReasonQueueFull: every eligible worker is busy and the waiting queue is
	// full. An AllWorkersBusy effect accompanies it.
	ReasonQueueFull
	// ReasonNoWorkers: no known worker is eligible (empty table, or the
	// pinned / allowed ranks are unknown or were removed).
	ReasonNoWorkers
	// ReasonDuplicate: the ID is already active or waiting.
	ReasonDuplicate
	// ReasonQueueWait: every eligible worker is busy and the request was
	// shed before queueing, its predicted wait being over (or near)
	// Config.MaxQueueWait. No AllWorkersBusy effect: the rejection window
	// is not opened.
	ReasonQueueWait
	// ReasonEvicted: the request was waiting and a request of a higher
	// class took its place in the full queue (an EffectRejected).
	ReasonEvicted
)

func (r Reason) String() string {
	switch r {
	case ReasonQueueFull:
		return "queue-full"
	case ReasonNoWorkers:
		return "no-workers"
	case ReasonDuplicate:
		return "duplicate"
	case ReasonQueueWait:
		return "queue-wait"
	case ReasonEvicted:
		return "evicted"
	}
	return "none"
}

// Decision is the outcome of routing one request. A plain, pointer-free
// value, safe to copy and keep.
type Decision struct {
	ID      uint64
	Outcome Outcome
	Reason  Reason // when Rejected
	// Worker, Overlap, Cost and PrefillTokens are set when Routed: the chosen
	// rank, its device overlap in blocks, the value the policy minimized
	// (0 for round-robin and random) and the effective prefill tokens booked.
	Worker        wire.WorkerKey
	Overlap       uint32
	Cost          float64
	PrefillTokens uint32
}

// Exclusion says why a worker was not a candidate in an explanation
// (NotExcluded: it was one).
type Exclusion uint8

// Exclusions.
const (
	// NotExcluded: the rank was a candidate.
	NotExcluded Exclusion = iota
	// ExcludedBusy: every rank of its worker is busy.
	ExcludedBusy
	// ExcludedNotAllowed: the request is pinned elsewhere or not allowed here.
	ExcludedNotAllowed
)

func (e Exclusion) String() string {
	switch e {
	case ExcludedBusy:
		return "busy"
	case ExcludedNotAllowed:
		return "not-allowed"
	}
	return "candidate"
}

// Candidate explains one dp rank's terms in a decision (DecideExplained). A
// plain value, safe to keep.
// PrefillBlocks and DecodeBlocks are the cost's terms for this request
// (prefill_blocks is the raw one in the credit form); Cost is what the policy
// minimizes. Busy says the rank itself is over a busy threshold (it stays a
// candidate while another rank of its worker is not).
type Candidate struct {
	Worker        wire.WorkerKey
	Overlap       uint32
	Host, Disk    uint32
	TreeSize      uint32
	NewBlocks     uint32
	PrefillTokens int64 // active prefill tokens before this request
	ActiveBlocks  int64 // active blocks before this request
	PrefillBlocks float64
	DecodeBlocks  float64
	Cost          float64
	// Session is the blocks credited as cached because the request's
	// session was last served here (Request.Session), 0 elsewhere.
	Session  uint32
	Busy     bool
	Excluded Exclusion
	Chosen   bool
}

// EffectKind tags an Effect.
type EffectKind uint8

// Effect kinds.
const (
	// EffectAdmitted: a waiting request was routed; see Decision.
	EffectAdmitted EffectKind = iota + 1
	// EffectRejected: a waiting request can no longer be routed (its eligible
	// workers were removed); see ID and Reason.
	EffectRejected
	// EffectAllWorkersBusy: requests were rejected because the queue was
	// full. Publish it (the HTTP layer answers 429 during the rejection
	// window). QueueDepth and At describe the latest rejection, Count how
	// many consecutive rejections it stands for.
	EffectAllWorkersBusy
	// EffectExpired: an active request outlived Config.Expiry and was
	// force-freed; see ID and Worker.
	EffectExpired
)

func (k EffectKind) String() string {
	switch k {
	case EffectAdmitted:
		return "admitted"
	case EffectRejected:
		return "rejected"
	case EffectAllWorkersBusy:
		return "all-workers-busy"
	case EffectExpired:
		return "expired"
	}
	return "none"
}

// Effect is one output of the scheduler for the caller to act on, in the
// order they happened. A tagged, pointer-free value, safe to keep and to hand
// to another goroutine.
type Effect struct {
	Kind       EffectKind
	ID         uint64         // Admitted, Rejected, Expired
	Decision   Decision       // Admitted
	Reason     Reason         // Rejected
	Worker     wire.WorkerKey // Expired
	QueueDepth int            // AllWorkersBusy
	Count      int            // AllWorkersBusy
	At         int64          // when it happened (the call's now)
}

// Capacity is a dp rank's static size, from the engine's runtime config. A
// plain value; zero fields are unknown (and the busy checks that need them
// never fire).
//
// Role is what the rank serves (RoleBoth, the zero value, unless it
// declares otherwise): prefill ranks form the pool DecidePD prefills on.
type Capacity struct {
	TotalBlocks      uint64
	MaxBatchedTokens uint64
	Role             Role
}

// Load is what an engine reports about a dp rank (its load metrics). A plain
// value; the zero value is an idle rank.
type Load struct {
	UsedBlocks uint64
	Waiting    uint64
}

// WorkerLoad is the read model of one dp rank (AppendLoads). A plain value,
// a snapshot: it does not change with the scheduler.
type WorkerLoad struct {
	Worker wire.WorkerKey
	Capacity
	Reported Load
	// ActiveBlocks are the distinct blocks of the active requests booked here.
	ActiveBlocks int64
	// PrefillTokens are the active prefill tokens at the given time (with the
	// oldest prefill's decay applied).
	PrefillTokens int64
	// HeldBlocks is how many of the given blocks are already active here;
	// NewBlocks = len(blocks) − HeldBlocks is what the request would add.
	HeldBlocks, NewBlocks uint32
	Busy                  bool // this rank is over a busy threshold
	WorkerBusy            bool // every rank of its worker is
	Requests              int  // active requests booked here
	Decisions             uint64
	TreeSize              uint32
}

// Stats are the scheduler's counters, a snapshot returned by value. Totals
// only grow; QueueDepth and Active are current values.
type Stats struct {
	Decisions         uint64 // requests routed (directly or from the queue)
	Admitted          uint64 // of which from the queue
	AdmittedAhead     uint64 // of which before an earlier waiting request (Config.QueueAffinity)
	Queued            uint64 // requests that had to wait
	Rejections        uint64 // all rejections
	RejectedQueueFull uint64
	RejectedNoWorkers uint64
	RejectedDuplicate uint64
	RejectedQueueWait uint64 // shed before queueing (Config.MaxQueueWait)
	RejectedEvicted   uint64 // waiting requests evicted by a higher class (ReasonEvicted)
	AllWorkersBusy    uint64 // AllWorkersBusy effects emitted (consecutive ones merge)
	Expirations       uint64
	Cancelled         uint64 // waiting requests freed before admission
	Dropped           uint64 // active requests dropped with their worker
	Disaggregated     uint64 // DecidePD: requests prefilled remotely (two bookings)
	ServedLocal       uint64 // DecidePD with prefill ranks: requests served on the decode rank alone
	QueueDepth        int
	Active            int
}
