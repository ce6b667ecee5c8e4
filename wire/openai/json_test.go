package openai

import (
	"encoding/json"
	"testing"
)

func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "plain", `q"uo\te`, "tab\tnl\ncr\r", "bell\a vt\v nul\x00 esc\x1b del\x7f",
		"ünïcödé 日本 😀", "bad \xff\xfe utf8", "\u2028 line sep"} {
		b := AppendJSONString(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Errorf("%q -> %s: not JSON: %v", s, b, err)
			continue
		}
		want := string([]rune(s)) // invalid bytes become U+FFFD, as in JSON decoding
		if got != want {
			t.Errorf("%q -> %s decodes to %q, want %q", s, b, got, want)
		}
	}
	// Error bodies carry user text (paths, ids): they must stay JSON.
	b := AppendError(nil, StatusError(404, "no such endpoint: /\a\x00"))
	if !json.Valid(b) {
		t.Errorf("AppendError wrote invalid JSON: %s", b)
	}
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "a\"b", "\x00\xff", "日本"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := AppendJSONString(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%q -> %s: %v", s, b, err)
		}
		if got != string([]rune(s)) {
			t.Fatalf("%q -> %q", s, got)
		}
	})
}
