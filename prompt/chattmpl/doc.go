// Package chattmpl provides a renderer of the chat templates of Hugging
// Face tokenizer_config.json files (Jinja) into the prompt text a
// /v1/chat/completions request becomes, as the engine behind the router
// renders it, so router and engine hash the same tokens.
//
// # Use
//
// Load reads a tokenizer_config.json (or a directory holding one, or a
// Jinja file as vLLM's --chat-template) and renders the template once on a
// probe conversation, so a template that cannot parse or cannot serve a
// plain system/user/assistant chat fails at start, with an error naming the
// file. Template.RenderRequest renders a request body: its messages
// (normalized as vLLM does, see Messages), tools, add_generation_prompt
// (default true) and chat_template_kwargs. Template.Render takes the
// variables directly. A *Template is immutable and goroutine-safe; each
// render allocates its own state.
//
// Variables are those transformers' apply_chat_template passes: messages,
// tools (none when absent), documents (none), add_generation_prompt, the
// config's special tokens that are set (bos_token, eos_token, unk_token,
// pad_token, ..., additional_special_tokens; AddedToken objects as their
// content), plus raise_exception, strftime_now, range, namespace and
// true/false/none in either case.
//
// # A subset of Jinja, held to the reference
//
// This package is the subset of Jinja that chat templates use, written
// against the reference renderer @huggingface/jinja (its lexer's
// lstrip_blocks/trim_blocks preprocessing, operator precedence, value
// printing, filters and tests follow its source) instead of a general Go
// Jinja engine (docs/decisions/0037-chat-templates-purpose-built-renderer.md).
// parity_test.go renders 31 conversations (system/user/assistant turns,
// multi-turn, tool definitions and calls, multi-part content, unicode, empty
// and whitespace content, generation prompt on and off, conversations the
// template refuses) with four real templates (qwen3, llama3, deepseek_v3,
// gemma3), raw and vLLM-normalized, and requires identical strings, or a
// failure where the reference fails. testdata/ref/render.mjs made the
// goldens; `make tokenizers` fetches the configs (out/tokenizers, not in
// git).
//
// Supported: text, {{ }}, {% %} and {# #} with whitespace control; if/elif/
// else, for (with loop.index/index0/revindex/revindex0/first/last/length/
// previtem/nextitem, an inline `if` filter, tuple unpacking, else, break,
// continue), set (names, tuples, namespace attributes, block set), macro
// with default and keyword arguments; literals (strings with escapes,
// numbers, lists, tuples, dicts), member and index access (negative
// indexes), slices ([1:], [::-1]), calls with keyword and * / ** arguments,
// and/or/not, comparisons, in / not in, + - * / // % ** ~, the a if b else c
// conditional; the string methods upper, lower, strip, lstrip, rstrip, title,
// capitalize, startswith, endswith, split, replace, find, count; dict get,
// items, keys, values; the filters tojson (indent, ensure_ascii, sort_keys,
// separators), trim, length/count, items, join, default, first, last, list,
// reverse, sort, unique, upper, lower, title, capitalize, indent, replace,
// map(attribute=), selectattr/rejectattr, int, float, abs, string, safe;
// the tests defined, undefined, none, string, number, integer, boolean,
// iterable, mapping, sequence, callable, true, false, odd, even, lower,
// upper. Not supported (Load fails naming the statement): include, import,
// extends, block, call, filter blocks, raw.
//
// # Divergences from the reference, on purpose
//
// Where @huggingface/jinja departs from Python's jinja2 (what vLLM and
// SGLang run), this package follows jinja2: strip/lstrip/rstrip honour their
// characters argument (the reference ignores it and trims all whitespace:
// Qwen3's content.lstrip('\n') differs on content starting with a space),
// and break/continue keep the output of the iteration so far (the reference
// drops it). Strings are indexed and measured in code points (the reference:
// UTF-16 units). The parity corpus has no case that reaches these. Where
// the reference is more lenient than jinja2 (a string plus a list or dict
// concatenates the JavaScript way, {{ none }} prints nothing, == is
// JavaScript's loose equality), this package does as the reference: jinja2
// would refuse those templates or print "None", and after vLLM's
// normalization the real templates do not reach them.
//
// # Message normalization (vLLM)
//
// vLLM does not hand the request's messages to the template as sent:
// parse_chat_messages flattens multi-part content to a string joined by "\n"
// for templates that treat content as a string, and wraps it into parts for
// templates that iterate over content (ContentFormat, detected from the
// template source as vLLM detects it on the AST); null content becomes ""
// (or no parts); tool-call arguments are parsed from their JSON string into an object. Messages
// restates those rules (and render.mjs restates them in JavaScript for the
// goldens' "vllm" half), so the router hashes the prompt vLLM's engine
// tokenizes. Other engines (SGLang) normalize by their own rules, which may
// differ for multi-part content and tool calls. Media parts (images, audio)
// render as the template's placeholder, which the engine expands into many
// tokens: the prompt's blocks match the engine's up to the first one.
//
// # Cost
//
// A render allocates (the normalized messages and the strings the template
// concatenates); it runs once per chat request, before tokenization, on the
// handler goroutine. BenchmarkRender measures RenderRequest of a 6-turn
// conversation, normalization included. Renders are bounded (loop
// iterations, macro calls and depth, bytes built), and a panic inside one
// fails the render, not the process.
package chattmpl
