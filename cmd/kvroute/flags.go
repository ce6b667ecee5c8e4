package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kvroute/kvroute/sched"
)

// envName is the environment variable that stands for a flag:
// --kv-blocks → KVROUTE_KV_BLOCKS.
func envName(flagName string) string {
	return "KVROUTE_" + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(flagName))
}

// newFlagSet returns a subcommand's flag set: errors are returned, not
// printed, and -h prints the flags spelled --name.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() { writeUsage(fs) }
	return fs
}

// writeUsage prints fs's flags as flag.PrintDefaults does, spelled --name.
func writeUsage(fs *flag.FlagSet) {
	w := fs.Output()
	fmt.Fprintf(w, "usage: %s [flags]\n\nflags (each also KVROUTE_<NAME>, e.g. --kv-blocks is KVROUTE_KV_BLOCKS):\n", fs.Name())
	fs.VisitAll(func(f *flag.Flag) {
		f = unwrapped(f)
		var b strings.Builder
		fmt.Fprintf(&b, "  --%s", f.Name)
		typ, usage := flag.UnquoteUsage(f)
		if typ != "" {
			b.WriteString(" " + typ)
		}
		b.WriteString("\n    \t")
		b.WriteString(strings.ReplaceAll(usage, "\n", "\n    \t"))
		if !isZeroDefault(f) {
			if typ == "string" {
				fmt.Fprintf(&b, " (default %q)", f.DefValue)
			} else {
				fmt.Fprintf(&b, " (default %v)", f.DefValue)
			}
		}
		fmt.Fprintln(w, b.String())
	})
}

// unwrapped returns f with the value parseFlags wrapped (friendly)
// unwrapped, for the flag package's type names.
func unwrapped(f *flag.Flag) *flag.Flag {
	if fr, ok := f.Value.(friendly); ok {
		g := *f
		g.Value = fr.Value
		return &g
	}
	return f
}

// isZeroDefault reports whether f's default is its type's zero value (not
// printed in the usage), as the flag package decides it.
func isZeroDefault(f *flag.Flag) (zero bool) {
	switch f.DefValue {
	case "", "0", "false", "0s", "[]":
		return true
	}
	t := reflect.TypeOf(f.Value)
	if t.Kind() != reflect.Pointer {
		return false
	}
	defer func() {
		if recover() != nil {
			zero = false
		}
	}()
	return f.DefValue == reflect.New(t.Elem()).Interface().(flag.Value).String()
}

// expectation says what a flag of f's type takes, for parse errors.
func expectation(f *flag.Flag) string {
	typ, _ := flag.UnquoteUsage(f)
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return "want true or false"
	}
	switch typ {
	case "duration":
		return "want a duration such as 5s, 250ms or 1m30s"
	case "int":
		return "want an integer such as 4"
	case "uint":
		return "want a non-negative integer such as 4"
	case "float":
		return "want a number such as 0.5"
	}
	return ""
}

// friendly wraps a flag's value so that a value that does not parse says
// what was expected instead of the flag package's "parse error".
type friendly struct {
	flag.Value
	want string
}

func (v friendly) Set(s string) error {
	err := v.Value.Set(s)
	if err == nil || v.want == "" {
		return err
	}
	if err.Error() == "value out of range" {
		return fmt.Errorf("out of range (%s)", v.want)
	}
	return errors.New(v.want)
}

func (v friendly) IsBoolFlag() bool {
	b, ok := v.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// The flag package's parse errors, rewritten into one line naming the flag.
var (
	errUnknownFlag = regexp.MustCompile(`^flag provided but not defined: -+(.*)$`)
	errBadValue    = regexp.MustCompile(`^invalid (?:boolean )?value (".*") for (?:flag )?-+([^:]+): (.*)$`)
	errNeedsArg    = regexp.MustCompile(`^flag needs an argument: -+(.*)$`)
)

// flagError rewrites a parse error of fs into one line that names the
// flag, says what it wants or which flag was meant, and where the flags are
// listed.
func flagError(fs *flag.FlagSet, err error) error {
	see := "see " + fs.Name() + " -h"
	msg := err.Error()
	if m := errUnknownFlag.FindStringSubmatch(msg); m != nil {
		if c, ok := closest(m[1], flagNames(fs)); ok {
			return fmt.Errorf("unknown flag --%s (did you mean --%s?); %s", m[1], c, see)
		}
		return fmt.Errorf("unknown flag --%s; %s", m[1], see)
	}
	if m := errBadValue.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("--%s %s: %s", m[2], m[1], m[3])
	}
	if m := errNeedsArg.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("--%s needs a value; %s", m[1], see)
	}
	return fmt.Errorf("%v; %s", err, see)
}

func flagNames(fs *flag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return names
}

// parseFlags parses args into fs, then fills every flag not given on the
// command line from its KVROUTE_* environment variable. Errors are one line
// naming the flag (and the variable) and what it wants; an unknown flag
// names the closest one. -h prints the usage and returns flag.ErrHelp. A
// KVROUTE_* variable that names no flag of fs is a warning on stderr, naming
// the closest flag.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if takeFlagSetForTesting != nil {
		takeFlagSetForTesting(fs)
		return errFlagSetTaken
	}
	return parseFlagsEnv(fs, args, os.Environ(), os.Stderr)
}

// takeFlagSetForTesting, when set, gets every flag set parseFlags is
// given, and parseFlags returns errFlagSetTaken without parsing: the
// reference test (TestReferenceDocs) collects each command's flags this
// way, without running the command.
var takeFlagSetForTesting func(fs *flag.FlagSet)

var errFlagSetTaken = errors.New("flag set taken, not parsed")

// parseFlagsEnv is parseFlags with the environment and the warnings'
// writer given.
func parseFlagsEnv(fs *flag.FlagSet, args, environ []string, warn io.Writer) error {
	fs.VisitAll(func(f *flag.Flag) {
		if _, done := f.Value.(friendly); !done {
			f.Value = friendly{f.Value, expectation(f)}
		}
	})
	out := fs.Output()
	fs.SetOutput(io.Discard) // errors are returned as one line; -h is printed below
	err := fs.Parse(args)
	fs.SetOutput(out)
	if errors.Is(err, flag.ErrHelp) {
		fs.Usage()
		return err
	}
	if err != nil {
		return flagError(fs, err)
	}
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "KVROUTE_") {
			env[k] = v
		}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	byEnv := map[string]string{} // variable → flag
	fs.VisitAll(func(f *flag.Flag) {
		byEnv[envName(f.Name)] = f.Name
		if err != nil || set[f.Name] {
			return
		}
		v, ok := env[envName(f.Name)]
		if !ok {
			return
		}
		if e := fs.Set(f.Name, v); e != nil {
			err = fmt.Errorf("%s=%q (for --%s): %v", envName(f.Name), v, f.Name, e)
		}
	})
	if err != nil {
		return err
	}
	var unknown []string
	for k := range env {
		if _, ok := byEnv[k]; !ok && !notAFlagVar(k) {
			unknown = append(unknown, k)
		}
	}
	slices.Sort(unknown)
	names := flagNames(fs)
	for _, k := range unknown {
		guess := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(k, "KVROUTE_"), "_", "-"))
		if c, ok := closest(guess, names); ok {
			fmt.Fprintf(warn, "%s: warning: %s names no flag of %s and is ignored; did you mean %s (--%s)?\n", fs.Name(), k, fs.Name(), envName(c), c)
		} else {
			fmt.Fprintf(warn, "%s: warning: %s names no flag of %s and is ignored; see %s -h\n", fs.Name(), k, fs.Name(), fs.Name())
		}
	}
	return nil
}

// notAFlagVar reports whether a KVROUTE_* variable is one the tests and
// benchmarks read, not a flag.
func notAFlagVar(k string) bool {
	return strings.HasPrefix(k, "KVROUTE_TEST_") || strings.HasPrefix(k, "KVROUTE_BENCH_") ||
		k == "KVROUTE_PARTREF_TRACE" || k == "KVROUTE_TOKENIZERS"
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// flagType names a flag's type in the flags reference (flagTypeName).
func (*stringList) flagType() string { return "string, repeatable" }

// autoDuration is a duration flag whose default is computed from other
// flags: "auto" until set.
type autoDuration struct {
	d   time.Duration
	set bool
}

func (a *autoDuration) String() string {
	if a == nil || !a.set {
		return "auto"
	}
	return a.d.String()
}

func (*autoDuration) flagType() string { return "duration or auto" }

func (a *autoDuration) Set(v string) error {
	if v == "auto" {
		*a = autoDuration{}
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return errors.New("want auto or a duration such as 5s, 250ms or 1m30s")
	}
	*a = autoDuration{d: d, set: true}
	return nil
}

// byteSize is a size flag: a number of bytes, optionally with a binary
// suffix (KiB, MiB, GiB, TiB).
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (*byteSize) flagType() string { return "size" }

func (b *byteSize) Set(v string) error {
	num, mul := strings.TrimSpace(v), int64(1)
	for i, suf := range []string{"KiB", "MiB", "GiB", "TiB"} {
		if strings.HasSuffix(num, suf) {
			num, mul = strings.TrimSpace(strings.TrimSuffix(num, suf)), int64(1)<<(10*(i+1))
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return fmt.Errorf("%q is not a size (bytes, or a number with KiB, MiB, GiB or TiB)", v)
	}
	if n > math.MaxInt64/mul || n < math.MinInt64/mul {
		return fmt.Errorf("%q is too large", v)
	}
	*b = byteSize(n * mul)
	return nil
}

// schedFlags are the scheduler's flags, shared by serve and replay so that a
// replay runs the scheduler exactly as a router configured the same way.
type schedFlags struct {
	weight, temp, prefScale, ovCredit, hostW, diskW, busyDecode, busyPFrac *float64
	headroom                                                               *float64
	cacheAff, qTail                                                        *float64
	reuse, credit                                                          *bool
	busyPTok                                                               *int64
	qPolicy                                                                *string
	qDepth, qAffinity                                                      *int
	rejWindow, expiry, qAgeBound, qHold, qHoldBlock                        *time.Duration
	seed                                                                   *uint64
}

func addSchedFlags(fs *flag.FlagSet) *schedFlags {
	def := sched.DefaultConfig()
	return &schedFlags{
		weight:     fs.Float64("kv-overlap-score-weight", def.Weight, "w in cost = w × prefill_blocks + decode_blocks (0 ignores prefill load)"),
		cacheAff:   fs.Float64("cache-affinity", def.CacheAffinity, "kv: credit each cached block as this many blocks of prefill in the cost (1: Dynamo's cost; larger: a request leaves its cache only for a rank with that much less prefill load)"),
		temp:       fs.Float64("router-temperature", def.Temperature, "0 picks the lowest cost; > 0 samples a softmax over normalized costs"),
		reuse:      fs.Bool("router-assume-kv-reuse", def.AssumeKVReuse, "count blocks shared by active requests on a worker once"),
		credit:     fs.Bool("router-credit-cost", false, "use the credit form of the cost (overlap credited against raw prefill)"),
		prefScale:  fs.Float64("prefill-load-scale", def.PrefillLoadScale, "credit cost: scale of the prefill term"),
		ovCredit:   fs.Float64("overlap-credit", def.OverlapCredit, "credit cost: credit per device-tier cached block"),
		hostW:      fs.Float64("host-hit-weight", def.HostHitWeight, "cached blocks credited per host-tier block beyond the device prefix (both cost forms)"),
		diskW:      fs.Float64("disk-hit-weight", def.DiskHitWeight, "cached blocks credited per disk- or external-tier block beyond the host prefix (both cost forms)"),
		busyDecode: fs.Float64("busy-decode-frac", def.BusyDecodeFrac, "a rank is busy above this fraction of its KV blocks in use (<= 0: off)"),
		busyPTok:   fs.Int64("busy-prefill-tokens", def.BusyPrefillTokens, "a rank is busy above this many active prefill tokens (0: off)"),
		busyPFrac:  fs.Float64("busy-prefill-frac", def.BusyPrefillFrac, "a rank is busy above this multiple of its max batched tokens in prefill (0: off)"),
		headroom:   fs.Float64("class-headroom", def.ClassHeadroom, "share of every rank's busy limits kept for critical requests: standard and sheddable ones see a rank busy at 1 - this of them (0: none)"),
		qPolicy:    fs.String("queue-policy", def.QueuePolicy.String(), "order of requests waiting while all workers are busy: fcfs, lcfs or wspt"),
		qDepth:     fs.Int("queue-depth", def.QueueDepth, "requests that may wait while all workers are busy; beyond it: rejected (429) and all-workers-busy"),
		qAffinity:  fs.Int("queue-affinity", def.QueueAffinity, "kv: when a worker frees, the first N waiting requests compete for it and the one whose cache favours it most goes first (0 or 1: strict --queue-policy order)"),
		qAgeBound:  fs.Duration("queue-affinity-max-wait", def.QueueAffinityMaxWait, "with --queue-affinity: a request waiting this long goes before any later one"),
		qHold:      fs.Duration("queue-affinity-hold", def.QueueAffinityHold, "with --queue-affinity: a request with more cached on a busy worker than on any free one waits up to this long for it, and a free worker idles meanwhile, instead of recomputing the prefix elsewhere (0: off)"),
		qTail:      fs.Float64("queue-affinity-tail", def.QueueAffinityTail, "with --queue-affinity: a request that has waited this many times the recent mean queue wait (and at least --queue-affinity-hold) goes before any later one, as at --queue-affinity-max-wait (0: off)"),
		qHoldBlock: fs.Duration("queue-affinity-hold-per-block", def.QueueAffinityHoldPerBlock, "with --queue-affinity: a request whose cache is on a busy worker waits this much longer, per block more cached there than on any free worker, before it goes first anywhere (at most --queue-affinity-max-wait; 0: off)"),
		rejWindow:  fs.Duration("rejection-window", def.RejectionWindow, "how long new requests are throttled (429) after an all-workers-busy event"),
		expiry:     fs.Duration("request-expiry", def.Expiry, "force-free requests booked longer than this (0: never)"),
		seed:       fs.Uint64("seed", 0, "seed of the scheduler's random choices"),
	}
}

// apply sets sc's fields from the flags and checks them; errors name the flags.
func (f *schedFlags) apply(sc *sched.Config) error {
	def := sched.DefaultConfig()
	if h := *f.headroom; !(h >= 0 && h < 1) {
		return fmt.Errorf("--class-headroom must be in [0, 1) (got %g)", h)
	}
	sc.ClassHeadroom = *f.headroom
	qp, err := sched.ParseQueuePolicy(*f.qPolicy)
	if err != nil {
		return fmt.Errorf("--queue-policy: %w", err)
	}
	if *f.cacheAff < 1 || *f.cacheAff != *f.cacheAff {
		return fmt.Errorf("--cache-affinity must be >= 1 (got %g)", *f.cacheAff)
	}
	for name, v := range map[string]float64{"kv-overlap-score-weight": *f.weight, "router-temperature": *f.temp} {
		if v < 0 || v != v {
			return fmt.Errorf("--%s must be >= 0 (got %g)", name, v)
		}
	}
	if *f.qDepth < 0 {
		return fmt.Errorf("--queue-depth must be >= 0 (got %d)", *f.qDepth)
	}
	if *f.qAffinity < 0 {
		return fmt.Errorf("--queue-affinity must be >= 0 (got %d)", *f.qAffinity)
	}
	if *f.qHold < 0 {
		return fmt.Errorf("--queue-affinity-hold must be >= 0 (got %v)", *f.qHold)
	}
	if *f.qTail < 0 || *f.qTail != *f.qTail {
		return fmt.Errorf("--queue-affinity-tail must be >= 0 (got %g)", *f.qTail)
	}
	if *f.qHoldBlock < 0 {
		return fmt.Errorf("--queue-affinity-hold-per-block must be >= 0 (got %v)", *f.qHoldBlock)
	}
	if *f.qAgeBound < 0 {
		return fmt.Errorf("--queue-affinity-max-wait must be >= 0 (got %v)", *f.qAgeBound)
	}
	if *f.rejWindow < 0 {
		return fmt.Errorf("--rejection-window must be >= 0 (got %v)", *f.rejWindow)
	}
	if !*f.credit && (*f.prefScale != def.PrefillLoadScale || *f.ovCredit != def.OverlapCredit) {
		return errors.New("--prefill-load-scale and --overlap-credit need --router-credit-cost")
	}
	sc.Weight, sc.CacheAffinity, sc.Temperature, sc.AssumeKVReuse = *f.weight, *f.cacheAff, *f.temp, *f.reuse
	sc.CreditCost, sc.PrefillLoadScale, sc.OverlapCredit, sc.HostHitWeight, sc.DiskHitWeight = *f.credit, *f.prefScale, *f.ovCredit, *f.hostW, *f.diskW
	sc.BusyDecodeFrac, sc.BusyPrefillTokens, sc.BusyPrefillFrac = *f.busyDecode, *f.busyPTok, *f.busyPFrac
	sc.QueuePolicy, sc.QueueDepth, sc.RejectionWindow, sc.Expiry = qp, *f.qDepth, *f.rejWindow, *f.expiry
	sc.QueueAffinity, sc.QueueAffinityMaxWait, sc.QueueAffinityHold, sc.QueueAffinityTail = *f.qAffinity, *f.qAgeBound, *f.qHold, *f.qTail
	sc.QueueAffinityHoldPerBlock = *f.qHoldBlock
	return sc.Validate()
}
