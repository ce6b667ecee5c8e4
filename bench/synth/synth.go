package synth

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kvroute/kvroute/bench/trace"
)

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("synth: invalid config")

// DistKind is the family of a Dist.
type DistKind uint8

// Distribution families.
const (
	Fixed     DistKind = iota // always A
	Uniform                   // uniform in [A, B]
	Exp                       // exponential with mean A
	LogNormal                 // log-normal with median A and shape sigma B
)

// Dist is a distribution of positive values (lengths, delays). A plain value;
// the zero value is Fixed 0.
type Dist struct {
	Kind DistKind
	A, B float64
}

// ParseDist parses "fixed:A", "uniform:A,B", "exp:MEAN" or
// "lognormal:MEDIAN,SIGMA" (a bare number is fixed).
func ParseDist(s string) (Dist, error) {
	kind, args, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok {
		kind, args = "fixed", kind
	}
	var v []float64
	for _, a := range strings.Split(args, ",") {
		f, err := strconv.ParseFloat(strings.TrimSpace(a), 64)
		if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
			return Dist{}, fmt.Errorf("%w: distribution %q: %q is not a non-negative number", ErrConfig, s, a)
		}
		v = append(v, f)
	}
	want := map[string]int{"fixed": 1, "uniform": 2, "exp": 1, "lognormal": 2}
	n, known := want[kind]
	if !known {
		return Dist{}, fmt.Errorf("%w: distribution %q: unknown kind %q (fixed, uniform, exp, lognormal)", ErrConfig, s, kind)
	}
	if len(v) != n {
		return Dist{}, fmt.Errorf("%w: distribution %q: %s takes %d parameters", ErrConfig, s, kind, n)
	}
	d := Dist{A: v[0]}
	switch kind {
	case "uniform":
		d.Kind, d.B = Uniform, v[1]
		if d.B < d.A {
			return Dist{}, fmt.Errorf("%w: distribution %q: uniform needs A ≤ B", ErrConfig, s)
		}
	case "exp":
		d.Kind = Exp
	case "lognormal":
		d.Kind, d.B = LogNormal, v[1]
	}
	return d, nil
}

// String formats d as ParseDist reads it.
func (d Dist) String() string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	switch d.Kind {
	case Uniform:
		return "uniform:" + f(d.A) + "," + f(d.B)
	case Exp:
		return "exp:" + f(d.A)
	case LogNormal:
		return "lognormal:" + f(d.A) + "," + f(d.B)
	}
	return "fixed:" + f(d.A)
}

// Mean returns the distribution's mean.
func (d Dist) Mean() float64 {
	switch d.Kind {
	case Uniform:
		return (d.A + d.B) / 2
	case LogNormal:
		return d.A * math.Exp(d.B*d.B/2)
	}
	return d.A
}

// sample draws one value.
func (d Dist) sample(r *rand.Rand) float64 {
	switch d.Kind {
	case Uniform:
		return d.A + r.Float64()*(d.B-d.A)
	case Exp:
		return r.ExpFloat64() * d.A
	case LogNormal:
		return d.A * math.Exp(d.B*r.NormFloat64())
	}
	return d.A
}

// Config describes a synthetic workload: sessions arrive as a Poisson
// process; each belongs to a shared-prefix group (a system prompt, picked
// with Zipf popularity) and has one or more turns; a follow-up turn's prompt
// is the previous turn's prompt and output plus new user tokens, sent a
// think time after the previous turn ended. A plain value; Default gives
// working values.
type Config struct {
	Requests int     // total requests (turns), > 0
	Rate     float64 // new sessions per second, > 0
	Groups   int     // shared-prefix groups, > 0
	// GroupSkew is the Zipf exponent of group popularity: group g (0-based)
	// is picked with probability ∝ 1/(g+1)^GroupSkew; 0 is uniform.
	GroupSkew float64
	// PrefixTokens is each group's shared prefix length (drawn once per
	// group, rounded down to whole 512-token trace blocks).
	PrefixTokens Dist
	PromptTokens Dist // a first turn's tokens after the shared prefix (≥ 1)
	OutputTokens Dist // tokens generated per turn (≥ 1)
	Turns        Dist // turns per session (≥ 1, rounded)
	TurnTokens   Dist // new user tokens of a follow-up turn (≥ 1)
	ThinkTime    Dist // milliseconds between a turn's end and the next turn
	// SystemTokens is a prefix every request begins with, before its
	// group's prefix (drawn once, rounded down to whole 512-token trace
	// blocks): an application's system prompt and tool definitions.
	SystemTokens Dist
	// TimeAllTurns gives follow-up turns a timestamp too (their arrival if
	// every turn took no time) besides their delay, for replays that order
	// requests by timestamp alone (tracestream, `kvroute bench index`).
	TimeAllTurns bool
	Seed         uint64
}

// Default returns a workload of 1000 requests at 4 sessions/s over 16
// groups (Zipf 1.1) with 2–6k-token system prompts, ~1k-token questions,
// ~200-token answers and 1–5 turns per session.
func Default() Config {
	return Config{
		Requests: 1000, Rate: 4, Groups: 16, GroupSkew: 1.1,
		PrefixTokens: Dist{Kind: Uniform, A: 2048, B: 6144},
		PromptTokens: Dist{Kind: LogNormal, A: 800, B: 0.6},
		OutputTokens: Dist{Kind: LogNormal, A: 150, B: 0.7},
		Turns:        Dist{Kind: Uniform, A: 1, B: 5},
		TurnTokens:   Dist{Kind: LogNormal, A: 200, B: 0.7},
		ThinkTime:    Dist{Kind: Exp, A: 3000},
		Seed:         1,
	}
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	switch {
	case c.Requests <= 0:
		return fmt.Errorf("%w: requests must be > 0 (got %d)", ErrConfig, c.Requests)
	case !(c.Rate > 0) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("%w: rate must be > 0 (got %g)", ErrConfig, c.Rate)
	case c.Groups <= 0:
		return fmt.Errorf("%w: groups must be > 0 (got %d)", ErrConfig, c.Groups)
	case c.GroupSkew < 0:
		return fmt.Errorf("%w: group skew must be ≥ 0 (got %g)", ErrConfig, c.GroupSkew)
	}
	return nil
}

// Generate returns the workload as a trace: first turns carry timestamps
// (and session ids when the session has more turns); follow-up turns carry
// their session id and delay (think time) but no timestamp, so a replay sends
// them after the previous turn ends. Requests are in the order of their
// arrival as if every turn took no time. Hash ids are fresh for every
// unshared 512-token block. Deterministic for a Config.
func Generate(c Config) (*trace.Trace, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0x73796e7468)) // "synth"
	var nextID uint64
	fresh := func() uint64 { nextID++; return nextID - 1 }

	var system []uint64
	for range int(c.SystemTokens.sample(rng)) / trace.IDBlockSize {
		system = append(system, fresh())
	}
	prefixes := make([][]uint64, c.Groups)
	for g := range prefixes {
		n := int(c.PrefixTokens.sample(rng)) / trace.IDBlockSize
		prefixes[g] = append(prefixes[g], system...)
		for range n {
			prefixes[g] = append(prefixes[g], fresh())
		}
	}
	cum := make([]float64, c.Groups)
	total := 0.0
	for g := range cum {
		total += 1 / math.Pow(float64(g+1), c.GroupSkew)
		cum[g] = total
	}
	pickGroup := func() int {
		x := rng.Float64() * total
		g, _ := slices.BinarySearch(cum, x)
		return min(g, c.Groups-1)
	}
	positive := func(d Dist) int { return max(1, int(math.Round(d.sample(rng)))) }

	type turn struct {
		req trace.Request
		at  time.Duration // arrival if every turn took no time
	}
	var turns []turn
	now := time.Duration(0)
	session := 0
	for len(turns) < c.Requests {
		now += time.Duration(rng.ExpFloat64() / c.Rate * float64(time.Second))
		g := pickGroup()
		n := min(positive(c.Turns), c.Requests-len(turns))
		ids := append([]uint64(nil), prefixes[g]...)
		length := len(ids) * trace.IDBlockSize
		prompt := length // tokens covered by ids' full blocks so far
		add := positive(c.PromptTokens)
		at := now
		name := ""
		if n > 1 {
			name = "s" + strconv.Itoa(session)
		}
		session++
		for t := range n {
			var delay time.Duration
			if t > 0 {
				delay = time.Duration(c.ThinkTime.sample(rng) * float64(time.Millisecond))
				at += delay
				add = positive(c.TurnTokens)
			}
			// Keep the previous prompt's full blocks; its partial last
			// block, the answer and the new tokens get fresh ids (their
			// content differs from anything before).
			ids = ids[:prompt/trace.IDBlockSize]
			length += add
			for len(ids)*trace.IDBlockSize < length {
				ids = append(ids, fresh())
			}
			out := positive(c.OutputTokens)
			r := trace.Request{
				InputLength: length, OutputLength: out, HashIDs: append([]uint64(nil), ids...),
				Session: name, Delay: delay,
			}
			if t == 0 || c.TimeAllTurns {
				r.Time, r.HasTime = at, true
			}
			turns = append(turns, turn{req: r, at: at})
			prompt = length
			length += out // the answer is part of the next turn's prompt
		}
	}
	slices.SortStableFunc(turns, func(a, b turn) int {
		switch {
		case a.at < b.at:
			return -1
		case a.at > b.at:
			return 1
		}
		return 0
	})
	t := &trace.Trace{Requests: make([]trace.Request, len(turns))}
	for i := range turns {
		t.Requests[i] = turns[i].req
	}
	return t, nil
}
