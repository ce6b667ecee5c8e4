package chattmpl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fastjson"
)

// FuzzTemplate parses arbitrary template source and renders what parses
// on a conversation: parse errors and render errors are fine, a panic (an
// "internal error") is not. Seeded with the real templates when fetched.
func FuzzTemplate(f *testing.F) {
	for _, s := range []string{
		"{{ bos_token }}{% for m in messages %}{{ m.role }}: {{ m.content | trim }}\n{% endfor %}",
		"{% set ns = namespace(a=1) %}{% for m in messages[::-1] if m.role != 'x' %}{% set ns.a = ns.a + loop.index %}{{ ns.a }}{% endfor %}",
		"{% macro f(a, b=2) %}{{ a ~ b }}{% endmacro %}{{ f(1) }}{{ f(1, b=3) }}{{ messages|tojson(indent=2) }}",
		"{{ messages[0].content.split(' ')[-1].strip('x') if messages else raise_exception('none') }}",
		"{%- if tools %}{{ tools | tojson }}{% elif messages|length > 2 %}{{ messages[1:3] }}{% else %}{{ 1 // 0 }}{% endif -%}",
	} {
		f.Add(s)
	}
	for _, n := range parityTemplates {
		if data, err := os.ReadFile(filepath.Join(tokenizersDir(), n, "tokenizer_config.json")); err == nil {
			f.Add(string(fastjson.MustParseBytes(data).GetStringBytes("chat_template")))
		}
	}
	msgs := FromJSON(fastjson.MustParse(`[{"role":"system","content":"S"},{"role":"user","content":[{"type":"text","text":"a b"}]},` +
		`{"role":"assistant","content":null,"tool_calls":[{"type":"function","function":{"name":"f","arguments":{"x":1}}}]},{"role":"tool","content":"r"}]`))
	tools := FromJSON(fastjson.MustParse(`[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]`))
	f.Fuzz(func(t *testing.T, src string) {
		done := make(chan error, 1)
		go func() {
			tmpl, err := Parse("fuzz", src)
			if err != nil {
				done <- nil
				return
			}
			for _, v := range []Vars{{Messages: msgs, AddGenerationPrompt: true, Tools: tools}, {Messages: arrayValue(nil)}} {
				if _, err := tmpl.Render(nil, v); err != nil && strings.HasPrefix(err.Error(), internalError) {
					done <- err
					return
				}
			}
			done <- nil
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%q: %v", src, err)
			}
		case <-time.After(10 * time.Second): // a safety limit: a render takes microseconds
			t.Fatalf("%q: parse and render did not end", src)
		}
	})
}

// FuzzRenderRequest renders arbitrary request bodies (the untrusted input)
// through a real template when fetched, else a tool-aware inline one:
// errors are fine, a panic is not.
func FuzzRenderRequest(f *testing.F) {
	_, bodies := loadCorpus(f)
	for _, b := range bodies {
		f.Add(string(b))
	}
	src := `{% for m in messages %}{{ m.role }}:{% if m.content is string %}{{ m.content }}{% else %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endif %}{% for c in m.tool_calls or [] %}{{ c.function.name }}{{ c.function.arguments|tojson }}{% endfor %}{% endfor %}{{ tools|tojson }}`
	var tmpls []*Template
	for _, fmtSrc := range []string{src, src + "{# for p in message['content'] #}"} {
		tmpl, err := Parse("inline", fmtSrc)
		if err != nil {
			f.Fatal(err)
		}
		tmpls = append(tmpls, tmpl)
	}
	if p := filepath.Join(tokenizersDir(), "qwen3", "tokenizer_config.json"); fileExists(p) {
		if tmpl, err := Load(p); err == nil {
			tmpls = append(tmpls, tmpl)
		}
	}
	f.Fuzz(func(t *testing.T, body string) {
		v, err := fastjson.Parse(body)
		if err != nil {
			return
		}
		for _, tmpl := range tmpls {
			if _, err := tmpl.RenderRequest(nil, v); err != nil && strings.HasPrefix(err.Error(), internalError) {
				t.Fatalf("%s: %q: %v", tmpl.Name(), body, err)
			}
		}
	})
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
