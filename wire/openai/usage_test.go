package openai

import (
	"encoding/json"
	"testing"
)

func TestCachedTokens(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
		ok   bool
	}{
		{`{"usage":{"prompt_tokens":40,"prompt_tokens_details":{"cached_tokens":32}}}`, 32, true},
		{`{"usage":{"prompt_tokens_details": { "audio_tokens" : null , "cached_tokens" : 0 }}}`, 0, true},
		{`{"usage":{"prompt_tokens_details":{"cached_tokens":null}}}`, 0, false},
		{`{"usage":{"prompt_tokens_details":null}}`, 0, false},
		{`{"usage":null}`, 0, false},
		{`{"usage":{"prompt_tokens":4}}`, 0, false},
		{`{"usage":{"prompt_tokens_details":{"cached_tokens":-3}}}`, 0, false},
		{`{"usage":{"prompt_tokens_details":{"cached_tokens":1.5}}}`, 0, false},
		{`{"usage":{"prompt_tokens_details":{"cached_tokens":012}}}`, 0, false},
		{`{"usage":{"prompt_tokens_details":{"cached_tokens":99999999999999}}}`, 0, false},
		{`{"usage":{"prompt_tokens_details":{"cached_tokens":16`, 0, false},
		// A key inside generated text is escaped and does not count.
		{`{"choices":[{"text":"\"prompt_tokens_details\":{\"cached_tokens\":7}"}],"usage":null}`, 0, false},
		{`{"choices":[{"text":"\"prompt_tokens_details\":{\"cached_tokens\":7}"}],"usage":{"prompt_tokens_details":{"cached_tokens":48}}}`, 48, true},
		{`{"usage":{"prompt_tokens_details":{"x":{"cached_tokens":5},"cached_tokens":6}}}`, 6, true},
	} {
		got, ok := CachedTokens([]byte(c.in))
		if got != c.want || ok != c.ok {
			t.Errorf("CachedTokens(%s) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestIsUsageChunk(t *testing.T) {
	h := Header{ID: "c", Model: "m", Created: 1}
	chunk := AppendUsageChunk(nil, h, Usage{PromptTokens: 40, CompletionTokens: 2, CachedTokens: 32})
	data := chunk[len("data: ") : len(chunk)-2]
	if !IsUsageChunk(data) {
		t.Fatalf("IsUsageChunk(%s) = false", data)
	}
	if n, ok := CachedTokens(data); n != 32 || !ok {
		t.Fatalf("CachedTokens = %d, %v", n, ok)
	}
	var v map[string]any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("usage chunk is not JSON: %v", err)
	}
	u := Usage{PromptTokens: 1, CachedTokens: 0}
	last := AppendChunk(nil, h, "x", "length", &u)
	if IsUsageChunk(last[len("data: ") : len(last)-2]) {
		t.Errorf("a chunk with a choice is not the usage chunk")
	}
	if !IsUsageChunk([]byte(`{"id":"x","choices": [ ],"usage":{"prompt_tokens_details":{"cached_tokens":3}}}`)) {
		t.Errorf("spaces around the empty choices")
	}
	if IsUsageChunk([]byte(`{"id":"x","choices":[],"usage":null}`)) {
		t.Errorf("a usage chunk without details carries nothing to read")
	}
}

func TestAppendIncludeUsage(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"prompt":"a","stream":true}`, `{"prompt":"a","stream":true,"stream_options":{"include_usage":true}}`},
		{"{\"prompt\":\"a\"}\n", "{\"prompt\":\"a\",\"stream_options\":{\"include_usage\":true}}\n"},
		{`{ }`, `{ "stream_options":{"include_usage":true}}`},
	} {
		got, ok := AppendIncludeUsage(nil, []byte(c.in))
		if !ok || string(got) != c.want {
			t.Errorf("AppendIncludeUsage(%q) = %q, %v; want %q", c.in, got, ok, c.want)
		}
	}
	if got, ok := AppendIncludeUsage([]byte("x"), []byte(`[1]`)); ok || string(got) != "x" {
		t.Errorf("not an object: %q, %v", got, ok)
	}
}

// FuzzCachedTokens checks that the scanners never panic and agree with a
// JSON decoder on valid bodies that carry a count.
func FuzzCachedTokens(f *testing.F) {
	f.Add([]byte(`{"usage":{"prompt_tokens_details":{"cached_tokens":32}}}`))
	f.Add([]byte(`{"choices":[],"usage":{"prompt_tokens_details":{"cached_tokens":0}}}`))
	f.Add([]byte(`{"usage":{"prompt_tokens_details":{"a":[1,{"b":"}"}],"cached_tokens":5}}}`))
	f.Add([]byte(`{"x":"\\"prompt_tokens_details\":{\"cached_tokens\":1}"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, ok := CachedTokens(b)
		IsUsageChunk(b)
		if out, ok2 := AppendIncludeUsage(nil, b); ok2 && json.Valid(b) {
			if !json.Valid(out) {
				t.Fatalf("AppendIncludeUsage(%q) = %q, not JSON", b, out)
			}
		}
		if !ok || !json.Valid(b) {
			return
		}
		var v struct {
			Usage struct {
				Details struct {
					Cached *int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if json.Unmarshal(b, &v) != nil || v.Usage.Details.Cached == nil {
			return // details elsewhere than usage, or a duplicate key
		}
		if *v.Usage.Details.Cached != n {
			t.Fatalf("CachedTokens(%q) = %d, JSON says %d", b, n, *v.Usage.Details.Cached)
		}
	})
}
