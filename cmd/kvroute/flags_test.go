package main

import (
	"flag"
	"strings"
	"testing"
)

func TestParseFlagsEnv(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	blocks := fs.Int("kv-blocks", 1, "")
	size := fs.Int("block-size", 16, "")
	t.Setenv("KVROUTE_KV_BLOCKS", "4096")
	t.Setenv("KVROUTE_BLOCK_SIZE", "99")
	if err := parseFlags(fs, []string{"--block-size", "64"}); err != nil {
		t.Fatal(err)
	}
	if *blocks != 4096 {
		t.Errorf("env not applied: kv-blocks = %d", *blocks)
	}
	if *size != 64 {
		t.Errorf("command line must win over env: block-size = %d", *size)
	}
	fs2 := flag.NewFlagSet("y", flag.ContinueOnError)
	fs2.Int("kv-blocks", 1, "")
	t.Setenv("KVROUTE_KV_BLOCKS", "many")
	err := parseFlags(fs2, nil)
	if err == nil || !strings.Contains(err.Error(), "--kv-blocks") || !strings.Contains(err.Error(), "KVROUTE_KV_BLOCKS") {
		t.Fatalf("want an error naming the flag and variable, got %v", err)
	}
}
