package replay

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kvroute/kvroute/bench/trace"
	"github.com/kvroute/kvroute/wire"
)

// ErrEmpty is returned by Prepare for a trace without requests.
var ErrEmpty = errors.New("replay: empty trace")

// Workload is a trace prepared for replay at one engine block size: every
// request's local and sequence block hashes, computed once, its session
// links, and the achievable hit ratio. A replay only reads it, so one
// Workload serves any number of concurrent Simulate calls.
//
// Immutable after Prepare and goroutine-safe; the zero value is not usable.
// Slices returned by its methods are views valid as long as the Workload and
// must not be modified.
type Workload struct {
	Name      string
	Trace     *trace.Trace
	BlockSize int

	local []wire.BlockHash // every request's local hashes, concatenated
	seq   []wire.SeqHash   // and their sequence hashes
	off   []int            // request i's hashes are [off[i], off[i+1])
	prev  []int32          // previous turn of the same session, -1 if none
	start time.Duration    // earliest timestamp: arrival offsets are measured from it

	achievable       float64
	promptTokens     int64
	outputTokens     int64
	achievableTokens int64
	achievableOver   []float64     // achievable hit ratio per time bucket
	span             time.Duration // of the static arrival times
	arrival          []time.Duration
}

// Buckets is the number of time slots of the hit-ratio-over-time series:
// the trace's span (at speedup 1) is cut into this many equal slots.
const Buckets = 60

// bucket accumulates the hit ratio of the requests arriving in one time slot.
type bucket struct{ prompt, cached int64 }

// Prepare hashes every request of t at blockSize tokens per block (wire.Seed)
// and computes the achievable hit ratio (see Workload.Achievable). name
// labels reports (usually the trace's path).
func Prepare(t *trace.Trace, blockSize int, name string) (*Workload, error) {
	if blockSize <= 0 {
		return nil, fmt.Errorf("replay: block size %d must be > 0", blockSize)
	}
	n := len(t.Requests)
	if n == 0 {
		return nil, ErrEmpty
	}
	w := &Workload{Name: name, Trace: t, BlockSize: blockSize, off: make([]int, n+1), prev: make([]int32, n)}
	total := 0
	for i := range t.Requests {
		total += t.Requests[i].InputLength / blockSize
	}
	w.local = make([]wire.BlockHash, 0, total)
	w.seq = make([]wire.SeqHash, 0, total)
	h := trace.NewHasher(blockSize, wire.Seed)
	lastTurn := map[string]int32{}
	first := true
	for i := range t.Requests {
		r := &t.Requests[i]
		if r.InputLength <= 0 {
			return nil, fmt.Errorf("replay: request %d (line %d) has input_length %d", i, r.Line, r.InputLength)
		}
		w.off[i] = len(w.local)
		w.local = h.Append(w.local, r)
		w.seq = wire.SequenceHashes(w.seq, w.local[w.off[i]:])
		w.prev[i] = -1
		if r.Session != "" {
			if p, ok := lastTurn[r.Session]; ok {
				w.prev[i] = p
			}
			lastTurn[r.Session] = int32(i)
		}
		if r.HasTime && (first || r.Time < w.start) {
			w.start, first = r.Time, false
		}
		w.promptTokens += int64(r.InputLength)
		w.outputTokens += int64(r.OutputLength)
	}
	w.off[n] = len(w.local)
	w.computeAchievable()
	return w, nil
}

// Len returns the number of requests.
func (w *Workload) Len() int { return len(w.Trace.Requests) }

// Local returns request i's local block hashes (one per full block).
func (w *Workload) Local(i int) []wire.BlockHash { return w.local[w.off[i]:w.off[i+1]] }

// Seq returns request i's sequence block hashes.
func (w *Workload) Seq(i int) []wire.SeqHash { return w.seq[w.off[i]:w.off[i+1]] }

// Achievable returns the hit ratio of an infinite prefix cache shared by all
// workers: requests in arrival order (a session turn without a timestamp
// arrives its delay after the previous turn), each hitting the leading
// blocks of its prompt that an earlier request already computed, capped as
// the engine caps them (at most (prompt tokens − 1) / block size blocks: the
// last prompt token is always computed), over the prompt tokens. It is an
// upper bound for any policy on any fleet of the same block size.
func (w *Workload) Achievable() float64 { return w.achievable }

// PromptTokens returns the sum of the prompts' lengths.
func (w *Workload) PromptTokens() int64 { return w.promptTokens }

// Span returns the time from the first to the last arrival at speedup 1,
// counting session turns without a timestamp at their delay after the
// previous turn's arrival.
func (w *Workload) Span() time.Duration { return w.span }

// staticArrival returns the arrival offset of every request at speedup 1,
// with session turns without a timestamp placed at their delay after the
// previous turn's arrival (a replay places them after its finish instead).
func (w *Workload) staticArrival() []time.Duration {
	reqs := w.Trace.Requests
	at := make([]time.Duration, len(reqs))
	for i := range reqs {
		r := &reqs[i]
		switch {
		case r.HasTime:
			at[i] = r.Time - w.start
		case w.prev[i] >= 0:
			at[i] = at[w.prev[i]] + r.Delay
		}
	}
	return at
}

// arrivalOrder returns the request indexes sorted by static arrival (file
// order among equals).
func arrivalOrder(at []time.Duration) []int32 {
	order := make([]int32, len(at))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortStableFunc(order, func(a, b int32) int {
		switch {
		case at[a] < at[b]:
			return -1
		case at[a] > at[b]:
			return 1
		}
		return 0
	})
	return order
}

func (w *Workload) computeAchievable() {
	at := w.staticArrival()
	w.arrival = at
	order := arrivalOrder(at)
	w.span = at[order[len(order)-1]] - at[order[0]]
	buckets := make([]bucket, Buckets)
	seen := make(map[wire.SeqHash]struct{}, len(w.seq)/2)
	for _, i := range order {
		seq := w.Seq(int(i))
		limit := (w.Trace.Requests[i].InputLength - 1) / w.BlockSize
		hit := 0
		for hit < len(seq) && hit < limit {
			if _, ok := seen[seq[hit]]; !ok {
				break
			}
			hit++
		}
		for _, s := range seq[hit:] {
			seen[s] = struct{}{}
		}
		w.achievableTokens += int64(hit * w.BlockSize)
		b := &buckets[w.bucketOf(at[i])]
		b.prompt += int64(w.Trace.Requests[i].InputLength)
		b.cached += int64(hit * w.BlockSize)
	}
	w.achievable = float64(w.achievableTokens) / float64(w.promptTokens)
	w.achievableOver = ratios(buckets)
}

// bucketOf returns the time slot of a static arrival offset.
func (w *Workload) bucketOf(at time.Duration) int {
	if w.span <= 0 {
		return 0
	}
	return min(Buckets-1, max(0, int(int64(at)*Buckets/int64(w.span+1))))
}

// ratios returns cached/prompt per bucket (-1 for an empty bucket).
func ratios(bs []bucket) []float64 {
	out := make([]float64, len(bs))
	for i, b := range bs {
		out[i] = -1
		if b.prompt > 0 {
			out[i] = float64(b.cached) / float64(b.prompt)
		}
	}
	return out
}

// AchievableOverTime returns the achievable hit ratio of the requests
// arriving in each of the Buckets time slots (-1 for an empty slot).
func (w *Workload) AchievableOverTime() []float64 { return w.achievableOver }
