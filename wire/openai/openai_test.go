package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/wire"
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
		`not json`:                        "not valid JSON",
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
}

// Error bodies have OpenAI's shape: message, type, param and code, with
// code a string and an empty param or code written as null.
func TestAppendError(t *testing.T) {
	type body struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	var e body
	b := AppendError(nil, Error{Message: `bad "x"`, Type: TypeInvalidRequest, Param: "model", Code: CodeModelNotFound})
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if e.Error.Message != `bad "x"` || e.Error.Type != TypeInvalidRequest || e.Error.Param == nil || *e.Error.Param != "model" ||
		e.Error.Code == nil || *e.Error.Code != CodeModelNotFound {
		t.Errorf("decoded %+v from %s", e.Error, b)
	}
	b = AppendError(nil, Error{Message: "m", Type: TypeServer})
	if !strings.Contains(string(b), `"param":null,"code":null`) {
		t.Errorf("empty param and code: %s", b)
	}
	for status, code := range map[int]string{400: CodeInvalidRequest, 404: CodeNotFound, 405: CodeMethodNotAllowed,
		413: CodeRequestTooLarge, 429: CodeRateLimitExceeded, 431: CodeHeadersTooLarge, 502: CodeBadGateway,
		503: CodeServiceUnavailable, 500: CodeInternal} {
		e := StatusError(status, "x")
		if e.Code != code || e.Type == "" {
			t.Errorf("StatusError(%d) = %+v, want code %s", status, e, code)
		}
	}
	ev := AppendErrorEvent(nil, StatusError(502, "gone"))
	if !strings.HasPrefix(string(ev), "data: {") || !strings.HasSuffix(string(ev), "}\n\n") || !json.Valid(ev[6:len(ev)-2]) {
		t.Errorf("error event %q", ev)
	}
}

// A bad field is named in the error's Param.
func TestParseParam(t *testing.T) {
	var r Request
	for body, param := range map[string]string{
		`{"model":3,"prompt":"x"}`:                   "model",
		`{"prompt":[1,"x"]}`:                         "prompt[1]",
		`{"max_tokens":-1,"prompt":"x"}`:             "max_tokens",
		`{"messages":[{"role":1}]}`:                  "messages[0].role",
		`{"messages":[{"role":"user","content":1}]}`: "messages[0].content",
	} {
		err := Parse([]byte(body), body[2] == 'm' && body[3] == 'e', BytesTokenizer{}, &r)
		if !errors.Is(err, ErrBadRequest) || ParamOf(err) != param {
			t.Errorf("%s: %v, param %q, want %q", body, err, ParamOf(err), param)
		}
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

// TestParseSamplingFields: sampling parameters of the wrong JSON type or out
// of vLLM's range are rejected with the field named; valid ones, and nulls,
// pass; n is kept.
func TestParseSamplingFields(t *testing.T) {
	for _, c := range []struct {
		chat bool
		body string
		want string // "" = accepted
	}{
		{false, `{"prompt":[1],"max_tokens":0}`, "max_tokens must be an integer in [1, 16777216], got 0"},
		{false, `{"prompt":[1],"max_tokens":"5"}`, "max_tokens"},
		{false, `{"prompt":[1],"max_completion_tokens":0}`, "max_completion_tokens"},
		{false, `{"prompt":[1],"temperature":"hot"}`, `temperature must be a number ≥ 0, got "hot"`},
		{false, `{"prompt":[1],"temperature":-0.5}`, "temperature"},
		{false, `{"prompt":[1],"top_p":[]}`, "top_p must be a number in (0, 1], got []"},
		{false, `{"prompt":[1],"top_p":0}`, "top_p"},
		{false, `{"prompt":[1],"top_p":1.5}`, "top_p"},
		{false, `{"prompt":[1],"n":"2"}`, `n must be an integer ≥ 1, got "2"`},
		{false, `{"prompt":[1],"n":0}`, "n must be"},
		{false, `{"prompt":[1],"n":1.5}`, "n must be"},
		{false, `{"prompt":[1],"best_of":true}`, "best_of"},
		{false, `{"prompt":[1],"top_k":-2}`, "top_k"},
		{false, `{"prompt":[1],"min_p":2}`, "min_p"},
		{false, `{"prompt":[1],"presence_penalty":3}`, "presence_penalty"},
		{false, `{"prompt":[1],"frequency_penalty":"x"}`, "frequency_penalty"},
		{false, `{"prompt":[1],"repetition_penalty":0}`, "repetition_penalty"},
		{false, `{"prompt":[1],"seed":"1"}`, "seed"},
		{false, `{"prompt":[1],"min_tokens":-1}`, "min_tokens"},
		{false, `{"prompt":[1],"min_tokens":9,"max_tokens":4}`, "min_tokens must be ≤ max_tokens (4), got 9"},
		{false, `{"prompt":[1],"stream":"yes"}`, `stream must be a boolean, got "yes"`},
		{false, `{"prompt":[1],"ignore_eos":1}`, "ignore_eos"},
		{false, `{"prompt":[1],"stop":3}`, "stop must be"},
		{false, `{"prompt":[1],"stop":["a",1]}`, "stop[1]"},
		{false, `{"prompt":[1],"logprobs":true}`, "logprobs must be an integer"},
		{true, `{"messages":[{"role":"user","content":"x"}],"logprobs":2}`, "logprobs must be a boolean"},
		{true, `{"messages":[{"role":"user","content":"x"}],"top_logprobs":"3"}`, "top_logprobs"},
		{false, `{"prompt":[1],"temperature":"` + strings.Repeat("h", 100) + `"}`, "hhh…"},
		{false, `{"prompt":[1],"n":3,"temperature":0.7,"top_p":1,"top_k":-1,"min_p":0,"seed":-5,"stop":["\n"],
			"presence_penalty":-2,"frequency_penalty":2,"repetition_penalty":1.1,"min_tokens":2,"max_tokens":4,"ignore_eos":true,"logprobs":1}`, ""},
		{false, `{"prompt":[1],"n":null,"temperature":null,"top_p":null,"stop":null,"max_tokens":null,"stream":null,"logprobs":null}`, ""},
		{true, `{"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":2,"n":1}`, ""},
	} {
		var r Request
		err := Parse([]byte(c.body), c.chat, BytesTokenizer{}, &r)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.body, err)
		case c.want != "" && (err == nil || !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: got %v, want ErrBadRequest containing %q", c.body, err, c.want)
		case c.want != "" && ParamOf(err) == "":
			t.Errorf("%s: %v names no param", c.body, err)
		}
	}
	var r Request
	if err := Parse([]byte(`{"prompt":[1],"n":3}`), false, BytesTokenizer{}, &r); err != nil || r.N != 3 {
		t.Fatalf("n: %d %v", r.N, err)
	}
	if err := Parse([]byte(`{"prompt":[1]}`), false, BytesTokenizer{}, &r); err != nil || r.N != 0 || r.MaxTokens != 0 {
		t.Fatalf("absent n and max_tokens: %d %d %v", r.N, r.MaxTokens, err)
	}
}

// A model list written by AppendModelList reads back with ParseModelIDs and
// has OpenAI's shape.
func TestModelList(t *testing.T) {
	b := AppendModelList(nil, []Model{{ID: "a", Created: 7, OwnedBy: "kvroute"}, {ID: `b"c`, OwnedBy: "kvroute"}})
	var doc struct {
		Object string `json:"object"`
		Data   []struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Created int64  `json:"created"`
			OwnedBy string `json:"owned_by"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &doc); err != nil || doc.Object != "list" || len(doc.Data) != 2 ||
		doc.Data[0].Object != "model" || doc.Data[0].Created != 7 || doc.Data[1].ID != `b"c` || doc.Data[1].OwnedBy != "kvroute" {
		t.Fatalf("%v: %s", err, b)
	}
	ids, err := ParseModelIDs(nil, b)
	if err != nil || len(ids) != 2 || ids[0] != "a" || ids[1] != `b"c` {
		t.Errorf("ParseModelIDs: %q %v", ids, err)
	}
	for _, bad := range []string{`[`, `{"data":7}`, `{"data":[{"id":""}]}`, `{"object":"list"}`} {
		if _, err := ParseModelIDs(nil, []byte(bad)); err == nil {
			t.Errorf("ParseModelIDs(%s) accepted", bad)
		}
	}
}

// Chat media parts become multimodal ranges over their placeholder tokens,
// identified by their uuid, else their URL; mm_hashes, when given, wins.
func TestChatMediaAndCacheKeys(t *testing.T) {
	var r Request
	body := `{"messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"http://x/a.png"}},{"type":"image_url","image_url":{"url":"http://x/b.png"},"uuid":"my-id"}]}],"cache_salt":"t1"}`
	if err := Parse([]byte(body), true, BytesTokenizer{}, &r); err != nil {
		t.Fatal(err)
	}
	pre := len("<|im_start|>user\nhi")
	ha, _ := wire.MMHashOf([]byte("http://x/a.png"))
	hb, _ := wire.MMHashOf([]byte("my-id"))
	want := []wire.MMRange{{Hash: ha, Offset: pre, Length: len(mediaPlaceholder)}, {Hash: hb, Offset: pre + len(mediaPlaceholder), Length: len(mediaPlaceholder)}}
	if fmt.Sprint(r.MM) != fmt.Sprint(want) || string(r.Salt) != "t1" {
		t.Fatalf("mm %v salt %q, want %v t1", r.MM, r.Salt, want)
	}
	if string(bytesOf(r.Tokens[pre:pre+len(mediaPlaceholder)])) != mediaPlaceholder {
		t.Fatalf("the range does not cover the placeholder: %q", bytesOf(r.Tokens))
	}
	explicit := strings.Replace(body, `"cache_salt":"t1"`, `"mm_hashes":[{"identifier":"z","offset":1,"length":2}]`, 1)
	if err := Parse([]byte(explicit), true, BytesTokenizer{}, &r); err != nil {
		t.Fatal(err)
	}
	hz, _ := wire.MMHashOf([]byte("z"))
	if len(r.MM) != 1 || r.MM[0] != (wire.MMRange{Hash: hz, Offset: 1, Length: 2}) || len(r.Salt) != 0 {
		t.Fatalf("explicit mm_hashes: %v salt %q", r.MM, r.Salt)
	}
}

func bytesOf(toks []uint32) []byte {
	b := make([]byte, len(toks))
	for i, t := range toks {
		b[i] = byte(t)
	}
	return b
}
