package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// Load reads a Hugging Face tokenizer from path: a tokenizer.json file, or a
// directory holding tokenizer.json (and optionally tokenizer_config.json, read
// for the bos/eos token names). A component this package does not implement
// fails here with an error naming it.
func Load(path string) (*Tokenizer, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	file, dir := path, filepath.Dir(path)
	if st.IsDir() {
		dir = path
		file = filepath.Join(path, "tokenizer.json")
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var cfg []byte
	if c, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json")); err == nil {
		cfg = c
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	t, err := Parse(data, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	t.name = path
	return t, nil
}

type jsonAdded struct {
	ID         uint32 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type jsonComponent struct {
	Type string `json:"type"`
	// Sequence
	Normalizers   []json.RawMessage `json:"normalizers"`
	Pretokenizers []json.RawMessage `json:"pretokenizers"`
	Processors    []json.RawMessage `json:"processors"`
	// Prepend
	Prepend string `json:"prepend"`
	// Replace, Split
	Pattern *struct {
		String *string `json:"String"`
		Regex  *string `json:"Regex"`
	} `json:"pattern"`
	Content  string `json:"content"`
	Behavior string `json:"behavior"`
	Invert   bool   `json:"invert"`
	// ByteLevel, Metaspace
	AddPrefixSpace *bool  `json:"add_prefix_space"`
	UseRegex       *bool  `json:"use_regex"`
	Replacement    string `json:"replacement"`
	PrependScheme  string `json:"prepend_scheme"`
	Split          *bool  `json:"split"`
	// TemplateProcessing
	Single []struct {
		SpecialToken *struct {
			ID string `json:"id"`
		} `json:"SpecialToken"`
		Sequence *struct {
			ID string `json:"id"`
		} `json:"Sequence"`
	} `json:"single"`
	SpecialTokens map[string]struct {
		IDs []uint32 `json:"ids"`
	} `json:"special_tokens"`
}

type jsonModel struct {
	Type                    string            `json:"type"`
	Dropout                 *float64          `json:"dropout"`
	UnkToken                *string           `json:"unk_token"`
	ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
	FuseUnk                 bool              `json:"fuse_unk"`
	ByteFallback            bool              `json:"byte_fallback"`
	IgnoreMerges            bool              `json:"ignore_merges"`
	Vocab                   map[string]uint32 `json:"vocab"`
	Merges                  json.RawMessage   `json:"merges"`
}

type jsonFile struct {
	AddedTokens   []jsonAdded     `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Model         json.RawMessage `json:"model"`
}

// Parse builds a tokenizer from the contents of tokenizer.json and, when
// config is not nil, tokenizer_config.json.
func Parse(data, config []byte) (*Tokenizer, error) {
	var f jsonFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	t := &Tokenizer{name: "tokenizer.json", bos: -1, eos: -1}
	if err := t.loadNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if err := t.loadPreTokenizer(f.PreTokenizer, 0); err != nil {
		return nil, err
	}
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(f.Model, &head); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if head.Type != "BPE" {
		return nil, fmt.Errorf("unsupported model type %q (supported: BPE)", head.Type)
	}
	var m jsonModel
	if err := json.Unmarshal(f.Model, &m); err != nil {
		return nil, fmt.Errorf("model BPE: %w", err)
	}
	if t.metaspace != nil && (len(t.splits) > 0 || t.byteLevel) {
		return nil, fmt.Errorf("pre_tokenizer: Metaspace combined with Split or ByteLevel is not supported")
	}
	if err := t.loadModel(&m); err != nil {
		return nil, err
	}
	if err := t.loadPost(f.PostProcessor); err != nil {
		return nil, err
	}
	t.loadAdded(f.AddedTokens)
	if config != nil {
		if err := t.loadConfig(config); err != nil {
			return nil, fmt.Errorf("tokenizer_config.json: %w", err)
		}
	}
	t.known = t.knownPattern()
	t.pool.New = func() any { return t.newScratch() }
	t.free = make(chan *scratch, 2*runtime.GOMAXPROCS(0))
	return t, nil
}

func isNull(raw json.RawMessage) bool {
	r := bytes.TrimSpace(raw)
	return len(r) == 0 || string(r) == "null"
}

func (t *Tokenizer) loadNormalizer(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var c jsonComponent
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("normalizer: %w", err)
	}
	switch c.Type {
	case "Sequence":
		for _, n := range c.Normalizers {
			if err := t.loadNormalizer(n); err != nil {
				return err
			}
		}
		return nil
	case "NFC", "NFD", "NFKC", "NFKD":
		t.norms = append(t.norms, normStep{kind: normUnicode, form: formOf(c.Type)})
		return nil
	case "Prepend":
		t.norms = append(t.norms, normStep{kind: normPrepend, s: []byte(c.Prepend)})
		return nil
	case "Replace":
		if c.Pattern == nil || c.Pattern.String == nil {
			return fmt.Errorf("normalizer Replace: only a String pattern is supported (a Regex pattern is not)")
		}
		if *c.Pattern.String == "" {
			return fmt.Errorf("normalizer Replace: empty pattern")
		}
		t.norms = append(t.norms, normStep{kind: normReplace, from: []byte(*c.Pattern.String), s: []byte(c.Content)})
		return nil
	}
	return fmt.Errorf("unsupported normalizer type %q (supported: NFC, NFD, NFKC, NFKD, Prepend, Replace, Sequence)", c.Type)
}

func (t *Tokenizer) loadPreTokenizer(raw json.RawMessage, depth int) error {
	if isNull(raw) {
		return nil
	}
	var c jsonComponent
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("pre_tokenizer: %w", err)
	}
	switch c.Type {
	case "Sequence":
		for _, p := range c.Pretokenizers {
			if err := t.loadPreTokenizer(p, depth+1); err != nil {
				return err
			}
		}
		return nil
	case "Split":
		var b behavior
		switch c.Behavior {
		case "Isolated":
			b = isolated
		case "MergedWithPrevious":
			b = mergedWithPrevious
		case "MergedWithNext":
			b = mergedWithNext
		case "Removed":
			b = removed
		default:
			return fmt.Errorf("pre_tokenizer Split: behavior %q is not supported (Isolated, MergedWithPrevious, MergedWithNext, Removed)", c.Behavior)
		}
		if c.Invert {
			return fmt.Errorf("pre_tokenizer Split: invert=true is not supported")
		}
		switch {
		case c.Pattern != nil && c.Pattern.Regex != nil:
			if err := t.addSplit(*c.Pattern.Regex); err != nil {
				return err
			}
		case c.Pattern != nil && c.Pattern.String != nil && *c.Pattern.String != "":
			t.splits = append(t.splits, split{literal: []byte(*c.Pattern.String)})
		default:
			return fmt.Errorf("pre_tokenizer Split: a Regex or non-empty String pattern is required")
		}
		t.splits[len(t.splits)-1].behavior = b
		return nil
	case "Metaspace":
		m := &metaspace{repl: []byte(c.Replacement), scheme: c.PrependScheme, split: c.Split == nil || *c.Split}
		if c.Replacement == "" {
			m.repl = []byte("\u2581")
		}
		if m.scheme == "" {
			m.scheme = "always"
			if c.AddPrefixSpace != nil && !*c.AddPrefixSpace {
				m.scheme = "never"
			}
		}
		if m.scheme != "always" && m.scheme != "first" && m.scheme != "never" {
			return fmt.Errorf("pre_tokenizer Metaspace: prepend_scheme %q is not always, first or never", m.scheme)
		}
		t.metaspace = m
		return nil
	case "ByteLevel":
		if c.AddPrefixSpace != nil && *c.AddPrefixSpace {
			return fmt.Errorf("pre_tokenizer ByteLevel: add_prefix_space=true is not supported")
		}
		t.byteLevel = true
		if c.UseRegex == nil || *c.UseRegex {
			return t.addSplit(gpt2Pattern)
		}
		return nil
	}
	return fmt.Errorf("unsupported pre_tokenizer type %q (supported: Split, ByteLevel, Metaspace, Sequence)", c.Type)
}

// gpt2Pattern is what a ByteLevel pre-tokenizer with use_regex splits on.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

func (t *Tokenizer) addSplit(pattern string) error {
	re, err := regexp2.Compile(pattern, regexp2.Unicode)
	if err != nil {
		return fmt.Errorf("pre_tokenizer Split: pattern %q: %w", pattern, err)
	}
	t.splits = append(t.splits, split{pattern: pattern, re: re})
	return nil
}

func (t *Tokenizer) loadModel(m *jsonModel) error {
	if m.Dropout != nil && *m.Dropout != 0 {
		return fmt.Errorf("model BPE: dropout is not supported")
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" {
		return fmt.Errorf("model BPE: continuing_subword_prefix is not supported")
	}
	if m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return fmt.Errorf("model BPE: end_of_word_suffix is not supported")
	}
	t.ignoreMerges = m.IgnoreMerges
	t.byteFallback = m.ByteFallback
	t.fuseUnk = m.FuseUnk
	t.vocabSize = 0
	t.vocab = make(map[string]uint32, len(m.Vocab))
	for tok, id := range m.Vocab {
		if int(id)+1 > t.vocabSize {
			t.vocabSize = int(id) + 1
		}
		key, ok := tok, true
		if t.byteLevel {
			key, ok = fromByteLevel(tok)
		}
		if ok {
			t.vocab[key] = id
		}
	}
	if t.byteLevel {
		for b := 0; b < 256; b++ {
			id, ok := t.vocab[string([]byte{byte(b)})]
			if !ok {
				return fmt.Errorf("model BPE: byte-level vocab lacks the token of byte 0x%02x", b)
			}
			t.byteID[b] = id
		}
	}
	t.unk = -1
	if m.UnkToken != nil {
		if id, ok := m.Vocab[*m.UnkToken]; ok {
			t.unk = int64(id)
		}
	}
	if t.byteFallback {
		for b := 0; b < 256; b++ {
			id, ok := m.Vocab[fmt.Sprintf("<0x%02X>", b)]
			if !ok {
				t.byteFallback = false
				break
			}
			t.byteID[b] = id
		}
	}
	pairs, err := parseMerges(m.Merges)
	if err != nil {
		return err
	}
	t.merges = newPairTable(len(pairs))
	for rank, p := range pairs {
		a, okA := m.Vocab[p[0]]
		b, okB := m.Vocab[p[1]]
		ab, okAB := m.Vocab[p[0]+p[1]]
		if !okA || !okB || !okAB {
			return fmt.Errorf("model BPE: merge %d (%q %q) names a token missing from the vocab", rank, p[0], p[1])
		}
		t.merges.put(a, b, uint32(rank), ab)
	}
	t.cut = t.newCutter(pairs, m)
	return nil
}

// newCutter returns the cutter of a character-level BPE (not byte-level)
// whose vocab has the Metaspace replacement ▁, or nil. A merge joins the
// symbols on both sides of a ▁ at p only if it is (A, B) with A ending with
// the character before p and B starting with ▁; with no such merge for that
// character, no symbol ever spans p, and the merges on either side proceed
// as if the other did not exist.
func (t *Tokenizer) newCutter(pairs [][2]string, m *jsonModel) *cutter {
	repl := "\u2581"
	if t.metaspace != nil {
		repl = string(t.metaspace.repl)
	}
	// ignore_merges looks the whole word up first: chunks would not.
	if t.byteLevel || repl == "" || t.ignoreMerges {
		return nil
	}
	if _, ok := t.vocab[repl]; !ok {
		return nil
	}
	c := &cutter{repl: []byte(repl)}
	fallbackLast := map[rune]bool{}
	if t.byteFallback {
		fallbackLast['>'] = true // <0xXX>
	}
	if m.UnkToken != nil && t.unk >= 0 {
		if r, _ := utf8.DecodeLastRuneInString(*m.UnkToken); r != utf8.RuneError {
			fallbackLast[r] = true
		} else {
			return nil
		}
	}
	// A character with no token and no fallback is dropped: the symbol
	// before the cut would end with the character before it.
	c.vocabOnly = !t.byteFallback && t.unk < 0
	seen := map[rune]bool{}
	for _, p := range pairs {
		if !strings.HasPrefix(p[1], repl) {
			continue
		}
		r, _ := utf8.DecodeLastRuneInString(p[0])
		if !seen[r] {
			seen[r] = true
			c.bad = append(c.bad, r)
			c.vocabOnly = c.vocabOnly || fallbackLast[r]
		}
	}
	// Checked by a linear scan per ▁: a model merging many characters
	// into ▁-words is merged whole instead.
	if len(c.bad) > 8 {
		return nil
	}
	for r := rune(0); r < utf8.RuneSelf; r++ {
		_, c.ascii[r] = t.vocab[string(r)]
	}
	return c
}

func parseMerges(raw json.RawMessage) ([][2]string, error) {
	r := bytes.TrimSpace(raw)
	if len(r) == 0 || string(r) == "null" {
		return nil, nil
	}
	var asPairs [][2]string
	if err := json.Unmarshal(r, &asPairs); err == nil {
		return asPairs, nil
	}
	var asStrings []string
	if err := json.Unmarshal(r, &asStrings); err != nil {
		return nil, fmt.Errorf("model BPE: merges: %w", err)
	}
	out := make([][2]string, len(asStrings))
	for i, s := range asStrings {
		a, b, ok := strings.Cut(s, " ")
		if !ok {
			return nil, fmt.Errorf("model BPE: merge %d %q has no space", i, s)
		}
		out[i] = [2]string{a, b}
	}
	return out, nil
}

func (t *Tokenizer) loadPost(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var c jsonComponent
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("post_processor: %w", err)
	}
	switch c.Type {
	case "ByteLevel":
		return nil
	case "Sequence":
		for _, p := range c.Processors {
			if err := t.loadPost(p); err != nil {
				return err
			}
		}
		return nil
	case "TemplateProcessing":
		var pre, post []uint32
		seen := false
		for _, piece := range c.Single {
			switch {
			case piece.Sequence != nil:
				seen = true
			case piece.SpecialToken != nil:
				st, ok := c.SpecialTokens[piece.SpecialToken.ID]
				if !ok {
					return fmt.Errorf("post_processor TemplateProcessing: special token %q is not defined", piece.SpecialToken.ID)
				}
				if seen {
					post = append(post, st.IDs...)
				} else {
					pre = append(pre, st.IDs...)
				}
			}
		}
		t.prefix, t.suffix = pre, post
		return nil
	}
	return fmt.Errorf("unsupported post_processor type %q (supported: ByteLevel, TemplateProcessing, Sequence)", c.Type)
}

func (t *Tokenizer) loadAdded(list []jsonAdded) {
	t.addedByID = make(map[string]uint32)
	for _, a := range list {
		if a.Content == "" {
			continue
		}
		at := addedToken{id: a.ID, content: a.Content, lstrip: a.LStrip, rstrip: a.RStrip, singleWord: a.SingleWord, special: a.Special}
		t.addedByID[a.Content] = a.ID
		if a.Normalized {
			t.normAdded.add(at)
		} else {
			t.rawAdded.add(at)
		}
	}
	t.rawAdded.finish()
	t.normAdded.finish()
}

func (t *Tokenizer) loadConfig(data []byte) error {
	var c map[string]json.RawMessage
	if err := json.Unmarshal(data, &c); err != nil {
		return err
	}
	tokenOf := func(key string) int64 {
		raw, ok := c[key]
		if !ok || isNull(raw) {
			return -1
		}
		var s string
		if json.Unmarshal(raw, &s) != nil {
			var obj struct {
				Content string `json:"content"`
			}
			if json.Unmarshal(raw, &obj) != nil {
				return -1
			}
			s = obj.Content
		}
		if id, ok := t.addedByID[s]; ok {
			return int64(id)
		}
		if id, ok := t.vocabToken(s); ok {
			return int64(id)
		}
		return -1
	}
	t.bos = tokenOf("bos_token")
	t.eos = tokenOf("eos_token")
	// transformers' Llama and Gemma tokenizers rebuild the post-processor from
	// add_bos_token/add_eos_token (update_post_processor), and vLLM encodes
	// completions with transformers: follow them where the file says so.
	var class string
	_ = json.Unmarshal(c["tokenizer_class"], &class)
	switch strings.TrimSuffix(class, "Fast") {
	case "LlamaTokenizer", "CodeLlamaTokenizer", "GemmaTokenizer":
		var addBOS, addEOS bool
		rawB, okB := c["add_bos_token"]
		rawE, okE := c["add_eos_token"]
		if !okB && !okE {
			break
		}
		_ = json.Unmarshal(rawB, &addBOS)
		_ = json.Unmarshal(rawE, &addEOS)
		t.prefix, t.suffix = nil, nil
		if addBOS && t.bos >= 0 {
			t.prefix = []uint32{uint32(t.bos)}
		}
		if addEOS && t.eos >= 0 {
			t.suffix = []uint32{uint32(t.eos)}
		}
		t.postFromConfig = true
	}
	return nil
}

// vocabToken looks a token up by its vocab spelling.
func (t *Tokenizer) vocabToken(s string) (uint32, bool) {
	if t.byteLevel {
		if k, ok := fromByteLevel(s); ok {
			id, ok := t.vocab[k]
			return id, ok
		}
		return 0, false
	}
	id, ok := t.vocab[s]
	return id, ok
}

// addedSet matches added tokens leftmost-longest.
type addedSet struct {
	first   [256]bool
	one     int // the only byte starting an added token, or -1
	byText  map[string]addedToken
	lengths [256][]int // by first byte: the distinct lengths, longest first
}

type addedToken struct {
	id                         uint32
	content                    string
	lstrip, rstrip, singleWord bool
	special                    bool
}

func (s *addedSet) add(a addedToken) {
	if s.byText == nil {
		s.byText = make(map[string]addedToken)
	}
	s.byText[a.content] = a
	s.first[a.content[0]] = true
}

func (s *addedSet) finish() {
	seen := map[[2]int]bool{}
	for k := range s.byText {
		if key := [2]int{int(k[0]), len(k)}; !seen[key] {
			seen[key] = true
			s.lengths[k[0]] = append(s.lengths[k[0]], len(k))
		}
	}
	s.one = -1
	for i := range s.lengths {
		sort.Sort(sort.Reverse(sort.IntSlice(s.lengths[i])))
		if len(s.lengths[i]) > 0 {
			s.one = i
		}
	}
	for i := range s.lengths {
		if len(s.lengths[i]) > 0 && i != s.one {
			s.one = -1
		}
	}
}

// next returns the first position from i where an added token may start, or
// len(text). All the added tokens of current models start with '<': the
// search is then bytes.IndexByte's, not a loop over every byte.
func (s *addedSet) next(text []byte, i int) int {
	if s.byText == nil || i >= len(text) {
		return len(text)
	}
	if s.one >= 0 {
		if j := bytes.IndexByte(text[i:], byte(s.one)); j >= 0 {
			return i + j
		}
		return len(text)
	}
	for ; i < len(text); i++ {
		if s.first[text[i]] {
			return i
		}
	}
	return i
}

// byte-level alphabet (GPT-2's bytes_to_unicode).
var byteToRune [256]rune
var runeToByte = map[rune]byte{}

func init() {
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = rune(256 + n)
			n++
		}
		runeToByte[byteToRune[b]] = byte(b)
	}
}

// fromByteLevel maps a byte-level vocab spelling back to the raw bytes it
// stands for; ok is false when s has a character outside the alphabet.
func fromByteLevel(s string) (string, bool) {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		b, ok := runeToByte[r]
		if !ok {
			return "", false
		}
		out = append(out, b)
	}
	return string(out), true
}
