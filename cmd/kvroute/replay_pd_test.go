package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// TestReplayPDFlags: --pd takes P,D with --speedup values, offline, and
// every bad value is refused naming the flag.
func TestReplayPDFlags(t *testing.T) {
	o, err := parseReplayFlags([]string{"--pd", "2,6", "--speedup", "0.5,1", "--pd-transfer-gbps", "50"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c := o.pd; c == nil || c.Prefill != 2 || c.Decode != 6 || c.TransferGBps != 50 || len(o.speedups) != 2 || c.Fleet.KVBlocks != 0 {
		t.Fatalf("--pd 2,6: %+v, speedups %v", o.pd, o.speedups)
	}
	// --kv-blocks, when given, replaces the profiled GPU's capacity.
	if o, err = parseReplayFlags([]string{"--pd", "2,6", "--speedup", "1", "--kv-blocks", "8192"}, io.Discard); err != nil || o.pd.Fleet.KVBlocks != 8192 {
		t.Fatalf("--kv-blocks 8192: %v, %+v", err, o.pd)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--pd", "2", "--speedup", "1"}, "--pd"},
		{[]string{"--pd", "2,6,1", "--speedup", "1"}, "--pd"},
		{[]string{"--pd", "0,6", "--speedup", "1"}, "--pd"},
		{[]string{"--pd", "2,x", "--speedup", "1"}, "--pd"},
		{[]string{"--pd", "2,6"}, "--speedup"},
		{[]string{"--pd", "2,6", "--speedup", "1", "--url", "http://127.0.0.1:1"}, "offline"},
		{[]string{"--pd", "2,6", "--speedup", "1", "--routers", "2"}, "--routers"},
		{[]string{"--pd", "2,6", "--speedup", "1", "--pd-transfer-gbps", "0"}, "--pd-transfer-gbps"},
		{[]string{"--pd", "2,6", "--speedup", "1", "--pd-transfer-gbps", "NaN"}, "--pd-transfer-gbps"},
	} {
		_, err := parseReplayFlags(c.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one naming %s", c.args, err, c.want)
		}
	}
}

// TestReplayPDRuns: `kvroute replay --pd` prints one row per load and cell.
func TestReplayPDRuns(t *testing.T) {
	o, err := parseReplayFlags([]string{"--synth", "--synth-requests", "40", "--pd", "1,2", "--speedup", "1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := replayMain(t.Context(), o, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, cell := range []string{"agg-kv", "disagg-rr", "disagg-kv", "cond-kv"} {
		if !strings.Contains(out.String(), " "+cell+" ") {
			t.Errorf("no %s row in\n%s", cell, out.String())
		}
	}
}
