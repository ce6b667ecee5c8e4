package ingest

import (
	"sync"
	"time"

	"github.com/kvroute/kvroute/wire"
)

// problem is a kind of trouble that is logged rate-limited.
type problem uint8

const (
	probMalformed problem = iota
	probRejected
	probSizeMismatch
	probGap
	probDuplicate
	probSink
)

// maxLimiterKeys bounds the limiter's table; beyond it, entries older than
// the interval are dropped, and if that is not enough, all of them.
const maxLimiterKeys = 4096

type limKey struct {
	prob problem
	src  Source
	k    wire.WorkerKey
}

type limState struct {
	last       time.Time
	suppressed uint64
}

// limiter lets one log line per (problem, source, worker key) through per
// interval and counts the others. It is used on problem paths only.
type limiter struct {
	every time.Duration
	mu    sync.Mutex
	m     map[limKey]limState
}

func (l *limiter) init(every time.Duration) {
	l.every, l.m = every, make(map[limKey]limState)
}

// allow reports whether a line for (prob, src, k) may be logged now and, if
// so, how many were suppressed since the last one.
func (l *limiter) allow(prob problem, src Source, k wire.WorkerKey) (suppressed uint64, ok bool) {
	now := time.Now()
	key := limKey{prob, src, k}
	l.mu.Lock()
	defer l.mu.Unlock()
	st, seen := l.m[key]
	if seen && now.Sub(st.last) < l.every {
		st.suppressed++
		l.m[key] = st
		return 0, false
	}
	if !seen && len(l.m) >= maxLimiterKeys {
		for k, s := range l.m {
			if now.Sub(s.last) >= l.every {
				delete(l.m, k)
			}
		}
		if len(l.m) >= maxLimiterKeys {
			clear(l.m)
		}
	}
	l.m[key] = limState{last: now}
	return st.suppressed, true
}

func (in *Ingest) malformed(src Source, k wire.WorkerKey, err error) {
	if sup, ok := in.lim.allow(probMalformed, src, k); ok {
		args := []any{"source", src.String(), "err", err.Error(), "suppressed_since_last_log", sup}
		if src == SourceZMQ {
			args = append(args, "worker", k.Worker, "dp_rank", k.Dp)
		}
		in.log.Warn("ingest: malformed KV event message dropped", args...)
	}
}

// gap records a hole: event ids expected..got-1 of k are missing or, with
// batches (ZMQ), the batches with sequence numbers expected..got-1.
func (in *Ingest) gap(src Source, k wire.WorkerKey, expected, got uint64, batches bool) {
	c := &in.src[src]
	c.gaps.Add(1)
	what := "events"
	if batches {
		c.missingBatches.Add(got - expected)
		what = "batches"
	} else {
		c.missing.Add(got - expected)
	}
	in.recordGap(Gap{Worker: k, Source: src, Expected: expected, Got: got, Batches: batches, At: time.Now()})
	if !batches {
		in.lostAfter(k, expected-1)
	}
	if sup, ok := in.lim.allow(probGap, src, k); ok {
		in.log.Warn("ingest: KV event gap: "+what+" missing, the index may lack blocks of this worker",
			"source", src.String(), "worker", k.Worker, "dp_rank", k.Dp,
			"expected", expected, "got", got, "missing", got-expected, "suppressed_since_last_log", sup)
	}
}

func (in *Ingest) duplicate(src Source, k wire.WorkerKey, id, last uint64) {
	if sup, ok := in.lim.allow(probDuplicate, src, k); ok {
		in.log.Warn("ingest: duplicate KV event dropped",
			"source", src.String(), "worker", k.Worker, "dp_rank", k.Dp,
			"id", id, "last", last, "suppressed_since_last_log", sup)
	}
}

func (in *Ingest) sinkError(src Source, err error) {
	if sup, ok := in.lim.allow(probSink, src, wire.WorkerKey{}); ok {
		in.log.Error("ingest: applying KV events failed", "source", src.String(), "err", err.Error(),
			"suppressed_since_last_log", sup)
	}
}
