package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvroute/kvroute/bench/mock"
	"github.com/kvroute/kvroute/router"
	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/wire/openai"
	"github.com/kvroute/kvroute/wire/plane"
)

// pdFlags are serve's disaggregated prefill/decode flags.
type pdFlags struct {
	policy         *string
	minUncached    *int
	prefillTimeout *time.Duration
	demo           *string
	demoProtocol   *string
}

func addPDFlags(fs *flag.FlagSet) *pdFlags {
	def := sched.DefaultConfig()
	return &pdFlags{
		policy: fs.String("disagg-policy", def.DisaggPolicy.String(),
			"with prefill workers: when a prompt is prefilled remotely: always, isl (not when its uncached part is under --disagg-min-uncached-tokens), load (not when the prefill pool has more prefill tokens queued than the decode pool) or isl-or-load"),
		minUncached: fs.Int("disagg-min-uncached-tokens", int(def.DisaggMinUncachedTokens),
			"with --disagg-policy isl or isl-or-load: a prompt with fewer uncached tokens on its decode worker is served there alone"),
		prefillTimeout: fs.Duration("prefill-timeout", router.DefaultPrefillTimeout,
			"a prefill leg not answered within this is given up and its request served aggregated on its decode worker"),
		demo: fs.String("demo-fleet-pd", "",
			"P,D: also run P simulated prefill workers and D decode workers in the process (a disaggregated fleet; evaluation without GPUs)"),
		demoProtocol: fs.String("demo-fleet-pd-protocol", plane.ProtocolVLLMNIXL,
			"the protocol --demo-fleet-pd's workers speak: vllm-nixl or sglang"),
	}
}

// apply checks the flags and sets them in sc, rc and o; errors name the
// flags.
func (f *pdFlags) apply(sc *sched.Config, rc *router.Config, o *serveOptions) error {
	p, err := sched.ParseDisaggPolicy(*f.policy)
	if err != nil {
		return fmt.Errorf("--disagg-policy: %w", err)
	}
	if *f.minUncached < 0 {
		return fmt.Errorf("--disagg-min-uncached-tokens must be >= 0 (got %d)", *f.minUncached)
	}
	if *f.prefillTimeout <= 0 {
		return fmt.Errorf("--prefill-timeout must be > 0 (got %v)", *f.prefillTimeout)
	}
	sc.DisaggPolicy, sc.DisaggMinUncachedTokens = p, uint32(*f.minUncached)
	rc.PrefillTimeout = *f.prefillTimeout
	if *f.demo != "" {
		ps, ds, ok := strings.Cut(*f.demo, ",")
		np, err1 := strconv.Atoi(strings.TrimSpace(ps))
		nd, err2 := strconv.Atoi(strings.TrimSpace(ds))
		if !ok || err1 != nil || err2 != nil || np < 1 || nd < 1 {
			return fmt.Errorf("--demo-fleet-pd %q: want P,D (prefill and decode workers, each >= 1)", *f.demo)
		}
		if o.demoFleet > 0 {
			return fmt.Errorf("--demo-fleet-pd and --demo-fleet both number their workers from 1: use one")
		}
		o.demoPrefill, o.demoDecode = np, nd
	}
	switch *f.demoProtocol {
	case plane.ProtocolVLLMNIXL, plane.ProtocolSGLang:
		o.demoPDProtocol = *f.demoProtocol
	default:
		return fmt.Errorf("--demo-fleet-pd-protocol %q: want vllm-nixl or sglang", *f.demoProtocol)
	}
	return nil
}

// staticWorkerPD reads a --worker option of disaggregated serving (role,
// pd_protocol, bootstrap_port) into w; it reports whether k was one.
func staticWorkerPD(w *router.StaticWorker, spec, k, v string) (bool, error) {
	switch k {
	case "role":
		r, err := sched.ParseRole(v)
		if err != nil || v == "" {
			return true, fmt.Errorf("--worker %q: role=%q: want prefill, decode or both", spec, v)
		}
		w.Capacity.Role = r
	case "pd_protocol":
		if v != plane.ProtocolVLLMNIXL && v != plane.ProtocolSGLang {
			return true, fmt.Errorf("--worker %q: pd_protocol=%q: want vllm-nixl or sglang", spec, v)
		}
		w.PDProtocol = v
	case "bootstrap_port":
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 65535 {
			return true, fmt.Errorf("--worker %q: bootstrap_port=%q: want a port in [1, 65535]", spec, v)
		}
		w.BootstrapPort = n
	default:
		return false, nil
	}
	return true, nil
}

// zmqWorkerRole takes a role= option out of a --zmq-worker spec: the role
// of the routed worker of that id (a --worker), whose KV events the
// endpoint carries. It returns the spec without it, for
// ingest.ParseZMQWorker (which reads the worker's id).
func zmqWorkerRole(spec string) (rest string, role sched.Role, set bool, err error) {
	parts := strings.Split(spec, ",")
	kept := parts[:1]
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(p, "=")
		if k != "role" {
			kept = append(kept, p)
			continue
		}
		if role, err = sched.ParseRole(v); err != nil || v == "" {
			return spec, 0, false, fmt.Errorf("--zmq-worker %q: role=%q: want prefill, decode or both", spec, v)
		}
		set = true
	}
	return strings.Join(kept, ","), role, set, nil
}

// applyZMQRoles sets the roles --zmq-worker ...,role= gave on the static
// workers of the same ids.
func applyZMQRoles(ws []router.StaticWorker, roles map[uint64]sched.Role) error {
	for id, role := range roles {
		found := false
		for i := range ws {
			if ws[i].ID == id {
				if ws[i].Capacity.Role != sched.RoleBoth && ws[i].Capacity.Role != role {
					return fmt.Errorf("--zmq-worker %d: role=%s, but --worker %d has role=%s", id, role, id, ws[i].Capacity.Role)
				}
				ws[i].Capacity.Role, found = role, true
			}
		}
		if !found {
			return fmt.Errorf("--zmq-worker %d: role= needs --worker %d=URL (the role is the routed worker's; a registered worker declares its own)", id, id)
		}
	}
	return nil
}

// startDemoPD starts --demo-fleet-pd's simulated prefill and decode fleets
// on nc (ids 1..P prefill, P+1..P+D decode).
func startDemoPD(cfg router.ServiceConfig, o serveOptions, nc *nats.Conn, transport string) ([]*mock.Fleet, error) {
	base := mock.Config{
		Port: 0, BlockSize: cfg.Router.Sched.BlockSize, KVBlocks: o.demoKVBlocks,
		Speedup: o.demoSpeedup, Transport: transport, ZMQPort: 0,
		Namespace: o.namespace, Component: o.component, Logger: cfg.Logger,
		ChatTemplate: cfg.Router.ChatTemplate,
		Tokenizer:    openai.TokenizerFor(&openai.ModelTokenizers{Default: cfg.Router.Tokenizer, ByModel: cfg.Router.ModelTokenizers}, []byte("mock")),
		PDProtocol:   o.demoPDProtocol,
	}
	var fleets []*mock.Fleet
	for _, part := range []struct {
		role  string
		n     int
		first uint64
	}{{mock.RolePrefill, o.demoPrefill, 1}, {mock.RoleDecode, o.demoDecode, uint64(o.demoPrefill) + 1}} {
		c := base
		c.Workers, c.Role = part.n, part.role
		for i := range part.n {
			c.WorkerIDs = append(c.WorkerIDs, part.first+uint64(i))
		}
		f, err := mock.Start(c, nc)
		if err != nil {
			for _, f := range fleets {
				_ = f.Close()
			}
			return nil, fmt.Errorf("--demo-fleet-pd: %w", err)
		}
		fleets = append(fleets, f)
		for _, w := range f.Workers() {
			fmt.Printf("demo %s worker %d %s (%s)\n", part.role, w.ID(), w.URL(), o.demoPDProtocol)
		}
	}
	return fleets, nil
}
