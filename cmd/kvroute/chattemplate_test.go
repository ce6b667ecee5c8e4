package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func tokenizerDir(t *testing.T, template any) string {
	t.Helper()
	cfg := map[string]any{"bos_token": "<s>", "eos_token": "</s>"}
	if template != nil {
		cfg["chat_template"] = template
	}
	data, _ := json.Marshal(cfg)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestServeChatTemplate: --chat-template and --model-chat-template load and
// probe their templates at start; a broken one stops the start with an
// error naming the flag and the file.
func TestServeChatTemplate(t *testing.T) {
	good := tokenizerDir(t, "{{ bos_token }}{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}")
	broken := tokenizerDir(t, "{% for m in messages %}{{ m.content }}")
	refusing := tokenizerDir(t, "{{ raise_exception('tools only') }}")
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--chat-template", broken}, []string{"--chat-template", broken}},
		{[]string{"--chat-template", refusing}, []string{"--chat-template", "tools only", "probe"}},
		{[]string{"--chat-template", filepath.Join(good, "missing.jinja")}, []string{"--chat-template", "missing.jinja"}},
		{[]string{"--model-chat-template", "m=" + broken}, []string{"--model-chat-template m", broken}},
		{[]string{"--model-chat-template", good}, []string{"--model-chat-template", "MODEL=PATH"}},
		{[]string{"--model-chat-template", "m=" + good, "--model-chat-template", "m=" + good}, []string{"given twice"}},
	} {
		_, _, err := serveConfig(c.args)
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%v: err %v, want one naming %q", c.args, err, w)
			}
		}
	}
	cfg, _, err := serveConfig([]string{"--chat-template", good, "--model-chat-template", "other=" + refusingOK(t)})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Router.ChatTemplate == nil || cfg.Router.ModelChatTemplates["other"] == nil {
		t.Errorf("templates not configured: %+v %v", cfg.Router.ChatTemplate, cfg.Router.ModelChatTemplates)
	}
	if cfg, _, err := serveConfig(nil); err != nil || cfg.Router.ChatTemplate != nil {
		t.Errorf("default: %v, %v (want ChatML: no template)", cfg.Router.ChatTemplate, err)
	}
}

func refusingOK(t *testing.T) string {
	return tokenizerDir(t, "{% for m in messages %}[{{ m.content }}]{% endfor %}")
}

// TestChatTemplateFromTokenizer: --tokenizer PATH brings the chat_template of
// the tokenizer_config.json beside it; a config without one warns and keeps
// ChatML; a broken one fails naming --tokenizer.
func TestChatTemplateFromTokenizer(t *testing.T) {
	var warnings []string
	warn := func(s string) { warnings = append(warnings, s) }
	def, _, err := chatTemplates(tokenizerDir(t, "{% for m in messages %}{{ m.content }}{% endfor %}"), "", nil, warn)
	if err != nil || def == nil || len(warnings) != 0 {
		t.Errorf("template beside the tokenizer: %v, %v, %v", def, err, warnings)
	}
	tj := filepath.Join(tokenizerDir(t, nil), "tokenizer.json")
	if err := os.WriteFile(tj, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	def, _, err = chatTemplates(tj, "", nil, warn)
	if err != nil || def != nil || len(warnings) != 1 || !strings.Contains(warnings[0], "no chat_template") {
		t.Errorf("config without a template: %v, %v, %v", def, err, warnings)
	}
	broken := tokenizerDir(t, "{% if %}")
	if _, _, err = chatTemplates(broken, "", nil, warn); err == nil || !strings.Contains(err.Error(), "--tokenizer") || !strings.Contains(err.Error(), broken) {
		t.Errorf("broken template beside the tokenizer: %v", err)
	}
	// --chat-template wins over the tokenizer's.
	if def, _, err = chatTemplates(broken, tokenizerDir(t, "x{{ messages|length }}"), nil, warn); err != nil || def == nil {
		t.Errorf("--chat-template over a broken tokenizer template: %v, %v", def, err)
	}
	if def, _, err = chatTemplates("bytes", "", nil, warn); err != nil || def != nil {
		t.Errorf("bytes: %v, %v", def, err)
	}
}

// TestMockChatTemplate: kvroute mock --chat-template refuses a broken
// template before starting anything.
func TestMockChatTemplate(t *testing.T) {
	broken := tokenizerDir(t, "{% for m in messages %}")
	err := runMock([]string{"--chat-template", broken, "--port", "0"})
	if err == nil || !strings.Contains(err.Error(), "--chat-template") || !strings.Contains(err.Error(), broken) {
		t.Errorf("err %v", err)
	}
}

// The start-up log says which tokenizer and chat template serve loaded, and
// from where.
func TestServeLogsTokenizerAndTemplate(t *testing.T) {
	good := tokenizerDir(t, "{% for m in messages %}{{ m.content }}{% endfor %}")
	for _, c := range []struct {
		args []string
		want []string
	}{
		{nil, []string{`tokenizer="bytes (one token per UTF-8 byte)"`, `chat_template="ChatML (built in)"`}},
		{[]string{"--chat-template", good}, []string{`chat_template="` + good + ` (--chat-template)"`}},
		{[]string{"--model-chat-template", "m=" + good}, []string{"per model: m=" + good + " (--model-chat-template)"}},
	} {
		_, o, err := serveConfig(c.args)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		logLoaded(slog.New(slog.NewTextHandler(&buf, nil)), o)
		for _, w := range c.want {
			if !strings.Contains(buf.String(), w) {
				t.Errorf("%v: log lacks %q:\n%s", c.args, w, buf.String())
			}
		}
	}
	if tok, _ := loadedFrom(good, "", true, nil, nil); !strings.Contains(tok, filepath.Join(good, "tokenizer.json")) {
		t.Errorf("a tokenizer directory is logged as %q, want its tokenizer.json", tok)
	}
	if _, chat := loadedFrom(good, "", true, nil, nil); chat != filepath.Join(good, "tokenizer_config.json")+" (beside --tokenizer)" {
		t.Errorf("the template beside --tokenizer is logged as %q", chat)
	}
}
