package openai

import (
	"bytes"
	"github.com/kvroute/kvroute/internal/jsonscan"
	"unicode/utf8"
)

// limitChunk is the size of the pieces a long text is tokenized in when
// Request.TokenLimit is set: tokenizing stops at the first piece past the
// limit, so a prompt far over it costs one piece's work and tokens beyond
// the limit, not its whole length's.
const limitChunk = 64 << 10

// encode appends the tokens of text to r.Tokens (special: with the special
// tokens an engine adds to a completion's text prompt), within
// r.TokenLimit: once the prompt is known to be longer, it sets r.TooLong
// and r.AtLeast and stops. With the bytes tokenizer the length alone
// decides. Any other tokenizer encodes a text longer than the room left (in
// bytes) piece by piece, cut at white space, and stops at the first piece
// past the limit; each cut may add a token the whole text would not have,
// so a cut counts one token less. A text found within the limit after all
// is encoded again whole, so its tokens are exactly the tokenizer's.
func (r *Request) encode(tok Tokenizer, text []byte, special bool) {
	if r.TooLong {
		return
	}
	if r.TokenLimit <= 0 {
		r.Tokens = encodeAs(tok, special, r.Tokens, text)
		return
	}
	room := r.TokenLimit - len(r.Tokens)
	if _, ok := tok.(BytesTokenizer); ok {
		if len(text) > room {
			r.tooLong(len(r.Tokens) + len(text))
			return
		}
		r.Tokens = tok.Encode(r.Tokens, text)
		return
	}
	if len(text) > room && len(text) > limitChunk {
		base := len(r.Tokens)
		cuts := 0
		for rest := text; len(rest) > 0; cuts++ {
			n := cutPoint(rest)
			r.Tokens = tok.Encode(r.Tokens, rest[:n])
			rest = rest[n:]
			if len(r.Tokens)-cuts > r.TokenLimit {
				r.tooLong(len(r.Tokens) - cuts)
				r.Tokens = r.Tokens[:base]
				return
			}
		}
		r.Tokens = r.Tokens[:base]
	}
	r.Tokens = encodeAs(tok, special, r.Tokens, text)
	if len(r.Tokens) > r.TokenLimit {
		r.tooLong(len(r.Tokens))
	}
}

func encodeAs(tok Tokenizer, special bool, dst []uint32, text []byte) []uint32 {
	if special {
		return encodePrompt(tok, dst, text)
	}
	return tok.Encode(dst, text)
}

func (r *Request) tooLong(atLeast int) {
	r.TooLong, r.AtLeast = true, atLeast
}

// cutPoint returns where the next piece of text ends: after limitChunk
// bytes, moved back to the last white space in the piece's last quarter, or
// else to a rune's start.
func cutPoint(text []byte) int {
	if len(text) <= limitChunk {
		return len(text)
	}
	n := limitChunk
	if i := bytes.LastIndexAny(text[n-limitChunk/4:n], " \n\t"); i > 0 {
		return n - limitChunk/4 + i
	}
	for n > limitChunk/2 && !utf8.RuneStart(text[n]) {
		n--
	}
	return n
}

// PrecheckPrompt decides, before body is parsed, whether its text
// "prompt" is over r.TokenLimit with tok the bytes tokenizer (whose count
// is the prompt's length): if so it sets r.TooLong and r.AtLeast and
// reports true, and body need not be parsed. False: parse it.
func (r *Request) PrecheckPrompt(body []byte, tok Tokenizer) bool {
	if _, ok := tok.(BytesTokenizer); !ok || r.TokenLimit <= 0 {
		return false
	}
	n, long := promptTooLong(body, r.TokenLimit)
	if long {
		r.TextPrompt = true
		r.tooLong(n)
	}
	return long
}

// promptTooLong decides, before the body is parsed, whether a completion
// body's text "prompt" is longer than limit bytes tokens, the bytes
// tokenizer's count; it returns the prompt's length in bytes when it is.
// It reads the body in place (no allocation) and answers false whenever it
// cannot tell (no top-level string "prompt", malformed JSON: the parser
// then says what is wrong).
func promptTooLong(body []byte, limit int) (int, bool) {
	if len(body) <= limit { // a prompt takes at least a byte of body per byte
		return 0, false
	}
	raw, ok := topLevelString(body, "prompt")
	if !ok || len(raw) <= limit {
		return 0, false
	}
	n, ok := decodedLen(raw)
	return n, ok && n > limit
}

// topLevelString returns the raw bytes (between the quotes, still escaped)
// of the string value of key in the JSON object b, without allocating.
func topLevelString(b []byte, key string) ([]byte, bool) {
	i := jsonscan.SkipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	i++
	for {
		i = jsonscan.SkipWS(b, i)
		if i >= len(b) || b[i] != '"' {
			return nil, false
		}
		kEnd, ok := jsonscan.StringEnd(b, i)
		if !ok {
			return nil, false
		}
		ks, ke := i+1, kEnd-1
		i = jsonscan.SkipWS(b, kEnd)
		if i >= len(b) || b[i] != ':' {
			return nil, false
		}
		i = jsonscan.SkipWS(b, i+1)
		if i >= len(b) {
			return nil, false
		}
		if string(b[ks:ke]) == key && b[i] == '"' {
			e, ok := jsonscan.StringEnd(b, i)
			if !ok {
				return nil, false
			}
			return b[i+1 : e-1], true
		}
		if i, ok = jsonscan.ValueEnd(b, i); !ok {
			return nil, false
		}
		i = jsonscan.SkipWS(b, i)
		if i >= len(b) || b[i] != ',' {
			return nil, false
		}
		i++
	}
}

// decodedLen returns the length in bytes of the JSON string contents raw
// once unescaped (what a parser hands the tokenizer; unpaired surrogates
// count as U+FFFD's 3 bytes).
func decodedLen(raw []byte) (int, bool) {
	n := 0
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			n++
			continue
		}
		i++
		if i >= len(raw) {
			return 0, false
		}
		if raw[i] != 'u' {
			n++
			continue
		}
		if i+4 >= len(raw) {
			return 0, false
		}
		r, ok := jsonscan.Hex4(raw[i+1 : i+5])
		if !ok {
			return 0, false
		}
		i += 4
		switch {
		case r < 0x80:
			n++
		case r < 0x800:
			n += 2
		case r >= 0xD800 && r < 0xDC00 && i+6 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u':
			if lo, ok := jsonscan.Hex4(raw[i+3 : i+7]); ok && lo >= 0xDC00 && lo < 0xE000 {
				n += 4
				i += 6
				continue
			}
			n += 3
		default:
			n += 3
		}
	}
	return n, true
}
