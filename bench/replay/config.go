package replay

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/kvroute/kvroute/bench/engine"
	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/shard"
)

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("replay: invalid config")

// Policy is one routing policy a replay compares. A plain value.
type Policy struct {
	// Name is how reports label it: "kv", "kv-approx", "kv-sticky",
	// "round-robin", "random" or "least-loaded".
	Name string
	// Sched is the scheduler's selection policy.
	Sched sched.Policy
	// Approx routes by the KV cost without KV events: the index holds the
	// router's own decisions (shard approximate mode, TTL and size cap from
	// Config.Approx) instead of the engines' events.
	Approx bool
	// Sticky is a reference, not a router: a request goes to the rank the
	// index says holds the longest prefix of its prompt (device + host
	// blocks), whatever that rank's load or busy state (pinned, so it waits
	// in the router queue if the rank is busy); a request cached nowhere is
	// routed by kv's cost. Its hit ratio is what cache affinity alone gets
	// from the fleet's partitioned caches when load is ignored.
	Sticky bool
}

// UsesIndex reports whether the policy looks requests up in an index.
func (p Policy) UsesIndex() bool { return p.Sched == sched.PolicyKV }

// PolicyNames lists the names ParsePolicy accepts.
var PolicyNames = []string{"kv", "kv-approx", "kv-sticky", "round-robin", "random", "least-loaded"}

// ParsePolicy parses one policy name (see PolicyNames).
func ParsePolicy(s string) (Policy, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "kv-approx":
		return Policy{Name: s, Sched: sched.PolicyKV, Approx: true}, nil
	case "kv-sticky":
		return Policy{Name: s, Sched: sched.PolicyKV, Sticky: true}, nil
	}
	p, err := sched.ParsePolicy(s)
	if err != nil {
		return Policy{}, fmt.Errorf("%w: unknown policy %q (want one of %s)", ErrConfig, s, strings.Join(PolicyNames, ", "))
	}
	return Policy{Name: s, Sched: p}, nil
}

// ParsePolicies parses a comma-separated list of distinct policy names.
func ParsePolicies(list string) ([]Policy, error) {
	var out []Policy
	seen := map[string]bool{}
	for _, s := range strings.Split(list, ",") {
		p, err := ParsePolicy(s)
		if err != nil {
			return nil, err
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("%w: policy %q listed twice", ErrConfig, p.Name)
		}
		seen[p.Name] = true
		out = append(out, p)
	}
	return out, nil
}

// Fleet is the simulated fleet's shape, matching `kvroute mock`'s flags.
// A plain value; zero fields take the defaults noted.
type Fleet struct {
	Workers  int // default 8
	DPRanks  int // dp ranks per worker, each an engine with its own cache; default 1
	KVBlocks int // KV cache blocks per rank; default 16384
	// HostKVBlocks > 0 gives every rank a host tier of that many blocks
	// behind its device (engine.Config.HostCapacity; `kvroute mock
	// --host-kv-blocks`), onloading at HostGBps (default
	// engine.DefaultHostGBps).
	HostKVBlocks     int
	HostGBps         float64
	BlockSize        int     // engine block size in tokens; default 16
	MaxNumSeqs       int     // default 256
	MaxBatchedTokens int     // default 8192
	EngineSpeedup    float64 // engine step times are divided by it (the mock's --speedup); default 1
	// PrefillPoly and DecodePoly are the step timing model (PolyPerf);
	// a zero Poly means the default (DefaultPrefillPoly, DefaultDecodePoly:
	// the timing of `kvroute mock`).
	PrefillPoly, DecodePoly Poly
}

// Ranks returns the number of engines: Workers × DPRanks.
func (f Fleet) Ranks() int { return f.Workers * f.DPRanks }

func (f Fleet) withDefaults() Fleet {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&f.Workers, 8)
	def(&f.DPRanks, 1)
	def(&f.KVBlocks, 16384)
	def(&f.BlockSize, 16)
	def(&f.MaxNumSeqs, 256)
	def(&f.MaxBatchedTokens, 8192)
	if f.EngineSpeedup == 0 {
		f.EngineSpeedup = 1
	}
	if f.HostGBps == 0 {
		f.HostGBps = engine.DefaultHostGBps
	}
	if f.PrefillPoly == (Poly{}) {
		f.PrefillPoly = DefaultPrefillPoly
	}
	if f.DecodePoly == (Poly{}) {
		f.DecodePoly = DefaultDecodePoly
	}
	return f
}

// Validate reports the first invalid field (after defaults).
func (f Fleet) Validate() error {
	f = f.withDefaults()
	for _, c := range []struct {
		name string
		v    int
	}{{"workers", f.Workers}, {"dp-ranks", f.DPRanks}, {"kv-blocks", f.KVBlocks}, {"block-size", f.BlockSize},
		{"max-num-seqs", f.MaxNumSeqs}, {"max-batched-tokens", f.MaxBatchedTokens}, {"host-kv-blocks", f.HostKVBlocks}} {
		if c.v < 0 {
			return fmt.Errorf("%w: %s must be > 0 (got %d)", ErrConfig, c.name, c.v)
		}
	}
	if f.DPRanks > 1<<16 {
		return fmt.Errorf("%w: dp-ranks %d exceeds %d", ErrConfig, f.DPRanks, 1<<16)
	}
	if f.HostGBps < 0 {
		return fmt.Errorf("%w: host-gbps must be > 0 (got %g)", ErrConfig, f.HostGBps)
	}
	if f.EngineSpeedup < 0 {
		return fmt.Errorf("%w: engine-speedup must be > 0 (got %g)", ErrConfig, f.EngineSpeedup)
	}
	return nil
}

// Poly is a quadratic a·x² + b·x + c, in milliseconds: a term of the step
// timing model (PolyPerf). A plain value.
type Poly [3]float64

// DefaultPrefillPoly and DefaultDecodePoly are engine.DefaultPerf's
// coefficients (Dynamo's mocker): prefill in uncached batch tokens, decode in
// KV usage.
var (
	DefaultPrefillPoly = Poly{4.209989e-07, 1.518344e-02, 16.50142}
	DefaultDecodePoly  = Poly{-25.74, 54.01, 5.74}
)

// String formats p as "a,b,c".
func (p Poly) String() string {
	return strconv.FormatFloat(p[0], 'g', -1, 64) + "," + strconv.FormatFloat(p[1], 'g', -1, 64) + "," + strconv.FormatFloat(p[2], 'g', -1, 64)
}

// ParsePoly parses "a,b,c".
func ParsePoly(s string) (Poly, error) {
	var p Poly
	f := strings.Split(s, ",")
	if len(f) != 3 {
		return p, fmt.Errorf("%w: %q: want three coefficients a,b,c of a·x² + b·x + c", ErrConfig, s)
	}
	for i, v := range f {
		x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			return p, fmt.Errorf("%w: %q: %q is not a number", ErrConfig, s, v)
		}
		p[i] = x
	}
	return p, nil
}

func (p Poly) at(x float64) time.Duration {
	ms := p[0]*x*x + p[1]*x + p[2]
	return time.Duration(max(ms, 0) * float64(time.Millisecond))
}

// PolyPerf returns the step timing model with these polynomials: a prefill
// of t uncached tokens takes prefill(t) ms (0 for no tokens), a decode pass
// at KV usage u in [0, 1] takes decode(u) ms; negative values count as 0.
// PolyPerf(DefaultPrefillPoly, DefaultDecodePoly) times like
// engine.DefaultPerf.
func PolyPerf(prefill, decode Poly) engine.Perf {
	return engine.Perf{
		Prefill: func(tokens int) time.Duration {
			if tokens <= 0 {
				return 0
			}
			return prefill.at(float64(tokens))
		},
		Decode: func(u float64) time.Duration { return decode.at(min(max(u, 0), 1)) },
	}
}

// Config configures an offline replay. A plain value; DefaultConfig gives
// the defaults of `kvroute replay`.
type Config struct {
	Fleet Fleet
	// Sched is the scheduler's configuration (sched.DefaultConfig when its
	// BlockSize is 0). BlockSize and Policy are set for each run from the
	// fleet and the policy.
	Sched sched.Config
	// Approx configures the index of the kv-approx policy.
	Approx shard.ApproxConfig
	// Speedup divides the trace's arrival times (and session delays).
	// Default 1.
	Speedup float64
	// EventDelay is how long after the end of the engine step that produced
	// them the KV events reach the index (the event plane's latency). 0
	// delivers them at once.
	EventDelay time.Duration
	// LoadInterval is the minimum gap between an engine's load reports to
	// the scheduler (the mock's --load-interval). Default 50 ms.
	LoadInterval time.Duration
	// TickInterval is how often (in simulated time) the scheduler's and the
	// approximate index's Tick run. Default 1 s.
	TickInterval time.Duration
	// Routers is the number of router replicas (`kvroute replay --routers`):
	// each has its own scheduler, and request i arrives at replica i mod
	// Routers. Default 1.
	Routers int
	// SyncDelay is how long a replica's bookings, prefill completions and
	// frees take to reach the other replicas' schedulers (replica sync,
	// `--sync-delay`); negative: never (replicas without sync). All
	// replicas share the index and see every worker's load reports.
	SyncDelay time.Duration
	// Tenants assigns tenants, classes and sessions to the requests
	// (`--tenants`, tenants.go); nil: none.
	Tenants *TenantMix
	// Seed seeds the scheduler's RNG (random policy, tie breaks).
	Seed uint64
	// Progress, when set, is called with the number of requests that just
	// ended (finished or rejected), in small batches. It is called from the
	// replay's goroutine; Run calls it from several at once, so it must be
	// goroutine-safe.
	Progress func(ended int)
}

// DefaultConfig returns the defaults of `kvroute replay`: 8 workers shaped
// like `kvroute mock`'s, the default scheduler, a 1 ms event delay.
func DefaultConfig() Config {
	return Config{
		Fleet:        Fleet{}.withDefaults(),
		Sched:        sched.DefaultConfig(),
		Speedup:      1,
		EventDelay:   time.Millisecond,
		LoadInterval: 50 * time.Millisecond,
		TickInterval: time.Second,
		Seed:         1,
	}
}

func (c Config) withDefaults() Config {
	c.Fleet = c.Fleet.withDefaults()
	if c.Sched.BlockSize == 0 {
		c.Sched = sched.DefaultConfig()
	}
	c.Sched.BlockSize = c.Fleet.BlockSize
	if c.Speedup == 0 {
		c.Speedup = 1
	}
	if c.LoadInterval == 0 {
		c.LoadInterval = 50 * time.Millisecond
	}
	if c.TickInterval == 0 {
		c.TickInterval = time.Second
	}
	if c.Routers == 0 {
		c.Routers = 1
	}
	return c
}

// Validate reports the first invalid field (after defaults).
func (c Config) Validate() error {
	if err := c.Fleet.Validate(); err != nil {
		return err
	}
	c = c.withDefaults()
	if c.Speedup < 0 {
		return fmt.Errorf("%w: speedup must be > 0 (got %g)", ErrConfig, c.Speedup)
	}
	if c.EventDelay < 0 || c.LoadInterval < 0 || c.TickInterval < 0 {
		return fmt.Errorf("%w: event delay, load interval and tick interval must be ≥ 0", ErrConfig)
	}
	if c.Routers < 1 || c.Routers > 64 {
		return fmt.Errorf("%w: routers must be in [1, 64] (got %d)", ErrConfig, c.Routers)
	}
	if err := c.Sched.Validate(); err != nil {
		return fmt.Errorf("%w: scheduler: %v", ErrConfig, err)
	}
	return nil
}
