package openai

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestReplacePrompt: the prompt becomes the ids; every other field stays.
func TestReplacePrompt(t *testing.T) {
	body := []byte(`{"model":"m","prompt":"hello there","max_tokens":3,"stream":true,"stop":["x"]}`)
	out, err := ReplacePrompt(nil, body, []uint32{7, 0, 4294967295})
	if err != nil {
		t.Fatal(err)
	}
	var got, want map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	_ = json.Unmarshal([]byte(`{"model":"m","prompt":[7,0,4294967295],"max_tokens":3,"stream":true,"stop":["x"]}`), &want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %s", out)
	}
	if _, err := ReplacePrompt(nil, []byte(`[1]`), nil); err == nil {
		t.Error("a non-object body was accepted")
	}
}

type fixedTok struct{ id uint32 }

func (f fixedTok) Encode(dst []uint32, text []byte) []uint32 {
	for range text {
		dst = append(dst, f.id)
	}
	return dst
}
func (f fixedTok) Name() string { return "fixed" }
func (f fixedTok) EncodeSpecial(dst []uint32, text []byte) []uint32 {
	return f.Encode(append(dst, 99), text)
}

// TestModelTokenizers: Parse tokenizes with the model's tokenizer, a text
// completion prompt with its special tokens, chat without them.
func TestModelTokenizers(t *testing.T) {
	tok := &ModelTokenizers{Default: BytesTokenizer{}, ByModel: map[string]Tokenizer{"a": fixedTok{1}}}
	var r Request
	for _, c := range []struct {
		body string
		chat bool
		want []uint32
		text bool
	}{
		{`{"model":"a","prompt":"xy"}`, false, []uint32{99, 1, 1}, true},
		{`{"model":"b","prompt":"xy"}`, false, []uint32{'x', 'y'}, true},
		{`{"prompt":"x"}`, false, []uint32{'x'}, true},
		{`{"model":"a","prompt":[5,6]}`, false, []uint32{5, 6}, false},
		{`{"model":"a","messages":[{"role":"user","content":""}]}`, true, nil, false},
	} {
		if err := Parse([]byte(c.body), c.chat, tok, &r); err != nil {
			t.Fatal(err)
		}
		if c.chat {
			if len(r.Tokens) == 0 || r.Tokens[0] != 1 {
				t.Errorf("%s: chat tokens %v, want the model's tokenizer without specials", c.body, r.Tokens)
			}
			continue
		}
		if !reflect.DeepEqual(r.Tokens, c.want) || r.TextPrompt != c.text {
			t.Errorf("%s: tokens %v text %v, want %v %v", c.body, r.Tokens, r.TextPrompt, c.want, c.text)
		}
	}
}
