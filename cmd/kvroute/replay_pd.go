package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/kvroute/kvroute/bench/replay"
)

// parseReplayPD validates --pd P,D and --pd-transfer-gbps against the other
// replay options and returns the comparison's configuration.
// kvSet says whether --kv-blocks was given: otherwise every GPU has the
// profiled GPU's KV capacity (engine.DistServeKVTokens).
func parseReplayPD(o *replayOptions, spec string, gbps float64, online, kvSet bool) (*replay.PDConfig, error) {
	f := strings.Split(spec, ",")
	if len(f) != 2 {
		return nil, fmt.Errorf("--pd %q: want P,D (prefill and decode GPUs, e.g. 2,6)", spec)
	}
	var n [2]int
	for i, v := range f {
		x, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || x < 1 || x > 2048 {
			return nil, fmt.Errorf("--pd %q: %q is not a GPU count in [1, 2048]", spec, v)
		}
		n[i] = x
	}
	switch {
	case online:
		return nil, errors.New("--pd is offline only (no --url)")
	case o.auto:
		return nil, errors.New("--pd: give the loads to compare with --speedup (a list, e.g. 0.05,0.5,1,1.5)")
	case len(o.syncDelays) > 0 || o.offline.Routers != 1:
		return nil, errors.New("--pd runs one router: drop --routers and --sync-delays")
	case !(gbps > 0) || gbps > 1e4:
		return nil, fmt.Errorf("--pd-transfer-gbps must be in (0, 10000] (got %g)", gbps)
	}
	fl := o.offline.Fleet
	c := &replay.PDConfig{
		Prefill: n[0], Decode: n[1],
		Fleet:        replay.Fleet{BlockSize: fl.BlockSize, MaxNumSeqs: fl.MaxNumSeqs, MaxBatchedTokens: fl.MaxBatchedTokens},
		Sched:        o.offline.Sched,
		TransferGBps: gbps,
		EventDelay:   o.offline.EventDelay,
		LoadInterval: o.offline.LoadInterval,
		Seed:         o.offline.Seed,
	}
	if kvSet {
		c.Fleet.KVBlocks = fl.KVBlocks
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("--pd: %w", err)
	}
	return c, nil
}

// replayPD runs the P/D comparison at every --speedup and prints its table
// (or JSON with --json -).
func replayPD(w *replay.Workload, o *replayOptions, stdout io.Writer) error {
	res, err := replay.RunPD(w, *o.pd, o.speedups, o.parallel)
	if err != nil {
		return err
	}
	if o.jsonPath == "-" {
		return replay.WritePDJSON(stdout, res)
	}
	if err := replay.WritePDTable(stdout, res); err != nil {
		return err
	}
	if o.jsonPath != "" {
		if err := replayWriteFile(o.jsonPath, func(f io.Writer) error { return replay.WritePDJSON(f, res) }); err != nil {
			return fmt.Errorf("--json: %w", err)
		}
	}
	return nil
}
