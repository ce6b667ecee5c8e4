package tokenizer

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"slices"
	"unicode"
	"unicode/utf8"
)

// The Split patterns this package has hand-written matchers for. Each is
// verified against the regexp2 path (TestFastPathMatchesRegexp).
const (
	// Qwen2, Qwen2.5, Qwen3.
	qwenPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// Llama 3, 3.1, 3.2, 3.3 (and GPT-4's cl100k).
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// DeepSeek V3 / R1: three Splits in a Sequence.
	dsDigits = `\p{N}{1,3}`
	dsCJK    = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
	dsMain   = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
)

type knownKind uint8

const (
	knownNone knownKind = iota
	knownQwen
	knownLlama3
	knownDeepSeek
)

func (t *Tokenizer) knownPattern() knownKind {
	switch {
	case len(t.splits) == 1 && t.splits[0].pattern == qwenPattern:
		return knownQwen
	case len(t.splits) == 1 && t.splits[0].pattern == llama3Pattern:
		return knownLlama3
	case len(t.splits) == 3 && t.splits[0].pattern == dsDigits && t.splits[1].pattern == dsCJK && t.splits[2].pattern == dsMain:
		return knownDeepSeek
	}
	return knownNone
}

// Character classes of ASCII, precomputed.
const (
	cL   = 1 << iota // \p{L}
	cN               // \p{N}
	cS               // \s
	cP               // \p{P}
	cSym             // \p{S}
	cM               // \p{M}
)

var asciiClass [128]uint8

func init() {
	for r := rune(0); r < 128; r++ {
		asciiClass[r] = classOf(r)
	}
}

func classOf(r rune) uint8 {
	var c uint8
	if unicode.IsLetter(r) {
		c |= cL
	}
	if unicode.IsNumber(r) {
		c |= cN
	}
	if isSpace(r) {
		c |= cS
	}
	if unicode.IsPunct(r) {
		c |= cP
	}
	if unicode.IsSymbol(r) {
		c |= cSym
	}
	if unicode.IsMark(r) {
		c |= cM
	}
	return c
}

// isSpace is the regex \s: Unicode White_Space.
func isSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', 0x85, 0xA0:
		return true
	}
	return r > 0xff && unicode.Is(unicode.White_Space, r)
}

// class returns the rune at text[i], its size and its classes.
func class(text []byte, i int) (rune, int, uint8) {
	if c := text[i]; c < utf8.RuneSelf {
		return rune(c), 1, asciiClass[c]
	}
	return classSlow(text, i)
}

func classSlow(text []byte, i int) (rune, int, uint8) {
	r, n := utf8.DecodeRune(text[i:])
	return r, n, classOf(r)
}

// pretokenize splits text into pieces.
func (t *Tokenizer) pretokenize(sc *scratch, text []byte) []span {
	out := sc.pieces[:0]
	switch {
	case t.metaspace != nil && t.metaspace.split:
		out = splitRegexp(sc, out, split{literal: t.metaspace.repl, behavior: mergedWithNext}, text, span{0, int32(len(text))})
	case len(t.splits) == 0:
		out = append(out, span{0, int32(len(text))})
	case t.known == knownQwen && !t.generic:
		out = splitQwen(out, text, 0, len(text), false)
	case t.known == knownLlama3 && !t.generic:
		out = splitQwen(out, text, 0, len(text), true)
	case t.known == knownDeepSeek && !t.generic:
		out = splitDeepSeek(sc, out, text)
	default:
		out = append(out, span{0, int32(len(text))})
		for _, sp := range t.splits {
			next := sc.tmp[:0]
			for _, p := range out {
				next = splitRegexp(sc, next, sp, text, p)
			}
			sc.tmp, out = out, next
		}
	}
	sc.pieces = out
	return out
}

// splitRegexp appends the pieces of text[p] by one Split: the matches (by
// regexp2, or of a literal) and the text between them, as its behavior says.
func splitRegexp(sc *scratch, out []span, sp split, text []byte, p span) []span {
	marks := sc.marks[:0]
	last := p.s
	emit := func(s, e int32) {
		if s > last {
			marks = append(marks, mark{span{last, s}, false})
		}
		if e > s {
			marks = append(marks, mark{span{s, e}, true})
		}
		last = e
	}
	if sp.re == nil {
		for i := int(p.s); i < int(p.e); {
			j := bytes.Index(text[i:p.e], sp.literal)
			if j < 0 {
				break
			}
			emit(int32(i+j), int32(i+j+len(sp.literal)))
			i += j + len(sp.literal)
		}
	} else {
		sc.runes, sc.roff = sc.runes[:0], sc.roff[:0]
		for i := int(p.s); i < int(p.e); {
			r, n := utf8.DecodeRune(text[i:])
			sc.runes = append(sc.runes, r)
			sc.roff = append(sc.roff, int32(i))
			i += n
		}
		sc.roff = append(sc.roff, p.e)
		m, _ := sp.re.FindRunesMatch(sc.runes)
		for m != nil {
			emit(sc.roff[m.Index], sc.roff[m.Index+m.Length])
			m, _ = sp.re.FindNextMatch(m)
		}
	}
	if p.e > last {
		marks = append(marks, mark{span{last, p.e}, false})
	}
	sc.marks = marks
	// HF's SplitDelimiterBehavior, fold for fold.
	switch sp.behavior {
	case isolated:
		for _, m := range marks {
			out = append(out, m.span)
		}
	case removed:
		for _, m := range marks {
			if !m.match {
				out = append(out, m.span)
			}
		}
	case mergedWithPrevious:
		first, prevMatch := len(out), false
		for _, m := range marks {
			if m.match && !prevMatch && len(out) > first {
				out[len(out)-1].e = m.e
			} else {
				out = append(out, m.span)
			}
			prevMatch = m.match
		}
	case mergedWithNext:
		first, prevMatch := len(out), false
		for k := len(marks) - 1; k >= 0; k-- {
			m := marks[k]
			if m.match && !prevMatch && len(out) > first {
				out[len(out)-1].s = m.s
			} else {
				out = append(out, m.span)
			}
			prevMatch = m.match
		}
		slices.Reverse(out[first:])
	}
	return out
}

type mark struct {
	span
	match bool
}

// contraction matches (?i:'s|'t|'re|'ve|'m|'ll|'d) after the quote at b[0];
// it returns the match length or 0.
func contraction(b []byte) int {
	if len(b) < 2 {
		return 0
	}
	switch b[1] | 0x20 {
	case 's', 't', 'm', 'd':
		return 2
	case 'r', 'v':
		if len(b) >= 3 && b[2]|0x20 == 'e' {
			return 3
		}
	case 'l':
		if len(b) >= 3 && b[2]|0x20 == 'l' {
			return 3
		}
	}
	return 0
}

// wsRun handles the last three alternatives, \s*[\r\n]+|\s+(?!\S)|\s+, at a
// white-space character at i; end is where the text (piece) ends.
func wsRun(text []byte, i, end int) int {
	k, lastNL, lastStart := i, -1, i
	for k < end {
		r, n, c := class(text, k)
		if c&cS == 0 {
			break
		}
		if r == '\r' || r == '\n' {
			lastNL = k
		}
		lastStart = k
		k += n
	}
	switch {
	case lastNL >= 0:
		return lastNL + 1
	case k == end:
		return k
	case lastStart > i:
		return lastStart
	}
	return k
}

// splitQwen is the Qwen2/Qwen3 pattern, or Llama 3's (digits in threes) when
// digits3, over text[from:to].
func splitQwen(out []span, text []byte, from, to int, digits3 bool) []span {
	for i := from; i < to; {
		var r0 rune
		var n0 int
		var c0 uint8
		if c := text[i]; c < utf8.RuneSelf { // class, inlined by hand
			r0, n0, c0 = rune(c), 1, asciiClass[c]
		} else {
			r0, n0, c0 = classSlow(text, i)
		}
		e := i
		switch {
		case r0 == '\'' && contraction(text[i:to]) > 0:
			e = i + contraction(text[i:to])
		case c0&cL != 0:
			e = letters(text, i+n0, to, cL)
		case c0&cN != 0:
			e = i + n0
			if digits3 {
				for k := 0; k < 2 && e < to; k++ {
					_, n, c := class(text, e)
					if c&cN == 0 {
						break
					}
					e += n
				}
			}
		default:
			// [^\r\n\p{L}\p{N}]?\p{L}+
			if r0 != '\r' && r0 != '\n' && i+n0 < to {
				if _, n1, c1 := class(text, i+n0); c1&cL != 0 {
					e = letters(text, i+n0+n1, to, cL)
					break
				}
			}
			// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
			p := i
			if r0 == ' ' && i+1 < to {
				if _, _, c1 := class(text, i+1); c1&(cS|cL|cN) == 0 {
					p = i + 1
				}
			}
			if _, n, c := class(text, p); c&(cS|cL|cN) == 0 {
				e = p + n
				for e < to {
					_, n, c := class(text, e)
					if c&(cS|cL|cN) != 0 {
						break
					}
					e += n
				}
				for e < to && (text[e] == '\r' || text[e] == '\n') {
					e++
				}
				break
			}
			e = wsRun(text, i, to)
		}
		out = append(out, span{int32(i), int32(e)})
		i = e
	}
	return out
}

// letters returns the end of the run of characters of class mask (\p{L},
// or \p{L}\p{M}) from i. ASCII goes eight bytes at a time: most words end
// within the first eight, so the loop exit is not a mispredicted branch per
// word as a byte loop's is.
func letters(text []byte, i, to int, mask uint8) int {
	for i+8 <= to {
		x := binary.LittleEndian.Uint64(text[i:])
		m := asciiLetters(x)
		if m == 0x8080808080808080 {
			i += 8
			continue
		}
		i += bits.TrailingZeros64(^m&0x8080808080808080) >> 3
		if text[i] < utf8.RuneSelf {
			return i // an ASCII non-letter
		}
		break // a non-ASCII character: class by class from here
	}
	for i < to {
		c := text[i]
		if c < utf8.RuneSelf {
			if asciiClass[c]&mask == 0 {
				return i
			}
			i++
			continue
		}
		_, n, cl := class(text, i)
		if cl&mask == 0 {
			return i
		}
		i += n
	}
	return i
}

// asciiLetters has the high bit of each byte of x that is an ASCII letter
// ([A-Za-z], all of ASCII's \p{L}) set, the rest clear: lowered (| 0x20), a
// letter is 0x61-0x7a, tested by two per-byte additions that cannot carry
// across bytes once the high bits are cleared.
func asciiLetters(x uint64) uint64 {
	const hi, lo7 = 0x8080808080808080, 0x7f7f7f7f7f7f7f7f
	t := (x | 0x2020202020202020) & lo7
	ge := t + 0x1f1f1f1f1f1f1f1f // high bit: t >= 0x61
	gt := t + 0x0505050505050505 // high bit: t >= 0x7b
	return ge &^ gt &^ x & hi
}

// digitsOrNonASCII has the high bit of each byte of x that is an ASCII digit
// or not ASCII set (the same per-byte additions as asciiLetters).
func digitsOrNonASCII(x uint64) uint64 {
	const hi, lo7 = 0x8080808080808080, 0x7f7f7f7f7f7f7f7f
	t := x & lo7
	ge := t + 0x5050505050505050 // high bit: t >= 0x30
	gt := t + 0x4646464646464646 // high bit: t >= 0x3a
	return (ge&^gt | x) & hi
}

func isCJK(r rune) bool {
	return (r >= 0x4e00 && r <= 0x9fa5) || (r >= 0x3040 && r <= 0x30ff)
}

// splitDeepSeek is DeepSeek V3's Sequence: digits in threes, then runs of
// CJK, then the main pattern over every piece.
func splitDeepSeek(sc *scratch, out []span, text []byte) []span {
	// Stages 1 and 2 in one pass: a piece is a run of up to three numbers, a
	// CJK run, or a run of anything else (stage 3 then splits every piece).
	tmp := sc.tmp[:0]
	for i := 0; i < len(text); {
		r0, n0, c0 := class(text, i)
		e := i + n0
		switch {
		case c0&cN != 0:
			for k := 0; k < 2 && e < len(text); k++ {
				_, n, c := class(text, e)
				if c&cN == 0 {
					break
				}
				e += n
			}
		case isCJK(r0):
			for e < len(text) {
				r, n := utf8.DecodeRune(text[e:])
				if !isCJK(r) {
					break
				}
				e += n
			}
		default:
			// Eight bytes at a time over ASCII without digits.
			for e+8 <= len(text) && digitsOrNonASCII(binary.LittleEndian.Uint64(text[e:])) == 0 {
				e += 8
			}
			for e < len(text) {
				if c := text[e]; c < utf8.RuneSelf {
					if c >= '0' && c <= '9' {
						break
					}
					e++
					continue
				}
				r, n, c := class(text, e)
				if c&cN != 0 || isCJK(r) {
					break
				}
				e += n
			}
		}
		tmp = append(tmp, span{int32(i), int32(e)})
		i = e
	}
	sc.tmp = tmp
	for _, p := range tmp {
		out = splitDSMain(out, text, int(p.s), int(p.e))
	}
	return out
}

func isASCIIPunct(c byte) bool {
	return c < utf8.RuneSelf && asciiClass[c]&(cP|cSym) != 0
}

func isASCIILetter(c byte) bool { return (c|0x20) >= 'a' && (c|0x20) <= 'z' }

// splitDSMain is DeepSeek V3's third Split over text[from:to].
func splitDSMain(out []span, text []byte, from, to int) []span {
	last := from
	for i := from; i < to; {
		var r0 rune
		var n0 int
		var c0 uint8
		if c := text[i]; c < utf8.RuneSelf { // class, inlined by hand
			r0, n0, c0 = rune(c), 1, asciiClass[c]
		} else {
			r0, n0, c0 = classSlow(text, i)
		}
		e := -1
		switch {
		case isASCIIPunct(text[i]) && i+1 < to && isASCIILetter(text[i+1]):
			e = i + 2
			for e < to && isASCIILetter(text[e]) {
				e++
			}
		case c0&(cL|cM) != 0:
			e = letters(text, i+n0, to, cL|cM)
		case r0 != '\r' && r0 != '\n' && c0&(cP|cSym) == 0 && i+n0 < to && hasClass(text, i+n0, cL|cM):
			e = letters(text, i+n0, to, cL|cM)
		case c0&(cP|cSym) != 0 || (r0 == ' ' && i+1 < to && hasClass(text, i+1, cP|cSym)):
			e = i + n0
			for e < to {
				_, n, c := class(text, e)
				if c&(cP|cSym) == 0 {
					break
				}
				e += n
			}
			for e < to && (text[e] == '\r' || text[e] == '\n') {
				e++
			}
		case c0&cS != 0:
			e = wsRun(text, i, to)
		}
		if e < 0 {
			i += n0 // no alternative matches here: part of the gap
			continue
		}
		if i > last {
			out = append(out, span{int32(last), int32(i)})
		}
		out = append(out, span{int32(i), int32(e)})
		i, last = e, e
	}
	if to > last {
		out = append(out, span{int32(last), int32(to)})
	}
	return out
}

func hasClass(text []byte, i int, mask uint8) bool {
	_, _, c := class(text, i)
	return c&mask != 0
}
