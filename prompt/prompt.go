package prompt

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kvroute/kvroute/prompt/tokenizer"
	"github.com/kvroute/kvroute/wire/openai"
)

// NewTokenizer returns the tokenizer named by a --tokenizer flag value:
// bytes (openai.BytesTokenizer: one token per byte), or the path of a
// Hugging Face tokenizer.json or of a directory holding one (and
// tokenizer_config.json), loaded by prompt/tokenizer.
func NewTokenizer(name string) (openai.Tokenizer, error) {
	switch name {
	case "bytes", "":
		return openai.BytesTokenizer{}, nil
	}
	st, err := os.Stat(name)
	if err != nil {
		return nil, fmt.Errorf("%q is neither bytes nor a tokenizer.json file or directory: %w", name, err)
	}
	if st.IsDir() {
		if _, err := os.Stat(filepath.Join(name, "tokenizer.json")); err != nil {
			return nil, fmt.Errorf("directory %s holds no tokenizer.json: %s", name, wantTokenizer)
		}
	} else if err := checkTokenizerJSON(name); err != nil {
		return nil, err
	}
	t, err := tokenizer.Load(name)
	if err != nil {
		return nil, err // names the file
	}
	return t, nil
}

const wantTokenizer = "give the engine's Hugging Face tokenizer.json, or the model directory that holds it"

// checkTokenizerJSON tells a file that is not a tokenizer.json (no "model"
// object at its top level) from one that is, naming what it looks like.
func checkTokenizerJSON(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return fmt.Errorf("%s is not a tokenizer.json (not a JSON object: %v): %s", path, err, wantTokenizer)
	}
	if m, ok := top["model"]; ok && len(m) > 0 && m[0] == '{' {
		return nil
	}
	what := "it has no \"model\" object"
	switch _, cfg := top["tokenizer_class"]; {
	case cfg || top["chat_template"] != nil || top["added_tokens_decoder"] != nil:
		what = "it looks like a tokenizer_config.json, which lies beside the tokenizer.json"
	case top["dependencies"] != nil || top["devDependencies"] != nil || (top["name"] != nil && top["version"] != nil):
		what = "it looks like a package.json"
	}
	return fmt.Errorf("%s is not a tokenizer.json (%s): %s", path, what, wantTokenizer)
}

// A prompt/tokenizer Tokenizer is an openai.Tokenizer and adds special tokens.
var (
	_ openai.Tokenizer      = (*tokenizer.Tokenizer)(nil)
	_ openai.SpecialEncoder = (*tokenizer.Tokenizer)(nil)
)
