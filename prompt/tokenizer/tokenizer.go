package tokenizer

import (
	"bytes"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"
)

// Tokenizer is a loaded Hugging Face BPE tokenizer. It is immutable after Load
// and safe for concurrent use; each call takes its scratch from a sync.Pool.
type Tokenizer struct {
	name string

	norms     []normStep
	splits    []split // Split pre-tokenizers, applied in sequence
	metaspace *metaspace
	known     knownKind
	// generic forces the regexp2 pre-tokenizer even for a known pattern (tests
	// and the measurement in doc.go).
	generic bool
	noCache bool // tests: bypass the word cache

	byteLevel    bool
	ignoreMerges bool
	byteFallback bool
	fuseUnk      bool
	unk          int64 // -1: none
	// byteID is the token of each byte: the byte-level alphabet's character in
	// byte-level mode, <0xXX> with byte fallback otherwise.
	byteID    [256]uint32
	vocab     map[string]uint32 // raw bytes (byte-level spellings decoded) -> id
	vocabSize int
	merges    pairTable
	cut       *cutter // nil: words are merged whole

	rawAdded  addedSet // matched on the input before normalization
	normAdded addedSet // matched on the normalized text
	addedByID map[string]uint32

	prefix, suffix []uint32 // what the post-processor adds with special tokens
	// postFromConfig: prefix and suffix come from tokenizer_config.json's
	// add_bos_token/add_eos_token (transformers), not tokenizer.json.
	postFromConfig bool
	bos, eos       int64

	// Scratches: a few kept for good in free (a sync.Pool drops its items at
	// every other GC, and a scratch with its word caches is ~530 KiB), more in
	// pool under bursts.
	free chan *scratch
	pool sync.Pool
}

func (t *Tokenizer) getScratch() *scratch {
	select {
	case sc := <-t.free:
		return sc
	default:
		return t.pool.Get().(*scratch)
	}
}

func (t *Tokenizer) putScratch(sc *scratch) {
	select {
	case t.free <- sc:
	default:
		t.pool.Put(sc)
	}
}

// metaspace is the Metaspace pre-tokenizer: spaces become the replacement,
// which is prepended (always, or to the input's first segment), and, with
// split, each replacement starts a piece.
type metaspace struct {
	repl   []byte
	scheme string // always, first, never
	split  bool
}

func (m *metaspace) apply(sc *scratch, text []byte, first bool) []byte {
	out := sc.mbuf[:0]
	if (m.scheme == "always" || (m.scheme == "first" && first)) && !(len(text) > 0 && text[0] == ' ') && !bytes.HasPrefix(text, m.repl) {
		out = append(out, m.repl...)
	}
	for _, c := range text {
		if c == ' ' {
			out = append(out, m.repl...)
		} else {
			out = append(out, c)
		}
	}
	sc.mbuf = out
	return out
}

type split struct {
	pattern  string
	re       *regexp2.Regexp // nil: literal
	literal  []byte
	behavior behavior
}

// behavior is what a Split does with a match (HF's SplitDelimiterBehavior).
type behavior uint8

const (
	isolated behavior = iota
	mergedWithPrevious
	mergedWithNext
	removed
)

type normKind uint8

const (
	normUnicode normKind = iota
	normPrepend
	normReplace
)

type normStep struct {
	kind    normKind
	form    norm.Form
	s, from []byte
}

func formOf(name string) norm.Form {
	switch name {
	case "NFD":
		return norm.NFD
	case "NFKC":
		return norm.NFKC
	case "NFKD":
		return norm.NFKD
	}
	return norm.NFC
}

type span struct{ s, e int32 }

// scratch is one call's working memory, reused through the pool.
type scratch struct {
	clean  []byte
	nbuf   [2][]byte
	pieces []span
	tmp    []span
	syms   []sym
	heap   []mergeItem
	runes  []rune
	mbuf   []byte
	marks  []mark
	roff   []int32
	cache  []cacheEntry
	long   []longEntry
	iter   norm.Iter
}

func (t *Tokenizer) newScratch() any {
	return &scratch{cache: make([]cacheEntry, cacheSize), long: make([]longEntry, longSize)}
}

// Name implements openai.Tokenizer: the path the tokenizer was loaded from.
func (t *Tokenizer) Name() string { return t.name }

// VocabSize is one more than the largest id of the model's vocab (added tokens
// may lie beyond it).
func (t *Tokenizer) VocabSize() int { return t.vocabSize }

// BOS returns the id of tokenizer_config.json's bos_token, if any.
func (t *Tokenizer) BOS() (uint32, bool) { return uint32(t.bos), t.bos >= 0 }

// EOS returns the id of tokenizer_config.json's eos_token, if any.
func (t *Tokenizer) EOS() (uint32, bool) { return uint32(t.eos), t.eos >= 0 }

// TokenID returns the id of an added token or vocab entry spelled s.
func (t *Tokenizer) TokenID(s string) (uint32, bool) {
	if id, ok := t.addedByID[s]; ok {
		return id, true
	}
	return t.vocabToken(s)
}

// Encode appends the ids of text to dst as HF tokenizers' encode with
// add_special_tokens=false does: added and special tokens written in the text
// are matched, nothing is added around it. Invalid UTF-8 is read as U+FFFD
// (one per maximal invalid subsequence, as WHATWG and Python decode it).
// It allocates nothing once dst has room and the pool is warm. It may write
// dst's spare capacity past the ids it appends (a cached word's ids are
// copied four at a time).
func (t *Tokenizer) Encode(dst []uint32, text []byte) []uint32 {
	sc := t.getScratch()
	dst = t.encode(sc, dst, text)
	t.putScratch(sc)
	return dst
}

// EncodeSpecial is Encode with add_special_tokens=true, what vLLM does to a
// text prompt of /v1/completions: the tokens the post-processor puts around a
// single sequence are added. The post-processor is tokenizer.json's
// (TemplateProcessing), except for the Llama and Gemma tokenizer classes
// whose tokenizer_config.json sets add_bos_token/add_eos_token: transformers
// rebuilds their post-processor from those (DeepSeek V3's adds the BOS its
// tokenizer.json does not).
func (t *Tokenizer) EncodeSpecial(dst []uint32, text []byte) []uint32 {
	dst = append(dst, t.prefix...)
	dst = t.Encode(dst, text)
	return append(dst, t.suffix...)
}

func (t *Tokenizer) encode(sc *scratch, dst []uint32, text []byte) []uint32 {
	if !utf8.Valid(text) {
		sc.clean = appendValid(sc.clean[:0], text)
		text = sc.clean
	}
	last := 0
	for i := t.rawAdded.next(text, 0); i < len(text); i = t.rawAdded.next(text, i+1) {
		a, s, e, ok := t.rawAdded.match(text, i, last)
		if !ok {
			continue
		}
		dst = t.encodeGap(sc, dst, text[last:s], last == 0)
		dst = append(dst, a.id)
		last = e
		i = e - 1
	}
	return t.encodeGap(sc, dst, text[last:], last == 0)
}

// encodeGap normalizes the text between two raw added tokens, splits it on
// the normalized added tokens and encodes the rest; first: the text starts
// the input (Metaspace's prepend_scheme "first").
func (t *Tokenizer) encodeGap(sc *scratch, dst []uint32, text []byte, first bool) []uint32 {
	if len(text) == 0 {
		return dst
	}
	text = t.normalize(sc, text)
	if t.normAdded.byText == nil {
		return t.encodeSegment(sc, dst, text, first)
	}
	last := 0
	for i := t.normAdded.next(text, 0); i < len(text); i = t.normAdded.next(text, i+1) {
		a, s, e, ok := t.normAdded.match(text, i, last)
		if !ok {
			continue
		}
		dst = t.encodeSegment(sc, dst, text[last:s], first && last == 0)
		dst = append(dst, a.id)
		last = e
		i = e - 1
	}
	return t.encodeSegment(sc, dst, text[last:], first && last == 0)
}

// match tries the added tokens at text[i:]; s and e are the bytes the match
// takes (lstrip/rstrip widen it over white space, never before floor).
func (a *addedSet) match(text []byte, i, floor int) (addedToken, int, int, bool) {
	for _, l := range a.lengths[text[i]] {
		if i+l > len(text) {
			continue
		}
		tok, ok := a.byText[string(text[i:i+l])]
		if !ok {
			continue
		}
		s, e := i, i+l
		if tok.singleWord {
			if r, _ := utf8.DecodeLastRune(text[:s]); s > 0 && isWordRune(r) {
				continue
			}
			if r, _ := utf8.DecodeRune(text[e:]); e < len(text) && isWordRune(r) {
				continue
			}
		}
		if tok.lstrip {
			for s > floor {
				r, n := utf8.DecodeLastRune(text[floor:s])
				if !unicode.IsSpace(r) {
					break
				}
				s -= n
			}
		}
		if tok.rstrip {
			for e < len(text) {
				r, n := utf8.DecodeRune(text[e:])
				if !unicode.IsSpace(r) {
					break
				}
				e += n
			}
		}
		return tok, s, e, true
	}
	return addedToken{}, 0, 0, false
}

func isWordRune(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }

// normalize applies the normalizers; the result is text or a scratch buffer.
func (t *Tokenizer) normalize(sc *scratch, text []byte) []byte {
	cur := 0
	for _, n := range t.norms {
		out := sc.nbuf[cur][:0]
		switch n.kind {
		case normUnicode:
			if n.form.QuickSpan(text) == len(text) {
				continue
			}
			// norm.Iter in the scratch: Form.Append allocates its buffer.
			sc.iter.Init(n.form, text)
			for !sc.iter.Done() {
				out = append(out, sc.iter.Next()...)
			}
		case normPrepend:
			if len(text) == 0 {
				continue
			}
			out = append(append(out, n.s...), text...)
		case normReplace:
			if bytes.Index(text, n.from) < 0 {
				continue
			}
			for {
				j := bytes.Index(text, n.from)
				if j < 0 {
					out = append(out, text...)
					break
				}
				out = append(append(out, text[:j]...), n.s...)
				text = text[j+len(n.from):]
			}
		}
		sc.nbuf[cur] = out
		text = out
		cur ^= 1
	}
	return text
}

// encodeSegment pre-tokenizes text and runs BPE on each piece.
func (t *Tokenizer) encodeSegment(sc *scratch, dst []uint32, text []byte, first bool) []uint32 {
	if len(text) == 0 {
		return dst
	}
	if m := t.metaspace; m != nil {
		text = m.apply(sc, text, first)
	}
	pieces := t.pretokenize(sc, text)
	// The capacity stops at the text's end: bpeChunk reads up to 16 bytes
	// from a word's start within it.
	if t.cut == nil {
		for _, p := range pieces {
			dst = t.bpeChunk(sc, dst, text[p.s:p.e:len(text)])
		}
		return dst
	}
	for _, p := range pieces {
		dst = t.bpeCut(sc, dst, text[p.s:p.e:len(text)])
	}
	return dst
}

// appendValid appends b with each maximal invalid subsequence replaced by
// U+FFFD (Unicode's "substitution of maximal subparts", what WHATWG's
// TextDecoder and Python's errors="replace" do).
func appendValid(dst, b []byte) []byte {
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			dst = append(dst, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || n != 1 {
			dst = append(dst, b[i:i+n]...)
			i += n
			continue
		}
		dst = append(dst, "\uFFFD"...)
		i += maximalSubpart(b[i:])
	}
	return dst
}

// maximalSubpart is the length of the invalid sequence starting at b[0]: the
// lead byte and the continuation bytes that could still have completed it.
func maximalSubpart(b []byte) int {
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(b); k++ {
		x := b[n]
		if x < lo || x > hi {
			break
		}
		lo, hi = 0x80, 0xBF
		n++
	}
	return n
}
