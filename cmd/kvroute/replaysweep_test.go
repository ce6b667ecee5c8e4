package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestReplaySyncDelays(t *testing.T) {
	dir := t.TempDir()
	o, err := parseReplayFlags([]string{"--trace", headTrace, "--requests", "40", "--compare", "kv", "--routers", "3", "--speedup", "1",
		"--sync-delays", "0, 1ms,50ms", "--plot", filepath.Join(dir, "s.svg"), "--json", filepath.Join(dir, "s.json")}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.syncDelays) != 3 || o.syncDelays[0] != 0 || o.syncDelays[1] != time.Millisecond || o.syncDelays[2] != 50*time.Millisecond {
		t.Fatalf("--sync-delays parsed as %v", o.syncDelays)
	}
	var stdout bytes.Buffer
	if err := replayMain(context.Background(), o, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"40 requests, 8 workers, policy kv", "1 router ", "3 replicas, no sync", "3 replicas, sync delay 1ms"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "s.svg")); err != nil || !bytes.HasPrefix(b, []byte("<svg")) {
		t.Fatalf("plot: %v %.40q", err, b)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "s.json")); err != nil || !bytes.Contains(b, []byte(`"window_max_mean"`)) {
		t.Fatalf("json: %v %.80q", err, b)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--sync-delays", "1ms", "--speedup", "1"}, "--routers > 1"},
		{[]string{"--sync-delays", "1ms", "--routers", "3"}, "one --speedup"},
		{[]string{"--sync-delays", "soon", "--routers", "3", "--speedup", "1"}, `"soon"`},
		{[]string{"--sync-delays", "-1ms", "--routers", "3", "--speedup", "1"}, "≥ 0"},
	} {
		if _, err := parseReplayFlags(append([]string{"--trace", headTrace}, c.args...), io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error with %s", c.args, err, c.want)
		}
	}
}
