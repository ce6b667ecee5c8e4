package synth

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/kvroute/kvroute/bench/trace"
)

func generate(t testing.TB, c Config) *trace.Trace {
	t.Helper()
	tr, err := Generate(c)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestDeterministic(t *testing.T) {
	a, b := generate(t, Default()), generate(t, Default())
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same config, different traces")
	}
	c := Default()
	c.Seed = 2
	if reflect.DeepEqual(a, generate(t, c)) {
		t.Fatal("different seeds, same trace")
	}
}

func TestShape(t *testing.T) {
	c := Default()
	c.Requests = 3000
	tr := generate(t, c)
	if len(tr.Requests) != c.Requests {
		t.Fatalf("%d requests, want %d", len(tr.Requests), c.Requests)
	}
	prev := map[string]*trace.Request{}
	var last time.Duration
	firsts, turns := 0, 0
	for i := range tr.Requests {
		r := &tr.Requests[i]
		if want := (r.InputLength + trace.IDBlockSize - 1) / trace.IDBlockSize; len(r.HashIDs) != want || r.InputLength <= 0 || r.OutputLength <= 0 {
			t.Fatalf("request %d: %d tokens, %d ids (want %d), output %d", i, r.InputLength, len(r.HashIDs), want, r.OutputLength)
		}
		p, follow := prev[r.Session]
		if r.Session == "" || !follow {
			// A first turn: timestamped, in time order.
			if !r.HasTime || r.Time < last || r.Delay != 0 {
				t.Fatalf("first turn %d: time %v (has %v) after %v, delay %v", i, r.Time, r.HasTime, last, r.Delay)
			}
			last = r.Time
			firsts++
		} else {
			// A follow-up turn extends the previous turn's full blocks.
			if r.HasTime || r.Delay < 0 {
				t.Fatalf("turn %d of %s carries a timestamp or a negative delay", i, r.Session)
			}
			full := p.InputLength / trace.IDBlockSize
			if !reflect.DeepEqual(r.HashIDs[:full], p.HashIDs[:full]) {
				t.Fatalf("turn %d of %s does not extend the previous turn's %d full blocks", i, r.Session, full)
			}
			if r.InputLength < p.InputLength+p.OutputLength+1 {
				t.Fatalf("turn %d of %s: %d tokens, previous prompt %d + answer %d", i, r.Session, r.InputLength, p.InputLength, p.OutputLength)
			}
			turns++
		}
		if r.Session != "" {
			prev[r.Session] = r
		}
	}
	if turns == 0 || firsts == 0 {
		t.Fatalf("%d first turns, %d follow-ups: want both", firsts, turns)
	}
	// Sessions: 1..5 turns (uniform, rounded): a mean of 3.
	if got := float64(len(tr.Requests)) / float64(firsts); math.Abs(got-3) > 0.3 {
		t.Errorf("%.2f turns per session, want about 3", got)
	}
	// Poisson arrivals at Rate sessions per second.
	if rate := float64(firsts-1) / last.Seconds(); math.Abs(rate-c.Rate)/c.Rate > 0.1 {
		t.Errorf("session rate %.2f/s, want %g ± 10%%", rate, c.Rate)
	}
}

func TestGroups(t *testing.T) {
	c := Default()
	c.Requests, c.Turns, c.Groups, c.GroupSkew = 4000, Dist{A: 1}, 4, 1
	c.PrefixTokens = Dist{A: 4 * trace.IDBlockSize}
	tr := generate(t, c)
	count := map[uint64]int{}
	for i := range tr.Requests {
		r := &tr.Requests[i]
		if r.Session != "" {
			t.Fatalf("single-turn sessions carry session id %q", r.Session)
		}
		// The first 4 ids are the group's prefix: ids 4g..4g+3.
		g := r.HashIDs[0] / 4
		for j := range 4 {
			if r.HashIDs[j] != 4*g+uint64(j) {
				t.Fatalf("request %d: prefix ids %v, want group %d's", i, r.HashIDs[:4], g)
			}
		}
		count[g]++
		for _, id := range r.HashIDs[4:] {
			if id < 16 {
				t.Fatalf("request %d reuses prefix id %d after its prefix", i, id)
			}
		}
	}
	// Zipf(1) over 4 groups: shares 12/25, 6/25, 4/25, 3/25.
	for g, want := range []float64{0.48, 0.24, 0.16, 0.12} {
		if got := float64(count[uint64(g)]) / 4000; math.Abs(got-want) > 0.03 {
			t.Errorf("group %d share %.3f, want %.2f", g, got, want)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	c := Default()
	c.Requests = 200
	tr := generate(t, c)
	var buf bytes.Buffer
	for i := range tr.Requests {
		buf.Write(tr.Requests[i].AppendJSON(nil))
		buf.WriteByte('\n')
	}
	back, err := trace.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	for i := range tr.Requests {
		a, b := tr.Requests[i], back.Requests[i]
		b.Line = 0
		if a.Time-b.Time > time.Microsecond || b.Time-a.Time > time.Microsecond || a.Delay-b.Delay > time.Microsecond || b.Delay-a.Delay > time.Microsecond {
			t.Fatalf("request %d times differ: %v/%v %v/%v", i, a.Time, b.Time, a.Delay, b.Delay)
		}
		a.Time, b.Time, a.Delay, b.Delay = 0, 0, 0, 0
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("request %d: %+v read back as %+v", i, a, b)
		}
	}
}

func TestParseDist(t *testing.T) {
	for _, s := range []string{"fixed:4096", "uniform:1,5", "exp:3000", "lognormal:800,0.6"} {
		d, err := ParseDist(s)
		if err != nil {
			t.Fatal(err)
		}
		if d.String() != s {
			t.Errorf("%q formats as %q", s, d.String())
		}
	}
	if d, err := ParseDist("12"); err != nil || d != (Dist{Kind: Fixed, A: 12}) {
		t.Errorf("bare number: %+v %v", d, err)
	}
	for _, s := range []string{"", "gamma:1", "uniform:5,1", "exp:1,2", "fixed:-1", "lognormal:1", "fixed:NaN", "exp:x"} {
		if _, err := ParseDist(s); !errors.Is(err, ErrConfig) {
			t.Errorf("ParseDist(%q): %v, want ErrConfig", s, err)
		}
	}
	if m := (Dist{Kind: LogNormal, A: 100, B: 0.5}).Mean(); math.Abs(m-100*math.Exp(0.125)) > 1e-9 {
		t.Errorf("log-normal mean %v", m)
	}
}

func TestValidate(t *testing.T) {
	for name, mut := range map[string]func(*Config){
		"requests": func(c *Config) { c.Requests = 0 },
		"rate":     func(c *Config) { c.Rate = 0 },
		"groups":   func(c *Config) { c.Groups = 0 },
		"skew":     func(c *Config) { c.GroupSkew = -1 },
	} {
		c := Default()
		mut(&c)
		if _, err := Generate(c); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
}

func FuzzParseDist(f *testing.F) {
	for _, s := range []string{"fixed:1", "uniform:1,2", "exp:3", "lognormal:1,1", "x", ":", "uniform:,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDist(s)
		if err != nil {
			return
		}
		back, err := ParseDist(d.String())
		if err != nil || back != d {
			t.Fatalf("%q parsed as %+v, which formats as %q and parses as %+v (%v)", s, d, d.String(), back, err)
		}
	})
}
