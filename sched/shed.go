package sched

import (
	"math"
	"math/rand/v2"
	"time"
)

// Early shedding (Config.MaxQueueWait, docs/decisions/0027-shedding-ramp.md).
// The waiting queue's
// drain rate is measured, the wait a new request would have is predicted
// from it, and a request that would wait longer than the bound is rejected
// (ReasonQueueWait) before it is queued; between half the bound and the
// bound it is rejected with a probability that grows linearly from 0 to 1,
// so that under a steady overload the queue settles where the admitted
// fraction matches the fleet's capacity instead of filling, overflowing and
// closing the door for a whole rejection window.
const (
	// A drain-rate sample spans at least shedWindow of queue-busy time and
	// shedMinCount admissions, or shedMaxWindow whatever the count (a
	// stalled fleet measures 0). 200 ms holds several admissions at tens of
	// requests per second and lets the estimate follow a change within a
	// second; a slow fleet (a few admissions per second) gets longer samples
	// instead of noisy ones.
	shedWindow    = int64(200 * time.Millisecond)
	shedMaxWindow = int64(2 * time.Second)
	shedMinCount  = 4
	// shedTau is the time constant of the drain rate's exponential
	// smoothing, in queue-busy time: a sample of duration d weighs
	// 1 − exp(−d/τ), about five 200 ms samples to follow a step.
	shedTau = float64(time.Second)
)

// shedder measures how fast the waiting queue drains and decides early
// rejections. It is part of the Scheduler's deterministic core: time comes
// in as arguments and randomness from its own seeded RNG (so shedding does
// not shift the tie-break draws of the main RNG). Not goroutine-safe; the
// zero value is off (maxWait 0).
//
// Rate: admissions from the queue per second of time during which the
// queue was not empty. Only that time counts, because only then is the rate
// at which requests leave the queue the fleet's (an empty queue drains at
// the arrival rate). Samples (see shedWindow) are smoothed with time
// constant shedTau. Before the first sample there is no estimate and nothing
// is shed.
type shedder struct {
	maxWait float64 // seconds; 0: off
	rng     *rand.Rand

	last    int64   // time of the last advance
	busy    int64   // queue-busy nanoseconds in the current sample
	count   int     // admissions in the current sample
	rate    float64 // smoothed admissions per second, valid when have
	have    bool
	samples uint64
}

func (m *shedder) init(maxWait time.Duration, seed uint64) {
	m.maxWait = maxWait.Seconds()
	m.rng = rand.New(rand.NewPCG(seed^0x3c6ef372fe94f82b, seed^0xa54ff53a5f1d36f1))
}

// account adds the time from the last call to now, during which the queue
// held queued requests. Callers account before every change of the
// queue's length.
func (m *shedder) account(now int64, queued int) {
	if now > m.last {
		if queued > 0 {
			m.busy += now - m.last
		}
		m.last = now
	}
}

// sample closes the current sample if it is long enough. Admissions made at
// the end of the busy time are counted first (drain calls it after them).
func (m *shedder) sample() {
	if m.busy < shedWindow || (m.count < shedMinCount && m.busy < shedMaxWindow) {
		return
	}
	x := float64(m.count) / (float64(m.busy) / 1e9)
	if m.have {
		m.rate += (1 - math.Exp(-float64(m.busy)/shedTau)) * (x - m.rate)
	} else {
		m.rate, m.have = x, true
	}
	m.busy, m.count = 0, 0
	m.samples++
}

// advance accounts up to now and closes a sample that is due.
func (m *shedder) advance(now int64, queued int) {
	m.account(now, queued)
	m.sample()
}

// admitted counts n requests leaving the queue for a worker.
func (m *shedder) admitted(n int) { m.count += n }

// limit is how many requests may wait, at the current drain rate, within
// the bound, capped at depth (the queue's size); ok is false without an
// estimate.
func (m *shedder) limit(depth int) (float64, bool) {
	if !m.have {
		return 0, false
	}
	return min(m.rate*m.maxWait, float64(depth)), true
}

// shedProb is the probability of rejecting a request that would be
// queued behind queued others, against the limit: 0 up to half of it,
// rising linearly to 1 at the limit (RED's ramp). queued+1 is the request's
// place in a FIFO queue, whose predicted wait is (queued+1)/rate.
func shedProb(queued int, limit float64) float64 {
	if limit <= 0 {
		return 1
	}
	x := float64(queued+1) / limit
	return min(max(2*x-1, 0), 1)
}

// shed reports whether a request that would wait behind queued others, in a
// queue of depth slots, is rejected. The first waiter is never shed: it
// waits for the next free rank, and its admission keeps the drain rate
// measurable after a stall.
func (m *shedder) shed(queued, depth int) bool {
	if m.maxWait <= 0 || queued == 0 {
		return false
	}
	lim, ok := m.limit(depth)
	if !ok {
		return false
	}
	p := shedProb(queued, lim)
	switch {
	case p <= 0:
		return false
	case p >= 1:
		return true
	}
	return m.rng.Float64() < p
}

// QueueWait is the drain-rate estimate and the wait it predicts.
type QueueWait struct {
	// Rate is the smoothed number of requests leaving the queue for a worker
	// per second while the queue is not empty; 0 with Known false before the
	// first sample.
	Rate  float64
	Known bool
	// Predicted is the time the requests waiting now take to drain at Rate
	// (0 for an empty queue; the bound, or more, when Rate is 0).
	Predicted time.Duration
	// Samples is the number of rate samples taken.
	Samples uint64
}

// QueueWait returns the queue's measured drain rate and the wait it
// predicts for the requests waiting at now. It is measured whether or not
// Config.MaxQueueWait sheds.
func (s *Scheduler) QueueWait(now int64) QueueWait {
	now = s.advance(now)
	n := s.q.len()
	s.shed.advance(now, n)
	w := QueueWait{Rate: s.shed.rate, Known: s.shed.have, Samples: s.shed.samples}
	if n > 0 && w.Known {
		sec := math.Inf(1)
		if w.Rate > 0 {
			sec = float64(n) / w.Rate
		}
		w.Predicted = time.Duration(min(sec, float64(time.Hour)/1e9) * 1e9)
	}
	return w
}
