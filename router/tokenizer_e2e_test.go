package router

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/prompt/chattmpl"
	"github.com/kvroute/kvroute/prompt/tokenizer"
	"github.com/kvroute/kvroute/wire/openai"
	"github.com/valyala/fastjson"
)

// realTokenizer loads out/tokenizers/NAME (make tokenizers); absent, the test
// is skipped, or fails under CI=true.
func realTokenizer(t *testing.T, name string) *tokenizer.Tokenizer {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		if dir == filepath.Dir(dir) {
			t.Fatal("no go.mod above the test")
		}
		dir = filepath.Dir(dir)
	}
	path := filepath.Join(dir, "out", "tokenizers", name)
	if _, err := os.Stat(filepath.Join(path, "tokenizer.json")); err != nil {
		msg := fmt.Sprintf("tokenizer %s not fetched (%v): run `make tokenizers`", name, err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	tk, err := tokenizer.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// realChatTemplate loads the chat template of out/tokenizers/NAME (fetched
// with its tokenizer: call realTokenizer first).
func realChatTemplate(t *testing.T, name string) *chattmpl.Template {
	t.Helper()
	dir, _ := os.Getwd()
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		dir = filepath.Dir(dir)
	}
	tmpl, err := chattmpl.Load(filepath.Join(dir, "out", "tokenizers", name))
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

type usageDoc struct {
	Usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// post sends a non-streaming request; it returns the worker, the blocks the
// router found cached and the engine's usage.
func (e *env) post(path, body string) (worker uint64, cachedBlocks int, u usageDoc) {
	e.t.Helper()
	code, b, h := e.do("POST", path, body)
	if code != 200 {
		e.t.Fatalf("%s: %d %s", path, code, b)
	}
	fmt.Sscan(h.Get(HeaderWorker), &worker)
	fmt.Sscan(h.Get(HeaderCachedBlocks), &cachedBlocks)
	if err := json.Unmarshal(b, &u); err != nil {
		e.t.Fatalf("%s: %v: %s", path, err, b)
	}
	return worker, cachedBlocks, u
}

// sharedPrefix is a long English text (about 300 Qwen3 tokens) two prompts
// start with.
var sharedPrefix = strings.Repeat("KV-cache-aware routing sends a request to the worker that already holds the longest prefix of its prompt, so the engine skips recomputing it. ", 10)

// TestRealTokenizerPrefixRouting: with the Qwen3 tokenizer, text completions
// and chats that share a long prefix go to the same worker, the router's
// overlap (X-Kvroute-Cached-Blocks × block size) is exactly the engine's
// cached_tokens, and the engine counts real Qwen3 tokens. Three setups:
// router and fleet share --tokenizer; the router picks it per model
// (--model-tokenizer mock=...); the router forwards its token ids
// (--forward-token-ids) to a fleet that tokenizes by bytes, which only agrees
// because it gets ids.
func TestRealTokenizerPrefixRouting(t *testing.T) {
	qwen := realTokenizer(t, "qwen3")
	qwenChat := realChatTemplate(t, "qwen3")
	for _, c := range []struct {
		name string
		o    envOptions
		chat bool
	}{
		{"same", envOptions{tokenizer: qwen, fleetTokenizer: qwen}, true},
		{"per-model", envOptions{modelTokenizers: map[string]openai.Tokenizer{"mock": qwen}, fleetTokenizer: qwen}, true},
		{"forward-token-ids", envOptions{tokenizer: qwen, forwardIDs: true}, false},
		// Qwen3's own chat template in the router and the fleet, as serve
		// --tokenizer out/tokenizers/qwen3 (and kvroute mock the same) runs.
		{"chat-template", envOptions{tokenizer: qwen, fleetTokenizer: qwen, chatTemplate: qwenChat}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := startEnv(t, c.o)
			first := sharedPrefix + "First question: what does the router hash?"
			second := sharedPrefix + "Second question: and what does the engine report?"
			toks := qwen.EncodeSpecial(nil, []byte(first))
			w1, _, u1 := e.post("/v1/completions", fmt.Sprintf(`{"model":"mock","prompt":%q,"max_tokens":2}`, first))
			if u1.Usage.PromptTokens != len(toks) {
				t.Fatalf("engine counted %d prompt tokens, Qwen3 has %d (bytes: %d)", u1.Usage.PromptTokens, len(toks), len(first))
			}
			if got := e.indexed(toks, len(toks)/testBlockSize); got != w1 {
				t.Fatalf("blocks indexed on worker %d, served by %d", got, w1)
			}
			w2, blocks, u2 := e.post("/v1/completions", fmt.Sprintf(`{"model":"mock","prompt":%q,"max_tokens":2}`, second))
			common := commonPrefix(toks, qwen.EncodeSpecial(nil, []byte(second)))
			if w2 != w1 || blocks != common/testBlockSize {
				t.Fatalf("second completion: worker %d with %d cached blocks; want worker %d with %d (%d common tokens)", w2, blocks, w1, common/testBlockSize, common)
			}
			if cached := u2.Usage.PromptTokensDetails.CachedTokens; cached != blocks*testBlockSize {
				t.Fatalf("router overlap %d blocks × %d = %d tokens, engine cached_tokens %d", blocks, testBlockSize, blocks*testBlockSize, cached)
			}
			if !c.chat {
				return
			}
			chat := func(q string) string {
				return fmt.Sprintf(`{"model":"mock","max_tokens":2,"messages":[{"role":"system","content":%q},{"role":"user","content":%q}]}`, sharedPrefix, q)
			}
			w3, _, _ := e.post("/v1/chat/completions", chat("Who are you?"))
			rendered := openai.RenderChat(nil, []string{"system", "user"}, []string{sharedPrefix, "Who are you?"})
			if c.o.chatTemplate != nil {
				var err error
				if rendered, err = c.o.chatTemplate.RenderRequest(nil, fastjson.MustParse(chat("Who are you?"))); err != nil {
					t.Fatal(err)
				}
				if !bytes.Contains(rendered, []byte("<|im_start|>system")) {
					t.Fatalf("Qwen3's template rendered %q", rendered)
				}
			}
			ctoks := qwen.Encode(nil, rendered)
			e.indexed(ctoks, len(ctoks)/testBlockSize)
			w4, blocks, u4 := e.post("/v1/chat/completions", chat("And what do you cache?"))
			if w4 != w3 || blocks == 0 || u4.Usage.PromptTokensDetails.CachedTokens != blocks*testBlockSize {
				t.Fatalf("second chat: worker %d (first %d), %d cached blocks, engine cached_tokens %d", w4, w3, blocks, u4.Usage.PromptTokensDetails.CachedTokens)
			}
		})
	}
}

func commonPrefix(a, b []uint32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
