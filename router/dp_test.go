package router

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
)

// TestDataParallelRankForwarded: behind one URL, a worker of two dp ranks
// runs each rank's engine with its own cache. The router sends the rank it
// chose in X-Data-Parallel-Rank, so the engine serves a request on the rank
// whose cache the decision counted: every request sharing a warm prefix
// finds as many cached tokens in the engine as the router credited. Without
// the header the worker's own balancer alternates idle ranks and half of
// them find nothing cached.
func TestDataParallelRankForwarded(t *testing.T) {
	e := startEnv(t, envOptions{workers: 1, dpSize: 2})
	var w workersDoc
	waitFor(t, "both dp ranks registered", func() bool {
		w = e.workers()
		return len(w.Workers) == 1 && len(w.Workers[0].Ranks) == 2
	})
	send := func(i int) (rank string, overlap, cached int) {
		t.Helper()
		toks := tokens(3, i, 8*testBlockSize, 5)
		code, body, h := e.do("POST", "/v1/completions", fmt.Sprintf(`{"prompt":%s,"max_tokens":2}`, promptJSON(toks)))
		if code != 200 {
			t.Fatalf("request %d: %d %s", i, code, body)
		}
		var resp struct {
			Usage struct {
				Details struct {
					Cached int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(body, &resp); err != nil {
			t.Fatalf("request %d: %v: %s", i, err, body)
		}
		overlap, _ = strconv.Atoi(h.Get(HeaderCachedBlocks))
		return h.Get(HeaderDpRank), overlap, resp.Usage.Details.Cached
	}
	first, _, _ := send(0)
	e.indexed(tokens(3, 0, 8*testBlockSize, 5), 8)
	for i := 1; i <= 6; i++ {
		rank, overlap, cached := send(i)
		if overlap < 8 {
			t.Fatalf("request %d: the router credited %d blocks, want the 8-block warm prefix", i, overlap)
		}
		if cached != overlap*testBlockSize {
			t.Fatalf("request %d: routed to dp rank %s (first went to %s) crediting %d blocks, but the engine found %d cached tokens, want %d: the rank was not forwarded",
				i, rank, first, overlap, cached, overlap*testBlockSize)
		}
	}
}
