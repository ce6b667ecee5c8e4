package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kvroute/kvroute/prompt/chattmpl"
	"github.com/kvroute/kvroute/wire/openai"
)

// chatTemplates loads `kvroute serve`'s chat templates: --chat-template
// PATH, else the chat_template of the tokenizer_config.json beside
// --tokenizer when it names a file or directory, and --model-chat-template
// MODEL=PATH per model. PATH is a tokenizer_config.json, a directory holding
// one, or a Jinja file. Each is parsed and rendered on a probe conversation
// here, at start: errors name the flag and the file. warn receives notices
// that do not stop the start.
func chatTemplates(tokenizer, chatTemplate string, perModel []string, warn func(string)) (openai.ChatTemplate, map[string]openai.ChatTemplate, error) {
	var def openai.ChatTemplate
	switch {
	case chatTemplate != "":
		t, err := chattmpl.Load(chatTemplate)
		if err != nil {
			return nil, nil, fmt.Errorf("--chat-template: %w", err)
		}
		def = t
	case tokenizer != "" && tokenizer != "bytes":
		dir := tokenizer
		st, err := os.Stat(tokenizer)
		if err != nil {
			break // not a path: the tokenizer's own flag check reports it
		}
		if !st.IsDir() {
			dir = filepath.Dir(tokenizer)
		}
		cfg := filepath.Join(dir, "tokenizer_config.json")
		if _, err := os.Stat(cfg); err != nil {
			warn(fmt.Sprintf("--tokenizer %s: no tokenizer_config.json beside it; chat requests are rendered with ChatML (set --chat-template)", tokenizer))
			break
		}
		t, err := chattmpl.Load(cfg)
		if errors.Is(err, chattmpl.ErrNoTemplate) {
			warn(fmt.Sprintf("--tokenizer %s: %s has no chat_template; chat requests are rendered with ChatML (set --chat-template)", tokenizer, cfg))
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("--tokenizer: %w (or set --chat-template)", err)
		}
		def = t
	}
	var byModel map[string]openai.ChatTemplate
	for _, m := range perModel {
		model, path, ok := strings.Cut(m, "=")
		if !ok || model == "" || path == "" {
			return nil, nil, fmt.Errorf("--model-chat-template %q: want MODEL=PATH", m)
		}
		t, err := chattmpl.Load(path)
		if err != nil {
			return nil, nil, fmt.Errorf("--model-chat-template %s: %w", model, err)
		}
		if byModel == nil {
			byModel = map[string]openai.ChatTemplate{}
		}
		if _, dup := byModel[model]; dup {
			return nil, nil, fmt.Errorf("--model-chat-template: model %q given twice", model)
		}
		byModel[model] = t
	}
	return def, byModel, nil
}
