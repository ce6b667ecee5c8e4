package openai

import (
	"errors"
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

// A malformed body is a bad request that says where it broke, by byte
// offset (and line and column), and neither quotes the body nor carries
// the parser's chain of internal messages.
func TestInvalidJSONSaysWhere(t *testing.T) {
	cases := []struct {
		body, want string
	}{
		{`{"prompt": "abc", "max_tokens": 8,}`, "at byte 34 (line 1, column 35)"},
		{"{\n  \"prompt\": abc\n}", "at byte 14 (line 2, column 13)"},
		{`{"prompt": "abc"`, "unexpected end of JSON input at byte 16"},
		{`{"prompt":"secret"} x`, "after top-level value at byte 20"},
		{`not json`, "at byte 1"},
	}
	for _, c := range cases {
		var r Request
		err := Parse([]byte(c.body), false, BytesTokenizer{}, &r)
		if err == nil || !errors.Is(err, ErrBadRequest) {
			t.Fatalf("%q: %v, want a bad request", c.body, err)
		}
		msg := err.Error()
		if !strings.Contains(msg, "body is not valid JSON") || !strings.Contains(msg, c.want) {
			t.Errorf("%q: %q, want it to say %q", c.body, msg, c.want)
		}
		for _, internal := range []string{"cannot parse", "unparsed tail", "unexpected tail", "abc", "secret"} {
			if strings.Contains(msg, internal) {
				t.Errorf("%q: %q carries %q", c.body, msg, internal)
			}
		}
	}
	if _, err := ReplacePrompt(nil, []byte(`{"prompt":`), []uint32{1}); err == nil || !strings.Contains(err.Error(), "at byte") {
		t.Errorf("ReplacePrompt: %v", err)
	}
}

// A chat message's role must be one the OpenAI API knows; the error names
// messages[i].role, with a template or with ChatML.
func TestChatRoleValidated(t *testing.T) {
	for _, tmpl := range []*ChatTemplates{nil, {Default: echoTemplate{}}} {
		for _, c := range []struct {
			body  string
			param string
		}{
			{`{"messages":[{"role":"user","content":"hi"},{"role":"robot","content":"x"}]}`, "messages[1].role"},
			{`{"messages":[{"role":"User","content":"hi"}]}`, "messages[0].role"},
			{`{"messages":[{"content":"hi"}]}`, "messages[0].role"},
			{`{"messages":[{"role":7,"content":"hi"}]}`, "messages[0].role"},
		} {
			var r Request
			err := ParseWith([]byte(c.body), true, BytesTokenizer{}, tmpl, &r)
			if err == nil || !errors.Is(err, ErrBadRequest) || ParamOf(err) != c.param || !strings.Contains(err.Error(), c.param) {
				t.Errorf("template %v: %s: %v (param %q), want a bad request naming %s", tmpl != nil, c.body, err, ParamOf(err), c.param)
			}
		}
		for _, role := range Roles {
			var r Request
			body := `{"messages":[{"role":"` + role + `","content":"hi"}]}`
			if err := ParseWith([]byte(body), true, BytesTokenizer{}, tmpl, &r); err != nil {
				t.Errorf("template %v: role %s refused: %v", tmpl != nil, role, err)
			}
		}
	}
}

// echoTemplate renders a chat as its raw messages (a stand-in template).
type echoTemplate struct{}

func (echoTemplate) RenderRequest(dst []byte, body *fastjson.Value) ([]byte, error) {
	return append(dst, body.Get("messages").MarshalTo(nil)...), nil
}
