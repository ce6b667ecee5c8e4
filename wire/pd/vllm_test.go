package pd

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/wire/openai"
)

// prefillSet are the members a prefill leg writes or removes.
var prefillSet = []string{"kv_transfer_params", "stream", "max_tokens", "max_completion_tokens",
	"stream_options", "min_tokens", "min_completion_tokens"}

// A client body with every kind of value, odd spacing, numbers a re-encode
// would change, escapes, and each member the prefill leg rewrites.
const chatBody = `{ "model" : "meta-llama/Llama-3.1-8B-Instruct",
	"messages":[{"role":"system","content":"be \"brief\" \u00e9"},{"role":"user","content":"hi"}],
	"stream": true, "stream_options": {"include_usage": true},
	"max_tokens": 256, "max_completion_tokens":  300, "min_tokens": 4, "min_completion_tokens": 2,
	"temperature": 0.70, "top_p": 1e0, "seed": 12345678901234567890, "logit_bias": {"50256": -1.0E+2},
	"kv_transfer_params": {"client": "own"}, "user": null, "n": 1 }`

func TestVLLMPrefillFields(t *testing.T) {
	out, err := AppendVLLMPrefill(nil, []byte(chatBody))
	if err != nil {
		t.Fatal(err)
	}
	m := mustMembers(t, out)
	in := mustMembers(t, []byte(chatBody))
	checkOne(t, m, "stream", "false")
	checkOne(t, m, "max_tokens", "1")
	checkOne(t, m, "max_completion_tokens", "1")
	for _, k := range []string{"stream_options", "min_tokens", "min_completion_tokens"} {
		if v := get(m, k); v != nil {
			t.Errorf("%s = %q, want it removed", k, v)
		}
	}
	tp := get(m, "kv_transfer_params")
	if len(tp) != 1 {
		t.Fatalf("kv_transfer_params = %q, want exactly one", tp)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(tp[0]), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": nil,
		"remote_block_ids": nil, "remote_host": nil, "remote_port": nil}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("kv_transfer_params = %v, want %v", got, want)
	}
	checkKept(t, in, m, prefillSet...)
	// The numbers a re-encode would rewrite are as sent.
	checkOne(t, m, "seed", "12345678901234567890")
	checkOne(t, m, "logit_bias", `{"50256": -1.0E+2}`)
	checkOne(t, m, "temperature", "0.70")
}

// max_completion_tokens is set only when the client sent it; a completion
// body without the removed members keeps all its own.
func TestVLLMPrefillCompletion(t *testing.T) {
	body := `{"model":"m","prompt":[1,2,3],"max_tokens":16,"echo":false}`
	out, err := AppendVLLMPrefill([]byte("head"), []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(out), "head{") {
		t.Fatalf("dst not appended to: %s", out)
	}
	m := mustMembers(t, out[4:])
	if v := get(m, "max_completion_tokens"); v != nil {
		t.Errorf("max_completion_tokens = %q, want absent (the client did not send it)", v)
	}
	checkOne(t, m, "stream", "false")
	checkOne(t, m, "max_tokens", "1")
	checkOne(t, m, "kv_transfer_params", PrefillTransferParams)
	checkKept(t, mustMembers(t, []byte(body)), m, prefillSet...)
	if want := `head{"model":"m","prompt":[1,2,3],"echo":false,"kv_transfer_params":` + PrefillTransferParams +
		`,"stream":false,"max_tokens":1}`; string(out) != want {
		t.Errorf("got  %s\nwant %s", out, want)
	}
}

// A key spelled with escapes is the same member to the engine's parser, so
// it is rewritten too; repeated members all go.
func TestVLLMPrefillEscapedAndRepeatedKeys(t *testing.T) {
	body := `{"str\u0065am":true,"stream":true,"max_tokens":5,"max\u005ftokens":6,"min_tokens":1,"x":"stream"}`
	out, err := AppendVLLMPrefill(nil, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	m := mustMembers(t, out)
	checkOne(t, m, "stream", "false")
	checkOne(t, m, "max_tokens", "1")
	checkOne(t, m, "x", `"stream"`)
	if v := get(m, "min_tokens"); v != nil {
		t.Errorf("min_tokens = %q, want removed", v)
	}
}

func TestVLLMPrefillEmptyObject(t *testing.T) {
	out, err := AppendVLLMPrefill(nil, []byte(" {\n} "))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"kv_transfer_params":` + PrefillTransferParams + `,"stream":false,"max_tokens":1}`
	if string(out) != want {
		t.Errorf("got %s, want %s", out, want)
	}
}

func TestBadBodies(t *testing.T) {
	params := []byte(`{"remote_engine_id":"e"}`)
	for _, body := range []string{``, `[]`, `"s"`, `{"a":1`, `{"a":1}x`, `{"a" 1}`, `null`} {
		dst := []byte("keep")
		calls := map[string]func() ([]byte, error){
			"prefill": func() ([]byte, error) { return AppendVLLMPrefill(dst, []byte(body)) },
			"decode":  func() ([]byte, error) { return AppendVLLMDecode(dst, []byte(body), params) },
			"sglang":  func() ([]byte, error) { return AppendSGLang(dst, []byte(body), Bootstrap{Host: "h", Room: 1}) },
		}
		for name, call := range calls {
			out, err := call()
			if !errors.Is(err, openai.ErrBadRequest) {
				t.Errorf("%s(%q): err = %v, want a bad request", name, body, err)
			}
			if string(out) != "keep" {
				t.Errorf("%s(%q): dst = %q, want it unchanged", name, body, out)
			}
		}
	}
}

func TestVLLMDecodeFields(t *testing.T) {
	params := `{"do_remote_prefill": true, "do_remote_decode": false, "remote_engine_id": "e-1",
		"remote_block_ids": [3, 4, 5], "remote_host": "10.0.0.7", "remote_port": 5600,
		"remote_request_id": "cmpl-1", "tp_size": 2, "future_field": {"x": [1.50]}}`
	out, err := AppendVLLMDecode(nil, []byte(chatBody), []byte("\n "+params+"\t"))
	if err != nil {
		t.Fatal(err)
	}
	m := mustMembers(t, out)
	checkOne(t, m, "kv_transfer_params", params)
	// Everything else, stream and the token limits included, as sent.
	checkKept(t, mustMembers(t, []byte(chatBody)), m, "kv_transfer_params")
	checkOne(t, m, "stream", "true")
	checkOne(t, m, "stream_options", `{"include_usage": true}`)
	checkOne(t, m, "min_tokens", "4")
}

func TestVLLMDecodeBadParams(t *testing.T) {
	for _, p := range []string{``, `null`, `[1]`, `"x"`, `{"a":`, `{} {}`} {
		out, err := AppendVLLMDecode([]byte("keep"), []byte(`{"a":1}`), []byte(p))
		if err == nil || !strings.Contains(err.Error(), "kv_transfer_params") || errors.Is(err, openai.ErrBadRequest) {
			t.Errorf("params %q: err = %v, want one naming kv_transfer_params", p, err)
		}
		if string(out) != "keep" {
			t.Errorf("params %q: dst = %q, want it unchanged", p, out)
		}
	}
}

// What a vLLM prefill worker with the NIXL connector answers to the two
// endpoints (the one-token leg).
const (
	completionAnswer = `{"id":"cmpl-9","object":"text_completion","created":1730000000,"model":"m",
"choices":[{"index":0,"text":" The","logprobs":null,"finish_reason":"length","stop_reason":null,"prompt_logprobs":null}],
"usage":{"prompt_tokens":1000,"total_tokens":1001,"completion_tokens":1,"prompt_tokens_details":null},
"kv_transfer_params":{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[1,2,3],"remote_engine_id":"5e4f","remote_host":"10.0.0.7","remote_port":5600,"tp_size":1}}`
	chatAnswer = `{"id":"chatcmpl-9","object":"chat.completion","created":1730000000,"model":"m",
"choices":[{"index":0,"message":{"role":"assistant","content":"The","tool_calls":[]},"logprobs":null,"finish_reason":"length"}],
"usage":{"prompt_tokens":1000,"total_tokens":1001,"completion_tokens":1},
"prompt_logprobs":null,"kv_transfer_params":{"remote_engine_id":"5e4f","remote_block_ids":[7],"do_remote_prefill":true}}`
)

func TestTransferParams(t *testing.T) {
	for name, c := range map[string]struct{ answer, want string }{
		"completion": {completionAnswer, `{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[1,2,3],"remote_engine_id":"5e4f","remote_host":"10.0.0.7","remote_port":5600,"tp_size":1}`},
		"chat":       {chatAnswer, `{"remote_engine_id":"5e4f","remote_block_ids":[7],"do_remote_prefill":true}`},
		"last wins":  {`{"kv_transfer_params":{"a":1},"kv_transfer_params":{"b":2}}`, `{"b":2}`},
	} {
		got, err := TransferParams([]byte(c.answer))
		if err != nil || string(got) != c.want {
			t.Errorf("%s: got %s, %v; want %s", name, got, err, c.want)
		}
	}
}

func TestTransferParamsMissing(t *testing.T) {
	for _, a := range []string{`{"id":"x","choices":[]}`, `{"kv_transfer_params":null}`, `{"kv_transfer_params": { } }`,
		`{"choices":[{"kv_transfer_params":{"a":1}}]}`} {
		if _, err := TransferParams([]byte(a)); !errors.Is(err, ErrNoTransferParams) {
			t.Errorf("%s: err = %v, want ErrNoTransferParams", a, err)
		}
	}
	for _, a := range []string{`{"kv_transfer_params":"x"}`, `{"kv_transfer_params":[{}]}`, `[]`, `{"kv_transfer_params":`} {
		_, err := TransferParams([]byte(a))
		if err == nil || errors.Is(err, ErrNoTransferParams) || errors.Is(err, openai.ErrBadRequest) ||
			!strings.Contains(err.Error(), "prefill answer") {
			t.Errorf("%s: err = %v, want a malformed-answer error", a, err)
		}
		if err != nil && a[0] == '{' && a[len(a)-1] != ':' && !strings.Contains(err.Error(), "kv_transfer_params") {
			t.Errorf("%s: err = %v, want it to name kv_transfer_params", a, err)
		}
	}
}

// The two legs end to end: the decode body is the client's plus what the
// prefill answered.
func TestVLLMLegs(t *testing.T) {
	params, err := TransferParams([]byte(completionAnswer))
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"m","prompt":"hello","max_tokens":64,"stream":true}`
	out, err := AppendVLLMDecode(nil, []byte(body), params)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model":"m","prompt":"hello","max_tokens":64,"stream":true,"kv_transfer_params":` + string(params) + `}`
	if string(out) != want {
		t.Errorf("got  %s\nwant %s", out, want)
	}
}
