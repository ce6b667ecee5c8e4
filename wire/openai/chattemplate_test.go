package openai

import (
	"errors"
	"testing"

	"github.com/kvroute/kvroute/prompt/chattmpl"
)

func mustTemplate(t *testing.T, src string) *chattmpl.Template {
	t.Helper()
	tmpl, err := chattmpl.Parse("test", src)
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// TestParseWithChatTemplate: a chat request's messages go through the
// model's template (else the default, else ChatML), the rendered text is
// what is tokenized, and a conversation the template refuses is a 400
// naming messages.
func TestParseWithChatTemplate(t *testing.T) {
	llama := mustTemplate(t, `{% for m in messages %}<|{{ m.role }}|>{{ m.content | trim }}<|eot|>{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}`)
	strict := mustTemplate(t, `{% if messages[0].role != "user" %}{{ raise_exception("first message must be the user's") }}{% endif %}[{{ messages[0].content }}]`)
	tmpls := &ChatTemplates{Default: llama, ByModel: map[string]ChatTemplate{"strict": strict}}
	var r Request
	body := `{"model":"m","messages":[{"role":"system","content":" Be brief. "},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`
	if err := ParseWith([]byte(body), true, BytesTokenizer{}, tmpls, &r); err != nil {
		t.Fatal(err)
	}
	if got, want := string(u32bytes(r.Tokens)), "<|system|>Be brief.<|eot|><|user|>a\nb<|eot|><|assistant|>"; got != want {
		t.Errorf("default template: tokens of %q, want %q", got, want)
	}
	body = `{"model":"strict","messages":[{"role":"user","content":"q"}],"add_generation_prompt":false}`
	if err := ParseWith([]byte(body), true, BytesTokenizer{}, tmpls, &r); err != nil {
		t.Fatal(err)
	}
	if got := string(u32bytes(r.Tokens)); got != "[q]" {
		t.Errorf("model template: %q", got)
	}
	err := ParseWith([]byte(`{"model":"strict","messages":[{"role":"system","content":"s"}]}`), true, BytesTokenizer{}, tmpls, &r)
	if !errors.Is(err, ErrBadRequest) || ParamOf(err) != "messages" || err.Error() != "bad request: chat template: first message must be the user's" {
		t.Errorf("refused conversation: %v (param %q)", err, ParamOf(err))
	}
	err = ParseWith([]byte(`{"messages":[{"role":"user","content":7}]}`), true, BytesTokenizer{}, tmpls, &r)
	if !errors.Is(err, ErrBadRequest) || ParamOf(err) != "messages" {
		t.Errorf("bad content: %v", err)
	}
	// No template: ChatML, as Parse.
	if err := ParseWith([]byte(`{"messages":[{"role":"user","content":"q"}]}`), true, BytesTokenizer{}, nil, &r); err != nil {
		t.Fatal(err)
	}
	if got := string(u32bytes(r.Tokens)); got != "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n" {
		t.Errorf("ChatML: %q", got)
	}
}

func u32bytes(toks []uint32) []byte {
	b := make([]byte, len(toks))
	for i, t := range toks {
		b[i] = byte(t)
	}
	return b
}
