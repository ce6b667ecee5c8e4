package openai

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestParseCompletionTokenIDs(t *testing.T) {
	var r Request
	err := Parse([]byte(`{"model":"m","prompt":[1,2,3,4294967295],"max_tokens":7,"stream":true,"request_id":"abc","lora_name":"ad"}`), false, BytesTokenizer{}, &r)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Tokens; len(got) != 4 || got[0] != 1 || got[3] != 4294967295 {
		t.Fatalf("tokens %v", got)
	}
	if r.MaxTokens != 7 || !r.Stream || string(r.Model) != "m" || string(r.RequestID) != "abc" || string(r.LoRA) != "ad" {
		t.Fatalf("fields: %+v", r)
	}
	// Nested single prompt and reuse of the same Request.
	if err := Parse([]byte(`{"prompt":[[5,6]]}`), false, BytesTokenizer{}, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Tokens) != 2 || r.Tokens[0] != 5 || r.MaxTokens != 0 || r.Stream || len(r.Model) != 0 {
		t.Fatalf("reuse did not reset: %+v", r)
	}
}

func TestParseText(t *testing.T) {
	var r Request
	if err := Parse([]byte(`{"prompt":"hé"}`), false, BytesTokenizer{}, &r); err != nil {
		t.Fatal(err)
	}
	want := []uint32{'h', 0xc3, 0xa9}
	if len(r.Tokens) != 3 || r.Tokens[0] != want[0] || r.Tokens[1] != want[1] || r.Tokens[2] != want[2] {
		t.Fatalf("tokens %v, want UTF-8 bytes %v", r.Tokens, want)
	}
}

func TestParseChatTemplate(t *testing.T) {
	var r Request
	body := `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"},{"type":"text","text":"!"}]}]}`
	if err := Parse([]byte(body), true, BytesTokenizer{}, &r); err != nil {
		t.Fatal(err)
	}
	want := RenderChat(nil, []string{"system", "user"}, []string{"be brief", "hi!"})
	if string(want) != "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi!<|im_end|>\n<|im_start|>assistant\n" {
		t.Fatalf("template: %q", want)
	}
	if len(r.Tokens) != len(want) {
		t.Fatalf("%d tokens, want %d", len(r.Tokens), len(want))
	}
	for i := range want {
		if r.Tokens[i] != uint32(want[i]) {
			t.Fatalf("token %d differs", i)
		}
	}
}

func TestParseErrors(t *testing.T) {
	cases := map[string]string{
		`not json`:                        "invalid JSON",
		`[1,2]`:                           "JSON object",
		`{}`:                              "prompt is required",
		`{"prompt":["a","b"]}`:            "batched prompts",
		`{"prompt":[1,-2]}`:               "prompt[1]",
		`{"prompt":[1],"max_tokens":-1}`:  "max_tokens",
		`{"prompt":[1],"max_tokens":1.5}`: "max_tokens",
		`{"prompt":[1],"stream":"yes"}`:   "stream",
		`{"prompt":{}}`:                   "prompt must be",
		`{"prompt":[1],"model":3}`:        "model",
	}
	for body, want := range cases {
		var r Request
		err := Parse([]byte(body), false, BytesTokenizer{}, &r)
		if err == nil || !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want ErrBadRequest mentioning %q", body, err, want)
		}
	}
	var r Request
	for body, want := range map[string]string{
		`{"messages":[]}`:                            "messages",
		`{"messages":[{"content":"x"}]}`:             "role",
		`{"messages":[{"role":"user","content":1}]}`: "content",
	} {
		if err := Parse([]byte(body), true, BytesTokenizer{}, &r); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want mention of %q", body, err, want)
		}
	}
}

func TestResponsesAreValidJSON(t *testing.T) {
	u := Usage{PromptTokens: 10, CompletionTokens: 3, CachedTokens: 8}
	for _, chat := range []bool{false, true} {
		h := Header{ID: "cmpl-1", Model: "m\"x", Created: 5, Chat: chat}
		var v map[string]any
		if err := json.Unmarshal(AppendResponse(nil, h, "ab\nc", "length", u), &v); err != nil {
			t.Fatal(err)
		}
		usage := v["usage"].(map[string]any)
		if usage["total_tokens"].(float64) != 13 || usage["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64) != 8 {
			t.Fatalf("usage %v", usage)
		}
		c := AppendChunk(nil, h, "x", "", nil)
		if !strings.HasPrefix(string(c), "data: ") || !strings.HasSuffix(string(c), "\n\n") {
			t.Fatalf("chunk framing %q", c)
		}
		if err := json.Unmarshal(c[len("data: "):len(c)-2], &v); err != nil {
			t.Fatalf("chunk JSON: %v", err)
		}
		last := AppendChunk(nil, h, "", "stop", &u)
		if err := json.Unmarshal(last[len("data: "):len(last)-2], &v); err != nil || v["usage"] == nil {
			t.Fatalf("final chunk: %v %v", err, v)
		}
	}
	var e map[string]any
	if err := json.Unmarshal(AppendError(nil, `bad "x"`, "invalid_request_error", 400), &e); err != nil {
		t.Fatal(err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"model":"m","prompt":[1,2,3],"max_tokens":7,"stream":true}`), false)
	f.Add([]byte(`{"prompt":"hello"}`), false)
	f.Add([]byte(`{"messages":[{"role":"user","content":"hi"}]}`), true)
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`), true)
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		var r Request
		for i := 0; i <= len(body); i++ {
			err := Parse(body[:i], chat, BytesTokenizer{}, &r)
			if err != nil && !errors.Is(err, ErrBadRequest) {
				t.Fatalf("error does not wrap ErrBadRequest: %v", err)
			}
		}
	})
}
