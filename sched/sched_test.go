package sched

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/kvroute/kvroute/wire"
)

func TestConfigValidate(t *testing.T) {
	good := testConfig()
	if err := good.Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	bad := []func(*Config){
		func(c *Config) { c.BlockSize = 0 },
		func(c *Config) { c.Weight = -1 },
		func(c *Config) { c.Weight = math.NaN() },
		func(c *Config) { c.Temperature = math.Inf(1) },
		func(c *Config) { c.Policy = 9 },
		func(c *Config) { c.QueuePolicy = 9 },
		func(c *Config) { c.QueueDepth = -1 },
		func(c *Config) { c.BusyPrefillTokens = -1 },
		func(c *Config) { c.RejectionWindow = -time.Second },
		func(c *Config) { c.HostHitWeight = math.NaN() },
	}
	for i, mod := range bad {
		c := testConfig()
		mod(&c)
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("case %d: Validate = %v, want ErrConfig", i, err)
		}
		if _, err := New(c, 1); err == nil {
			t.Errorf("case %d: New accepted an invalid config", i)
		}
	}
}

func TestParseNames(t *testing.T) {
	for p := PolicyKV; p <= PolicyLeastLoaded; p++ {
		got, err := ParsePolicy(p.String())
		if err != nil || got != p {
			t.Errorf("ParsePolicy(%q) = %v, %v", p, got, err)
		}
	}
	for q := QueueFCFS; q <= QueueWSPT; q++ {
		got, err := ParseQueuePolicy(q.String())
		if err != nil || got != q {
			t.Errorf("ParseQueuePolicy(%q) = %v, %v", q, got, err)
		}
	}
	if _, err := ParseQueuePolicy("sjf"); err == nil {
		t.Error("ParseQueuePolicy accepted sjf")
	}
}

// The per-decision generation counter wraps after 2^32 decisions; the
// stamps it guards must be reset so stale overlaps and held counts from 2^32
// decisions ago cannot come back.
func TestGenerationWrap(t *testing.T) {
	s, err := New(testConfig(), 1)
	if err != nil {
		t.Fatal(err)
	}
	a, b := wire.WorkerKey{Worker: 1}, wire.WorkerKey{Worker: 2}
	s.AddWorker(a, Capacity{})
	s.AddWorker(b, Capacity{})
	blocks := []wire.SeqHash{11, 12}
	s.gen = math.MaxUint32 - 3
	for i := uint64(1); i <= 8; i++ {
		// Each request has its prefix cached on a; the previous one is
		// freed, so a always wins on overlap, whatever stamps are left.
		d := s.Decide(nil, []Request{{ID: i, ISL: 32, Blocks: blocks}}, [][]Overlap{{{Worker: a, Device: 2}}}, 0)[0]
		if d.Outcome != Routed || d.Worker != a || d.Overlap != 2 {
			t.Fatalf("gen %d: %+v", s.gen, d)
		}
		// b must not inherit a stale overlap after the wrap.
		loads := s.AppendLoads(nil, blocks, 0)
		for _, l := range loads {
			if l.Worker == b && l.HeldBlocks != 0 {
				t.Fatalf("gen %d: b holds %d", s.gen, l.HeldBlocks)
			}
		}
		s.Free(i, 0)
		if err := s.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
	}
	if s.gen > 20 {
		t.Fatalf("generation did not wrap: %d", s.gen)
	}
}

// Decide panics on mismatched batch and overlaps (a caller bug).
func TestDecideMismatch(t *testing.T) {
	s, _ := New(testConfig(), 1)
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	s.Decide(nil, make([]Request, 2), make([][]Overlap, 1), 0)
}

// Time never goes backwards: a now older than one already seen is treated
// as the latest seen (bookings and expiry stay ordered).
func TestTimeMonotonic(t *testing.T) {
	cfg := testConfig()
	cfg.Expiry = 10 * time.Second
	s, _ := New(cfg, 1)
	k := wire.WorkerKey{Worker: 1}
	s.AddWorker(k, Capacity{})
	if err := s.AddRequest(1, k, nil, 16, 0, PrefillLoadHint{}, int64(100*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := s.AddRequest(2, k, nil, 16, 0, PrefillLoadHint{}, int64(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	s.Tick(int64(109 * time.Second))
	if n := len(s.Drain(nil)); n != 0 {
		t.Fatalf("%d expired at 109 s, want 0 (both booked at 100 s)", n)
	}
	s.Tick(int64(111 * time.Second))
	if n := len(s.Drain(nil)); n != 2 {
		t.Fatalf("%d expired at 111 s, want 2", n)
	}
}

// Loads at and above 2^32 (which leave the 12-byte scan mirror) still cost
// correctly through the general path.
func TestHugeLoads(t *testing.T) {
	s, _ := New(testConfig(), 1)
	a, b := wire.WorkerKey{Worker: 1}, wire.WorkerKey{Worker: 2}
	s.AddWorker(a, Capacity{})
	s.AddWorker(b, Capacity{})
	for i := uint64(1); i <= 3; i++ {
		if err := s.AddRequest(i, a, nil, 0, 0, PrefillLoadHint{InitialEffectiveTokens: math.MaxUint32}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AddRequest(9, b, nil, 0, 0, PrefillLoadHint{InitialEffectiveTokens: math.MaxUint32 - 1}, 0); err != nil {
		t.Fatal(err)
	}
	d := s.Decide(nil, []Request{{ID: 10, ISL: 16}}, nil, 0)[0]
	if d.Worker != b {
		t.Fatalf("routed to %v, want the less loaded %v", d.Worker, b)
	}
	want := (float64(math.MaxUint32-1) + 16) / 16
	if d.Cost != want {
		t.Fatalf("cost %v, want %v", d.Cost, want)
	}
}

// testConfig is the configuration the unit tests and the scripts in
// testdata were written against: DefaultConfig with weight 1 and busy above
// the total KV blocks, the values their expected costs and busy transitions
// were computed with (the defaults come from replay measurements instead).
func testConfig() Config {
	c := DefaultConfig()
	c.Weight, c.BusyDecodeFrac = 1, 1
	c.CacheAffinity, c.QueueAffinityHold, c.QueueAffinityTail, c.QueueAffinityHoldPerBlock = 1, 0, 0, 0
	return c
}

// The defaults chosen by the replay measurements (doc.go, "Defaults").
func TestDefaults(t *testing.T) {
	c := DefaultConfig()
	if c.Weight != 8 || c.BusyDecodeFrac != 1 || c.HostHitWeight != 0.75 || c.DiskHitWeight != 0.25 {
		t.Fatalf("defaults: weight %v, busy decode frac %v, host %v, disk %v", c.Weight, c.BusyDecodeFrac, c.HostHitWeight, c.DiskHitWeight)
	}
	if c.QueueAffinity != 32 || c.QueueAffinityMaxWait != 10*time.Second || c.QueueAffinityHold != 3*time.Second || c.QueueAffinityTail != 2 || c.CacheAffinity != 4 || c.QueueAffinityHoldPerBlock != 4*time.Millisecond {
		t.Fatalf("defaults: queue affinity %d, max wait %v, hold %v, tail %v, cache affinity %v", c.QueueAffinity, c.QueueAffinityMaxWait, c.QueueAffinityHold, c.QueueAffinityTail, c.CacheAffinity)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}
