package openai

import (
	"bytes"

	"github.com/kvroute/kvroute/internal/jsonscan"
)

// Reading what an engine reports about its prefix cache: vLLM
// (--enable-prompt-tokens-details) and SGLang (--enable-cache-report) put
// usage.prompt_tokens_details.cached_tokens in a whole answer and, with
// stream_options.include_usage, in a stream's last chunk, one whose
// "choices" is empty.

var (
	keyDetails = []byte(`"prompt_tokens_details"`)
	keyCached  = []byte(`"cached_tokens"`)
	keyChoices = []byte(`"choices"`)
)

// CachedTokens returns usage.prompt_tokens_details.cached_tokens of a
// response body or an SSE chunk's data, and false when b carries none (no
// usage details, a null, or a value that is not a non-negative integer
// below 2^40). It scans the bytes without decoding them (the last
// "prompt_tokens_details" key that is not inside a string wins) and
// allocates nothing.
func CachedTokens(b []byte) (int, bool) {
	i := lastKey(b, keyDetails)
	if i < 0 {
		return 0, false
	}
	j := jsonscan.SkipWS(b, i+len(keyDetails))
	if j >= len(b) || b[j] != ':' {
		return 0, false
	}
	j = jsonscan.SkipWS(b, j+1)
	if j >= len(b) || b[j] != '{' {
		return 0, false
	}
	end, ok := jsonscan.ValueEnd(b, j)
	if !ok {
		return 0, false
	}
	// The object's members, one by one, at depth one.
	k := j + 1
	for {
		k = jsonscan.SkipWS(b, k)
		if k >= end || b[k] != '"' {
			return 0, false
		}
		ke, ok := jsonscan.StringEnd(b, k)
		if !ok || ke > end {
			return 0, false
		}
		isCached := bytes.Equal(b[k:ke], keyCached)
		k = jsonscan.SkipWS(b, ke)
		if k >= end || b[k] != ':' {
			return 0, false
		}
		k = jsonscan.SkipWS(b, k+1)
		if k >= end {
			return 0, false
		}
		if isCached {
			return parseCount(b[k:end])
		}
		if k, ok = jsonscan.ValueEnd(b, k); !ok || k > end {
			return 0, false
		}
		k = jsonscan.SkipWS(b, k)
		if k >= end || b[k] != ',' {
			return 0, false
		}
		k++
	}
}

// parseCount reads a non-negative integer below 2^40 at the start of b,
// ended by a delimiter.
func parseCount(b []byte) (int, bool) {
	n, i := 0, 0
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		n = n*10 + int(b[i]-'0')
		if n >= 1<<40 {
			return 0, false
		}
	}
	if i == 0 || (i > 1 && b[0] == '0') {
		return 0, false
	}
	if i < len(b) {
		switch b[i] {
		case ',', '}', ' ', '\t', '\r', '\n':
		default:
			return 0, false
		}
	}
	return n, true
}

// lastKey returns the index of the last occurrence of key (a quoted
// string) in b that is a string of its own, not the inside of another
// (whose quotes would be escaped), or -1.
func lastKey(b, key []byte) int {
	for end := len(b); ; {
		i := bytes.LastIndex(b[:end], key)
		if i < 0 {
			return -1
		}
		if i == 0 || b[i-1] != '\\' {
			return i
		}
		end = i
	}
}

// IsUsageChunk reports whether an SSE chunk's data is the usage chunk that
// stream_options.include_usage adds at the end of a stream: an object whose
// "choices" is an empty array (EmptyChoices) and which carries usage
// details. It allocates nothing.
func IsUsageChunk(data []byte) bool {
	if !EmptyChoices(data) {
		return false
	}
	_, ok := CachedTokens(data)
	return ok
}

// EmptyChoices reports whether a chunk's last "choices" member is an empty
// array: IsUsageChunk for a chunk already known to carry usage details
// (CachedTokens). It allocates nothing.
func EmptyChoices(data []byte) bool {
	i := lastKey(data, keyChoices)
	if i < 0 {
		return false
	}
	j := jsonscan.SkipWS(data, i+len(keyChoices))
	if j >= len(data) || data[j] != ':' {
		return false
	}
	j = jsonscan.SkipWS(data, j+1)
	if j >= len(data) || data[j] != '[' {
		return false
	}
	j = jsonscan.SkipWS(data, j+1)
	return j < len(data) && data[j] == ']'
}

// includeUsage is what AppendIncludeUsage adds to a request body.
const includeUsage = `"stream_options":{"include_usage":true}`

// AppendIncludeUsage appends to dst body (a JSON object, as Parse accepted
// it, without stream_options) with "stream_options":{"include_usage":true}
// added as its last member, so that a streaming engine ends its stream with
// a usage chunk. It returns false, and dst unchanged, when body does not
// end with an object's closing brace.
func AppendIncludeUsage(dst, body []byte) ([]byte, bool) {
	end := len(body)
	for end > 0 && (body[end-1] == ' ' || body[end-1] == '\n' || body[end-1] == '\r' || body[end-1] == '\t') {
		end--
	}
	if end == 0 || body[end-1] != '}' {
		return dst, false
	}
	prev := end - 1
	for prev > 0 && (body[prev-1] == ' ' || body[prev-1] == '\n' || body[prev-1] == '\r' || body[prev-1] == '\t') {
		prev--
	}
	dst = append(dst, body[:end-1]...)
	if prev > 0 && body[prev-1] != '{' {
		dst = append(dst, ',')
	}
	dst = append(dst, includeUsage...)
	return append(dst, body[end-1:]...), true
}

// AppendUsageChunk appends the SSE event that ends a stream asked for
// with stream_options.include_usage, as vLLM sends it: no choices, the
// usage.
func AppendUsageChunk(dst []byte, h Header, u Usage) []byte {
	dst = append(dst, "data: "...)
	dst = appendHead(dst, h, true)
	dst = append(dst, `,"choices":[],"usage":`...)
	dst = AppendUsage(dst, u)
	return append(dst, "}\n\n"...)
}
