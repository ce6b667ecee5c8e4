package prompt

import (
	"fmt"
	"os"

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
	if _, err := os.Stat(name); err != nil {
		return nil, fmt.Errorf("%q is neither bytes nor a tokenizer.json file or directory: %w", name, err)
	}
	t, err := tokenizer.Load(name)
	if err != nil {
		return nil, err // names the file
	}
	return t, nil
}

// A prompt/tokenizer Tokenizer is an openai.Tokenizer and adds special tokens.
var (
	_ openai.Tokenizer      = (*tokenizer.Tokenizer)(nil)
	_ openai.SpecialEncoder = (*tokenizer.Tokenizer)(nil)
)
