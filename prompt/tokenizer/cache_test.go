package tokenizer

import (
	"os"
	"testing"
	"unsafe"
)

// TestCacheEntrySizes: a short entry is half a cache line, a long one two.
func TestCacheEntrySizes(t *testing.T) {
	if n := unsafe.Sizeof(cacheEntry{}); n != 32 {
		t.Errorf("cacheEntry is %d bytes, want 32", n)
	}
	if n := unsafe.Sizeof(longEntry{}); n != 128 {
		t.Errorf("longEntry is %d bytes, want 128", n)
	}
}

// TestWarmCacheMerges: once the benchmark prompt has been encoded, encoding
// it again merges only the words no cache entry holds (over 64 bytes, or
// more than 13 ids): the set hashes spread the words (a weak hash left
// 45-180 short words thrashing their sets), and the cut Llama 2 chunks fit
// the long cache.
func TestWarmCacheMerges(t *testing.T) {
	text, err := os.ReadFile("testdata/english32k.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, tn := range []string{"qwen3", "llama3", "deepseek_v3", "llama2"} {
		tk := realTokenizer(t, tn)
		sc := tk.newScratch().(*scratch)
		tk.encode(sc, nil, text)
		var merged []string
		mergeHook = func(w []byte) { merged = append(merged, string(w)) }
		tk.encode(sc, nil, text)
		mergeHook = nil
		uncacheable := 0
		for _, w := range merged {
			if len(w) > len(longEntry{}.b) || len(tk.merge(&scratch{}, nil, []byte(w))) > len(longEntry{}.ids) {
				uncacheable++
			}
		}
		if len(merged) != uncacheable {
			t.Errorf("%s: %d words merged with a warm cache, %d of them too long for it", tn, len(merged), uncacheable)
		}
	}
}
