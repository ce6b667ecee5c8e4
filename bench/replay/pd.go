package replay

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"text/tabwriter"
	"time"

	"github.com/kvroute/kvroute/bench/engine"
	"github.com/kvroute/kvroute/radix"
	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire"
)

// PDCell is one way of serving a disaggregation comparison's GPUs (RunPD).
type PDCell uint8

// The cells of a P/D comparison, on the same P + D GPUs.
const (
	// CellAggKV: P + D aggregated workers, the kv policy.
	CellAggKV PDCell = iota
	// CellDisaggRR: P prefill and D decode workers, every request
	// prefilled remotely, both legs round-robin.
	CellDisaggRR
	// CellDisaggKV: every request prefilled remotely, the prefill leg by
	// the kv cost, the decode leg load first (sched.DecidePD, always).
	CellDisaggKV
	// CellCondKV: CellDisaggKV with the isl-or-load policy: short uncached
	// prompts, or a prefill pool busier than the decode pool, are served
	// on the decode worker alone.
	CellCondKV
)

// PDCells lists every cell, in report order.
var PDCells = []PDCell{CellAggKV, CellDisaggRR, CellDisaggKV, CellCondKV}

var pdCellNames = [...]string{"agg-kv", "disagg-rr", "disagg-kv", "cond-kv"}

func (c PDCell) String() string {
	if int(c) < len(pdCellNames) {
		return pdCellNames[c]
	}
	return fmt.Sprintf("PDCell(%d)", c)
}

// PDConfig configures a P/D comparison. A plain value; zero fields take the
// defaults noted.
type PDConfig struct {
	// Prefill and Decode are the pools' GPUs (one engine each); the
	// aggregated cell runs Prefill + Decode aggregated engines.
	Prefill, Decode int
	// Fleet gives every engine's KVBlocks (default DistServeKVTokens /
	// BlockSize), BlockSize (16), MaxNumSeqs (256) and MaxBatchedTokens
	// (8192); its Workers, DPRanks, host tier and polynomials are unused:
	// the step model is engine.DistServePerf.
	Fleet Fleet
	// Sched configures the scheduler (sched.DefaultConfig when its
	// BlockSize is 0); Policy and DisaggPolicy are set by the cell.
	Sched sched.Config
	// Speedup divides the trace's arrival times. Default 1.
	Speedup float64
	// TransferGBps is the prefill-to-decode KV bandwidth in GB/s; default
	// 25 (one 200 Gb/s RDMA link). KVBytesPerToken is the KV size of a
	// token; default PDKVBytesPerToken.
	TransferGBps    float64
	KVBytesPerToken int
	// EventDelay, LoadInterval and TickInterval are Config's (defaults 1
	// ms, 50 ms, 1 s).
	EventDelay, LoadInterval, TickInterval time.Duration
	Seed                                   uint64
}

// PDKVBytesPerToken is the KV cache of one OPT-13B token in fp16 (40 layers
// × 5120 × K and V × 2 bytes), the model engine.DistServePerf was profiled
// on.
const PDKVBytesPerToken = 40 * 5120 * 2 * 2

func (c PDConfig) withDefaults() PDConfig {
	if c.Fleet.BlockSize == 0 {
		c.Fleet.BlockSize = 16
	}
	if c.Fleet.KVBlocks == 0 {
		c.Fleet.KVBlocks = engine.DistServeKVTokens / c.Fleet.BlockSize
	}
	c.Fleet = c.Fleet.withDefaults()
	if c.Sched.BlockSize == 0 {
		c.Sched = sched.DefaultConfig()
	}
	c.Sched.BlockSize = c.Fleet.BlockSize
	c.Sched.ChainedHashes = true
	if c.Speedup == 0 {
		c.Speedup = 1
	}
	if c.TransferGBps == 0 {
		c.TransferGBps = 25
	}
	if c.KVBytesPerToken == 0 {
		c.KVBytesPerToken = PDKVBytesPerToken
	}
	if c.EventDelay == 0 {
		c.EventDelay = time.Millisecond
	}
	if c.LoadInterval == 0 {
		c.LoadInterval = 50 * time.Millisecond
	}
	if c.TickInterval == 0 {
		c.TickInterval = time.Second
	}
	return c
}

// Validate reports the first invalid field.
func (c PDConfig) Validate() error {
	if c.Prefill < 1 || c.Decode < 1 {
		return fmt.Errorf("%w: pd: want at least one prefill and one decode GPU (got %d,%d)", ErrConfig, c.Prefill, c.Decode)
	}
	if c.Prefill+c.Decode > 4096 {
		return fmt.Errorf("%w: pd: %d GPUs, at most 4096", ErrConfig, c.Prefill+c.Decode)
	}
	if c.Speedup < 0 || c.TransferGBps < 0 || c.KVBytesPerToken < 0 || math.IsNaN(c.Speedup) || math.IsNaN(c.TransferGBps) {
		return fmt.Errorf("%w: pd: speedup, transfer bandwidth and KV bytes per token must be > 0", ErrConfig)
	}
	d := c.withDefaults()
	if err := d.Fleet.Validate(); err != nil {
		return err
	}
	if err := d.Sched.Validate(); err != nil {
		return fmt.Errorf("%w: scheduler: %v", ErrConfig, err)
	}
	return nil
}

// PDResult is one cell at one load. Latencies in milliseconds from arrival.
type PDResult struct {
	Cell    string  `json:"cell"`
	Speedup float64 `json:"speedup"`
	// Result has the latencies (TTFT to the decode worker's first token,
	// ITL), hit ratio (prompt tokens cached where they were prefilled) and
	// counts, computed as for the other replays.
	Result Result `json:"result"`
	// Remote counts requests prefilled on a prefill worker; TransferGB the
	// KV they pulled (prompt blocks less those the decode worker held).
	Remote     int     `json:"remote"`
	TransferGB float64 `json:"transfer_gb"`
	// PrefillUtil and DecodeUtil are the busy share of each pool's GPUs
	// over the run (first arrival to last completion); in the aggregated
	// cell the first Prefill GPUs and the other Decode ones.
	PrefillUtil float64 `json:"prefill_util"`
	DecodeUtil  float64 `json:"decode_util"`
}

// P/D event kinds, in the order simultaneous events are processed.
const (
	pdStepEnd uint8 = iota + 1
	pdPulled
	pdArrival
)

// pdSim is the P/D discrete-event simulation: the offline mode's clock,
// heap and KV-event deliveries, with prefill legs, KV pulls and decode legs.
type pdSim struct {
	w    *Workload
	cfg  PDConfig
	cell PDCell

	sch     *sched.Scheduler
	core    *shard.Core // nil for round-robin pairs
	engines []*engine.Engine
	keys    []wire.WorkerKey
	rankOf  map[wire.WorkerKey]int32
	busy    []time.Duration

	stepping   []bool
	stepEffect [][]engine.Effect
	stepEvents []*delivery
	lastLoad   []time.Duration
	loaded     []bool

	agenda
	now     time.Duration
	nextTic time.Duration

	state   []uint8
	arrive  []time.Duration
	first   []time.Duration
	finish  []time.Duration
	cached  []int32
	output  []int32
	rank    []int32 // decode (or aggregated) rank
	prank   []int32 // prefill rank, -1 when served locally
	queued  []bool
	tooLong []bool
	next    []int32

	remote   int
	pulled   int64 // tokens
	radixOv  []radix.Overlap
	ov       []sched.Overlap
	batch    [1]sched.Request
	ovBatch  [1][]sched.Overlap
	decs     []sched.Decision
	effects  []sched.Effect
	firstArr time.Duration
}

// SimulatePD runs cell on the GPUs of cfg with workload w: deterministic,
// like Simulate. The decode leg's KV arrives TransferGBps after its prefill
// leg's first token; until then the prefill worker keeps the blocks pinned.
func SimulatePD(w *Workload, cfg PDConfig, cell PDCell) (PDResult, error) {
	if err := cfg.Validate(); err != nil {
		return PDResult{}, err
	}
	if int(cell) >= len(pdCellNames) {
		return PDResult{}, fmt.Errorf("%w: pd: unknown cell %d", ErrConfig, cell)
	}
	cfg = cfg.withDefaults()
	if cfg.Fleet.BlockSize != w.BlockSize {
		return PDResult{}, fmt.Errorf("%w: workload hashed at block size %d, fleet block size %d", ErrConfig, w.BlockSize, cfg.Fleet.BlockSize)
	}
	s, err := newPDSim(w, cfg, cell)
	if err != nil {
		return PDResult{}, err
	}
	if err := s.run(); err != nil {
		return PDResult{}, err
	}
	return s.result(), nil
}

func newPDSim(w *Workload, cfg PDConfig, cell PDCell) (*pdSim, error) {
	sc := cfg.Sched
	sc.Policy, sc.DisaggPolicy = sched.PolicyKV, sched.DisaggAlways
	switch cell {
	case CellDisaggRR:
		sc.Policy = sched.PolicyRoundRobin
	case CellCondKV:
		sc.DisaggPolicy = sched.DisaggISLOrLoad
	}
	sch, err := sched.New(sc, cfg.Seed)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	n := w.Len()
	gpus := cfg.Prefill + cfg.Decode
	s := &pdSim{
		w: w, cfg: cfg, cell: cell, sch: sch,
		rankOf: make(map[wire.WorkerKey]int32, gpus),
		state:  make([]uint8, n), arrive: make([]time.Duration, n),
		first: make([]time.Duration, n), finish: make([]time.Duration, n),
		cached: make([]int32, n), output: make([]int32, n),
		rank: make([]int32, n), prank: make([]int32, n),
		queued: make([]bool, n), tooLong: make([]bool, n), next: make([]int32, n),
		busy: make([]time.Duration, gpus), stepping: make([]bool, gpus),
		stepEffect: make([][]engine.Effect, gpus), stepEvents: make([]*delivery, gpus),
		lastLoad: make([]time.Duration, gpus), loaded: make([]bool, gpus),
	}
	if cell != CellDisaggRR {
		s.core = shard.NewCore(shard.CoreConfig{})
	}
	f := cfg.Fleet
	perf := engine.DistServePerf(f.KVBlocks * f.BlockSize)
	for g := range gpus {
		k := wire.WorkerKey{Worker: uint64(g + 1)}
		role := sched.RoleDecode
		if cell == CellAggKV {
			role = sched.RoleBoth
		} else if g < cfg.Prefill {
			role = sched.RolePrefill
		}
		s.rankOf[k] = int32(g)
		s.keys = append(s.keys, k)
		s.engines = append(s.engines, engine.New(engine.Config{
			Worker: k, Capacity: f.KVBlocks, BlockSize: f.BlockSize, MaxNumSeqs: f.MaxNumSeqs,
			MaxBatchedTokens: f.MaxBatchedTokens, Perf: perf,
		}))
		sch.AddWorker(k, sched.Capacity{TotalBlocks: uint64(f.KVBlocks), MaxBatchedTokens: uint64(f.MaxBatchedTokens), Role: role})
	}
	for i := range n {
		s.rank[i], s.prank[i], s.next[i] = -1, -1, -1
		req := &w.Trace.Requests[i]
		if pv := w.prev[i]; pv >= 0 && !req.HasTime {
			s.next[pv] = int32(i)
			continue
		}
		s.push(s.scale(w.arrival[i]), pdArrival, int32(i))
	}
	s.firstArr = -1
	return s, nil
}

func (s *pdSim) scale(d time.Duration) time.Duration { return scaleBy(d, s.cfg.Speedup) }

func (s *pdSim) run() error {
	for {
		ev, d, ok := s.take()
		if !ok {
			break
		}
		if d != nil {
			if err := s.advance(d.at); err != nil {
				return err
			}
			s.deliver(d)
			continue
		}
		if err := s.advance(ev.at); err != nil {
			return err
		}
		var err error
		switch ev.kind {
		case pdStepEnd:
			err = s.stepEnd(ev.idx)
		case pdPulled:
			err = s.pulledKV(ev.idx)
		case pdArrival:
			err = s.arrival(ev.idx)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *pdSim) advance(t time.Duration) error {
	s.now = t
	if t < s.nextTic {
		return nil
	}
	s.nextTic = t + s.cfg.TickInterval
	s.sch.Tick(int64(t))
	return s.drain()
}

func (s *pdSim) arrival(i int32) error {
	w := s.w
	s.arrive[i] = s.now
	if s.firstArr < 0 {
		s.firstArr = s.now
	}
	req := &w.Trace.Requests[i]
	r := sched.Request{ID: uint64(i) + 1, ISL: uint32(req.InputLength), Blocks: w.Seq(int(i))}
	s.ov = s.ov[:0]
	if s.core != nil {
		s.radixOv = s.core.Match(s.radixOv[:0], w.Local(int(i)))
		for _, o := range s.radixOv {
			s.ov = append(s.ov, sched.Overlap{Worker: o.Worker, Device: o.Blocks, TreeSize: o.TreeSize})
		}
	}
	if s.cell == CellAggKV {
		s.batch[0] = r
		s.ovBatch[0] = s.ov
		s.decs = s.sch.Decide(s.decs[:0], s.batch[:], s.ovBatch[:], int64(s.now))
		if err := s.drain(); err != nil {
			return err
		}
		return s.outcome(i, s.decs[0], sched.Decision{})
	}
	pd := s.sch.DecidePD(&r, s.ov, int64(s.now))
	if err := s.drain(); err != nil {
		return err
	}
	return s.outcome(i, pd.Decode, pd.Prefill)
}

func (s *pdSim) outcome(i int32, d, pre sched.Decision) error {
	switch d.Outcome {
	case sched.Routed:
		s.rank[i] = s.rankOf[d.Worker]
		if pre.Outcome == sched.Routed {
			return s.prefillLeg(i, pre)
		}
		return s.decodeLeg(i, 0)
	case sched.Queued:
		s.state[i] = stQueued
		s.queued[i] = true
	default:
		s.reject(i)
	}
	return nil
}

func (s *pdSim) drain() error {
	for s.sch.Pending() > 0 {
		s.effects = s.sch.Drain(s.effects[:0])
		for _, e := range s.effects {
			i := int32(e.ID - 1)
			switch e.Kind {
			case sched.EffectAdmitted:
				s.rank[i] = s.rankOf[e.Decision.Worker]
				if err := s.decodeLeg(i, 0); err != nil {
					return err
				}
			case sched.EffectRejected:
				s.reject(i)
			}
		}
	}
	return nil
}

// prefillLeg submits request i's one-token prefill leg to the prefill rank
// pre chose, its blocks pinned until the decode side has pulled them.
func (s *pdSim) prefillLeg(i int32, pre sched.Decision) error {
	p := s.rankOf[pre.Worker]
	s.prank[i] = p
	s.remote++
	req := &s.w.Trace.Requests[i]
	err := s.engines[p].Submit(engine.Request{ID: uint64(i) + 1, Prompt: s.w.Local(int(i)), PromptTokens: req.InputLength, MaxTokens: 1, Pin: true}, s.now)
	if errors.Is(err, engine.ErrTooLong) {
		s.sch.Free(uint64(i)+1, int64(s.now))
		s.tooLong[i] = true
		s.reject(i)
		return nil
	}
	if err != nil {
		return fmt.Errorf("replay: request %d: %w", i, err)
	}
	s.state[i] = stRouted
	return s.kick(p)
}

// decodeLeg submits request i to its decode (or aggregated) rank,
// transferred tokens of its prompt already computed elsewhere.
func (s *pdSim) decodeLeg(i int32, transferred int) error {
	r := s.rank[i]
	req := &s.w.Trace.Requests[i]
	err := s.engines[r].Submit(engine.Request{
		ID: uint64(i) + 1, Prompt: s.w.Local(int(i)), PromptTokens: req.InputLength,
		MaxTokens: max(req.OutputLength, 1), Transferred: transferred,
	}, s.now)
	if errors.Is(err, engine.ErrTooLong) {
		s.sch.Free(uint64(i)+1, int64(s.now))
		if p := s.prank[i]; p >= 0 {
			s.engines[p].Unpin(uint64(i) + 1)
		}
		s.tooLong[i] = true
		s.reject(i)
		return nil
	}
	if err != nil {
		return fmt.Errorf("replay: request %d: %w", i, err)
	}
	s.state[i] = stRouted
	return s.kick(r)
}

func (s *pdSim) kick(r int32) error {
	if !s.stepping[r] {
		return s.startStep(r)
	}
	return nil
}

// pulledKV: request i's KV has reached its decode rank; the prefill rank
// unpins it and the decode leg starts.
func (s *pdSim) pulledKV(i int32) error {
	p := s.prank[i]
	s.engines[p].Unpin(uint64(i) + 1)
	if err := s.kick(p); err != nil {
		return err
	}
	return s.decodeLeg(i, s.w.Trace.Requests[i].InputLength)
}

func (s *pdSim) reject(i int32) {
	s.state[i] = stRejected
	s.finish[i] = s.now
	s.followUp(i)
}

func (s *pdSim) followUp(i int32) {
	if n := s.next[i]; n >= 0 {
		s.push(s.now+s.scale(s.w.Trace.Requests[n].Delay), pdArrival, n)
	}
}

func (s *pdSim) startStep(r int32) error {
	e := s.engines[r]
	steps := e.Stats().Steps
	d := e.Step(s.now)
	if e.Stats().Steps == steps {
		if e.Idle() || e.Pinned() > 0 {
			// Idle, or waiting for pinned prompts' KV to be pulled:
			// pulledKV unpins them and steps again.
			s.stepping[r] = false
			return nil
		}
		w, run := e.Load()
		return fmt.Errorf("%w: worker %v (%s) at %v: %d waiting, %d running", ErrStalled, s.keys[r], s.cell, s.now, w, run)
	}
	s.stepping[r] = true
	s.busy[r] += d
	s.stepEffect[r] = append(s.stepEffect[r][:0], e.Effects()...)
	if evs := e.Events(); s.core != nil && len(evs) > 0 {
		s.stepEvents[r] = s.newDelivery(r, evs)
	}
	e.Reset()
	s.push(s.now+max(d, 1), pdStepEnd, r)
	return nil
}

func (s *pdSim) deliver(d *delivery) {
	s.core.Apply(d.events)
	k := s.keys[d.rank]
	if err := s.sch.SetTreeSize(k, s.core.TreeSize(k)); err != nil {
		panic(err) // every rank is in the scheduler's table
	}
	s.spare = append(s.spare, d)
}

func (s *pdSim) stepEnd(r int32) error {
	now := s.now
	bs := s.w.BlockSize
	for _, ef := range s.stepEffect[r] {
		i := int32(ef.Request - 1)
		id := ef.Request
		if s.prank[i] == r && s.rank[i] != r {
			// The prefill leg.
			if ef.Kind == engine.FirstToken {
				s.cached[i] = int32(ef.CachedTokens)
				s.sch.PrefillDone(id, int64(now))
				// Pull the prompt's full blocks less the decode rank's
				// cached prefix (the engine recomputes the last token).
				req := &s.w.Trace.Requests[i]
				full := (req.InputLength - 1) / bs
				held := s.engines[s.rank[i]].KV().Match(s.w.Local(int(i))[:full])
				tok := int64(full-held) * int64(bs)
				s.pulled += tok
				d := time.Duration(float64(tok*int64(s.cfg.KVBytesPerToken)) / (s.cfg.TransferGBps * 1e9) * float64(time.Second))
				s.push(now+d, pdPulled, i)
			}
			continue
		}
		switch ef.Kind {
		case engine.FirstToken:
			s.first[i] = ef.At
			if s.prank[i] < 0 {
				s.cached[i] = int32(ef.CachedTokens)
			}
			s.sch.MarkPrefillCompleted(id, int64(now))
		case engine.Finished:
			s.finish[i] = ef.At
			s.output[i] = int32(ef.OutputTokens)
			s.state[i] = stDone
			s.sch.Free(id, int64(now))
			s.followUp(i)
		}
	}
	s.stepEffect[r] = s.stepEffect[r][:0]
	if d := s.stepEvents[r]; d != nil {
		s.stepEvents[r] = nil
		d.at = now + s.cfg.EventDelay
		s.fifo = append(s.fifo, d)
	}
	e := s.engines[r]
	if !s.loaded[r] || now-s.lastLoad[r] >= s.cfg.LoadInterval {
		s.loaded[r], s.lastLoad[r] = true, now
		used, _ := e.KV().Usage()
		wt, _ := e.Load()
		if err := s.sch.ReportLoad(s.keys[r], sched.Load{UsedBlocks: uint64(used), Waiting: uint64(wt)}, int64(now)); err != nil {
			return err
		}
	}
	if err := s.drain(); err != nil {
		return err
	}
	s.stepping[r] = false
	if !e.Idle() {
		return s.startStep(r)
	}
	return nil
}

func (s *pdSim) result() PDResult {
	w := s.w
	labels := make([]string, len(s.engines))
	for i := range labels {
		labels[i] = fmt.Sprint(i + 1)
	}
	recs := make([]record, w.Len())
	var last time.Duration
	for i := range recs {
		req := &w.Trace.Requests[i]
		c := &recs[i]
		c.arrive, c.prompt, c.worker, c.best, c.routed = s.arrive[i], req.InputLength, int(s.rank[i]), -1, -1
		c.bucket = w.bucketOf(w.arrival[i])
		c.queued = s.queued[i]
		switch s.state[i] {
		case stDone:
			c.done, c.hasFirst = true, true
			c.first, c.finish = s.first[i], s.finish[i]
			c.cached, c.output = int(s.cached[i]), int(s.output[i])
			last = max(last, s.finish[i])
		case stRejected:
			c.rejected, c.tooLong = true, s.tooLong[i]
		}
	}
	res := PDResult{Cell: s.cell.String(), Speedup: s.cfg.Speedup, Remote: s.remote}
	res.Result = summarize(recs, labels, s.scale(w.span), w.achievable)
	res.Result.Policy, res.Result.Speedup = res.Cell, s.cfg.Speedup
	res.TransferGB = float64(s.pulled) * float64(s.cfg.KVBytesPerToken) / 1e9
	if span := last - max(s.firstArr, 0); span > 0 {
		var pb, db time.Duration
		for r, b := range s.busy {
			if r < s.cfg.Prefill {
				pb += b
			} else {
				db += b
			}
		}
		res.PrefillUtil = float64(pb) / float64(span) / float64(s.cfg.Prefill)
		res.DecodeUtil = float64(db) / float64(span) / float64(s.cfg.Decode)
	}
	return res
}

// RunPD runs every cell of PDCells at every speedup (on parallel goroutines,
// at most parallel at once; 0: one per run) and returns the results
// speedup-major, in PDCells order. Results do not depend on parallel.
func RunPD(w *Workload, cfg PDConfig, speedups []float64, parallel int) ([]PDResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(speedups) == 0 {
		return nil, fmt.Errorf("%w: pd: no speedups", ErrConfig)
	}
	out := make([]PDResult, len(speedups)*len(PDCells))
	errs := make([]error, len(out))
	if parallel <= 0 {
		parallel = len(out)
	}
	sem := make(chan struct{}, parallel)
	done := make(chan struct{})
	for k := range out {
		go func() {
			sem <- struct{}{}
			c := cfg
			c.Speedup = speedups[k/len(PDCells)]
			out[k], errs[k] = SimulatePD(w, c, PDCells[k%len(PDCells)])
			<-sem
			done <- struct{}{}
		}()
	}
	for range out {
		<-done
	}
	return out, errors.Join(errs...)
}

// WritePDTable writes results as a text table, one row per (speedup, cell),
// with each cell's ITL p99 over its own at the lowest speedup (the unloaded
// reference when the sweep starts low).
func WritePDTable(out io.Writer, res []PDResult) error {
	base := map[string]float64{}
	low := math.Inf(1)
	for _, r := range res {
		low = min(low, r.Speedup)
	}
	for _, r := range res {
		if r.Speedup == low {
			base[r.Cell] = r.Result.ITLP99Ms
		}
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "speedup\tcell\tdone\trejected\tTTFT mean ms\tTTFT p99 ms\tITL mean ms\tITL p99 ms\tITL p99 / low\thit ratio\tremote\ttransfer GB\tprefill util\tdecode util\t")
	for _, r := range res {
		x := &r.Result
		rel := math.NaN()
		if b := base[r.Cell]; b > 0 {
			rel = x.ITLP99Ms / b
		}
		fmt.Fprintf(tw, "%g\t%s\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.2f\t%.3f\t%d\t%.1f\t%.2f\t%.2f\t\n",
			r.Speedup, r.Cell, x.Completed, x.Rejected, x.TTFTMeanMs, x.TTFTP99Ms, x.ITLMeanMs, x.ITLP99Ms, rel, x.HitRatio, r.Remote, r.TransferGB, r.PrefillUtil, r.DecodeUtil)
	}
	return tw.Flush()
}

// WritePDJSON writes results as a JSON array.
func WritePDJSON(out io.Writer, res []PDResult) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}
