package chattmpl

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

func writeConfig(t *testing.T, dir string, template any) string {
	t.Helper()
	cfg := map[string]any{"bos_token": "<s>", "eos_token": map[string]any{"__type": "AddedToken", "content": "</s>"}, "chat_template": template}
	data, err := jsonMarshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "tokenizer_config.json")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLoadFailsLoudly: a template that does not parse, or that fails on the
// probe conversation, or a config without a template, is refused by Load
// with an error naming the file.
func TestLoadFailsLoudly(t *testing.T) {
	for _, tc := range []struct{ name, tmpl, want string }{
		{"syntax", "{% for m in messages %}{{ m.content }}", "expected"},
		{"unknown statement", "{% include 'x.jinja' %}", `unsupported statement "include"`},
		{"raise on probe", "{{ raise_exception('only tool conversations') }}", "only tool conversations"},
		{"type error on probe", "{{ messages[0].content.nope() }}", "probe conversation"},
		{"empty output", "{% if false %}x{% endif %}", "empty prompt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeConfig(t, t.TempDir(), tc.tmpl)
			_, err := Load(filepath.Dir(p))
			if err == nil {
				t.Fatal("Load accepted a broken template")
			}
			if !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not name %s and say %q", err, p, tc.want)
			}
		})
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"bos_token":"<s>"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); !errors.Is(err, ErrNoTemplate) || !strings.Contains(err.Error(), dir) {
		t.Errorf("config without chat_template: %v", err)
	}
	if _, err := Load(filepath.Join(dir, "missing.jinja")); err == nil || !strings.Contains(err.Error(), "missing.jinja") {
		t.Errorf("missing file: %v", err)
	}
}

// TestLoadJinjaFile: a template file (vLLM's --chat-template) takes its
// special tokens from the tokenizer_config.json beside it.
func TestLoadJinjaFile(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "unused")
	p := filepath.Join(dir, "chat.jinja")
	if err := os.WriteFile(p, []byte("{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{{ eos_token }}{% endfor %}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tmpl, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	out, err := tmpl.RenderRequest(nil, fastjson.MustParse(`{"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != "<s>[user]hi</s>" {
		t.Errorf("got %q", out)
	}
}

func render(t *testing.T, src string, messages string) (string, error) {
	t.Helper()
	tmpl, err := Parse("test", src)
	if err != nil {
		t.Fatal(err)
	}
	out, err := tmpl.Render([]byte("keep:"), Vars{Messages: FromJSON(fastjson.MustParse(messages)), AddGenerationPrompt: true})
	return string(out), err
}

// TestPythonStrip: strip/lstrip/rstrip with characters follow Python (what
// vLLM's jinja2 runs); the reference renderer ignores the argument and trims
// all whitespace (doc.go, "Divergences").
func TestPythonStrip(t *testing.T) {
	for src, want := range map[string]string{
		`{{ "\n\nx y\n".strip("\n") }}`:    "x y",
		`{{ " \nx".lstrip("\n") }}`:        " \nx",
		`{{ "x \n".rstrip("\n") }}`:        "x ",
		`{{ "  x  ".strip() }}`:            "x",
		`{{ "ab--".rstrip("-b") }}`:        "a",
		`{{ "a,b,,c".split(",")|length }}`: "4",
		`{{ " a  b ".split()|join("|") }}`: "a|b",
	} {
		got, err := render(t, src, `[]`)
		if err != nil || got != "keep:"+want {
			t.Errorf("%s = %q, %v; want %q", src, got, err, want)
		}
	}
}

// TestRenderErrors: a template failing on a conversation returns a
// *RenderError with its message, and dst keeps its content.
func TestRenderErrors(t *testing.T) {
	got, err := render(t, `x{% if messages|length > 1 %}{{ raise_exception("one message only") }}{% endif %}`, `[{"role":"user","content":"a"},{"role":"user","content":"b"}]`)
	var re *RenderError
	if !errors.As(err, &re) || re.Msg != "one message only" || got != "keep:" {
		t.Errorf("got %q, %v", got, err)
	}
	_, err = render(t, `{{ messages[0].content + none }}`, `[{"role":"user","content":"a"}]`)
	if !errors.As(err, &re) {
		t.Errorf("type error: %v", err)
	}
}

// TestJinjaFeatures covers what templates use beyond the parity corpus:
// loop variables, namespace, slicing, macros, filters and tests.
func TestJinjaFeatures(t *testing.T) {
	msgs := `[{"role":"system","content":"S"},{"role":"user","content":"U1"},{"role":"assistant","content":"A1"},{"role":"user","content":"U2"}]`
	for src, want := range map[string]string{
		`{% for m in messages %}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.revindex0 }},{% endfor %}`:                                                           "1truefalse3,2falsefalse2,3falsefalse1,4falsetrue0,",
		`{% set ns = namespace(n=0) %}{% for m in messages if m.role == "user" %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}`:                                           "2",
		`{% for m in messages[1:] %}{{ m.content }}{% endfor %}|{% for m in messages[::-1] %}{{ m.content }}{% endfor %}|{{ messages[-1].content }}`:                        "U1A1U2|U2A1U1S|U2",
		`{% macro turn(m, sep="\n") %}<{{ m.role }}>{{ m.content }}{{ sep }}{% endmacro %}{{ turn(messages[0]) }}{{ turn(messages[1], sep=";") }}`:                          "<system>S\n<user>U1;",
		`{{ messages|length }} {{ "abc"|upper }} {{ " t "|trim }} {{ messages[0]|tojson }} {{ {"b": 1, "a": [1, 2.5, none, true]}|tojson }}`:                                `4 ABC t {"role": "system", "content": "S"} {"b": 1, "a": [1, 2.5, null, true]}`,
		`{% for k, v in {"x": 1, "y": 2}|items %}{{ k }}={{ v }};{% endfor %}`:                                                                                              "x=1;y=2;",
		`{{ messages[0].content is string }} {{ messages[5] is defined }} {{ none is none }} {{ 3 is odd }}`:                                                                "true false true true",
		`{{ "x" if messages[0].role == "system" else "y" }}{{ "z" if false }}`:                                                                                              "x",
		`{{ "a" ~ 1 ~ true }} {{ 7 // 2 }} {{ 7 % 3 }} {{ 2 ** 3 }} {{ 1 / 2 }} {{ -3|abs }}`:                                                                               "a1true 3 1 8 0.5 3",
		`{% for i in range(3) %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% endfor %}{% for i in range(5) %}{% if i == 2 %}{% break %}{% endif %}{{ i }}{% endfor %}`: "0201",
		`{% for i in range(3) %}{{ i }}{% if i == 1 %}{% break %}{% endif %}{% endfor %}`:                                                                                   "01", // jinja2 keeps the iteration's output
		`{%- set x = "a" -%}  {{- x -}}  {# c #}  b`:                                                                                                                        "a  b",
		`{{ strftime_now("%Y") | length }}`: "4",
		`{{ "content" in messages[0] }} {{ "U" in "U1" }} {{ 1 in [1, 2] }} {{ "q" not in messages[0] }}`:                 "true true true true",
		`{{ messages|map(attribute="role")|join(",") }} {{ messages|selectattr("role", "equalto", "user")|list|length }}`: "system,user,assistant,user 2",
	} {
		got, err := render(t, src, msgs)
		if err != nil || got != "keep:"+want {
			t.Errorf("%s\n got %q, %v\nwant %q", src, got, err, want)
		}
	}
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// TestRenderBounds: endless loops and recursion fail the render.
func TestRenderBounds(t *testing.T) {
	for _, src := range []string{
		`{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}`,
		`{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}`,
	} {
		_, err := render(t, src, `[]`)
		var re *RenderError
		if !errors.As(err, &re) || strings.HasPrefix(re.Msg, internalError) {
			t.Errorf("%s: %v", src, err)
		}
	}
}

// TestRenderSizeBound: a template doubling a string fails instead of
// exhausting memory.
func TestRenderSizeBound(t *testing.T) {
	_, err := render(t, `{% set ns = namespace(s="ab") %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s|length }}`, `[]`)
	var re *RenderError
	if !errors.As(err, &re) || !strings.Contains(re.Msg, "more than") {
		t.Errorf("%v", err)
	}
}

// TestNamedTemplates: a chat_template given as a list of named templates
// (tool_use, default) uses "default".
func TestNamedTemplates(t *testing.T) {
	p := writeConfig(t, t.TempDir(), []map[string]string{{"name": "tool_use", "template": "T"}, {"name": "default", "template": "{{ bos_token }}D{{ messages|length }}"}})
	tmpl, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	out, err := tmpl.RenderRequest(nil, fastjson.MustParse(`{"messages":[{"role":"user","content":"x"}]}`))
	if err != nil || string(out) != "<s>D1" {
		t.Errorf("%q, %v", out, err)
	}
}

// TestConcurrentRenders: one Template serves renders on many goroutines
// (run with -race); namespaces and sets stay per render.
func TestConcurrentRenders(t *testing.T) {
	tmpl, err := Parse("c", `{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + m.content|length %}{% endfor %}{{ ns.n }}`)
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 4)
	for g := range 4 {
		go func() {
			for i := range 200 {
				body := fastjson.MustParse(fmt.Sprintf(`{"messages":[{"role":"user","content":%q}]}`, strings.Repeat("x", g*1000+i)))
				out, err := tmpl.RenderRequest(nil, body)
				if err == nil && string(out) != strconv.Itoa(g*1000+i) {
					err = fmt.Errorf("goroutine %d render %d: %q", g, i, out)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
