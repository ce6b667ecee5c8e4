// Package prompt provides the step from request text to the token ids the
// index hashes: NewTokenizer resolves a --tokenizer value (bytes, or a
// Hugging Face tokenizer.json file or directory) into an openai.Tokenizer.
//
// Its subpackages do the work: prompt/tokenizer encodes text exactly as
// Hugging Face tokenizers does with a model's tokenizer.json (BPE models,
// byte-level or with byte fallback), and prompt/chattmpl renders a model's
// Jinja chat template into the text the engine tokenizes. wire/openai's
// request parser calls them through its Tokenizer and ChatTemplate
// interfaces, so it imports neither.
//
//	tok, err := prompt.NewTokenizer("out/tokenizers/qwen3") // or "bytes"
//
// Everything here is immutable and goroutine-safe once loaded, and keeps no
// global state.
package prompt
