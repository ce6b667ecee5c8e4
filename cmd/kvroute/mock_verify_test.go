package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// kvroute mock refuses a negative --announce-block-size, naming the flag.
func TestMockAnnounceBlockSizeFlag(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$", "--", "mock", "--workers", "1", "--port", "0", "--announce-block-size", "-1")
	cmd.Env = append(os.Environ(), "KVROUTE_TEST_MAIN=1", "TMPDIR="+t.TempDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if err == nil || ctx.Err() != nil || !strings.Contains(stderr.String(), "--announce-block-size") {
		t.Fatalf("%v (timed out: %v), stderr %q; want a refusal naming --announce-block-size", err, ctx.Err() != nil, stderr.String())
	}
}
