package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/wire/pd"
)

// TestMockRoleFlags: kvroute mock --role prefill starts workers that answer
// a vLLM NIXL prefill leg (built by wire/pd) with the kv_transfer_params
// naming the blocks they keep for the decode side; a bad --role or
// --pd-protocol is refused naming the flag.
func TestMockRoleFlags(t *testing.T) {
	for _, c := range []struct{ flag, value string }{{"--role", "bogus"}, {"--pd-protocol", "nixl"}} {
		// A refusal exits at once; one that is not refused would serve
		// until killed, so the run is bounded.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$", "--", "mock", "--workers", "1", "--port", "0", "--zmq-port", "0", c.flag, c.value)
		cmd.Env = append(os.Environ(), "KVROUTE_TEST_MAIN=1", "TMPDIR="+t.TempDir())
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		timedOut := ctx.Err() != nil
		cancel()
		if err == nil || timedOut || !strings.Contains(stderr.String(), c.flag) {
			t.Errorf("mock %s %s: %v (timed out: %v), stderr %q; want a refusal naming %s", c.flag, c.value, err, timedOut, stderr.String(), c.flag)
		}
	}

	cmd := exec.Command(os.Args[0], "-test.run=^$", "--", "mock", "--workers", "1", "--port", "0", "--role", "prefill", "--zmq-port", "0")
	cmd.Env = append(os.Environ(), "KVROUTE_TEST_MAIN=1", "TMPDIR="+t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var url string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "worker 1 "); ok {
			url = strings.TrimSpace(rest)
		}
		if strings.HasPrefix(sc.Text(), "ready:") {
			break
		}
	}
	go func() { // keep draining stdout
		for sc.Scan() {
		}
	}()
	if url == "" {
		t.Fatal("kvroute mock printed no worker URL")
	}
	body, err := pd.AppendVLLMPrefill(nil, []byte(`{"prompt":"a prompt long enough to fill two blocks of sixteen tokens","max_tokens":8,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Post(url+"/v1/completions", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var answer struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
		Params struct {
			DoRemotePrefill bool   `json:"do_remote_prefill"`
			Blocks          []int  `json:"remote_block_ids"`
			Host            string `json:"remote_host"`
			Port            int    `json:"remote_port"`
		} `json:"kv_transfer_params"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		t.Fatalf("prefill leg answer (%d): %v", resp.StatusCode, err)
	}
	if resp.StatusCode != 200 || answer.Usage.CompletionTokens != 1 || !answer.Params.DoRemotePrefill ||
		len(answer.Params.Blocks) == 0 || answer.Params.Host == "" || answer.Params.Port == 0 {
		t.Fatalf("prefill leg: status %d, answer %+v; want one token and kv_transfer_params naming the kept blocks", resp.StatusCode, answer)
	}
}
