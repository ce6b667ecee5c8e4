package verify

import (
	"fmt"
	"time"

	"github.com/kvroute/kvroute/wire"
)

// Config configures a Tracker. Zero fields take the defaults.
type Config struct {
	BlockSize int // the router's block size in tokens (required)
	// Window is the number of recent requests kept per rank (default 32).
	Window int
	// MinSamples is the number of requests a window needs before a cause
	// is named (default 8).
	MinSamples int
	// Persist is the share of a window that must disagree in one direction
	// for a stale index or missing events (default 0.5).
	Persist float64
	// RepairInterval is the least time between two repairs of one rank
	// (default 5 s).
	RepairInterval time.Duration
}

func (c *Config) defaults() {
	if c.Window <= 0 {
		c.Window = 32
	}
	if c.MinSamples <= 0 {
		c.MinSamples = 8
	}
	c.MinSamples = min(c.MinSamples, c.Window)
	if c.Persist <= 0 {
		c.Persist = 0.5
	}
	if c.RepairInterval <= 0 {
		c.RepairInterval = 5 * time.Second
	}
}

// Cause is what a persistent disagreement means.
type Cause uint8

// Causes, see the package doc.
const (
	CauseNone Cause = iota
	CauseBlockSize
	CauseHash
	CauseStale
	CauseMissing
	NumCauses
)

var causeNames = [NumCauses]string{"none", "block_size_mismatch", "hash_mismatch", "stale_index", "missing_events"}

func (c Cause) String() string {
	if c < NumCauses {
		return causeNames[c]
	}
	return fmt.Sprintf("cause(%d)", c)
}

// Sample is one request's prediction and the engine's report.
type Sample struct {
	// Predicted and Host are the blocks the decision credited to the chosen
	// rank: its device overlap and the host-tier blocks beyond it.
	Predicted, Host uint32
	// Reported is the engine's cached_tokens.
	Reported int
	// Publishes: the rank has blocks in the index (its events arrive).
	Publishes bool
}

// Verdict is what Observe concludes from one request.
type Verdict struct {
	Agree bool
	// ErrBlocks is the reported blocks minus the predicted device blocks.
	ErrBlocks int
	// Cause is the rank's current diagnosis (CauseNone while it agrees or
	// the evidence is thin); Named is set when it changed to a cause other
	// than none with this request (log it once).
	Cause Cause
	Named bool
	// EngineBlock is the engine's block size a CauseBlockSize infers.
	EngineBlock int
	// Repair: ask the rank for a dump of its cache now.
	Repair bool
}

// Stats are a rank's running totals (since the tracker first saw it) and
// its window's agreement.
type Stats struct {
	Requests, Agreed, Unverified uint64
	PredictedTokens              uint64 // device blocks predicted × block size
	PredictedHostTokens          uint64 // host-tier blocks beyond them × block size
	ReportedTokens               uint64
	Repairs                      uint64
	Errors                       [NumBuckets]uint64 // signed error in blocks, by ErrorBuckets
	ErrorSum                     int64
	// WindowAgreed of WindowSize requests in the window agree.
	WindowAgreed, WindowSize int
	Cause                    Cause
	EngineBlock              int
	// LastCause is the last cause named (it stays after a repair).
	LastCause Cause
	// LastReported is the last cached_tokens reported (-1: none yet).
	LastReported int
}

// ErrorBuckets are the upper bounds of the signed error histogram, in
// blocks (reported − predicted); the last bucket is +Inf.
var ErrorBuckets = [NumBuckets - 1]float64{-64, -16, -4, -2, -1, 0, 1, 2, 4, 16, 64}

// NumBuckets is the number of error buckets, +Inf included.
const NumBuckets = 12

type entry struct {
	predicted, host uint32
	reported        int
	err             int32
	agree           bool
}

type rank struct {
	ring       []entry
	next, n    int
	cause      Cause
	engBlock   int
	lastRepair int64
	repaired   bool
	// matched: some request of the rank was ever predicted a block (its
	// hashes match the engine's), so a window without predictions is lost
	// events, not a hash mismatch.
	matched bool
	// disagree and offGrid count the window's disagreeing requests and its
	// reports that are not multiples of the block size: while both are
	// below what names a cause, diagnose skips its scan.
	disagree, offGrid int
	st                Stats
}

// Tracker keeps the windows of every rank it was given a sample of. Not
// goroutine-safe; the zero value is not usable (New).
type Tracker struct {
	cfg   Config
	ranks map[wire.WorkerKey]*rank
}

// New returns a Tracker.
func New(cfg Config) *Tracker {
	cfg.defaults()
	if cfg.BlockSize <= 0 {
		cfg.BlockSize = 16
	}
	return &Tracker{cfg: cfg, ranks: make(map[wire.WorkerKey]*rank)}
}

// Config returns the configuration with its defaults.
func (t *Tracker) Config() Config { return t.cfg }

func (t *Tracker) rank(k wire.WorkerKey) *rank {
	r := t.ranks[k]
	if r == nil {
		r = &rank{ring: make([]entry, t.cfg.Window)}
		r.st.LastReported = -1
		t.ranks[k] = r
	}
	return r
}

// Unverified counts a request whose engine reported no cached tokens.
func (t *Tracker) Unverified(k wire.WorkerKey, predicted uint32) {
	r := t.rank(k)
	r.st.Requests++
	r.st.Unverified++
	r.st.PredictedTokens += uint64(predicted) * uint64(t.cfg.BlockSize)
}

// Observe adds one request's sample for rank k at time now (nanoseconds).
func (t *Tracker) Observe(k wire.WorkerKey, s Sample, now int64) Verdict {
	r := t.rank(k)
	bs := t.cfg.BlockSize
	rep := s.Reported / bs
	e := rep - int(s.Predicted)
	agree := e >= -1 && e <= 1
	if !agree && s.Host > 0 && rep >= int(s.Predicted)-1 && rep <= int(s.Predicted+s.Host)+1 {
		agree = true
	}
	st := &r.st
	st.Requests++
	if s.Predicted > 0 {
		r.matched = true
	}
	if agree {
		st.Agreed++
	}
	st.PredictedTokens += uint64(s.Predicted) * uint64(bs)
	st.PredictedHostTokens += uint64(s.Host) * uint64(bs)
	st.ReportedTokens += uint64(max(s.Reported, 0))
	st.ErrorSum += int64(e)
	b := 0
	for b < len(ErrorBuckets) && float64(e) > ErrorBuckets[b] {
		b++
	}
	st.Errors[b]++
	st.LastReported = s.Reported
	if r.n == len(r.ring) {
		r.count(&r.ring[r.next], -1, bs)
	}
	r.ring[r.next] = entry{predicted: s.Predicted, host: s.Host, reported: s.Reported, err: int32(e), agree: agree}
	r.count(&r.ring[r.next], 1, bs)
	r.next = (r.next + 1) % len(r.ring)
	r.n = min(r.n+1, len(r.ring))

	v := Verdict{Agree: agree, ErrBlocks: e}
	cause, eng := t.diagnose(r, s.Publishes)
	if cause != r.cause || eng != r.engBlock {
		if cause != CauseNone {
			st.LastCause = cause
		}
		v.Named = cause != CauseNone
		r.cause, r.engBlock = cause, eng
	}
	v.Cause, v.EngineBlock = cause, eng
	if (cause == CauseStale || cause == CauseMissing) && (!r.repaired || now-r.lastRepair >= int64(t.cfg.RepairInterval)) {
		v.Repair = true
		r.repaired, r.lastRepair = true, now
		st.Repairs++
		r.n, r.next = 0, 0 // the next verdict rests on the repaired index
		r.disagree, r.offGrid = 0, 0
		r.cause, r.engBlock = CauseNone, 0
	}
	return v
}

// count adds (d = 1) or removes (d = -1) e from the window's counts.
func (r *rank) count(e *entry, d, bs int) {
	if !e.agree {
		r.disagree += d
	}
	if e.reported%bs != 0 {
		r.offGrid += d
	}
}

// diagnose names the cause the window shows (see the package doc).
func (t *Tracker) diagnose(r *rank, publishes bool) (Cause, int) {
	if r.n < t.cfg.MinSamples {
		return CauseNone, 0
	}
	if r.offGrid == 0 && r.disagree < int(t.cfg.Persist*float64(r.n)+0.5) {
		return CauseNone, 0 // every named cause needs one or the other
	}
	bs := t.cfg.BlockSize
	var g, nonzero, over, under, agreed, lo, hi int
	for i := range r.n {
		e := &r.ring[i]
		if e.reported > 0 {
			g = gcd(g, e.reported)
			nonzero++
			if lo == 0 || e.reported < lo {
				lo = e.reported
			}
			hi = max(hi, e.reported)
		}
		switch {
		case e.agree:
			agreed++
		case e.err < -1:
			over++
		case e.err > 1:
			under++
		}
	}
	need := int(t.cfg.Persist*float64(r.n) + 0.5)
	disagree := r.n - agreed
	// A larger multiple is evidence only while nothing matches (the
	// engine's blocks hash differently) and the reports vary: a constant
	// report has itself as its divisor.
	if nonzero >= t.cfg.MinSamples && (g%bs != 0 || (g > bs && !r.matched && disagree >= need && lo != hi)) {
		return CauseBlockSize, g
	}
	if under >= need && !r.matched {
		if g > bs {
			// The reports' divisor is a larger multiple of the block
			// size: left to the block-size rule until the reports vary,
			// whether or not the rank's events have arrived yet.
			return CauseNone, 0
		}
		if publishes {
			return CauseHash, 0
		}
	}
	if over >= need {
		return CauseStale, 0
	}
	if under >= need {
		return CauseMissing, 0
	}
	return CauseNone, 0
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// Stats returns rank k's totals and window, and false for a rank never
// seen.
func (t *Tracker) Stats(k wire.WorkerKey) (Stats, bool) {
	r := t.ranks[k]
	if r == nil {
		return Stats{}, false
	}
	st := r.st
	st.WindowSize = r.n
	for i := range r.n {
		if r.ring[i].agree {
			st.WindowAgreed++
		}
	}
	st.Cause, st.EngineBlock = r.cause, r.engBlock
	return st, true
}

// Keys appends the ranks the tracker holds to dst.
func (t *Tracker) Keys(dst []wire.WorkerKey) []wire.WorkerKey {
	for k := range t.ranks {
		dst = append(dst, k)
	}
	return dst
}

// Forget drops every rank of worker (it left).
func (t *Tracker) Forget(worker uint64) {
	for k := range t.ranks {
		if k.Worker == worker {
			delete(t.ranks, k)
		}
	}
}
