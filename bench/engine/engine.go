package engine

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kvroute/kvroute/bench/kvcache"
	"github.com/kvroute/kvroute/wire"
)

// Errors returned by Submit.
var (
	ErrDuplicate  = errors.New("engine: request id already queued or running")
	ErrTooLong    = errors.New("engine: request needs more KV blocks than the cache has")
	ErrBadRequest = errors.New("engine: malformed request")
)

// Config configures an Engine. Zero fields take the defaults noted. Plain
// data, copied by New.
type Config struct {
	Worker           wire.WorkerKey
	Capacity         int     // KV cache blocks (> 0)
	BlockSize        int     // tokens per block (> 0)
	MaxNumSeqs       int     // running requests at most; default 256 (vLLM max_num_seqs)
	MaxBatchedTokens int     // tokens per step at most; default 8192 (vLLM max_num_batched_tokens)
	Speedup          float64 // step times are divided by it; default 1
	Perf             Perf    // default DefaultPerf
	Salt             uint64  // engine hash salt (kvcache.Config.Salt)
	// HostCapacity > 0 adds a host tier of that many blocks behind the
	// device (kvcache.Config.HostCapacity): blocks the device evicts are
	// offloaded there, and a prompt's blocks found there after its device
	// prefix are onloaded instead of recomputed, each adding HostBlockTime
	// to its step (before Speedup).
	HostCapacity  int
	HostBlockTime time.Duration
}

// Request is a request to the engine. Submit copies what it keeps, so the
// caller may reuse Prompt's storage at once.
type Request struct {
	ID           uint64
	Prompt       []wire.BlockHash // local hashes of the prompt's full blocks: len PromptTokens/BlockSize (copied)
	PromptTokens int              // > 0
	MaxTokens    int              // output tokens to generate, >= 1
	// Output, when not empty, holds the local hashes of the full blocks
	// past the prompt's: (PromptTokens+MaxTokens)/BlockSize - len(Prompt)
	// of them, covering the prompt's partial tail and the generated tokens
	// (copied). A caller that knows its output tokens passes their hashes,
	// so identical requests store identical blocks and a follow-up prompt
	// that repeats prompt and answer finds them cached. Empty: the engine
	// names those blocks by the request id, so no two requests share one.
	Output []wire.BlockHash
	// Transferred counts prompt tokens whose KV arrived from another
	// worker (the decode side of disaggregated serving): at admission the
	// full blocks among them count as computed, as cached ones do, and are
	// stored (and announced) like computed blocks; only the rest of the
	// prompt is prefilled. 0: none.
	Transferred int
	// Pin keeps the request's blocks allocated after it finishes (the
	// prefill side of disaggregated serving holds them until the decode
	// side has pulled them), until Unpin.
	Pin bool
}

// EffectKind is the kind of an Effect.
type EffectKind uint8

// Effect kinds.
const (
	FirstToken EffectKind = iota + 1 // prefill done, first output token out
	Finished                         // last output token out; blocks released
	Preempted                        // blocks released for recomputation; back to waiting
)

func (k EffectKind) String() string {
	switch k {
	case FirstToken:
		return "first-token"
	case Finished:
		return "finished"
	case Preempted:
		return "preempted"
	}
	return fmt.Sprintf("EffectKind(%d)", uint8(k))
}

// Effect (plain data) is something that happened to a request, at At (the end of the step
// that produced it; for Preempted, the start).
type Effect struct {
	Kind         EffectKind
	Request      uint64
	At           time.Duration
	CachedTokens int // prompt tokens found in the prefix cache when first scheduled (device and host)
	HostTokens   int // of CachedTokens, those onloaded from the host tier
	OutputTokens int // output tokens generated so far
}

// Stats are an Engine's cumulative counters (plain data).
type Stats struct {
	Steps         uint64
	Busy          time.Duration // sum of step durations
	PrefillTokens uint64        // tokens computed in prefill (including recomputation)
	CachedTokens  uint64        // prompt tokens served by the prefix cache at first scheduling
	HostTokens    uint64        // of CachedTokens, those onloaded from the host tier
	// RecomputeCachedTokens: tokens of preempted requests found still cached
	// when they were scheduled again (not recomputed).
	RecomputeCachedTokens uint64
	DecodeTokens          uint64 // tokens computed in decode passes
	Preemptions           uint64
	Finished              uint64
	Aborted               uint64 // requests ended by Abort
	// TransferredTokens: prompt tokens admitted as computed because their
	// KV arrived from another worker (Request.Transferred).
	TransferredTokens uint64
}

// StepInfo describes the last non-empty step (plain data).
type StepInfo struct {
	At            time.Duration // the step's start (Step's now)
	Duration      time.Duration
	Scheduled     int     // requests in the batch
	PrefillTokens int     // uncached tokens computed in prefill (chunks and recomputation)
	DecodeTokens  int     // decode tokens
	Usage         float64 // KV usage after allocation: the decode model's input
}

// req is one request's state. Pointer-free apart from local, whose capacity
// is reused across the requests a slot serves.
type req struct {
	id        uint64
	local     []wire.BlockHash // prompt hashes, then synthesized hashes of blocks holding output tokens
	prompt    int              // prompt tokens
	nPrompt   int              // prompt hashes in local
	maxTokens int
	output    int // generated tokens
	computed  int // tokens whose KV is computed (or scheduled this step)
	cached    int // CachedTokens; -1 until first scheduled
	host      int // HostTokens
	first     bool
	pin       bool
	remote    int // Request.Transferred
	arrival   time.Duration
}

func (r *req) tokens() int { return r.prompt + r.output }

// scheduled is one request's share of a step.
type scheduled struct {
	slot   int32
	tokens int
	decode bool
}

// Engine is a vLLM-like engine model over one kvcache.Manager (see the
// package doc). Not goroutine-safe; the zero value is not usable, use New.
// Effects and Events return views valid until Reset. Step allocates nothing
// in steady state.
type Engine struct {
	cfg     Config
	kv      *kvcache.Manager
	reqs    []req
	spare   []int32
	index   map[uint64]int32
	waiting []int32 // FIFO from whead; preempted requests go back to the front
	whead   int
	running []int32 // in admission order; preemption takes the last
	sched   []scheduled
	effects []Effect
	stats   Stats
	last    StepInfo
	pinned  map[uint64]struct{} // finished requests whose blocks stay allocated (Request.Pin)
}

// New returns an idle engine.
func New(cfg Config) *Engine {
	if cfg.MaxNumSeqs <= 0 {
		cfg.MaxNumSeqs = 256
	}
	if cfg.MaxBatchedTokens <= 0 {
		cfg.MaxBatchedTokens = 8192
	}
	if cfg.Speedup <= 0 {
		cfg.Speedup = 1
	}
	if cfg.Perf.Prefill == nil {
		cfg.Perf.Prefill = DefaultPerf.Prefill
	}
	if cfg.Perf.Decode == nil {
		cfg.Perf.Decode = DefaultPerf.Decode
	}
	return &Engine{
		cfg:   cfg,
		kv:    kvcache.New(kvcache.Config{Capacity: cfg.Capacity, BlockSize: cfg.BlockSize, Worker: cfg.Worker, Salt: cfg.Salt, HostCapacity: cfg.HostCapacity}),
		index: make(map[uint64]int32),
	}
}

// Config returns the configuration with defaults filled in.
func (e *Engine) Config() Config { return e.cfg }

// KV returns the engine's block manager, for inspection (Held, Usage,
// Match). Mutating it behind the engine's back breaks the engine.
func (e *Engine) KV() *kvcache.Manager { return e.kv }

// Stats returns the cumulative counters.
func (e *Engine) Stats() Stats { return e.stats }

// LastStep describes the last step that scheduled anything.
func (e *Engine) LastStep() StepInfo { return e.last }

// Load returns the number of waiting and running requests.
func (e *Engine) Load() (waiting, running int) { return len(e.waiting) - e.whead, len(e.running) }

// Idle reports whether no request is waiting or running.
func (e *Engine) Idle() bool { return len(e.waiting) == e.whead && len(e.running) == 0 }

// Submit queues r at time now. The prompt hashes are copied.
func (e *Engine) Submit(r Request, now time.Duration) error {
	bs := e.cfg.BlockSize
	if r.PromptTokens <= 0 || r.MaxTokens < 1 || len(r.Prompt) != r.PromptTokens/bs ||
		(len(r.Output) != 0 && len(r.Prompt)+len(r.Output) != (r.PromptTokens+r.MaxTokens)/bs) {
		return fmt.Errorf("%w: %d prompt tokens, %d prompt and %d output hashes at block size %d, %d max tokens",
			ErrBadRequest, r.PromptTokens, len(r.Prompt), len(r.Output), bs, r.MaxTokens)
	}
	if (r.PromptTokens+r.MaxTokens+bs-1)/bs > e.cfg.Capacity {
		return ErrTooLong
	}
	if _, ok := e.index[r.ID]; ok {
		return ErrDuplicate
	}
	if _, ok := e.pinned[r.ID]; ok {
		return ErrDuplicate
	}
	if r.Transferred < 0 || r.Transferred > r.PromptTokens {
		return fmt.Errorf("%w: %d transferred tokens of a %d-token prompt", ErrBadRequest, r.Transferred, r.PromptTokens)
	}
	var slot int32
	if n := len(e.spare); n > 0 {
		slot, e.spare = e.spare[n-1], e.spare[:n-1]
	} else {
		e.reqs = append(e.reqs, req{})
		slot = int32(len(e.reqs) - 1)
	}
	q := &e.reqs[slot]
	*q = req{
		id: r.ID, local: append(append(q.local[:0], r.Prompt...), r.Output...), prompt: r.PromptTokens, nPrompt: len(r.Prompt),
		maxTokens: r.MaxTokens, cached: -1, arrival: now, pin: r.Pin, remote: r.Transferred,
	}
	e.index[r.ID] = slot
	e.waiting = append(e.waiting, slot)
	return nil
}

// cover extends q.local to hashes for the first blocks full blocks. Blocks
// past the prompt's hold output tokens (and the prompt's partial tail); when
// the request did not name them (Request.Output), their local hash is a
// function of the request id and block index: a preempted request
// recomputes the same blocks and finds them cached.
func (q *req) cover(blocks int) {
	for i := len(q.local); i < blocks; i++ {
		q.local = append(q.local, wire.BlockHash(mix(q.id^mix(uint64(i)+0x6f7574707574))))
	}
}

func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Step schedules one batch at time now, as vLLM's scheduler does, and
// returns its duration (0 when idle: nothing was scheduled):
//
//  1. Running requests, in admission order, get their next tokens (the rest
//     of a chunked prefill, or one decode token), within the token budget.
//     When a request's blocks cannot grow, the last running request is
//     preempted (its blocks freed, back to the front of the waiting queue)
//     until it fits, or the request itself was the one preempted.
//  2. If nothing was preempted, waiting requests are admitted in order while
//     budget, MaxNumSeqs and blocks allow: each reuses its cached prefix (at
//     most PromptTokens-1 tokens, as vLLM recomputes the last) and computes
//     up to the budget (chunked prefill).
//
// The duration is Prefill(uncached tokens of prefill work) plus, if any
// request decodes, Decode(KV usage after allocation) (less Perf.Shared when
// both run), divided by Speedup. A
// request whose prompt (or recomputation) completes emits one output token;
// a decoding request emits one per step.
func (e *Engine) Step(now time.Duration) time.Duration {
	bs := e.cfg.BlockSize
	budget := e.cfg.MaxBatchedTokens
	e.sched = e.sched[:0]
	onload := 0 // blocks copied from the host tier this step
	preempted := false

	for i := 0; i < len(e.running) && budget > 0; i++ {
		slot := e.running[i]
		q := &e.reqs[slot]
		n := min(q.tokens()-q.computed, budget)
		decode := q.output > 0 && q.computed == q.tokens()-1
		q.cover((q.computed + n) / bs)
		ok := true
		for {
			if _, err := e.kv.Grow(q.id, q.local, q.computed+n); err == nil {
				break
			} else if !errors.Is(err, kvcache.ErrNoSpace) {
				panic(fmt.Sprintf("engine: grow request %d: %v", q.id, err))
			}
			victim := e.running[len(e.running)-1]
			e.running = e.running[:len(e.running)-1]
			e.preempt(victim, now)
			preempted = true
			if victim == slot {
				ok = false
				break
			}
		}
		if !ok {
			break
		}
		e.sched = append(e.sched, scheduled{slot: slot, tokens: n, decode: decode})
		budget -= n
	}

	for !preempted && e.whead < len(e.waiting) && budget > 0 && len(e.running) < e.cfg.MaxNumSeqs {
		slot := e.waiting[e.whead]
		q := &e.reqs[slot]
		total := q.tokens()
		q.cover(total / bs)
		dev, host := e.kv.MatchTiers(q.local[:(total-1)/bs])
		computed := (dev + host) * bs
		hits := computed
		if tb := min(q.remote/bs, (total-1)/bs); tb > dev+host {
			// Transferred blocks past the cached prefix: taken as they
			// came, nothing to onload.
			host, computed = 0, tb*bs
			hits = dev * bs
		}
		n := min(total-computed, budget)
		e.kv.Onload(q.local, dev, dev+host)
		if _, err := e.kv.Allocate(q.id, q.local, computed+n); err != nil {
			if !errors.Is(err, kvcache.ErrNoSpace) {
				panic(fmt.Sprintf("engine: allocate request %d: %v", q.id, err))
			}
			break
		}
		onload += host
		if q.cached < 0 {
			q.cached, q.host = hits, host*bs
			e.stats.CachedTokens += uint64(hits)
			e.stats.HostTokens += uint64(host * bs)
			e.stats.TransferredTokens += uint64(computed - hits)
		} else {
			e.stats.RecomputeCachedTokens += uint64(computed)
		}
		q.computed = computed
		e.whead++
		e.running = append(e.running, slot)
		e.sched = append(e.sched, scheduled{slot: slot, tokens: n})
		budget -= n
	}
	if e.whead == len(e.waiting) {
		e.waiting, e.whead = e.waiting[:0], 0
	} else if e.whead > len(e.waiting)/2 { // compact: keeps the queue's storage bounded
		n := copy(e.waiting, e.waiting[e.whead:])
		e.waiting, e.whead = e.waiting[:n], 0
	}

	if len(e.sched) == 0 {
		return 0
	}
	prefill, decode := 0, 0
	for _, s := range e.sched {
		if s.decode {
			decode += s.tokens
		} else {
			prefill += s.tokens
		}
	}
	e.stats.PrefillTokens += uint64(prefill)
	e.stats.DecodeTokens += uint64(decode)
	used, total := e.kv.Usage()
	u := float64(used) / float64(total)
	d := e.cfg.Perf.Prefill(prefill)
	if decode > 0 {
		d += e.cfg.Perf.Decode(u)
		if prefill > 0 {
			d -= min(e.cfg.Perf.Shared, d)
		}
	}
	d += time.Duration(onload) * e.cfg.HostBlockTime
	d = time.Duration(float64(d) / e.cfg.Speedup)
	e.last = StepInfo{At: now, Duration: d, Scheduled: len(e.sched), PrefillTokens: prefill, DecodeTokens: decode, Usage: u}
	end := now + d

	finished := false
	for _, s := range e.sched {
		q := &e.reqs[s.slot]
		q.computed += s.tokens
		if q.computed < q.tokens() {
			continue // a prefill chunk
		}
		q.output++
		if !q.first {
			q.first = true
			e.effects = append(e.effects, Effect{Kind: FirstToken, Request: q.id, At: end, CachedTokens: q.cached, HostTokens: q.host, OutputTokens: q.output})
		}
		if q.output >= q.maxTokens {
			e.effects = append(e.effects, Effect{Kind: Finished, Request: q.id, At: end, CachedTokens: q.cached, HostTokens: q.host, OutputTokens: q.output})
			if q.pin {
				if e.pinned == nil {
					e.pinned = make(map[uint64]struct{})
				}
				e.pinned[q.id] = struct{}{}
			} else {
				e.kv.Free(q.id)
			}
			e.stats.Finished++
			finished = true
		}
	}
	if finished {
		kept := e.running[:0]
		for _, slot := range e.running {
			q := &e.reqs[slot]
			if q.output >= q.maxTokens {
				delete(e.index, q.id)
				e.spare = append(e.spare, slot)
			} else {
				kept = append(kept, slot)
			}
		}
		e.running = kept
	}
	e.stats.Steps++
	e.stats.Busy += d
	return d
}

// preempt frees a running request's blocks and requeues it at the front.
func (e *Engine) preempt(slot int32, now time.Duration) {
	q := &e.reqs[slot]
	e.kv.Preempt(q.id)
	q.computed = 0
	e.stats.Preemptions++
	e.effects = append(e.effects, Effect{Kind: Preempted, Request: q.id, At: now, CachedTokens: q.cached, HostTokens: q.host, OutputTokens: q.output})
	// Prepend: vLLM puts preempted requests first in line.
	if e.whead > 0 {
		e.whead--
		e.waiting[e.whead] = slot
		return
	}
	e.waiting = append(e.waiting, 0)
	copy(e.waiting[1:], e.waiting)
	e.waiting[0] = slot
}

// Abort ends request id at once, as vLLM aborts a request whose client
// disconnected: it leaves the waiting or running queue and its blocks are
// freed. Its full blocks stay cached until evicted, so nothing is announced
// (vLLM publishes no event when it frees blocks), and no effect is emitted.
// Effects of id already in the outbox stay there. It reports whether id was
// waiting or running. Call it between steps.
func (e *Engine) Abort(id uint64) bool {
	slot, ok := e.index[id]
	if !ok {
		return false
	}
	if i := slices.Index(e.running, slot); i >= 0 {
		e.running = slices.Delete(e.running, i, i+1)
	} else if i := slices.Index(e.waiting[e.whead:], slot); i >= 0 {
		e.waiting = slices.Delete(e.waiting, e.whead+i, e.whead+i+1)
	}
	e.kv.Free(id)
	delete(e.index, id)
	e.spare = append(e.spare, slot)
	e.stats.Aborted++
	return true
}

// Unpin frees the blocks of a finished request submitted with Pin; they
// stay cached until evicted, as a finished request's do. It reports whether
// id was pinned.
func (e *Engine) Unpin(id uint64) bool {
	if _, ok := e.pinned[id]; !ok {
		return false
	}
	delete(e.pinned, id)
	e.kv.Free(id)
	return true
}

// Pinned returns the number of finished requests whose blocks are pinned.
func (e *Engine) Pinned() int { return len(e.pinned) }

// Effects returns the effects since the last Reset, in order.
func (e *Engine) Effects() []Effect { return e.effects }

// Events returns the KV events since the last Reset (kvcache.Manager.Events).
func (e *Engine) Events() []wire.Event { return e.kv.Events() }

// Reset empties the effect and event outboxes.
func (e *Engine) Reset() {
	e.effects = e.effects[:0]
	e.kv.Reset()
}
