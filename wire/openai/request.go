package openai

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/valyala/fastjson"

	"github.com/kvroute/kvroute/wire"
)

// Tokenizer turns text into token ids. Implementations must be goroutine-safe.
type Tokenizer interface {
	// Encode appends the token ids of text to dst.
	Encode(dst []uint32, text []byte) []uint32
	// Name is the tokenizer's flag value.
	Name() string
}

// BytesTokenizer tokenizes text as its UTF-8 bytes, one token per byte. It is
// what the simulated fleet uses, so router and fleet agree on block hashes.
type BytesTokenizer struct{}

// Encode implements Tokenizer.
func (BytesTokenizer) Encode(dst []uint32, text []byte) []uint32 {
	for _, c := range text {
		dst = append(dst, uint32(c))
	}
	return dst
}

// Name implements Tokenizer.
func (BytesTokenizer) Name() string { return "bytes" }

// SpecialEncoder is a Tokenizer that can also add the special tokens an
// engine adds to a completion's text prompt (add_special_tokens=true, e.g. a
// BOS). ParsePrompt uses it for text prompts; chat text is rendered with its
// special tokens already and goes through Encode.
type SpecialEncoder interface {
	EncodeSpecial(dst []uint32, text []byte) []uint32
}

// ModelTokenizers is a Tokenizer that picks the tokenizer of a request's
// model (--model-tokenizer MODEL=PATH): Parse asks it For the body's "model";
// models without one get Default. Encode and Name are Default's.
type ModelTokenizers struct {
	Default Tokenizer
	ByModel map[string]Tokenizer
}

// For returns the tokenizer of model.
func (m *ModelTokenizers) For(model []byte) Tokenizer {
	if t, ok := m.ByModel[string(model)]; ok {
		return t
	}
	return m.Default
}

// Encode implements Tokenizer with Default.
func (m *ModelTokenizers) Encode(dst []uint32, text []byte) []uint32 {
	return m.Default.Encode(dst, text)
}

// Name implements Tokenizer with Default.
func (m *ModelTokenizers) Name() string { return m.Default.Name() }

// TokenizerFor returns the tokenizer tok stands for with model: tok itself,
// or, for ModelTokenizers, the model's.
func TokenizerFor(tok Tokenizer, model []byte) Tokenizer {
	if m, ok := tok.(*ModelTokenizers); ok {
		return m.For(model)
	}
	return tok
}

// encodePrompt tokenizes a completion's text prompt as an engine does.
func encodePrompt(tok Tokenizer, dst []uint32, text []byte) []uint32 {
	if s, ok := tok.(SpecialEncoder); ok {
		return s.EncodeSpecial(dst, text)
	}
	return tok.Encode(dst, text)
}

// ChatTemplate renders a /v1/chat/completions body (its messages, tools,
// add_generation_prompt, chat_template_kwargs) into the prompt text that is
// tokenized: *chattmpl.Template implements it. Implementations must be
// goroutine-safe; an error is the client's (a malformed message, or a
// conversation the template refuses) and is answered 400.
type ChatTemplate interface {
	RenderRequest(dst []byte, body *fastjson.Value) ([]byte, error)
}

// ChatTemplates picks a chat request's template by its model: ByModel, else
// Default; none renders ChatML (see the package doc). The zero value and
// nil render ChatML. Read-only once in use.
type ChatTemplates struct {
	Default ChatTemplate
	ByModel map[string]ChatTemplate
}

// For returns model's template, or nil for ChatML.
func (c *ChatTemplates) For(model []byte) ChatTemplate {
	if c == nil {
		return nil
	}
	if t, ok := c.ByModel[string(model)]; ok {
		return t
	}
	return c.Default
}

// ErrBadRequest wraps every error a malformed body produces; the HTTP layer
// answers it with 400.
var ErrBadRequest = errors.New("bad request")

// FieldError is a bad request caused by one field of the body. It wraps
// ErrBadRequest; Param names the field as OpenAI's error "param" does
// (e.g. "messages[2].role").
type FieldError struct {
	Param string
	Msg   string
}

func (e *FieldError) Error() string { return ErrBadRequest.Error() + ": " + e.Msg }

// Unwrap returns ErrBadRequest.
func (e *FieldError) Unwrap() error { return ErrBadRequest }

// ParamOf returns the field an error names (see FieldError), or "".
func ParamOf(err error) string {
	var fe *FieldError
	if errors.As(err, &fe) {
		return fe.Param
	}
	return ""
}

func badField(param, format string, args ...any) error {
	return &FieldError{Param: param, Msg: fmt.Sprintf(format, args...)}
}

// Request is a parsed completion or chat request. Its slices are owned by the
// Request and reused by the next Parse into it; the zero value is ready.
// Not goroutine-safe.
type Request struct {
	Chat   bool
	Model  []byte
	Tokens []uint32 // the prompt as token ids (given, or tokenized)
	// TextPrompt: a completion's prompt was text, tokenized into Tokens.
	TextPrompt bool
	MaxTokens  int // ≥ 1; 0 when absent
	N          int // choices requested ("n", ≥ 1); 0 when absent
	Stream     bool
	// StreamOptions: the request has a non-null "stream_options";
	// IncludeUsage: its include_usage is true (the engine then ends a
	// stream with a usage chunk).
	StreamOptions, IncludeUsage bool
	// Router extensions (ignored by engines): a caller's request id and the LoRA adapter name.
	RequestID []byte
	LoRA      []byte
	// Salt is vLLM's cache_salt: blocks are hashed with wire.SaltSeed, so a
	// salted request matches only its tenant's blocks.
	Salt []byte
	// MM are the multimodal objects the request declares (the router
	// extension "mm_hashes"): their hashes are folded into the blocks their
	// placeholder tokens overlap, as the engine's events do.
	MM []wire.MMRange

	// TokenLimit, when > 0, bounds the work spent on a prompt longer than
	// it: tokenizing stops once the prompt is known to have more than
	// TokenLimit tokens, and TooLong is set (see Request.encode). Set it
	// before parsing; Reset keeps it, ReleaseRequest clears it.
	TokenLimit int
	// TooLong: the prompt has more than TokenLimit tokens, at least
	// AtLeast (exactly that many with the bytes tokenizer); Tokens then
	// holds only part of it.
	TooLong bool
	AtLeast int

	text []byte // rendered chat template scratch
	// media are the byte ranges of the placeholders of multimodal content
	// parts in text, with their objects' hashes.
	media []media
}

// media is one multimodal content part of a chat request in Request.text.
type media struct {
	start, end int
	hash       uint64
}

// Reset clears r, keeping its buffers.
func (r *Request) Reset() {
	r.Chat = false
	r.Model = r.Model[:0]
	r.Tokens = r.Tokens[:0]
	r.TextPrompt = false
	r.MaxTokens = 0
	r.N = 0
	r.Stream = false
	r.StreamOptions, r.IncludeUsage = false, false
	r.RequestID = r.RequestID[:0]
	r.LoRA = r.LoRA[:0]
	r.Salt = r.Salt[:0]
	r.MM = r.MM[:0]
	r.TooLong, r.AtLeast = false, 0
	r.text = r.text[:0]
	r.media = r.media[:0]
}

var parsers fastjson.ParserPool

// Parse parses a /v1/completions (chat=false) or /v1/chat/completions
// (chat=true) body into r. Text prompts and chat messages are tokenized with
// tok. Errors wrap ErrBadRequest and say which field is wrong.
func Parse(body []byte, chat bool, tok Tokenizer, r *Request) error {
	return ParseWith(body, chat, tok, nil, r)
}

// ParseWith is Parse with chat templates: a chat request's messages are
// rendered with tmpl.For(model) (ChatML when it is nil) before they are
// tokenized.
//
// With r.TokenLimit set and the bytes tokenizer, a completion whose text
// prompt is longer than the limit is found so before the body is parsed
// (r.TooLong, no error; the body is not checked further): a 15 MB prompt
// costs neither the parser's copy of the body nor its tokens.
func ParseWith(body []byte, chat bool, tok Tokenizer, tmpl *ChatTemplates, r *Request) error {
	r.Reset()
	r.Chat = chat
	if !chat && r.PrecheckPrompt(body, tok) {
		return nil
	}
	p := parsers.Get()
	defer parsers.Put(p)
	v, err := p.ParseBytes(body)
	if err != nil {
		return InvalidJSON(body)
	}
	if v.Type() != fastjson.TypeObject {
		return fmt.Errorf("%w: body must be a JSON object", ErrBadRequest)
	}
	if m := v.Get("model"); m != nil {
		if m.Type() != fastjson.TypeString {
			return badField("model", "model must be a string")
		}
		r.Model = append(r.Model, m.GetStringBytes()...)
	}
	if err := parseCommon(v, r); err != nil {
		return err
	}
	tok = TokenizerFor(tok, r.Model)
	if chat {
		return ParseMessages(v, tok, tmpl.For(r.Model), r)
	}
	return ParsePrompt(v, tok, r)
}

// field is a numeric request field and the range vLLM's SamplingParams
// accepts for it.
type field struct {
	name    string
	integer bool
	lo, hi  float64
	loOpen  bool   // lo itself is out of range
	rule    string // the range in words, for the error
}

// numeric are the numeric fields Parse checks. max_tokens must be ≥ 1 (vLLM:
// "max_tokens must be at least 1"); the bound of 2^24 keeps it an int
// anywhere. top_k -1 and 0 both disable it (vLLM has used either).
var numeric = [...]field{
	{"max_tokens", true, 1, 1 << 24, false, "an integer in [1, 16777216]"},
	{"max_completion_tokens", true, 1, 1 << 24, false, "an integer in [1, 16777216]"},
	{"n", true, 1, 1 << 24, false, "an integer ≥ 1"},
	{"best_of", true, 1, 1 << 24, false, "an integer ≥ 1"},
	{"min_tokens", true, 0, 1 << 24, false, "an integer ≥ 0"},
	{"temperature", false, 0, math.MaxFloat64, false, "a number ≥ 0"},
	{"top_p", false, 0, 1, true, "a number in (0, 1]"},
	{"top_k", true, -1, math.MaxInt32, false, "an integer ≥ -1 (-1 or 0: disabled)"},
	{"min_p", false, 0, 1, false, "a number in [0, 1]"},
	{"presence_penalty", false, -2, 2, false, "a number in [-2, 2]"},
	{"frequency_penalty", false, -2, 2, false, "a number in [-2, 2]"},
	{"repetition_penalty", false, 0, math.MaxFloat64, true, "a number > 0"},
	{"seed", true, math.MinInt64, math.MaxInt64, false, "an integer"},
	{"top_logprobs", true, 0, 1 << 24, false, "an integer ≥ 0"},
}

// brief is a rejected value as an error shows it: its JSON, cut at 40 bytes.
func brief(v *fastjson.Value) string {
	s := v.String()
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return s
}

// checkNumber checks field f of v; it returns the value and whether it is
// present (null counts as absent).
func checkNumber(v *fastjson.Value, f *field) (float64, bool, error) {
	x := v.Get(f.name)
	if x == nil || x.Type() == fastjson.TypeNull {
		return 0, false, nil
	}
	n, err := x.Float64()
	if err != nil || n < f.lo || (f.loOpen && n == f.lo) || n > f.hi || (f.integer && n != math.Trunc(n)) {
		return 0, false, badField(f.name, "%s must be %s, got %s", f.name, f.rule, brief(x))
	}
	return n, true, nil
}

// parseCommon reads the fields both endpoints share and rejects, with the
// field named, sampling parameters vLLM would reject: a wrong JSON type (no
// string-to-number or string-to-boolean coercion) or a value out of range.
// The router and the simulated engines do not sample, but a request an
// engine refuses is better refused before it is routed.
func parseCommon(v *fastjson.Value, r *Request) error {
	minTokens := -1
	for i := range numeric {
		f := &numeric[i]
		n, ok, err := checkNumber(v, f)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		switch f.name {
		case "max_tokens", "max_completion_tokens":
			r.MaxTokens = int(n)
		case "n":
			r.N = int(n)
		case "min_tokens":
			minTokens = int(n)
		}
	}
	if r.MaxTokens > 0 && minTokens > r.MaxTokens {
		return badField("min_tokens", "min_tokens must be ≤ max_tokens (%d), got %d", r.MaxTokens, minTokens)
	}
	for _, name := range [...]string{"ignore_eos", "echo", "skip_special_tokens"} {
		if b := v.Get(name); b != nil && b.Type() != fastjson.TypeNull && b.Type() != fastjson.TypeTrue && b.Type() != fastjson.TypeFalse {
			return badField(name, "%s must be a boolean, got %s", name, brief(b))
		}
	}
	if st := v.Get("stop"); st != nil {
		switch st.Type() {
		case fastjson.TypeNull, fastjson.TypeString:
		case fastjson.TypeArray:
			for i, e := range st.GetArray() {
				if e.Type() != fastjson.TypeString {
					return badField(fmt.Sprintf("stop[%d]", i), "stop[%d] must be a string, got %s", i, brief(e))
				}
			}
		default:
			return badField("stop", "stop must be a string or an array of strings, got %s", brief(st))
		}
	}
	// logprobs: a count of top tokens on /v1/completions, a boolean on chat.
	if lp := v.Get("logprobs"); lp != nil && lp.Type() != fastjson.TypeNull {
		if r.Chat {
			if lp.Type() != fastjson.TypeTrue && lp.Type() != fastjson.TypeFalse {
				return badField("logprobs", "logprobs must be a boolean, got %s", brief(lp))
			}
		} else if _, _, err := checkNumber(v, &field{"logprobs", true, 0, 1 << 24, false, "an integer ≥ 0"}); err != nil {
			return err
		}
	}
	if s := v.Get("stream"); s != nil && s.Type() != fastjson.TypeNull {
		b, err := s.Bool()
		if err != nil {
			return badField("stream", "stream must be a boolean, got %s", brief(s))
		}
		r.Stream = b
	}
	if so := v.Get("stream_options"); so != nil && so.Type() != fastjson.TypeNull {
		if so.Type() != fastjson.TypeObject {
			return badField("stream_options", "stream_options must be an object, got %s", brief(so))
		}
		r.StreamOptions = true
		if iu := so.Get("include_usage"); iu != nil && iu.Type() != fastjson.TypeNull {
			b, err := iu.Bool()
			if err != nil {
				return badField("stream_options.include_usage", "stream_options.include_usage must be a boolean, got %s", brief(iu))
			}
			r.IncludeUsage = b
		}
	}
	if id := v.Get("request_id"); id != nil {
		if id.Type() != fastjson.TypeString {
			return badField("request_id", "request_id must be a string")
		}
		r.RequestID = append(r.RequestID, id.GetStringBytes()...)
	}
	if l := v.Get("lora_name"); l != nil && l.Type() != fastjson.TypeNull {
		if l.Type() != fastjson.TypeString {
			return badField("lora_name", "lora_name must be a string")
		}
		r.LoRA = append(r.LoRA, l.GetStringBytes()...)
	}
	return ParseCacheKeys(v, r)
}

// ParseCacheKeys reads the fields that change a request's block hashes
// besides lora_name: vLLM's "cache_salt" (a non-empty string, as vLLM
// requires) into r.Salt, and the router extension "mm_hashes", a list of
// {"identifier": string, "offset": int ≥ 0, "length": int ≥ 1}, one per
// multimodal object (the engine's identifier of it, e.g. vLLM's
// multi_modal_uuids or its 64-hex content hash, and the prompt positions its
// placeholder tokens take), into r.MM.
func ParseCacheKeys(v *fastjson.Value, r *Request) error {
	if x := v.Get("cache_salt"); x != nil && x.Type() != fastjson.TypeNull {
		if x.Type() != fastjson.TypeString || len(x.GetStringBytes()) == 0 {
			return badField("cache_salt", "cache_salt must be a non-empty string")
		}
		r.Salt = append(r.Salt[:0], x.GetStringBytes()...)
	}
	x := v.Get("mm_hashes")
	if x == nil || x.Type() == fastjson.TypeNull {
		return nil
	}
	if x.Type() != fastjson.TypeArray {
		return badField("mm_hashes", "mm_hashes must be an array of {identifier, offset, length}")
	}
	r.MM = r.MM[:0]
	for i, o := range x.GetArray() {
		param := fmt.Sprintf("mm_hashes[%d]", i)
		if o.Type() != fastjson.TypeObject {
			return badField(param, "%s must be an object {identifier, offset, length}", param)
		}
		id := o.Get("identifier")
		if id == nil || id.Type() != fastjson.TypeString {
			return badField(param+".identifier", "%s.identifier must be a non-empty string", param)
		}
		h, ok := wire.MMHashOf(id.GetStringBytes())
		if !ok {
			return badField(param+".identifier", "%s.identifier must be a non-empty string", param)
		}
		off, ok := intField(o, "offset")
		if !ok || off < 0 {
			return badField(param+".offset", "%s.offset must be an integer ≥ 0 (the object's first placeholder token)", param)
		}
		n, ok := intField(o, "length")
		if !ok || n < 1 {
			return badField(param+".length", "%s.length must be an integer ≥ 1 (its placeholder tokens)", param)
		}
		r.MM = append(r.MM, wire.MMRange{Hash: h, Offset: off, Length: n})
	}
	return nil
}

// intField reads an integer field of o (false if absent or not an integer).
func intField(o *fastjson.Value, name string) (int, bool) {
	x := o.Get(name)
	if x == nil || x.Type() != fastjson.TypeNumber {
		return 0, false
	}
	n, err := x.Int()
	return n, err == nil
}

// ParsePrompt reads v's "prompt" (a string, an array of token ids, or a
// one-element array of either) or, failing that, "token_ids", into r.Tokens.
// A text prompt is tokenized with its special tokens when tok is a
// SpecialEncoder, as engines encode a completion's prompt; r.TextPrompt
// tells it was text.
func ParsePrompt(v *fastjson.Value, tok Tokenizer, r *Request) error {
	field := "prompt"
	p := v.Get("prompt")
	if p == nil {
		field = "token_ids"
		p = v.Get("token_ids")
	}
	if p == nil {
		return badField("prompt", "prompt is required (a string or an array of token ids)")
	}
	switch p.Type() {
	case fastjson.TypeString:
		r.encode(tok, p.GetStringBytes(), true)
		r.TextPrompt = true
		return nil
	case fastjson.TypeArray:
		arr := p.GetArray()
		if len(arr) == 1 && (arr[0].Type() == fastjson.TypeArray || arr[0].Type() == fastjson.TypeString) {
			if arr[0].Type() == fastjson.TypeString {
				r.encode(tok, arr[0].GetStringBytes(), true)
				r.TextPrompt = true
				return nil
			}
			arr = arr[0].GetArray()
		}
		if r.TokenLimit > 0 && len(r.Tokens)+len(arr) > r.TokenLimit {
			r.tooLong(len(r.Tokens) + len(arr))
			return nil
		}
		for i, t := range arr {
			if t.Type() != fastjson.TypeNumber {
				return badField(fmt.Sprintf("%s[%d]", field, i), "%s[%d] must be a token id (batched prompts are not supported)", field, i)
			}
			n, err := t.Uint()
			if err != nil || n > math.MaxUint32 {
				return badField(fmt.Sprintf("%s[%d]", field, i), "%s[%d] is not a token id in [0, 2^32)", field, i)
			}
			r.Tokens = append(r.Tokens, uint32(n))
		}
		return nil
	}
	return badField(field, "%s must be a string or an array of token ids", field)
}

func parseMessages(v *fastjson.Value, tok Tokenizer, r *Request) error {
	m := v.Get("messages")
	if m == nil || m.Type() != fastjson.TypeArray || len(m.GetArray()) == 0 {
		return badField("messages", "messages must be a non-empty array")
	}
	text := r.text[:0]
	explicitMM := len(r.MM) > 0 // mm_hashes: the caller placed the objects
	for i, msg := range m.GetArray() {
		if msg.Type() != fastjson.TypeObject {
			return badField(fmt.Sprintf("messages[%d]", i), "messages[%d] must be an object", i)
		}
		role, err := messageRole(msg, i)
		if err != nil {
			return err
		}
		text = append(text, "<|im_start|>"...)
		text = append(text, role...)
		text = append(text, '\n')
		c := msg.Get("content")
		switch {
		case c == nil || c.Type() == fastjson.TypeNull:
		case c.Type() == fastjson.TypeString:
			text = append(text, c.GetStringBytes()...)
		case c.Type() == fastjson.TypeArray:
			for j, part := range c.GetArray() {
				t := part.Get("text")
				if part.Type() != fastjson.TypeObject {
					return badField(fmt.Sprintf("messages[%d].content[%d]", i, j), "messages[%d].content[%d] must be an object", i, j)
				}
				if t != nil && t.Type() == fastjson.TypeString {
					text = append(text, t.GetStringBytes()...)
				} else if h, ok := mediaHash(part); ok && !explicitMM {
					start := len(text)
					text = append(text, mediaPlaceholder...)
					r.media = append(r.media, media{start: start, end: len(text), hash: h})
				}
			}
		default:
			return badField(fmt.Sprintf("messages[%d].content", i), "messages[%d].content must be a string or an array of parts", i)
		}
		text = append(text, "<|im_end|>\n"...)
	}
	text = append(text, "<|im_start|>assistant\n"...)
	r.text = text
	// Encoded piece by piece around the placeholders (as a tokenizer splits
	// at special tokens), so each object's token range is known.
	at := 0
	for _, m := range r.media {
		r.encode(tok, text[at:m.start], false)
		off := len(r.Tokens)
		r.encode(tok, text[m.start:m.end], false)
		r.MM = append(r.MM, wire.MMRange{Hash: m.hash, Offset: off, Length: len(r.Tokens) - off})
		at = m.end
	}
	r.encode(tok, text[at:], false)
	return nil
}

// ParseMessages reads v's chat "messages" into r.Tokens: rendered with
// tmpl, or with ChatML when tmpl is nil, then tokenized.
func ParseMessages(v *fastjson.Value, tok Tokenizer, tmpl ChatTemplate, r *Request) error {
	if tmpl != nil {
		return renderMessages(v, tmpl, tok, r)
	}
	return parseMessages(v, tok, r)
}

// renderMessages renders v's messages through a chat template and tokenizes
// the text as it is: the template writes the special tokens (BOS included),
// as vLLM tokenizes a rendered chat prompt without adding any.
func renderMessages(v *fastjson.Value, t ChatTemplate, tok Tokenizer, r *Request) error {
	m := v.Get("messages")
	if m == nil || m.Type() != fastjson.TypeArray || len(m.GetArray()) == 0 {
		return badField("messages", "messages must be a non-empty array")
	}
	for i, msg := range m.GetArray() {
		if msg.Type() != fastjson.TypeObject {
			return badField(fmt.Sprintf("messages[%d]", i), "messages[%d] must be an object", i)
		}
		if _, err := messageRole(msg, i); err != nil {
			return err
		}
	}
	text, err := t.RenderRequest(r.text[:0], v)
	if err != nil {
		return badField("messages", "chat template: %v", err)
	}
	r.text = text
	r.encode(tok, text, false)
	return nil
}

// Roles are the chat message roles the OpenAI API accepts.
var Roles = [...]string{"system", "user", "assistant", "tool", "function", "developer"}

// messageRole returns message i's role; a missing, non-string or unknown
// role is a FieldError naming messages[i].role, as the OpenAI API answers.
func messageRole(msg *fastjson.Value, i int) ([]byte, error) {
	role := msg.Get("role")
	if role == nil || role.Type() != fastjson.TypeString {
		return nil, badField(fmt.Sprintf("messages[%d].role", i), "messages[%d].role must be a string", i)
	}
	b := role.GetStringBytes()
	for _, r := range Roles {
		if string(b) == r {
			return b, nil
		}
	}
	return nil, badField(fmt.Sprintf("messages[%d].role", i), "messages[%d].role %q is not a role: want system, user, assistant, tool, function or developer", i, truncate(b, 64))
}

// truncate returns b cut to at most n bytes (for quoting client input).
func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// mediaPlaceholder stands for a multimodal content part in the rendered chat.
const mediaPlaceholder = "<|media|>"

// mediaHash returns the hash of a multimodal content part (OpenAI's
// image_url, input_audio, vLLM's video_url, audio_url, image_embeds): its
// "uuid" (vLLM's user-provided media identifier) when it has one, else its
// URL or data, hashed with wire.MMHashOf as Dynamo's URL-based multimodal
// hasher identifies an object by its URL. false for a part without either.
func mediaHash(part *fastjson.Value) (uint64, bool) {
	if u := part.Get("uuid"); u != nil && u.Type() == fastjson.TypeString {
		if h, ok := wire.MMHashOf(u.GetStringBytes()); ok {
			return h, true
		}
	}
	for _, key := range [...]string{"image_url", "video_url", "audio_url", "input_audio", "image_embeds"} {
		x := part.Get(key)
		if x == nil {
			continue
		}
		switch x.Type() {
		case fastjson.TypeString:
			return wire.MMHashOf(x.GetStringBytes())
		case fastjson.TypeObject:
			for _, k := range [...]string{"url", "data"} {
				if s := x.Get(k); s != nil && s.Type() == fastjson.TypeString {
					return wire.MMHashOf(s.GetStringBytes())
				}
			}
		}
	}
	return 0, false
}

var arenas fastjson.ArenaPool

// ReplacePrompt appends to dst the completion body with its "prompt" replaced
// by tokens, a JSON array of token ids (what --forward-token-ids sends).
func ReplacePrompt(dst, body []byte, tokens []uint32) ([]byte, error) {
	p := parsers.Get()
	defer parsers.Put(p)
	v, err := p.ParseBytes(body)
	if err != nil {
		return dst, InvalidJSON(body)
	}
	o, err := v.Object()
	if err != nil {
		return dst, fmt.Errorf("%w: body must be a JSON object", ErrBadRequest)
	}
	a := arenas.Get()
	defer arenas.Put(a)
	arr := a.NewArray()
	for i, t := range tokens {
		arr.SetArrayItem(i, a.NewNumberInt(int(t)))
	}
	o.Set("prompt", arr)
	dst = v.MarshalTo(dst)
	a.Reset()
	return dst, nil
}

// RenderChat appends the ChatML rendering of (role, content) pairs and the
// generation prompt to dst: the text Parse tokenizes for a chat request.
func RenderChat(dst []byte, roles, contents []string) []byte {
	for i := range roles {
		dst = append(dst, "<|im_start|>"...)
		dst = append(dst, roles[i]...)
		dst = append(dst, '\n')
		dst = append(dst, contents[i]...)
		dst = append(dst, "<|im_end|>\n"...)
	}
	return append(dst, "<|im_start|>assistant\n"...)
}

var reqPool = sync.Pool{New: func() any { return new(Request) }}

// AcquireRequest returns an empty Request from a pool; ReleaseRequest returns it.
func AcquireRequest() *Request { return reqPool.Get().(*Request) }

// ReleaseRequest returns r to the pool; r must not be used afterwards. The
// buffers of a very long prompt are dropped rather than kept in the pool.
func ReleaseRequest(r *Request) {
	r.Reset()
	r.TokenLimit = 0
	if cap(r.Tokens) > maxPooledTokens {
		r.Tokens = nil
	}
	if cap(r.text) > maxPooledText {
		r.text = nil
	}
	reqPool.Put(r)
}

// The largest buffers a pooled Request keeps: room for a 256 Ki-token
// prompt (1 MiB of ids) and 1 MiB of rendered chat.
const (
	maxPooledTokens = 256 << 10
	maxPooledText   = 1 << 20
)
