package tokenizer

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// synthetic builds a byte-level tokenizer.json with no merges over the given
// pre-tokenizer Splits: enough to compare pre-tokenizers without real files.
func synthetic(t testing.TB, patterns ...string) *Tokenizer {
	t.Helper()
	vocab := map[string]int{}
	for b := 0; b < 256; b++ {
		vocab[string(byteToRune[b])] = b
	}
	var pre []any
	for _, p := range patterns {
		pre = append(pre, map[string]any{"type": "Split", "pattern": map[string]string{"Regex": p}, "behavior": "Isolated", "invert": false})
	}
	pre = append(pre, map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false})
	data, err := json.Marshal(map[string]any{
		"added_tokens":  []any{map[string]any{"id": 256, "content": "<|x|>", "special": true}},
		"normalizer":    map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": pre},
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{}},
	})
	if err != nil {
		t.Fatal(err)
	}
	tk, err := Parse(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// alphabet is what the random texts are made of: each class the patterns
// distinguish, and the characters at their edges.
var alphabet = []string{
	"a", "Z", "é", "ß", "s", "t", "S", "l", "L", "r", "e", "v", "m", "d", "'", "ſ",
	"0", "7", "١", "½", "²", "Ⅻ", "〇",
	" ", " ", " ", "\t", "\n", "\r", "\v", "\f", "\u00a0", "\u3000", "\u2028", "\u0085", "\u2003",
	".", ",", "!", "?", "-", "_", "(", ")", "$", "+", "<", "|", "~", "`", "\"", "\\", "/", "@",
	"你", "好", "中", "ひ", "カ", "・", "ー", "゛", "\u3099", "゠", "ア", "한", "م", "ر", "\u064e",
	"\u0301", "\u0308", "\u200d", "\u200b", "\ufeff", "😀", "👍", "🏽", "✨", "\x00", "\x1b", "\x7f",
	"A\u030a", "<|x|>",
}

func randomText(r *rand.Rand) []byte {
	var b strings.Builder
	n := r.IntN(40)
	for range n {
		b.WriteString(alphabet[r.IntN(len(alphabet))])
	}
	return []byte(b.String())
}

// TestFastPathMatchesRegexp: the hand-written pre-tokenizers split random
// texts exactly as regexp2 does with the patterns they stand for.
func TestFastPathMatchesRegexp(t *testing.T) {
	for name, patterns := range map[string][]string{
		"qwen":     {qwenPattern},
		"llama3":   {llama3Pattern},
		"deepseek": {dsDigits, dsCJK, dsMain},
	} {
		t.Run(name, func(t *testing.T) {
			tk := synthetic(t, patterns...)
			if tk.known == knownNone {
				t.Fatal("pattern not recognised as known")
			}
			sc := tk.newScratch().(*scratch)
			r := rand.New(rand.NewPCG(1, uint64(len(name))))
			iters := 20000
			if testing.Short() || raceEnabled {
				iters = 3000
			}
			for range iters {
				text := randomText(r)
				tk.generic = false
				fast := slices.Clone(tk.pretokenize(sc, text))
				tk.generic = true
				slow := tk.pretokenize(sc, text)
				if !slices.Equal(fast, slow) {
					t.Fatalf("%q: fast %v, regexp2 %v", text, pieces(text, fast), pieces(text, slow))
				}
			}
		})
	}
}

func pieces(text []byte, sp []span) []string {
	var out []string
	for _, p := range sp {
		out = append(out, string(text[p.s:p.e]))
	}
	return out
}

// TestInvalidUTF8 replaces maximal invalid subsequences with one U+FFFD each.
func TestInvalidUTF8(t *testing.T) {
	for in, want := range map[string]string{
		"a\xffb":              "a\uFFFDb",
		"\xe4\xbd":            "\uFFFD",
		"\xe4\xbdx":           "\uFFFDx",
		"\xed\xa0\x80":        "\uFFFD\uFFFD\uFFFD",
		"\xf0\x9f\x98":        "\uFFFD",
		"\xc0\xaf":            "\uFFFD\uFFFD",
		"\xf4\x90\x80\x80":    "\uFFFD\uFFFD\uFFFD\uFFFD",
		"ok \xf0\x9f\x98\x80": "ok 😀",
	} {
		if got := string(appendValid(nil, []byte(in))); got != want {
			t.Errorf("%q: got %q want %q", in, got, want)
		}
	}
}

// TestLoadErrors: unsupported components fail at load, naming the component.
func TestLoadErrors(t *testing.T) {
	base := func(mut func(m map[string]any)) []byte {
		m := map[string]any{"model": map[string]any{"type": "BPE", "vocab": map[string]int{"a": 0}, "merges": []string{}}}
		mut(m)
		b, _ := json.Marshal(m)
		return b
	}
	for name, c := range map[string]struct {
		data []byte
		want string
	}{
		"unigram":   {base(func(m map[string]any) { m["model"] = map[string]any{"type": "Unigram"} }), `model type "Unigram"`},
		"wordpiece": {base(func(m map[string]any) { m["model"] = map[string]any{"type": "WordPiece", "vocab": map[string]int{}} }), `model type "WordPiece"`},
		"bert norm": {base(func(m map[string]any) { m["normalizer"] = map[string]any{"type": "BertNormalizer"} }), `normalizer type "BertNormalizer"`},
		"regex repl": {base(func(m map[string]any) {
			m["normalizer"] = map[string]any{"type": "Replace", "pattern": map[string]string{"Regex": " +"}}
		}), "normalizer Replace"},
		"whitespace": {base(func(m map[string]any) { m["pre_tokenizer"] = map[string]any{"type": "Whitespace"} }), `pre_tokenizer type "Whitespace"`},
		"split invert": {base(func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Split", "pattern": map[string]string{"Regex": "x"}, "behavior": "Isolated", "invert": true}
		}), "pre_tokenizer Split: invert"},
		"split contig": {base(func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Split", "pattern": map[string]string{"Regex": "x"}, "behavior": "Contiguous"}
		}), `behavior "Contiguous"`},
		"metaspace+split": {base(func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{map[string]any{"type": "Metaspace"}, map[string]any{"type": "Split", "pattern": map[string]string{"Regex": "x"}, "behavior": "Isolated"}}}
		}), "Metaspace combined"},
		"metaspace scheme": {base(func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Metaspace", "prepend_scheme": "sometimes"}
		}), "prepend_scheme"},
		"digits":    {base(func(m map[string]any) { m["pre_tokenizer"] = map[string]any{"type": "Digits"} }), `pre_tokenizer type "Digits"`},
		"bert post": {base(func(m map[string]any) { m["post_processor"] = map[string]any{"type": "BertProcessing"} }), `post_processor type "BertProcessing"`},
		"bad merge": {base(func(m map[string]any) {
			m["model"] = map[string]any{"type": "BPE", "vocab": map[string]int{"a": 0}, "merges": []string{"a b"}}
		}), "merge 0"},
		"not json": {[]byte("{"), "tokenizer.json"},
	} {
		_, err := Parse(c.data, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, c.want)
		}
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("Load of a missing path succeeded")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), base(func(map[string]any) {}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"bos_token":"a","eos_token":{"content":"a"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tk, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := tk.BOS(); !ok || id != 0 {
		t.Errorf("BOS = %d, %v; want 0, true", id, ok)
	}
	if got := tk.Encode(nil, []byte("aa")); !slices.Equal(got, []uint32{0, 0}) {
		t.Errorf("Encode(aa) = %v", got)
	}
	if tk.Name() != dir {
		t.Errorf("Name = %q, want %q", tk.Name(), dir)
	}
}

// TestConcurrentEncode: goroutines sharing a tokenizer get the same ids.
func TestConcurrentEncode(t *testing.T) {
	tk := realTokenizer(t, "qwen3")
	_, texts := loadCorpus(t)
	want := make([][]uint32, len(texts))
	for i, tx := range texts {
		want[i] = tk.Encode(nil, tx)
	}
	done := make(chan error, 4)
	for g := range 4 {
		go func() {
			var dst []uint32
			for k := range 3 * len(texts) {
				i := (k + g) % len(texts)
				dst = tk.Encode(dst[:0], texts[i])
				if !slices.Equal(dst, want[i]) {
					done <- &mismatch{i}
					return
				}
			}
			done <- nil
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

type mismatch struct{ i int }

func (m *mismatch) Error() string {
	return "concurrent Encode differs on case " + string(rune('0'+m.i%10))
}

// TestSplitBehaviors: a literal Split under each of HF's delimiter behaviors.
func TestSplitBehaviors(t *testing.T) {
	text := []byte("a  b c ")
	sc := &scratch{}
	for b, want := range map[behavior][]string{
		isolated:           {"a", " ", " ", "b", " ", "c", " "},
		removed:            {"a", "b", "c"},
		mergedWithPrevious: {"a ", " ", "b ", "c "},
		mergedWithNext:     {"a", " ", " b", " c", " "},
	} {
		got := pieces(text, splitRegexp(sc, nil, split{literal: []byte(" "), behavior: b}, text, span{0, int32(len(text))}))
		if !slices.Equal(got, want) {
			t.Errorf("behavior %d: %q, want %q", b, got, want)
		}
	}
}

// FuzzFastPath: on any input (made valid UTF-8 as Encode does), each
// hand-written pre-tokenizer splits exactly as regexp2 with its pattern.
func FuzzFastPath(f *testing.F) {
	for _, s := range []string{"", "Hello world's  \n\n x", "你好123 ・カ", "a\u0301 😀\u200d👍 \r\n\t", "'S 'll 'ſ 12345"} {
		f.Add([]byte(s))
	}
	tks := []*Tokenizer{synthetic(f, qwenPattern), synthetic(f, llama3Pattern), synthetic(f, dsDigits, dsCJK, dsMain)}
	f.Fuzz(func(t *testing.T, b []byte) {
		text := appendValid(nil, b)
		for _, tk := range tks {
			sc := tk.newScratch().(*scratch)
			tk.generic = false
			fast := slices.Clone(tk.pretokenize(sc, text))
			tk.generic = true
			slow := tk.pretokenize(sc, text)
			tk.generic = false
			if !slices.Equal(fast, slow) {
				t.Fatalf("%q: fast %q, regexp2 %q", text, pieces(text, fast), pieces(text, slow))
			}
		}
	})
}

// TestCacheKey: the packed key of a word (up to 14 bytes) is unique to it.
func TestCacheKey(t *testing.T) {
	seen := map[[2]uint64]string{}
	r := rand.New(rand.NewPCG(3, 4))
	words := []string{"", "a", "a\x00", "\x00", "ab", "ba", "abc", "abcd", "abcde", "abcdefg", "abcdefgh", "abcdefghi", "abcdefghijklmn"}
	for range 20000 {
		b := make([]byte, r.IntN(cacheKeyMax+1))
		for i := range b {
			b[i] = "a\x00b\xff"[r.IntN(4)]
		}
		words = append(words, string(b))
	}
	for _, w := range words {
		k0, k1 := cacheKey([]byte(w)[:len(w):len(w)])
		// The fast path reads 16 bytes and masks what follows the word.
		buf := append([]byte(w), "\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8\xf7\xf6\xf5\xf4\xf3\xf2\xf1\xf0"...)
		if f0, f1 := cacheKey(buf[:len(w)]); f0 != k0 || f1 != k1 {
			t.Fatalf("%q: key %x %x with the text after it, %x %x without", w, f0, f1, k0, k1)
		}
		if k1&nMask != 0 {
			t.Fatalf("%q: key uses the count byte", w)
		}
		if prev, ok := seen[[2]uint64{k0, k1}]; ok && prev != w {
			t.Fatalf("%q and %q share a key", prev, w)
		}
		seen[[2]uint64{k0, k1}] = w
	}
}

// TestASCIILetters: the eight-byte letter and digit tests agree with \p{L}
// and [0-9] or non-ASCII on every byte value, in every lane.
func TestASCIILetters(t *testing.T) {
	for c := 0; c < 256; c++ {
		want := c < 0x80 && asciiClass[c]&cL != 0
		for lane := range 8 {
			x := uint64(0x2e2e2e2e2e2e2e2e) // '.' elsewhere
			x = x&^(0xff<<(8*lane)) | uint64(c)<<(8*lane)
			if got, want := digitsOrNonASCII(x)>>(8*lane+7)&1 == 1, c >= 0x80 || (c >= '0' && c <= '9'); got != want {
				t.Fatalf("byte %#x in lane %d: digit or non-ASCII %v, want %v", c, lane, got, want)
			}
			if digitsOrNonASCII(x)&^(0x80<<(8*lane)) != 0 {
				t.Fatalf("byte %#x in lane %d: other lanes marked as digits", c, lane)
			}
			m := asciiLetters(x)
			if got := m>>(8*lane+7)&1 == 1; got != want {
				t.Fatalf("byte %#x in lane %d: letter %v, want %v", c, lane, got, want)
			}
			if m&^(0x80<<(8*lane)) != 0 {
				t.Fatalf("byte %#x in lane %d: other lanes marked: %#x", c, lane, m)
			}
		}
	}
}
