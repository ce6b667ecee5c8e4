// Package prompt turns request text into the token ids the index hashes.
//
// Its subpackages do the work: prompt/tokenizer is a Hugging Face
// tokenizer.json encoder (BPE, WordPiece and Unigram models with their
// pre-tokenizers and normalizers), and prompt/chattmpl renders a model's Jinja
// chat template into the text the engine tokenizes. This package joins them
// to the OpenAI request parser in wire/openai: NewTokenizer resolves a
// --tokenizer flag value into an openai.Tokenizer.
//
// Everything here is goroutine-safe once loaded and keeps no global state.
package prompt
