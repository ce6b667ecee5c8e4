package chattmpl

import (
	"fmt"
	"strings"

	"github.com/valyala/fastjson"
)

// Messages converts a request's "messages" array into the template's
// messages variable as vLLM's parse_chat_messages prepares them (what the
// engine behind the router renders), so router and engine tokenize the same
// prompt:
//
//   - content: in a "string"-format template, the text parts (text,
//     input_text, output_text, thinking, refusal, plain strings) joined by
//     "\n", media parts dropped (a string stays, null becomes ""); in an
//     "openai"-format template, a list of parts ({"type":"text","text":...},
//     media as {"type":"image"|"audio"|"video"}), a string becoming one text
//     part. A text part without its text is skipped; an unknown part type
//     is an error (vLLM: "Unknown part type").
//   - assistant tool_calls: each function.arguments JSON string parsed into
//     an object (invalid JSON, a non-object or an empty value: {}); an empty
//     tool_calls list is dropped.
//   - tool_call_id (tool), name (a string), tools (developer) and reasoning
//     or reasoning_content (both set) are kept; other keys are dropped.
//
// It checks the shapes it reads; errors name the field (messages[2].content).
func (t *Template) Messages(msgs *fastjson.Value) (Value, error) {
	if msgs == nil {
		return Value{}, fieldErr("messages is required")
	}
	arr, err := msgs.Array()
	if err != nil {
		return Value{}, fmt.Errorf("messages must be an array")
	}
	out := make([]Value, len(arr))
	for i, m := range arr {
		v, err := t.message(m)
		if err != nil {
			return Value{}, fmt.Errorf("messages[%d]%w", i, err)
		}
		out[i] = v
	}
	return arrayValue(out), nil
}

type fieldErr string

func (e fieldErr) Error() string { return string(e) }

func (t *Template) message(m *fastjson.Value) (Value, error) {
	if m.Type() != fastjson.TypeObject {
		return Value{}, fieldErr(" must be an object")
	}
	role := m.Get("role")
	if role == nil || role.Type() != fastjson.TypeString {
		return Value{}, fieldErr(".role must be a string")
	}
	o := &object{keys: make([]string, 0, 4), vals: make([]Value, 0, 4)}
	roleS := intern(role.GetStringBytes())
	o.set("role", StringValue(roleS))
	// The content as vLLM's parts: text (from a string, a string part or a
	// text-like part) or a media type; parts without content are skipped.
	var texts []string
	var kinds []string // "" for text, else the media type
	c := m.Get("content")
	switch {
	case c == nil || c.Type() == fastjson.TypeNull:
	case c.Type() == fastjson.TypeString:
		texts, kinds = []string{string(c.GetStringBytes())}, []string{""}
	case c.Type() == fastjson.TypeArray:
		parts := c.GetArray()
		texts, kinds = make([]string, 0, len(parts)), make([]string, 0, len(parts))
		for j, p := range parts {
			if p.Type() == fastjson.TypeString {
				texts, kinds = append(texts, string(p.GetStringBytes())), append(kinds, "")
				continue
			}
			if p.Type() != fastjson.TypeObject {
				return Value{}, fieldErr(fmt.Sprintf(".content[%d] must be a string or an object", j))
			}
			typ := string(p.GetStringBytes("type"))
			field := "text"
			switch typ {
			case "text", "input_text", "output_text", "thinking":
			case "refusal":
				field = "refusal"
			case "image_url", "input_image", "image_embeds", "image_pil":
				texts, kinds = append(texts, ""), append(kinds, "image")
				continue
			case "audio_url", "input_audio", "audio_embeds":
				texts, kinds = append(texts, ""), append(kinds, "audio")
				continue
			case "video_url":
				texts, kinds = append(texts, ""), append(kinds, "video")
				continue
			default:
				return Value{}, fieldErr(fmt.Sprintf(".content[%d].type %q is not a supported content part", j, typ))
			}
			tx := p.Get(field)
			if tx == nil || tx.Type() == fastjson.TypeNull {
				continue // vLLM skips a part without content
			}
			if tx.Type() != fastjson.TypeString {
				return Value{}, fieldErr(fmt.Sprintf(".content[%d].%s must be a string", j, field))
			}
			texts, kinds = append(texts, string(tx.GetStringBytes())), append(kinds, "")
		}
	default:
		return Value{}, fieldErr(".content must be a string, an array of parts or null")
	}
	if t.format == FormatString {
		if len(texts) == 1 && kinds[0] == "" {
			o.set("content", StringValue(texts[0]))
		} else {
			var b strings.Builder
			n := 0
			for i, s := range texts {
				if kinds[i] != "" {
					continue
				}
				if n > 0 {
					b.WriteByte('\n')
				}
				b.WriteString(s)
				n++
			}
			o.set("content", StringValue(b.String()))
		}
	} else {
		l := make([]Value, len(texts))
		for i, s := range texts {
			if kinds[i] == "" {
				l[i] = textPart(s)
				continue
			}
			po := &object{}
			po.set("type", StringValue(kinds[i]))
			l[i] = objectValue(po)
		}
		o.set("content", arrayValue(l))
	}
	if roleS == "assistant" {
		if tc := m.Get("tool_calls"); tc != nil && tc.Type() == fastjson.TypeArray && len(tc.GetArray()) > 0 {
			calls := tc.GetArray()
			l := make([]Value, len(calls))
			for j, call := range calls {
				if call.Type() != fastjson.TypeObject {
					return Value{}, fieldErr(fmt.Sprintf(".tool_calls[%d] must be an object", j))
				}
				fn := call.Get("function")
				if fn == nil || fn.Type() != fastjson.TypeObject {
					return Value{}, fieldErr(fmt.Sprintf(".tool_calls[%d].function must be an object", j))
				}
				cv := FromJSON(call)
				fv := FromJSON(fn)
				fv.obj.set("arguments", toolArguments(fn.Get("arguments")))
				cv.obj.set("function", fv)
				l[j] = cv
			}
			o.set("tool_calls", arrayValue(l))
		}
	}
	if roleS == "tool" {
		if id := m.Get("tool_call_id"); id != nil {
			o.set("tool_call_id", FromJSON(id))
		}
	}
	if n := m.Get("name"); n != nil && n.Type() == fastjson.TypeString {
		o.set("name", FromJSON(n))
	}
	if roleS == "developer" {
		o.set("tools", nullIfAbsent(m.Get("tools")))
	}
	r := m.Get("reasoning")
	if r == nil || r.Type() == fastjson.TypeNull {
		r = m.Get("reasoning_content")
	}
	if r != nil && r.Type() != fastjson.TypeNull {
		o.set("reasoning", FromJSON(r))
		o.set("reasoning_content", FromJSON(r))
	}
	return objectValue(o), nil
}

// intern returns the common role names without allocating.
func intern(b []byte) string {
	for _, s := range [...]string{"user", "assistant", "system", "tool", "developer"} {
		if string(b) == s {
			return s
		}
	}
	return string(b)
}

func nullIfAbsent(v *fastjson.Value) Value {
	if v == nil {
		return NullValue()
	}
	return FromJSON(v)
}

func textPart(s string) Value {
	return objectValue(&object{keys: []string{"type", "text"}, vals: []Value{StringValue("text"), StringValue(s)}})
}

// toolArguments is vLLM's treatment of a tool call's arguments: a JSON
// string parsed, anything but an object becoming {}.
func toolArguments(a *fastjson.Value) Value {
	if a == nil {
		return objectValue(&object{})
	}
	switch a.Type() {
	case fastjson.TypeObject:
		return FromJSON(a)
	case fastjson.TypeString:
		var p fastjson.Parser
		if v, err := p.ParseBytes(a.GetStringBytes()); err == nil && v.Type() == fastjson.TypeObject {
			return FromJSON(v)
		}
	}
	return objectValue(&object{})
}

// RenderRequest appends the prompt of a /v1/chat/completions body: its
// messages (normalized as Messages does), tools, add_generation_prompt
// (vLLM's request extension, default true) and chat_template_kwargs. A
// *RenderError is the template refusing the conversation; other errors are
// malformed fields.
func (t *Template) RenderRequest(dst []byte, body *fastjson.Value) ([]byte, error) {
	msgs, err := t.Messages(body.Get("messages"))
	if err != nil {
		return dst, err
	}
	vars := Vars{Messages: msgs, AddGenerationPrompt: true}
	if tools := body.Get("tools"); tools != nil && tools.Type() != fastjson.TypeNull {
		if tools.Type() != fastjson.TypeArray {
			return dst, fieldErr("tools must be an array")
		}
		vars.Tools = FromJSON(tools)
	}
	if g := body.Get("add_generation_prompt"); g != nil && g.Type() != fastjson.TypeNull {
		switch g.Type() {
		case fastjson.TypeTrue:
		case fastjson.TypeFalse:
			vars.AddGenerationPrompt = false
		default:
			return dst, fieldErr("add_generation_prompt must be a boolean")
		}
	}
	if kw := body.Get("chat_template_kwargs"); kw != nil && kw.Type() != fastjson.TypeNull {
		if kw.Type() != fastjson.TypeObject {
			return dst, fieldErr("chat_template_kwargs must be an object")
		}
		vars.Extra = FromJSON(kw)
	}
	return t.Render(dst, vars)
}
