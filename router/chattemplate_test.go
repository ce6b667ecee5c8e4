package router

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/valyala/fastjson"

	"github.com/kvroute/kvroute/prompt/chattmpl"
)

// llamaStyle is a Llama-3-style chat template (real ones are in
// prompt/chattmpl's parity test); it refuses a conversation ending with an
// assistant turn when a generation prompt is asked for.
const llamaStyle = `{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>

{{ m.content | trim }}<|eot_id|>{% endfor %}{% if add_generation_prompt %}{% if messages[-1].role == "assistant" %}{{ raise_exception("the last message is the assistant's: nothing to generate") }}{% endif %}<|start_header_id|>assistant<|end_header_id|>

{% endif %}`

func loadTemplate(t *testing.T, src string) *chattmpl.Template {
	t.Helper()
	cfg, _ := json.Marshal(map[string]any{"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "chat_template": src})
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	tmpl, err := chattmpl.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// TestChatTemplateRouting: with a chat template configured, a chat request
// is hashed over the template's rendering of its messages. Two chats sharing
// a system prompt land on the same worker, the second with the system
// prompt's blocks cached: the router's overlap is the rendered common prefix
// in full blocks, and equals what the engine (rendering with the same
// template) reports as cached_tokens.
func TestChatTemplateRouting(t *testing.T) {
	tmpl := loadTemplate(t, llamaStyle)
	e := startEnv(t, envOptions{chatTemplate: tmpl})
	system := strings.Repeat("You are a careful assistant for a KV-cache router. ", 8)
	chat := func(question string) string {
		b, _ := json.Marshal(map[string]any{"max_tokens": 2, "messages": []map[string]any{
			{"role": "system", "content": system}, {"role": "user", "content": question}}})
		return string(b)
	}
	render := func(body string) string {
		out, err := tmpl.RenderRequest(nil, fastjson.MustParse(body))
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	chat1, chat2 := chat("What is prefix caching?"), chat("And how are blocks evicted?")
	p1, p2 := render(chat1), render(chat2)
	common := 0
	for common < len(p1) && common < len(p2) && p1[common] == p2[common] {
		common++
	}
	shared := common / testBlockSize
	if !strings.HasPrefix(p1, "<|begin_of_text|><|start_header_id|>system") || shared < 20 {
		t.Fatalf("rendered %q: shared prefix of %d blocks", p1, shared)
	}

	type usage struct {
		Usage struct {
			PromptTokens        int `json:"prompt_tokens"`
			PromptTokensDetails struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	send := func(body string) (worker uint64, cached int, u usage) {
		code, resp, h := e.do("POST", "/v1/chat/completions", body)
		if code != 200 {
			t.Fatalf("chat: %d %s", code, resp)
		}
		fmt.Sscan(h.Get(HeaderWorker), &worker)
		fmt.Sscan(h.Get(HeaderCachedBlocks), &cached)
		if err := json.Unmarshal(resp, &u); err != nil {
			t.Fatalf("%v: %s", err, resp)
		}
		return
	}
	w1, cached1, u1 := send(chat1)
	if cached1 != 0 || u1.Usage.PromptTokens != len(p1) {
		t.Fatalf("first chat: %d cached blocks, %d prompt tokens; want 0 and the rendered %d", cached1, u1.Usage.PromptTokens, len(p1))
	}
	toks := make([]uint32, len(p1))
	for i := range p1 {
		toks[i] = uint32(p1[i])
	}
	if w := e.indexed(toks, len(p1)/testBlockSize); w != w1 {
		t.Fatalf("the first chat's blocks are indexed on worker %d, it ran on %d", w, w1)
	}
	w2, cached2, u2 := send(chat2)
	if w2 != w1 || cached2 != shared {
		t.Errorf("second chat: worker %d with %d cached blocks; want worker %d with the %d blocks of the shared system prompt", w2, cached2, w1, shared)
	}
	if u2.Usage.PromptTokens != len(p2) || u2.Usage.PromptTokensDetails.CachedTokens != cached2*testBlockSize {
		t.Errorf("engine: %d prompt tokens, %d cached; router: %d rendered tokens, %d cached blocks", u2.Usage.PromptTokens, u2.Usage.PromptTokensDetails.CachedTokens, len(p2), cached2)
	}

	// /route decides a chat as /v1/chat/completions hashes it.
	var rt struct {
		RequestID     string `json:"request_id"`
		WorkerID      uint64 `json:"worker_id"`
		OverlapBlocks int    `json:"overlap_blocks"`
		PromptBlocks  int    `json:"prompt_blocks"`
	}
	chat3 := chat("Which worker holds my prefix?")
	code, resp, _ := e.do("POST", "/route", strings.Replace(chat3, "{", `{"explain":true,`, 1))
	if err := json.Unmarshal(resp, &rt); code != 200 || err != nil {
		t.Fatalf("/route: %d %s", code, resp)
	}
	if p3 := render(chat3); rt.WorkerID != w1 || rt.OverlapBlocks < shared || rt.PromptBlocks != len(p3)/testBlockSize {
		t.Errorf("/route of a chat: worker %d, %d of %d blocks cached; want worker %d, ≥ %d of %d", rt.WorkerID, rt.OverlapBlocks, rt.PromptBlocks, w1, shared, len(p3)/testBlockSize)
	}
	if code, resp, _ := e.do("POST", "/route/"+rt.RequestID+"/free", ""); code != 200 {
		t.Fatalf("free: %d %s", code, resp)
	}

	// A conversation the template refuses: 400 with an OpenAI error naming messages.
	code, resp, _ = e.do("POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"}]}`)
	var er struct {
		Error struct{ Message, Type, Param string }
	}
	if err := json.Unmarshal(resp, &er); code != 400 || err != nil || er.Error.Param != "messages" || er.Error.Type != "invalid_request_error" ||
		!strings.Contains(er.Error.Message, "nothing to generate") {
		t.Errorf("refused conversation: %d %s", code, resp)
	}
	waitFor(t, "load back to zero", e.idle)
}
