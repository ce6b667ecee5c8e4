package openai

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// words is a tokenizer that makes one token of each space-separated word
// (and of each space) and counts the bytes it was given: a stand-in for a
// real tokenizer whose cost grows with the text.
type words struct{ seen *int }

func (w words) Encode(dst []uint32, text []byte) []uint32 {
	*w.seen += len(text)
	for len(text) > 0 {
		i := bytes.IndexByte(text, ' ')
		switch {
		case i < 0:
			i = len(text)
		case i == 0:
			i = 1
		}
		dst = append(dst, uint32(len(text[:i])))
		text = text[i:]
	}
	return dst
}

func (words) Name() string { return "words" }

// With a tokenizer other than bytes, a prompt far over the limit is
// tokenized piece by piece and tokenizing stops at the first piece past
// it: a 15 MB prompt costs about one piece, not 15 MB. A long text within
// the limit gets exactly the tokens of encoding it whole.
func TestTokenLimitStopsTokenizingEarly(t *testing.T) {
	seen := 0
	tok := words{&seen}
	long := strings.Repeat("lorem ipsum ", 15<<20/12)
	body := fmt.Sprintf(`{"prompt":%q}`, long)
	var r Request
	r.TokenLimit = 1000
	if err := Parse([]byte(body), false, tok, &r); err != nil {
		t.Fatal(err)
	}
	if !r.TooLong || r.AtLeast <= 1000 {
		t.Fatalf("15 MB prompt over a 1,000-token limit: TooLong %v AtLeast %d", r.TooLong, r.AtLeast)
	}
	if seen > 2*limitChunk {
		t.Errorf("tokenized %d bytes of a prompt past its limit; want at most %d", seen, 2*limitChunk)
	}

	// Within the limit: 200 KiB in few tokens (long words), cut into
	// pieces to decide, then encoded whole.
	within := strings.Repeat(strings.Repeat("x", 999)+" ", 200)
	body = fmt.Sprintf(`{"prompt":%q}`, within)
	r.Reset()
	if err := Parse([]byte(body), false, tok, &r); err != nil {
		t.Fatal(err)
	}
	whole := tok.Encode(nil, []byte(within))
	if r.TooLong || !slices.Equal(r.Tokens, whole) {
		t.Errorf("a prompt within the limit: TooLong %v, %d tokens, want the %d of encoding it whole", r.TooLong, len(r.Tokens), len(whole))
	}
}

// With the bytes tokenizer a text prompt, token-id array or chat over the
// limit is refused by its count.
func TestTokenLimitBytes(t *testing.T) {
	var r Request
	r.TokenLimit = 1000
	for name, body := range map[string]string{
		"escaped":   fmt.Sprintf(`{"prompt":"%s"}`, strings.Repeat(`\u00e9`, 600)), // 1,200 bytes once decoded
		"token ids": `{"prompt":[` + strings.Repeat("1,", 1000) + `1]}`,
		"chat":      fmt.Sprintf(`{"messages":[{"role":"user","content":%q}]}`, strings.Repeat("b", 1001)),
	} {
		r.Reset()
		if err := Parse([]byte(body), name == "chat", BytesTokenizer{}, &r); err != nil || !r.TooLong || r.AtLeast <= 1000 {
			t.Errorf("%s over the limit: err %v TooLong %v AtLeast %d", name, err, r.TooLong, r.AtLeast)
		}
	}
	r.Reset()
	if err := Parse([]byte(fmt.Sprintf(`{"prompt":"%s"}`, strings.Repeat(`\u00e9`, 500))), false, BytesTokenizer{}, &r); err != nil || r.TooLong || len(r.Tokens) != 1000 {
		t.Errorf("1,000 bytes of escaped prompt at a 1,000 limit: err %v TooLong %v tokens %d", err, r.TooLong, len(r.Tokens))
	}
}

func TestTopLevelString(t *testing.T) {
	for body, want := range map[string]string{
		`{"prompt":"abc"}`: "abc",
		` { "a" : [1, {"prompt":"no"}, "x\"y"], "b": {"c": "]"}, "n": -1.5e3, "t": true, "prompt" : "h\"i" }`: `h\"i`,
		`{"prompt":["abc"]}`:   "",
		`{"x":"prompt"}`:       "",
		`[1]`:                  "",
		`{"a":1 "prompt":"x"}`: "",
	} {
		got, ok := topLevelString([]byte(body), "prompt")
		if string(got) != want || ok != (want != "") {
			t.Errorf("topLevelString(%s) = %q, %v; want %q", body, got, ok, want)
		}
	}
	for raw, want := range map[string]int{`abc`: 3, `\n\"`: 2, `\u00e9`: 2, `\u20ac`: 3, `\ud83d\ude00`: 4, `\ud83d`: 3, `é`: 2} {
		if n, ok := decodedLen([]byte(raw)); !ok || n != want {
			t.Errorf("decodedLen(%s) = %d, %v; want %d", raw, n, ok, want)
		}
	}
}
