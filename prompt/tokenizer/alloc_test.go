//go:build !race

package tokenizer

import (
	"os"
	"runtime"
	"testing"
)

// TestEncodeAllocs: Encode allocates nothing in steady state, on English,
// on text needing NFC and added-token splits, and on the multilingual document.
func TestEncodeAllocs(t *testing.T) {
	english, err := os.ReadFile("testdata/english32k.txt")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("testdata/doc100k.txt")
	if err != nil {
		t.Fatal(err)
	}
	mixed := []byte("<|im_start|>user\ne\u0301 caf\u00e9 \xff 你好 😀 <|im_end|>\n" + string(doc[:4096]))
	for _, tn := range []string{"qwen3", "llama3", "deepseek_v3", "llama2"} {
		tk := realTokenizer(t, tn)
		for name, text := range map[string][]byte{"english32k": english, "mixed": mixed, "doc100k": doc} {
			dst := tk.Encode(nil, text)
			if n := testing.AllocsPerRun(20, func() { dst = tk.Encode(dst[:0], text) }); n != 0 {
				t.Errorf("%s %s: %v allocs per Encode, want 0", tn, name, n)
			}
			// Garbage collections do not take the scratch (a sync.Pool would).
			if n := testing.AllocsPerRun(3, func() {
				runtime.GC()
				runtime.GC()
				dst = tk.Encode(dst[:0], text)
			}); n != 0 {
				t.Errorf("%s %s: %v allocs per Encode after two GCs, want 0", tn, name, n)
			}
		}
	}
}
