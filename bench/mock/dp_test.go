package mock

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/natstest"
	"github.com/kvroute/kvroute/internal/promtext/promtexttest"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/plane"
)

// completeRank posts a completion pinned to dp rank rank (header value
// as given; "" sends no header) and returns the status and body.
func completeRank(t *testing.T, url, rank string, prompt []uint32, maxTokens int) (int, []byte) {
	t.Helper()
	var hdr http.Header
	if rank != "" {
		hdr = http.Header{"x-data-parallel-rank": {rank}} // vLLM reads it case-insensitively
	}
	return postWith(t, url, "/v1/completions", map[string]any{"prompt": prompt, "max_tokens": maxTokens}, hdr)
}

// TestDataParallelRanks: a worker of two dp ranks registers both behind one
// URL; a request pinned by X-Data-Parallel-Rank runs on that rank's engine
// (its cache, its cached_tokens), events carry each rank's dp rank and ids,
// a bad rank is a 400 naming the header, an unpinned request goes to the
// least loaded rank, recovery answers each rank's own state, and /metrics
// has one sample per rank.
func TestDataParallelRanks(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Connect(t, s)
	sub := natstest.Connect(t, s)
	subj, _ := plane.SubjectsFor("kvroute", "backend")
	m := mirrorNATS(t, sub, plane.TransportDynamo)
	cfg := Config{Workers: 1, BlockSize: 4, KVBlocks: 64, MaxNumSeqs: 8, MaxBatchedTokens: 64, Speedup: 2000,
		Transport: plane.TransportDynamo, DPSize: 2}
	w := startFleet(t, cfg, nc).Workers()[0]
	if reg := w.Registration(); !slices.Equal(reg.DpRanks, []uint32{0, 1}) || reg.Validate() != nil {
		t.Fatalf("registration dp_ranks %v (valid: %v), want [0 1]", reg.DpRanks, reg.Validate())
	}
	if w.DPSize() != 2 || w.Rank(1) == nil || w.Rank(2) != nil {
		t.Fatalf("DPSize %d, Rank(1) %v, Rank(2) %v", w.DPSize(), w.Rank(1), w.Rank(2))
	}

	// Pinned: the same prompt twice on rank 1 hits rank 1's cache; then on
	// rank 0 it is cold.
	prompt := tokens(7, 40)
	cached := func(rank string) int {
		code, body := completeRank(t, w.URL(), rank, prompt, 2)
		if code != http.StatusOK {
			t.Fatalf("rank %s: %d %s", rank, code, body)
		}
		var c completion
		if err := json.Unmarshal(body, &c); err != nil || c.Usage == nil {
			t.Fatalf("rank %s: %v %s", rank, err, body)
		}
		if want := "-r" + rank + "-"; !strings.Contains(string(body), want) {
			t.Fatalf("rank %s: response id lacks %q: %s", rank, want, body)
		}
		return c.Usage.PromptTokensDetails.CachedTokens
	}
	if c := cached("1"); c != 0 {
		t.Fatalf("first request on rank 1: %d cached tokens, want 0", c)
	}
	if c := cached("1"); c != 36 {
		t.Fatalf("second request on rank 1: %d cached tokens, want 36 (9 full blocks of the 40-token prompt)", c)
	}
	if c := cached("0"); c != 0 {
		t.Fatalf("the prompt on rank 0: %d cached tokens, want 0 (rank 1's cache is not rank 0's)", c)
	}
	if len(w.Rank(1).Held(nil)) == 0 || len(w.Held(nil)) == 0 {
		t.Fatal("a rank holds no block")
	}
	// Each rank's events carry its dp rank and rebuild its cache exactly.
	for r := range 2 {
		waitReproduced(t, m, w.Rank(r))
	}

	for _, bad := range []string{"2", "x", "-1"} {
		code, body := completeRank(t, w.URL(), bad, prompt, 2)
		if code != http.StatusBadRequest || !bytes.Contains(body, []byte("X-Data-Parallel-Rank")) {
			t.Errorf("rank %q: %d %s, want 400 naming the header", bad, code, body)
		}
	}

	// Unpinned: while rank 1 is busy, a request goes to idle rank 0.
	w.Rank(1).Pause()
	done := make(chan int, 1)
	go func() {
		code, _ := completeRank(t, w.URL(), "1", tokens(8, 8), 2)
		done <- code
	}()
	deadline := time.Now().Add(10 * time.Second)
	for w.Rank(1).load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the pinned request never queued on rank 1")
		}
		time.Sleep(time.Millisecond) // polling: the queue has no event to await
	}
	for range 3 {
		code, body := completeRank(t, w.URL(), "", tokens(9, 8), 2)
		if code != http.StatusOK || !strings.Contains(string(body), "-r0-") {
			t.Fatalf("unpinned request while rank 1 is busy: %d %s, want rank 0", code, body)
		}
	}
	w.Rank(1).Resume()
	if code := <-done; code != http.StatusOK {
		t.Fatalf("the pinned request: %d", code)
	}

	// Recovery: each rank dumps its own blocks; an unknown rank is an error.
	for r := range 3 {
		msg, err := sub.Request(subj.RecoverSubject(w.ID()), plane.AppendRecoverRequest(nil, plane.RecoverRequest{
			Worker: wire.WorkerKey{Worker: w.ID(), Dp: uint32(r)}, After: 0}), 5*time.Second)
		if err != nil {
			t.Fatalf("recovery of rank %d: %v", r, err)
		}
		h, body, err := plane.DecodeRecoverReply(msg.Data)
		if err != nil {
			t.Fatal(err)
		}
		if r == 2 {
			if h.Kind != plane.RecoverError || !bytes.Contains(body, []byte("dp ranks 0 to 1")) {
				t.Fatalf("recovery of rank 2: %+v %s, want an error naming the ranks", h, body)
			}
			continue
		}
		if h.Kind == plane.RecoverError || h.Worker.Dp != uint32(r) {
			t.Fatalf("recovery of rank %d: %+v %s", r, h, body)
		}
	}

	resp, err := client.Get(w.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for r := range 2 {
		if want := fmt.Sprintf(`mock_kv_total_blocks{worker="1",dp_rank="%d"} 64`, r); !bytes.Contains(body, []byte(want)) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
	promtexttest.Check(t, "a dp worker's /metrics", body)
}
