package mock

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/wire/openai"
	"github.com/kvroute/kvroute/wire/plane"
)

// engineState is what the abort tests read from a worker's engine.
func engineState(w *Worker) (running, waiting, used, cached int, aborted uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	waiting, running = w.mu.eng.Load()
	used, _ = w.mu.eng.KV().Usage()
	return running, waiting, used, w.mu.eng.KV().Cached(), w.mu.c.aborted
}

// waitFor polls cond until it holds (safety limit 10 s; the poll interval
// is not a synchronization, the condition is).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestClientDisconnectAborts: a client that goes away in the middle of a
// long request, streamed or not, has the request aborted in the engine as
// vLLM aborts it: it leaves the running queue, its blocks are freed (the
// full ones stay cached), and the engine stops generating for it long
// before max_tokens.
func TestClientDisconnectAborts(t *testing.T) {
	const maxTokens = 10000 // ≥ 5.74 ms a decode step at speedup 1: ≥ 57 s to the end
	for _, stream := range []bool{true, false} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			f := startFleet(t, Config{Workers: 1, BlockSize: 16, KVBlocks: 1024, Speedup: 1, Transport: plane.TransportNone}, nil)
			w := f.Workers()[0]
			body, _ := json.Marshal(map[string]any{"prompt": tokens(1, 100), "max_tokens": maxTokens, "stream": stream})
			if stream {
				// A real HTTP client reads one chunk and closes the body,
				// which closes the connection.
				tr := &http.Transport{DisableKeepAlives: true}
				defer tr.CloseIdleConnections()
				resp, err := (&http.Client{Transport: tr}).Post(w.URL()+"/v1/completions", "application/json", bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				line, err := bufio.NewReader(resp.Body).ReadString('\n')
				if err != nil || !strings.HasPrefix(line, "data: {") {
					t.Fatalf("first chunk %q: %v", line, err)
				}
				resp.Body.Close()
			} else {
				// A client that sends its request and hangs up without
				// reading: only the connection's close tells.
				c, err := net.Dial("tcp", strings.TrimPrefix(w.URL(), "http://"))
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: mock\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
				waitFor(t, "decoding", func() bool { return w.Stats().DecodeTokens > 0 })
				c.Close()
			}
			waitFor(t, "the abort", func() bool {
				running, waiting, used, _, aborted := engineState(w)
				return running == 0 && waiting == 0 && used == 0 && aborted == 1
			})
			_, _, _, cached, _ := engineState(w)
			st := w.Stats()
			if st.Aborted != 1 || st.Finished != 0 || st.DecodeTokens >= maxTokens-1 {
				t.Fatalf("engine stats %+v: want one abort, no finish, and far fewer than %d decoded tokens", st, maxTokens)
			}
			// The prompt's 6 full blocks and the decoded ones stay cached.
			if cached < 100/16 {
				t.Fatalf("%d blocks cached after the abort, want at least the prompt's 6", cached)
			}
			if !w.Idle() {
				t.Fatal("the worker still tracks the call")
			}
			// The worker serves on.
			if r := complete(t, w.URL(), tokens(1, 100), 2); r.Usage.PromptTokensDetails.CachedTokens != 96 {
				t.Fatalf("after the abort: %+v", *r.Usage)
			}
		})
	}
}

// TestDeterministicOutput: the generated tokens are a function of the
// prompt, so two identical requests store the same blocks (the second adds
// none), and a follow-up prompt that repeats the first prompt and its
// answer, as the next turn of a chat does, finds the answer's blocks cached
// up to the last token whose KV was computed.
func TestDeterministicOutput(t *testing.T) {
	f := startFleet(t, Config{Workers: 1, BlockSize: 16, KVBlocks: 256, Speedup: 1000, Transport: plane.TransportNone}, nil)
	w := f.Workers()[0]
	url := w.URL()
	p := tokens(5, 40) // 2 full blocks and 8 tokens of tail
	const m = 50       // 90 tokens; the last one's KV is never computed: 89 → 5 full blocks
	r1 := complete(t, url, p, m)
	h1 := held(w)
	r2 := complete(t, url, p, m)
	h2 := held(w)
	if r1.Choices[0].Text != r2.Choices[0].Text || r1.Choices[0].Text != generated(p, m) || len(r1.Choices[0].Text) != m {
		t.Fatalf("texts %q and %q", r1.Choices[0].Text, r2.Choices[0].Text)
	}
	if len(h1) != (40+m-1)/16 || !mapsEqual(h1, h2) {
		t.Fatalf("first request stored %d blocks, want %d; the second changed them: %v", len(h1), (40+m-1)/16, !mapsEqual(h1, h2))
	}
	if got := r2.Usage.PromptTokensDetails.CachedTokens; got != 32 {
		t.Fatalf("identical request: cached_tokens %d, want the prompt's 2 full blocks", got)
	}
	if other := complete(t, url, tokens(6, 40), m).Choices[0].Text; other == r1.Choices[0].Text {
		t.Fatal("another prompt generated the same text")
	}
	// Next turn: prompt, answer (the bytes tokenizer maps each letter back
	// to its token), then new tokens.
	next := append(append([]uint32(nil), p...), []uint32(openai.BytesTokenizer{}.Encode(nil, []byte(r1.Choices[0].Text)))...)
	next = append(next, tokens(7, 20)...)
	if got := complete(t, url, next, 1).Usage.PromptTokensDetails.CachedTokens; got != (40+m-1)/16*16 {
		t.Fatalf("follow-up: cached_tokens %d, want %d (the first answer's decode blocks)", got, (40+m-1)/16*16)
	}

	// The same through chat: the next turn's template repeats the answer.
	msgs := []map[string]string{{"role": "user", "content": strings.Repeat("tell me more ", 5)}}
	code, body := post(t, url, "/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 40})
	var c completion
	if err := json.Unmarshal(body, &c); err != nil || code != 200 {
		t.Fatalf("%d %v %s", code, err, body)
	}
	msgs = append(msgs, map[string]string{"role": "assistant", "content": c.Choices[0].Message.Content}, map[string]string{"role": "user", "content": "and?"})
	code, body = post(t, url, "/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 1})
	var c2 completion
	if err := json.Unmarshal(body, &c2); err != nil || code != 200 {
		t.Fatalf("%d %v %s", code, err, body)
	}
	if want := (c.Usage.PromptTokens + 40 - 1) / 16 * 16; c2.Usage.PromptTokensDetails.CachedTokens != want {
		t.Fatalf("chat follow-up: cached_tokens %d, want %d", c2.Usage.PromptTokensDetails.CachedTokens, want)
	}
}
