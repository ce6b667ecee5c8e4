// Package openai provides the OpenAI-compatible request parsing and response
// encoding that kvroute's proxy, decision API and simulated workers share:
// POST /v1/completions and /v1/chat/completions bodies, prompts as token ids or
// text, the chat template, tokenizers, SSE chunks, GET /v1/models lists, and
// error bodies ({"error":{"message","type","param","code"}}, Error and
// StatusError; FieldError names the field a bad request is about), and the
// engines' cache reports (CachedTokens reads
// usage.prompt_tokens_details.cached_tokens, IsUsageChunk tells a stream's
// usage chunk, AppendIncludeUsage asks for it).
//
// Chat template. Chat messages are rendered to text with ChatML before they are
// tokenized, so the router and the simulated fleet agree on the prompt:
//
//	<|im_start|>{role}\n{content}<|im_end|>\n   (for each message)
//	<|im_start|>assistant\n                     (generation prompt)
//
// Content may be a string or a list of parts of which the "text" parts are
// concatenated. ParseWith renders a model's real chat template instead
// (ChatTemplate, implemented by prompt/chattmpl from a tokenizer_config.json);
// a render error is a 400 naming "messages".
//
// Tokenizers. Tokenizer is the interface; BytesTokenizer ("bytes") is the
// one defined here, and prompt.NewTokenizer resolves a --tokenizer value
// into it or a Hugging Face tokenizer.json loaded by prompt/tokenizer;
// ModelTokenizers picks one per request model (Parse asks it after reading
// "model"). A completion's text
// prompt is encoded with EncodeSpecial when the tokenizer has it
// (SpecialEncoder: the BOS an engine adds), chat text with Encode; Request.
// TextPrompt tells a text prompt was tokenized, and ReplacePrompt rewrites a
// body's prompt as those ids (--forward-token-ids).
//
// Validation. Parse also rejects, naming the field, the sampling fields vLLM
// rejects: a wrong JSON type (no coercion of "2" or "yes") or a value out of
// SamplingParams' range (max_tokens and n ≥ 1, temperature ≥ 0, top_p in
// (0, 1], penalties in [-2, 2], stop a string or strings, ...). It does not
// limit n: a real engine serves n > 1; the simulated fleet refuses it.
package openai
