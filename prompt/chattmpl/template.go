package chattmpl

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/valyala/fastjson"
)

// Template is a parsed chat template with the special-token variables of
// its tokenizer_config.json. It is immutable and goroutine-safe.
type Template struct {
	name   string // where it came from, for errors
	body   []*node
	vars   *scope // special tokens: bos_token, eos_token, ...
	format ContentFormat
}

// ContentFormat is how a template expects message content, as vLLM
// detects it: "string" templates concatenate message['content'] as text,
// "openai" templates iterate over its parts.
type ContentFormat uint8

const (
	FormatString ContentFormat = iota
	FormatOpenAI
)

func (f ContentFormat) String() string {
	if f == FormatOpenAI {
		return "openai"
	}
	return "string"
}

// contentLoopRe finds a for loop over a message's content: the mark of an
// "openai"-format template (vLLM's detection walks the Jinja AST for the same).
var contentLoopRe = regexp.MustCompile(`\{%-?\s*for\s+\w+\s+in\s+[\w.\[\]'"]*(\[['"]content['"]\]|\.content)\s*-?%\}`)

// Parse parses template source. name says where it came from in errors.
func Parse(name, src string) (*Template, error) {
	toks, err := lex(src)
	if err != nil {
		return nil, fmt.Errorf("chat template %s: %w", name, err)
	}
	body, err := parseTemplate(toks)
	if err != nil {
		return nil, fmt.Errorf("chat template %s: %w", name, err)
	}
	t := &Template{name: name, body: body, vars: newScope(builtins)}
	if contentLoopRe.MatchString(src) {
		t.format = FormatOpenAI
	}
	return t, nil
}

// Name says where the template came from.
func (t *Template) Name() string { return t.name }

// ContentFormat is the template's content format.
func (t *Template) ContentFormat() ContentFormat { return t.format }

// specialTokenKeys are the tokenizer_config.json fields transformers passes
// to the template (its special_tokens_map), when they are set.
var specialTokenKeys = [...]string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token", "additional_special_tokens"}

// ErrNoTemplate is returned by Load for a tokenizer_config.json without a
// chat_template.
var ErrNoTemplate = errors.New("no chat_template")

// Load reads path: a tokenizer_config.json, a directory holding one, or a
// Jinja file (any other name: the template source itself, as vLLM's
// --chat-template). The template is parsed and rendered once on a probe
// conversation, so a template that cannot serve fails here, naming the file.
// Special tokens come from the tokenizer_config.json (for a Jinja file: from
// a tokenizer_config.json beside it, if any).
func Load(path string) (*Template, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	if st.IsDir() {
		path = filepath.Join(path, "tokenizer_config.json")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	var t *Template
	if filepath.Base(path) == "tokenizer_config.json" {
		t, err = FromConfig(path, data)
	} else {
		t, err = Parse(path, string(data))
		if err == nil {
			if cfg, rerr := os.ReadFile(filepath.Join(filepath.Dir(path), "tokenizer_config.json")); rerr == nil {
				err = t.setSpecialTokens(path, cfg)
			}
		}
	}
	if err != nil {
		return nil, err
	}
	if err := t.Probe(); err != nil {
		return nil, err
	}
	return t, nil
}

// FromConfig parses the chat_template of a tokenizer_config.json's bytes.
// A chat_template given as a list of named templates uses "default".
func FromConfig(name string, data []byte) (*Template, error) {
	var p fastjson.Parser
	v, err := p.ParseBytes(data)
	if err != nil {
		return nil, fmt.Errorf("chat template %s: %w", name, err)
	}
	ct := v.Get("chat_template")
	var src string
	switch {
	case ct == nil || ct.Type() == fastjson.TypeNull:
		return nil, fmt.Errorf("chat template %s: %w", name, ErrNoTemplate)
	case ct.Type() == fastjson.TypeString:
		src = string(ct.GetStringBytes())
	case ct.Type() == fastjson.TypeArray:
		for _, e := range ct.GetArray() {
			if string(e.GetStringBytes("name")) == "default" {
				src = string(e.GetStringBytes("template"))
			}
		}
		if src == "" {
			return nil, fmt.Errorf("chat template %s: a list of chat templates without \"default\"", name)
		}
	default:
		return nil, fmt.Errorf("chat template %s: chat_template must be a string", name)
	}
	t, err := Parse(name, src)
	if err != nil {
		return nil, err
	}
	if err := t.setSpecialTokens(name, data); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *Template) setSpecialTokens(name string, data []byte) error {
	var p fastjson.Parser
	v, err := p.ParseBytes(data)
	if err != nil {
		return fmt.Errorf("chat template %s: %w", name, err)
	}
	for _, k := range specialTokenKeys {
		x := v.Get(k)
		if x == nil || x.Type() == fastjson.TypeNull {
			continue
		}
		t.vars.set(k, tokenValue(x))
	}
	return nil
}

// tokenValue is a special token's text: a string, an AddedToken object's
// "content", or a list of either.
func tokenValue(x *fastjson.Value) Value {
	switch x.Type() {
	case fastjson.TypeObject:
		return StringValue(string(x.GetStringBytes("content")))
	case fastjson.TypeArray:
		l := make([]Value, 0, len(x.GetArray()))
		for _, e := range x.GetArray() {
			l = append(l, tokenValue(e))
		}
		return arrayValue(l)
	}
	return FromJSON(x)
}

// SpecialToken returns a special-token variable (e.g. "bos_token") and
// whether the config set it.
func (t *Template) SpecialToken(name string) (string, bool) {
	v, ok := t.vars.lookup(name)
	if !ok || v.kind != String {
		return "", false
	}
	return v.s, true
}

// probeMessages is the conversation Load renders: a template that fails on
// it cannot serve a plain chat.
const probeMessages = `[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Hello"},{"role":"assistant","content":"Hi! How can I help?"},{"role":"user","content":"Tell me about KV caches."}]`

// Probe renders a system/user/assistant/user conversation with and without
// a generation prompt and fails if the template cannot.
func (t *Template) Probe() error {
	var p fastjson.Parser
	msgs, _ := p.Parse(probeMessages)
	for _, gen := range []bool{true, false} {
		out, err := t.Render(nil, Vars{Messages: FromJSON(msgs), AddGenerationPrompt: gen})
		if err != nil {
			return fmt.Errorf("chat template %s fails on a probe conversation (add_generation_prompt=%v): %w", t.name, gen, err)
		}
		if len(out) == 0 {
			return fmt.Errorf("chat template %s renders a probe conversation as an empty prompt", t.name)
		}
	}
	return nil
}

// internalError prefixes the message of a render that panicked.
const internalError = "chattmpl: internal error: "

// Vars are a render's variables.
type Vars struct {
	// Messages is the conversation (an array of message objects).
	Messages Value
	// Tools are the tool definitions; the zero Value passes none (null, as
	// transformers does).
	Tools               Value
	AddGenerationPrompt bool
	// Extra are more variables (a request's chat_template_kwargs), an
	// object or the zero Value.
	Extra Value
	// Now is strftime_now's clock; nil is time.Now.
	Now func() time.Time
}

// Render appends the template rendered with vars to dst. A failing render
// (raise_exception, a type error) returns a *RenderError and dst unchanged
// in content (its length restored).
func (t *Template) Render(dst []byte, vars Vars) (out []byte, err error) {
	sc := newScope(t.vars)
	sc.set("messages", vars.Messages)
	tools := vars.Tools
	if tools.kind == Undefined {
		tools = NullValue()
	}
	sc.set("tools", tools)
	sc.set("documents", NullValue())
	sc.set("add_generation_prompt", BoolValue(vars.AddGenerationPrompt))
	if vars.Extra.kind == Object {
		for i, k := range vars.Extra.obj.keys {
			sc.set(k, vars.Extra.obj.vals[i])
		}
	}
	r := &renderer{out: dst, sc: sc, now: vars.Now}
	if r.now == nil {
		r.now = time.Now
	}
	start := len(dst)
	defer func() {
		if p := recover(); p != nil {
			out = dst[:start]
			if rp, ok := p.(renderPanic); ok {
				err = rp.err
				return
			}
			// A bug here must not take the router down with the request:
			// the request fails (FuzzTemplate looks for these).
			err = &RenderError{Msg: fmt.Sprintf("%s%v", internalError, p)}
		}
	}()
	r.exec(t.body)
	return r.out, nil
}
