package sched

import (
	"math"
	"time"
)

// TokenBucket is a tenant's rate limit in prompt tokens per second with a
// burst: it fills at Rate up to Burst, and a request takes its prompt's
// tokens. A request is allowed when the bucket holds at least
// min(tokens, Burst) (so a prompt larger than the burst passes when the
// bucket is full) and then takes all its tokens, which may leave the
// bucket in debt: the long-run rate is Rate whatever the prompt sizes.
//
// Deterministic (time is an argument, nanoseconds since an epoch the
// caller chooses) and not goroutine-safe. The zero value has Rate 0:
// unlimited.
type TokenBucket struct {
	Rate  float64 // tokens per second; 0: unlimited
	Burst float64 // tokens

	level float64
	last  int64
	init  bool
}

// Take takes tokens at now if the bucket allows it. Otherwise it takes
// nothing and returns how long until it would allow them (the Retry-After
// of a 429), at least one nanosecond.
func (b *TokenBucket) Take(tokens uint32, now int64) (ok bool, retry time.Duration) {
	if b.Rate <= 0 {
		return true, 0
	}
	b.refill(now)
	need := min(float64(tokens), b.Burst)
	if b.level >= need {
		b.level -= float64(tokens)
		return true, 0
	}
	sec := (need - b.level) / b.Rate
	return false, max(time.Duration(math.Ceil(sec*1e9)), 1)
}

// Level returns the tokens in the bucket at now (negative in debt).
func (b *TokenBucket) Level(now int64) float64 {
	if b.Rate <= 0 {
		return math.Inf(1)
	}
	b.refill(now)
	return b.level
}

// SetLimit changes the rate and burst, keeping the level (capped at the
// new burst); a bucket seen for the first time starts full.
func (b *TokenBucket) SetLimit(rate, burst float64) {
	b.Rate, b.Burst = rate, burst
	if b.init {
		b.level = min(b.level, burst)
	}
}

func (b *TokenBucket) refill(now int64) {
	if !b.init {
		b.level, b.last, b.init = b.Burst, now, true
		return
	}
	if now > b.last {
		b.level = min(b.Burst, b.level+float64(now-b.last)/1e9*b.Rate)
		b.last = now
	}
}
