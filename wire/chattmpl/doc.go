// Package chattmpl renders the chat templates of Hugging Face
// tokenizer_config.json files (Jinja) into the prompt text a
// /v1/chat/completions request becomes, as the engine behind the router
// renders it, so router and engine hash the same tokens.
package chattmpl
