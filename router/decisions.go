package router

import (
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/openai"
)

// The decision ring: the last Config.DecisionRing routing decisions, for
// GET /debug/decisions?n=N on the admin listener, each with the request id,
// the candidates' overlaps (and costs, for sampled and explained
// decisions), the chosen rank, the rule that decided it, and, once the
// proxied answer came, the engine's reported cached tokens. One decision in
// Config.DecisionSample is decided with the scheduler's explanation (every
// candidate's cost) and logged at debug level.

// Rules that decide a request.
const (
	ruleCost     = "cost"     // the lowest cost among the candidates
	ruleOverride = "override" // a /route override pinned or restricted it, or changed the weights
	ruleQueue    = "queue"    // admitted from the waiting queue (cache-aware with --queue-affinity)
	ruleShed     = "shed"     // rejected: every worker busy and the queue full or its predicted wait too long
)

// maxRingCands bounds the candidates kept per decision.
const maxRingCands = 8

type ringCand struct {
	worker    wire.WorkerKey
	device    uint32
	host      uint32
	cost      float64
	costKnown bool
	chosen    bool
}

type ringSlot struct {
	seq      uint64 // position in the ring's history, from 1; 0: empty
	id       uint64
	routeID  string
	at       int64 // unix nanoseconds
	rule     string
	routed   bool
	worker   wire.WorkerKey
	overlap  uint32
	host     uint32
	prompt   uint32
	cost     float64
	reported int64 // -2: not yet; -1: the engine reported none
	n        int
	cands    [maxRingCands]ringCand
	more     int // candidates left out
}

// decisionRing is goroutine-safe: the batcher records, proxied requests'
// ends report, the admin listener reads.
type decisionRing struct {
	mu     sync.Mutex
	slots  []ringSlot // a power of two
	mask   uint64
	last   uint64
	sample uint64
	log    *slog.Logger
}

func newDecisionRing(size, sample int, log *slog.Logger) *decisionRing {
	if size <= 0 {
		size = 1024
	}
	if sample <= 0 {
		sample = 100
	}
	n := 1
	for n < size {
		n <<= 1
	}
	return &decisionRing{slots: make([]ringSlot, n), mask: uint64(n - 1), sample: uint64(sample), log: log}
}

// sampled reports whether the next decision recorded is a sampled one
// (decided with every candidate's cost, and logged).
func (d *decisionRing) sampled(id uint64) bool { return id%d.sample == 0 }

// record keeps p's decision, made at unix nanoseconds at, and returns its
// slot's sequence number.
func (d *decisionRing) record(p *pending, dec sched.Decision, rule string, routed bool, at int64) uint64 {
	d.mu.Lock()
	d.last++
	seq := d.last
	s := &d.slots[seq&d.mask]
	s.seq, s.id, s.routeID, s.at, s.rule, s.routed = seq, p.id, p.routeID, at, rule, routed
	s.worker, s.overlap, s.host, s.prompt, s.cost, s.reported = dec.Worker, dec.Overlap, p.host, uint32(len(p.local)), dec.Cost, -2
	s.n, s.more = 0, 0
	if len(p.cands) > 0 {
		for i := range p.cands {
			c := &p.cands[i]
			if c.Excluded != sched.NotExcluded {
				continue
			}
			if s.n == maxRingCands {
				s.more++
				continue
			}
			s.cands[s.n] = ringCand{worker: c.Worker, device: c.Overlap, host: c.Host, cost: c.Cost, costKnown: true, chosen: c.Chosen}
			s.n++
		}
	} else {
		for i := range p.ovs {
			o := &p.ovs[i]
			if s.n == maxRingCands {
				s.more++
				continue
			}
			s.cands[s.n] = ringCand{worker: o.Worker, device: o.Device, host: o.Host, chosen: routed && o.Worker == dec.Worker}
			s.n++
		}
	}
	var line []byte
	if d.log != nil && d.sampled(p.id) && d.log.Enabled(nil, slog.LevelDebug) { //nolint:staticcheck // a nil context is Enabled's documented default
		line = appendSlot(nil, s)
	}
	d.mu.Unlock()
	if line != nil {
		d.log.Debug("routing decision", "decision", string(line))
	}
	return seq
}

// report sets the engine's reported cached tokens (-1: none) of the
// decision in slot seq, if it is still there.
func (d *decisionRing) report(seq, id uint64, cached int) {
	if seq == 0 {
		return
	}
	d.mu.Lock()
	s := &d.slots[seq&d.mask]
	if s.seq == seq && s.id == id {
		s.reported = int64(cached)
	}
	d.mu.Unlock()
}

// appendLast appends the last n decisions, newest first, as a JSON array.
func (d *decisionRing) appendLast(b []byte, n int) []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	n = min(n, len(d.slots))
	b = append(b, '[')
	first := true
	for seq := d.last; seq > 0 && n > 0; seq-- {
		s := &d.slots[seq&d.mask]
		if s.seq != seq {
			break
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendSlot(b, s)
		n--
	}
	return append(b, ']')
}

func appendSlot(b []byte, s *ringSlot) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendUint(b, s.id, 10)
	b = append(b, `,"request_id":`...)
	b = openai.AppendJSONString(b, s.routeID)
	b = append(b, `,"time":"`...)
	b = time.Unix(0, s.at).UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","rule":"`...)
	b = append(b, s.rule...)
	b = append(b, `","prompt_blocks":`...)
	b = strconv.AppendUint(b, uint64(s.prompt), 10)
	if s.routed {
		b = append(b, `,"worker_id":`...)
		b = strconv.AppendUint(b, s.worker.Worker, 10)
		b = append(b, `,"dp_rank":`...)
		b = strconv.AppendUint(b, uint64(s.worker.Dp), 10)
		b = append(b, `,"overlap_blocks":`...)
		b = strconv.AppendUint(b, uint64(s.overlap), 10)
		b = append(b, `,"host_overlap_blocks":`...)
		b = strconv.AppendUint(b, uint64(s.host), 10)
		b = append(b, `,"cost":`...)
		b = appendFloat(b, s.cost)
	}
	b = append(b, `,"reported_cached_tokens":`...)
	if s.reported >= 0 {
		b = strconv.AppendInt(b, s.reported, 10)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"verified":`...) // null until the answer came
	if s.reported == -2 {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendBool(b, s.reported >= 0)
	}
	b = append(b, `,"candidates":[`...)
	for i := range s.n {
		c := &s.cands[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"worker_id":`...)
		b = strconv.AppendUint(b, c.worker.Worker, 10)
		b = append(b, `,"dp_rank":`...)
		b = strconv.AppendUint(b, uint64(c.worker.Dp), 10)
		b = append(b, `,"overlap_blocks":`...)
		b = strconv.AppendUint(b, uint64(c.device), 10)
		b = append(b, `,"host_overlap_blocks":`...)
		b = strconv.AppendUint(b, uint64(c.host), 10)
		if c.costKnown {
			b = append(b, `,"cost":`...)
			b = appendFloat(b, c.cost)
		}
		b = append(b, `,"chosen":`...)
		b = strconv.AppendBool(b, c.chosen)
		b = append(b, '}')
	}
	b = append(b, ']')
	if s.more > 0 {
		b = append(b, `,"candidates_left_out":`...)
		b = strconv.AppendInt(b, int64(s.more), 10)
	}
	return append(b, '}')
}

// ruleOf names the rule that decided p.
func ruleOf(p *pending) string {
	o := &p.override
	switch {
	case p.admitted:
		return ruleQueue
	case o.PinnedSet || o.WeightSet || o.TemperatureSet || len(o.Allowed) > 0:
		return ruleOverride
	}
	return ruleCost
}

// hostOf is the host-tier blocks beyond the device prefix that p's
// lookup found on the chosen rank.
func hostOf(p *pending, k wire.WorkerKey) uint32 {
	for i := range p.ovs {
		if p.ovs[i].Worker == k {
			return p.ovs[i].Host
		}
	}
	return 0
}

// debugDecisions answers GET /debug/decisions?n=N (default 100, at most
// the ring's size) on the admin listener.
func (s *Service) debugDecisions(w http.ResponseWriter, req *http.Request) {
	n := 100
	if v := req.URL.Query().Get("n"); v != "" {
		x, err := strconv.Atoi(v)
		if err != nil || x < 1 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			e := openai.StatusError(http.StatusBadRequest, "n must be an integer ≥ 1, got "+strconv.Quote(v))
			e.Param = "n"
			_, _ = w.Write(openai.AppendError(nil, e))
			return
		}
		n = x
	}
	b := append([]byte(nil), `{"decisions":`...)
	b = s.Router.decisions.appendLast(b, n)
	b = append(b, "}\n"...)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}
