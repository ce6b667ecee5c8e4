package openai

import "strconv"

// Usage is the token accounting of a response, as OpenAI reports it.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	CachedTokens     int // prompt tokens served from the prefix cache
}

// AppendUsage appends the JSON usage object.
func AppendUsage(dst []byte, u Usage) []byte {
	dst = append(dst, `{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.PromptTokens), 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.CompletionTokens), 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.PromptTokens+u.CompletionTokens), 10)
	dst = append(dst, `,"prompt_tokens_details":{"cached_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.CachedTokens), 10)
	return append(dst, `}}`...)
}

// Header is what identifies a response: its id, model and creation time.
type Header struct {
	ID      string
	Model   string
	Created int64 // unix seconds
	Chat    bool
}

func appendHead(dst []byte, h Header, chunk bool) []byte {
	dst = append(dst, `{"id":`...)
	dst = AppendJSONString(dst, h.ID)
	dst = append(dst, `,"object":"`...)
	switch {
	case h.Chat && chunk:
		dst = append(dst, "chat.completion.chunk"...)
	case h.Chat:
		dst = append(dst, "chat.completion"...)
	default:
		dst = append(dst, "text_completion"...)
	}
	dst = append(dst, `","created":`...)
	dst = strconv.AppendInt(dst, h.Created, 10)
	dst = append(dst, `,"model":`...)
	return AppendJSONString(dst, h.Model)
}

func appendChoiceText(dst []byte, chat, chunk bool, text string) []byte {
	switch {
	case chat && chunk:
		dst = append(dst, `"delta":{"role":"assistant","content":`...)
		dst = AppendJSONString(dst, text)
		return append(dst, '}')
	case chat:
		dst = append(dst, `"message":{"role":"assistant","content":`...)
		dst = AppendJSONString(dst, text)
		return append(dst, '}')
	}
	dst = append(dst, `"text":`...)
	return AppendJSONString(dst, text)
}

// AppendResponse appends a complete (non-streaming) response body.
func AppendResponse(dst []byte, h Header, text, finish string, u Usage) []byte {
	dst = appendHead(dst, h, false)
	dst = append(dst, `,"choices":[{"index":0,`...)
	dst = appendChoiceText(dst, h.Chat, false, text)
	dst = append(dst, `,"finish_reason":`...)
	dst = AppendJSONString(dst, finish)
	dst = append(dst, `}],"usage":`...)
	dst = AppendUsage(dst, u)
	return append(dst, '}')
}

// AppendChunk appends one SSE event ("data: {...}\n\n") carrying text; finish
// is empty except on the last chunk, and usage, when non-nil, is included
// (OpenAI sends it on the final chunk).
func AppendChunk(dst []byte, h Header, text, finish string, u *Usage) []byte {
	dst = append(dst, "data: "...)
	dst = appendHead(dst, h, true)
	dst = append(dst, `,"choices":[{"index":0,`...)
	dst = appendChoiceText(dst, h.Chat, true, text)
	dst = append(dst, `,"finish_reason":`...)
	if finish == "" {
		dst = append(dst, "null"...)
	} else {
		dst = AppendJSONString(dst, finish)
	}
	dst = append(dst, `}]`...)
	if u != nil {
		dst = append(dst, `,"usage":`...)
		dst = AppendUsage(dst, *u)
	}
	return append(dst, "}\n\n"...)
}

// Done is the SSE terminator.
const Done = "data: [DONE]\n\n"

// AppendError appends an OpenAI-style JSON error body.
func AppendError(dst []byte, message, typ string, code int) []byte {
	dst = append(dst, `{"error":{"message":`...)
	dst = AppendJSONString(dst, message)
	dst = append(dst, `,"type":`...)
	dst = AppendJSONString(dst, typ)
	dst = append(dst, `,"code":`...)
	dst = strconv.AppendInt(dst, int64(code), 10)
	return append(dst, "}}"...)
}
