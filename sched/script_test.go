package sched

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/zeebo/xxh3"

	"github.com/kvroute/kvroute/wire"
)

// TestScripts runs the datadriven scripts in testdata/. Commands:
//
//	config [key=value...]        new scheduler (keys: block-size weight temperature
//	                             policy queue queue-depth reuse expiry busy-decode
//	                             busy-prefill busy-prefill-frac credit scale
//	                             credit-w host-w disk-w window seed
//	                             aging aging-share headroom quantum session-ttl
//	                             max-wait)
//	tenant id=N weight=F         a tenant's weight
//	tenants                      per tenant: weight, waiting per class, served
//	                             tokens; running per class; evictions; sessions
//	add-worker w=ID [dp=N] [blocks=N] [max-batched=N]
//	remove-worker w=ID [dp=N]
//	report w=ID [dp=N] used=N [waiting=N] [t=D]
//	tree w=ID [dp=N] size=N
//	book id=NAME w=ID [dp=N] blocks=h1,h2 [isl=N] [overlap=N] tokens=N [dur=D] [t=D]
//	route [t=D] [explain]        one request per input line:
//	    NAME isl=N [blocks=h1,h2] [ov=W:N,...] [host=W:N,...] [disk=W:N,...]
//	    [tree=W:N,...] [weight=F] [temp=F] [pin=W] [allowed=W,...] [dur=D]
//	    [class=C] [tenant=N] [session=S]
//	sample n=N [t=D]             route one input request N times, freeing each at
//	                             once, and count the chosen workers
//	prefill-done NAME [t=D]
//	free NAME [t=D]
//	tick t=D
//	state [t=D] [blocks=h1,...]  read model, queue, counters, latch
//	outbox                       drain effects
//	throttled t=D
//	observe-busy t=D
//
// Workers are written wID (dp 0) or wID.DP; times as Go durations since 0.
// Every command is followed by CheckInvariants.
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := &harness{}
		h.reset(testConfig(), 1)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			out := h.run(t, d)
			if err := h.s.CheckInvariants(); err != nil {
				t.Fatalf("%s: invariants: %v", d.Pos, err)
			}
			return out
		})
	})
}

type harness struct {
	s      *Scheduler
	now    int64
	ids    map[string]uint64
	names  map[uint64]string
	nextID uint64
}

func (h *harness) reset(cfg Config, seed uint64) {
	s, err := New(cfg, seed)
	if err != nil {
		panic(err)
	}
	h.s = s
	h.now = 0
	h.ids = map[string]uint64{}
	h.names = map[uint64]string{}
	h.nextID = 0
}

func (h *harness) id(name string) uint64 {
	if id, ok := h.ids[name]; ok {
		return id
	}
	h.nextID++
	h.ids[name] = h.nextID
	h.names[h.nextID] = name
	return h.nextID
}

func (h *harness) name(id uint64) string {
	if n, ok := h.names[id]; ok {
		return n
	}
	return fmt.Sprintf("#%d", id)
}

func hashOf(name string) wire.SeqHash { return wire.SeqHash(xxh3.HashString(name)) }

func hashes(list string) []wire.SeqHash {
	if list == "" {
		return nil
	}
	var hs []wire.SeqHash
	for _, n := range strings.Split(list, ",") {
		hs = append(hs, hashOf(n))
	}
	return hs
}

func parseKey(t *testing.T, s string) wire.WorkerKey {
	s = strings.TrimPrefix(s, "w")
	w, dp, _ := strings.Cut(s, ".")
	id, err := strconv.ParseUint(w, 10, 64)
	if err != nil {
		t.Fatalf("bad worker %q", s)
	}
	k := wire.WorkerKey{Worker: id}
	if dp != "" {
		d, err := strconv.ParseUint(dp, 10, 32)
		if err != nil {
			t.Fatalf("bad dp in %q", s)
		}
		k.Dp = uint32(d)
	}
	return k
}

func keyString(k wire.WorkerKey) string {
	if k.Dp == 0 {
		return fmt.Sprintf("w%d", k.Worker)
	}
	return fmt.Sprintf("w%d.%d", k.Worker, k.Dp)
}

func dur(t *testing.T, s string) int64 {
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("bad duration %q", s)
	}
	return int64(d)
}

func fmtTime(ns int64) string { return time.Duration(ns).String() }

// args maps key → value (values joined with commas) for key=value pairs and
// records bare words in order.
type args struct {
	kv    map[string]string
	words []string
}

func cmdArgs(d *datadriven.TestData) args {
	a := args{kv: map[string]string{}}
	for _, c := range d.CmdArgs {
		if len(c.Vals) == 0 {
			a.words = append(a.words, c.Key)
			continue
		}
		a.kv[c.Key] = strings.Join(c.Vals, ",")
	}
	return a
}

func lineArgs(line string) args {
	a := args{kv: map[string]string{}}
	for _, f := range strings.Fields(line) {
		if k, v, ok := strings.Cut(f, "="); ok {
			a.kv[k] = v
		} else {
			a.words = append(a.words, f)
		}
	}
	return a
}

func (a args) has(k string) bool { _, ok := a.kv[k]; return ok }

func (a args) u64(t *testing.T, k string, def uint64) uint64 {
	v, ok := a.kv[k]
	if !ok {
		return def
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("bad %s=%q", k, v)
	}
	return n
}

func (a args) f64(t *testing.T, k string, def float64) float64 {
	v, ok := a.kv[k]
	if !ok {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		t.Fatalf("bad %s=%q", k, v)
	}
	return f
}

func (a args) key(t *testing.T) wire.WorkerKey {
	k := parseKey(t, a.kv["w"])
	if dp, ok := a.kv["dp"]; ok {
		d, err := strconv.ParseUint(dp, 10, 32)
		if err != nil {
			t.Fatalf("bad dp %q", dp)
		}
		k.Dp = uint32(d)
	}
	return k
}

func (h *harness) at(t *testing.T, a args) int64 {
	if v, ok := a.kv["t"]; ok {
		h.now = dur(t, v)
	}
	return h.now
}

// perWorker parses "W:N,W:N".
func perWorker(t *testing.T, list string, f func(k wire.WorkerKey, n uint32)) {
	if list == "" {
		return
	}
	for _, p := range strings.Split(list, ",") {
		w, n, ok := strings.Cut(p, ":")
		if !ok {
			t.Fatalf("bad per-worker value %q", p)
		}
		v, err := strconv.ParseUint(n, 10, 32)
		if err != nil {
			t.Fatalf("bad per-worker value %q", p)
		}
		f(parseKey(t, w), uint32(v))
	}
}

// request parses one route line.
func (h *harness) request(t *testing.T, line string) (Request, []Overlap) {
	a := lineArgs(line)
	if len(a.words) != 1 {
		t.Fatalf("route line %q: want one request name", line)
	}
	r := Request{ID: h.id(a.words[0]), ISL: uint32(a.u64(t, "isl", 0)), Blocks: hashes(a.kv["blocks"])}
	if a.has("dur") {
		r.ExpectedPrefill = time.Duration(dur(t, a.kv["dur"]))
	}
	if a.has("weight") {
		r.Override.Weight, r.Override.WeightSet = a.f64(t, "weight", 0), true
	}
	if a.has("temp") {
		r.Override.Temperature, r.Override.TemperatureSet = a.f64(t, "temp", 0), true
	}
	if v, ok := a.kv["class"]; ok {
		c, err := ParseClass(v)
		if err != nil {
			t.Fatal(err)
		}
		r.Class = c
	}
	r.Tenant = uint32(a.u64(t, "tenant", 0))
	if v, ok := a.kv["session"]; ok {
		r.Session = xxh3.HashString(v) | 1
	}
	if a.has("pin") {
		r.Override.Pinned, r.Override.PinnedSet = parseKey(t, a.kv["pin"]), true
	}
	if a.has("allowed") {
		for _, w := range strings.Split(a.kv["allowed"], ",") {
			r.Override.Allowed = append(r.Override.Allowed, parseKey(t, w))
		}
	}
	var ovs []Overlap
	get := func(k wire.WorkerKey) *Overlap {
		for i := range ovs {
			if ovs[i].Worker == k {
				return &ovs[i]
			}
		}
		ovs = append(ovs, Overlap{Worker: k})
		return &ovs[len(ovs)-1]
	}
	perWorker(t, a.kv["ov"], func(k wire.WorkerKey, n uint32) { get(k).Device = n })
	perWorker(t, a.kv["host"], func(k wire.WorkerKey, n uint32) { get(k).Host = n })
	perWorker(t, a.kv["disk"], func(k wire.WorkerKey, n uint32) { get(k).Disk = n })
	perWorker(t, a.kv["tree"], func(k wire.WorkerKey, n uint32) { get(k).TreeSize = n })
	return r, ovs
}

func (h *harness) decision(d Decision) string {
	switch d.Outcome {
	case Routed:
		return fmt.Sprintf("%s: routed %s overlap=%d cost=%.3f prefill-tokens=%d", h.name(d.ID), keyString(d.Worker), d.Overlap, d.Cost, d.PrefillTokens)
	case Rejected:
		return fmt.Sprintf("%s: rejected %s", h.name(d.ID), d.Reason)
	}
	return fmt.Sprintf("%s: %s", h.name(d.ID), d.Outcome)
}

func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	a := cmdArgs(d)
	var b strings.Builder
	switch d.Cmd {
	case "config":
		cfg := testConfig()
		seed := a.u64(t, "seed", 1)
		cfg.BlockSize = int(a.u64(t, "block-size", uint64(cfg.BlockSize)))
		cfg.Weight = a.f64(t, "weight", cfg.Weight)
		cfg.Temperature = a.f64(t, "temperature", cfg.Temperature)
		if v, ok := a.kv["policy"]; ok {
			p, err := ParsePolicy(v)
			if err != nil {
				return err.Error()
			}
			cfg.Policy = p
		}
		if v, ok := a.kv["queue"]; ok {
			p, err := ParseQueuePolicy(v)
			if err != nil {
				return err.Error()
			}
			cfg.QueuePolicy = p
		}
		cfg.QueueDepth = int(a.u64(t, "queue-depth", uint64(cfg.QueueDepth)))
		cfg.QueueAffinity = int(a.u64(t, "affinity", uint64(cfg.QueueAffinity)))
		if v, ok := a.kv["affinity-wait"]; ok {
			cfg.QueueAffinityMaxWait = time.Duration(dur(t, v))
		}
		if v, ok := a.kv["reuse"]; ok {
			cfg.AssumeKVReuse = v == "true"
		}
		if v, ok := a.kv["expiry"]; ok {
			cfg.Expiry = time.Duration(dur(t, v))
		}
		if v, ok := a.kv["window"]; ok {
			cfg.RejectionWindow = time.Duration(dur(t, v))
		}
		cfg.BusyDecodeFrac = a.f64(t, "busy-decode", cfg.BusyDecodeFrac)
		cfg.BusyPrefillTokens = int64(a.u64(t, "busy-prefill", uint64(cfg.BusyPrefillTokens)))
		cfg.BusyPrefillFrac = a.f64(t, "busy-prefill-frac", cfg.BusyPrefillFrac)
		if v, ok := a.kv["credit"]; ok {
			cfg.CreditCost = v == "true"
		}
		cfg.PrefillLoadScale = a.f64(t, "scale", cfg.PrefillLoadScale)
		cfg.OverlapCredit = a.f64(t, "credit-w", cfg.OverlapCredit)
		cfg.HostHitWeight = a.f64(t, "host-w", cfg.HostHitWeight)
		cfg.DiskHitWeight = a.f64(t, "disk-w", cfg.DiskHitWeight)
		if v, ok := a.kv["aging"]; ok {
			cfg.ClassAging = time.Duration(dur(t, v))
		}
		cfg.ClassAgingShare = a.f64(t, "aging-share", cfg.ClassAgingShare)
		cfg.ClassHeadroom = a.f64(t, "headroom", cfg.ClassHeadroom)
		cfg.TenantQuantum = int(a.u64(t, "quantum", uint64(cfg.TenantQuantum)))
		if v, ok := a.kv["session-ttl"]; ok {
			cfg.SessionTTL = time.Duration(dur(t, v))
		}
		if v, ok := a.kv["max-wait"]; ok {
			cfg.MaxQueueWait = time.Duration(dur(t, v))
		}
		if err := cfg.Validate(); err != nil {
			return err.Error()
		}
		h.reset(cfg, seed)
		return "ok"

	case "add-worker":
		h.s.AddWorker(a.key(t), Capacity{TotalBlocks: a.u64(t, "blocks", 0), MaxBatchedTokens: a.u64(t, "max-batched", 0)})
		return "ok"

	case "remove-worker":
		now := h.at(t, a)
		var ok bool
		if a.has("dp") {
			ok = h.s.RemoveRank(a.key(t), now)
		} else {
			ok = h.s.RemoveWorker(parseKey(t, a.kv["w"]).Worker, now)
		}
		return strconv.FormatBool(ok)

	case "report":
		now := h.at(t, a)
		if err := h.s.ReportLoad(a.key(t), Load{UsedBlocks: a.u64(t, "used", 0), Waiting: a.u64(t, "waiting", 0)}, now); err != nil {
			return err.Error()
		}
		return "ok"

	case "tree":
		if err := h.s.SetTreeSize(a.key(t), uint32(a.u64(t, "size", 0))); err != nil {
			return err.Error()
		}
		return "ok"

	case "book":
		now := h.at(t, a)
		hint := PrefillLoadHint{InitialEffectiveTokens: uint32(a.u64(t, "tokens", 0))}
		if v, ok := a.kv["dur"]; ok {
			hint.ExpectedDuration = time.Duration(dur(t, v))
		}
		err := h.s.AddRequest(h.id(a.kv["id"]), a.key(t), hashes(a.kv["blocks"]), uint32(a.u64(t, "isl", 0)), uint32(a.u64(t, "overlap", 0)), hint, now)
		if err != nil {
			return err.Error()
		}
		return "ok"

	case "route":
		now := h.at(t, a)
		explain := slices.Contains(a.words, "explain")
		var batch []Request
		var ovs [][]Overlap
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			if strings.TrimSpace(line) == "" {
				continue
			}
			r, ov := h.request(t, line)
			batch = append(batch, r)
			ovs = append(ovs, ov)
		}
		if !explain {
			for _, dec := range h.s.Decide(nil, batch, ovs, now) {
				fmt.Fprintln(&b, h.decision(dec))
			}
			return b.String()
		}
		for i := range batch {
			dec, cands := h.s.DecideExplained(nil, &batch[i], ovs[i], now)
			fmt.Fprintln(&b, h.decision(dec))
			slices.SortFunc(cands, func(x, y Candidate) int { return cmpKey(x.Worker, y.Worker) })
			for _, c := range cands {
				fmt.Fprintf(&b, "  %s overlap=%d", keyString(c.Worker), c.Overlap)
				if c.Host != 0 || c.Disk != 0 {
					fmt.Fprintf(&b, " host=%d disk=%d", c.Host, c.Disk)
				}
				fmt.Fprintf(&b, " new=%d prefill=%.3f decode=%.3f cost=%.3f", c.NewBlocks, c.PrefillBlocks, c.DecodeBlocks, c.Cost)
				if c.Session != 0 {
					fmt.Fprintf(&b, " session=%d", c.Session)
				}
				if c.Busy {
					b.WriteString(" busy")
				}
				if c.Excluded != NotExcluded {
					fmt.Fprintf(&b, " excluded=%s", c.Excluded)
				}
				if c.Chosen {
					b.WriteString(" *")
				}
				b.WriteString("\n")
			}
		}
		return b.String()

	case "sample":
		now := h.at(t, a)
		n := int(a.u64(t, "n", 100))
		counts := map[wire.WorkerKey]int{}
		base, ov := h.request(t, strings.TrimSpace(d.Input))
		for i := 0; i < n; i++ {
			r := base
			r.ID = 1<<40 + uint64(i)
			dec := h.s.Decide(nil, []Request{r}, [][]Overlap{ov}, now)[0]
			if dec.Outcome != Routed {
				t.Fatalf("sample: %s", h.decision(dec))
			}
			counts[dec.Worker]++
			h.s.Free(r.ID, now)
		}
		keys := make([]wire.WorkerKey, 0, len(counts))
		for k := range counts {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, cmpKey)
		for _, k := range keys {
			fmt.Fprintf(&b, "%s: %d\n", keyString(k), counts[k])
		}
		return b.String()

	case "prefill-done":
		now := h.at(t, a)
		return strconv.FormatBool(h.s.MarkPrefillCompleted(h.id(a.words[0]), now))

	case "free":
		now := h.at(t, a)
		return strconv.FormatBool(h.s.Free(h.id(a.words[0]), now))

	case "tick":
		h.s.Tick(h.at(t, a))
		return "ok"

	case "state":
		now := h.at(t, a)
		loads := h.s.AppendLoads(nil, hashes(a.kv["blocks"]), now)
		slices.SortFunc(loads, func(x, y WorkerLoad) int { return cmpKey(x.Worker, y.Worker) })
		for _, l := range loads {
			fmt.Fprintf(&b, "%s: active=%d prefill=%d requests=%d decisions=%d", keyString(l.Worker), l.ActiveBlocks, l.PrefillTokens, l.Requests, l.Decisions)
			if a.has("blocks") {
				fmt.Fprintf(&b, " held=%d new=%d", l.HeldBlocks, l.NewBlocks)
			}
			if l.Reported.UsedBlocks > 0 {
				fmt.Fprintf(&b, " used=%d", l.Reported.UsedBlocks)
			}
			if l.Busy {
				b.WriteString(" busy")
			}
			if l.WorkerBusy {
				b.WriteString(" worker-busy")
			}
			b.WriteString("\n")
		}
		var names []string
		for _, id := range h.s.AppendWaiting(nil) {
			names = append(names, h.name(id))
		}
		fmt.Fprintf(&b, "queue: [%s]\n", strings.Join(names, " "))
		st := h.s.Stats()
		fmt.Fprintf(&b, "stats: decisions=%d admitted=%d queued=%d rejections=%d (queue-full=%d no-workers=%d duplicate=%d) busy-events=%d expired=%d cancelled=%d dropped=%d active=%d\n",
			st.Decisions, st.Admitted, st.Queued, st.Rejections, st.RejectedQueueFull, st.RejectedNoWorkers, st.RejectedDuplicate, st.AllWorkersBusy, st.Expirations, st.Cancelled, st.Dropped, st.Active)
		if h.s.Throttled(now) {
			fmt.Fprintf(&b, "throttled until %s\n", fmtTime(h.s.RejectUntil()))
		}
		return b.String()

	case "outbox":
		for _, e := range h.s.Drain(nil) {
			switch e.Kind {
			case EffectAdmitted:
				fmt.Fprintf(&b, "admitted at %s: %s\n", fmtTime(e.At), h.decision(e.Decision))
			case EffectRejected:
				fmt.Fprintf(&b, "rejected at %s: %s %s\n", fmtTime(e.At), h.name(e.ID), e.Reason)
			case EffectAllWorkersBusy:
				fmt.Fprintf(&b, "all-workers-busy at %s: queue-depth=%d count=%d\n", fmtTime(e.At), e.QueueDepth, e.Count)
			case EffectExpired:
				fmt.Fprintf(&b, "expired at %s: %s on %s\n", fmtTime(e.At), h.name(e.ID), keyString(e.Worker))
			}
		}
		if b.Len() == 0 {
			return "empty"
		}
		return b.String()

	case "throttled":
		now := h.at(t, a)
		return fmt.Sprintf("%v until %s", h.s.Throttled(now), fmtTime(h.s.RejectUntil()))

	case "tenant":
		if err := h.s.SetTenant(uint32(a.u64(t, "id", 0)), a.f64(t, "weight", 1)); err != nil {
			return err.Error()
		}
		return "ok"

	case "tenants":
		for _, ts := range h.s.AppendTenants(nil) {
			fmt.Fprintf(&b, "tenant %d: weight=%g waiting=%v served=%d routed=%d\n", ts.Tenant, ts.Weight, ts.Waiting, ts.ServedTokens, ts.Routed)
		}
		fmt.Fprintf(&b, "running: critical=%d standard=%d sheddable=%d\n", h.s.Running(ClassCritical), h.s.Running(ClassStandard), h.s.Running(ClassSheddable))
		st := h.s.Stats()
		fmt.Fprintf(&b, "evicted=%d queue-wait=%d queue-full=%d sessions=%d\n", st.RejectedEvicted, st.RejectedQueueWait, st.RejectedQueueFull, h.s.Sessions())
		return b.String()

	case "observe-busy":
		h.s.ObserveAllWorkersBusy(h.at(t, a))
		return "ok"
	}
	t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	return ""
}

func cmpKey(x, y wire.WorkerKey) int {
	if x.Worker != y.Worker {
		if x.Worker < y.Worker {
			return -1
		}
		return 1
	}
	return int(x.Dp) - int(y.Dp)
}
