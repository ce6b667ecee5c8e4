package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// cutAlphabet: words, runs of spaces, the characters a cut depends on (▁,
// '>' which ends Gemma 3's merge ('>', '▁</'), '<', '/'), characters without
// a token of their own (byte fallback), newlines and added tokens.
var cutAlphabet = []string{
	"a", "the", "e", "x", "Hello", " ", " ", "  ", "   ", "\u2581", "\u2581\u2581", ">", "<", "</", "/", "'", ".", "\n", "\t",
	"你", "😀", "\u0301", "\U0001F9EC", "\ufffd", "0", "12", "<s>", "</s>", "<unk>",
}

func cutText(r *rand.Rand) []byte {
	var b strings.Builder
	for range r.IntN(60) {
		b.WriteString(cutAlphabet[r.IntN(len(cutAlphabet))])
	}
	return []byte(b.String())
}

// encodeWhole encodes text with the words merged whole (no cuts), the model
// the cuts must agree with.
func encodeWhole(tk *Tokenizer, text []byte) []uint32 {
	saved := tk.cut
	tk.cut = nil
	defer func() { tk.cut = saved }()
	return tk.Encode(nil, text)
}

// TestCutMatchesWhole: cutting a Metaspace word before ▁ gives the ids of
// merging it whole, on the corpus and on random texts, for the tokenizers
// that cut (Llama 2, its Metaspace variants, Gemma 3).
func TestCutMatchesWhole(t *testing.T) {
	_, texts := loadCorpus(t)
	for _, tn := range []string{"llama2", "llama2-metaspace-first", "llama2-metaspace-always-split", "gemma3"} {
		t.Run(tn, func(t *testing.T) {
			tk := realTokenizer(t, tn)
			if tk.cut == nil {
				t.Fatal("no cutter: Load did not derive one")
			}
			r := rand.New(rand.NewPCG(5, 6))
			all := slices.Clone(texts)
			n := 3000
			if testing.Short() || raceEnabled {
				n = 300
			}
			for range n {
				all = append(all, cutText(r))
			}
			for _, text := range all {
				if raceEnabled && len(text) > 4096 {
					continue
				}
				got, want := tk.Encode(nil, text), encodeWhole(tk, text)
				if !slices.Equal(got, want) {
					d := firstDiff(got, want)
					t.Fatalf("%q: cut %v, whole %v (first difference at %d)", text, around(got, d), around(want, d), d)
				}
			}
		})
	}
}

// TestCutterRules: what Load derives from the merges, on small models.
func TestCutterRules(t *testing.T) {
	// Llama 2: only ▁ ends a left operand joined to a ▁-word.
	if c := realTokenizer(t, "llama2").cut; c == nil || !slices.Equal(c.bad, []rune{'\u2581'}) || c.vocabOnly {
		t.Errorf("llama2 cutter %+v, want bad [▁] and any character", c)
	}
	// Gemma 3 merges ('>', '▁</'): '>' is also how a byte-fallback token
	// (<0xXX>) ends, so a character without a token must not end a chunk.
	if c := realTokenizer(t, "gemma3").cut; c == nil || !slices.Contains(c.bad, '>') || !c.vocabOnly {
		t.Errorf("gemma3 cutter %+v, want '>' in bad and vocabOnly", c)
	}
	tk := realTokenizer(t, "llama2")
	for _, tc := range []struct {
		left string
		want bool
	}{{"\u2581the", true}, {"\u2581", false}, {"a\u2581", false}, {"x", true}, {"😀", true}} {
		if got := tk.cut.cuttable(tk, []byte(tc.left)); got != tc.want {
			t.Errorf("llama2 cuttable(%q) = %v, want %v", tc.left, got, tc.want)
		}
	}
	if tk := realTokenizer(t, "qwen3"); tk.cut != nil {
		t.Errorf("qwen3 (byte-level) has a cutter")
	}
}

// FuzzCut: on any input, Llama 2 with cuts gives the ids of merging whole.
func FuzzCut(f *testing.F) {
	for _, s := range []string{"", "Hello world", "a  b\n\n c", "x > </s> 😀 ▁▁y", "你好 世界"} {
		f.Add([]byte(s))
	}
	tk := realTokenizer(f, "llama2")
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := tk.Encode(nil, b), encodeWhole(tk, b); !slices.Equal(got, want) {
			t.Fatalf("%q: cut %v, whole %v", b, got, want)
		}
	})
}
