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

// Error is an OpenAI-style error object, written by AppendError as
// {"error":{"message","type","param","code"}}. Param names the request field
// at fault; Code is a short machine-readable string (model_not_found,
// rate_limit_exceeded, ...). An empty Param or Code is written as null, as
// OpenAI and vLLM do.
type Error struct {
	Message string
	Type    string
	Param   string
	Code    string
}

// Error types and codes kvroute answers with. The types are OpenAI's; the
// codes follow OpenAI's where it has one (model_not_found,
// rate_limit_exceeded) and name the condition otherwise.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeNotFound       = "not_found_error"
	TypeRateLimit      = "rate_limit_error"
	TypeServer         = "server_error"

	CodeInvalidRequest        = "invalid_request_error"
	CodeNotFound              = "not_found"
	CodeModelNotFound         = "model_not_found"
	CodeMethodNotAllowed      = "method_not_allowed"
	CodeRequestTimeout        = "request_timeout"
	CodeConflict              = "conflict"
	CodeRequestTooLarge       = "request_too_large"
	CodeHeadersTooLarge       = "request_header_fields_too_large"
	CodeRateLimitExceeded     = "rate_limit_exceeded"
	CodeInternal              = "internal_error"
	CodeBadGateway            = "bad_gateway"
	CodeServiceUnavailable    = "service_unavailable"
	CodeWorkerStreamInterrupt = "worker_stream_interrupted"
	CodeShuttingDown          = "shutting_down"
)

// StatusError returns the error for an HTTP status with msg, its type and
// code the defaults for that status.
func StatusError(status int, msg string) Error {
	e := Error{Message: msg, Type: TypeInvalidRequest}
	switch status {
	case 400:
		e.Code = CodeInvalidRequest
	case 404:
		e.Type, e.Code = TypeNotFound, CodeNotFound
	case 405:
		e.Code = CodeMethodNotAllowed
	case 408:
		e.Code = CodeRequestTimeout
	case 409:
		e.Code = CodeConflict
	case 413:
		e.Code = CodeRequestTooLarge
	case 429:
		e.Type, e.Code = TypeRateLimit, CodeRateLimitExceeded
	case 431:
		e.Code = CodeHeadersTooLarge
	case 502:
		e.Type, e.Code = TypeServer, CodeBadGateway
	case 503:
		e.Type, e.Code = TypeServer, CodeServiceUnavailable
	default:
		if status >= 500 {
			e.Type, e.Code = TypeServer, CodeInternal
		}
	}
	return e
}

// AppendError appends e as an OpenAI-style JSON error body.
func AppendError(dst []byte, e Error) []byte {
	dst = append(dst, `{"error":{"message":`...)
	dst = AppendJSONString(dst, e.Message)
	dst = append(dst, `,"type":`...)
	dst = AppendJSONString(dst, e.Type)
	dst = append(dst, `,"param":`...)
	dst = appendStringOrNull(dst, e.Param)
	dst = append(dst, `,"code":`...)
	dst = appendStringOrNull(dst, e.Code)
	return append(dst, "}}"...)
}

// AppendErrorEvent appends e as an SSE event (data: {"error":{...}}\n\n), the
// way OpenAI-compatible servers report an error inside a stream.
func AppendErrorEvent(dst []byte, e Error) []byte {
	dst = append(dst, "data: "...)
	dst = AppendError(dst, e)
	return append(dst, "\n\n"...)
}

func appendStringOrNull(dst []byte, s string) []byte {
	if s == "" {
		return append(dst, "null"...)
	}
	return AppendJSONString(dst, s)
}
