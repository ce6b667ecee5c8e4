package chattmpl

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

type tokType uint8

const (
	tText tokType = iota
	tNumber
	tString
	tIdent
	tEquals
	tOpenParen
	tCloseParen
	tOpenStmt
	tCloseStmt
	tOpenExpr
	tCloseExpr
	tOpenBracket
	tCloseBracket
	tOpenCurly
	tCloseCurly
	tComma
	tDot
	tColon
	tPipe
	tAdditive
	tMultiplicative
	tPower
	tComparison
	tUnary
	tComment
)

var tokNames = [...]string{"Text", "NumericLiteral", "StringLiteral", "Identifier", "Equals", "OpenParen", "CloseParen",
	"OpenStatement", "CloseStatement", "OpenExpression", "CloseExpression", "OpenSquareBracket", "CloseSquareBracket",
	"OpenCurlyBracket", "CloseCurlyBracket", "Comma", "Dot", "Colon", "Pipe", "AdditiveBinaryOperator",
	"MultiplicativeBinaryOperator", "ExponentiationBinaryOperator", "ComparisonBinaryOperator", "UnaryOperator", "Comment"}

func (t tokType) String() string { return tokNames[t] }

type token struct {
	val string
	typ tokType
}

// symbols in the order the reference lexer tries them (longest first where
// one is a prefix of another).
var symbols = [...]struct {
	s string
	t tokType
}{
	{"{%", tOpenStmt}, {"%}", tCloseStmt}, {"{{", tOpenExpr}, {"}}", tCloseExpr},
	{"(", tOpenParen}, {")", tCloseParen}, {"{", tOpenCurly}, {"}", tCloseCurly},
	{"[", tOpenBracket}, {"]", tCloseBracket}, {",", tComma}, {".", tDot}, {":", tColon}, {"|", tPipe},
	{"<=", tComparison}, {">=", tComparison}, {"==", tComparison}, {"!=", tComparison}, {"<", tComparison}, {">", tComparison},
	{"+", tAdditive}, {"-", tAdditive}, {"~", tAdditive},
	{"**", tPower}, {"*", tMultiplicative}, {"//", tMultiplicative}, {"/", tMultiplicative}, {"%", tMultiplicative},
	{"=", tEquals},
}

var (
	lstripRe     = regexp.MustCompile(`(?m)^[ \t]*(\{[#%-])`)
	trimRe       = regexp.MustCompile(`([#%-]\})\n`)
	generationRe = regexp.MustCompile(`(?s)(\s*)\{%(-?)\s*(?:end)?generation\s*(-?)%\}(\s*)`)
)

// preprocess applies what the reference (and transformers, through jinja2's
// options) does before lexing: drop one trailing newline, lstrip_blocks,
// trim_blocks, and remove {% generation %} markers.
func preprocess(src string) string {
	src = strings.TrimSuffix(src, "\n")
	src = lstripRe.ReplaceAllString(src, "$1")
	src = trimRe.ReplaceAllString(src, "$1")
	return generationRe.ReplaceAllStringFunc(src, func(m string) string {
		sm := generationRe.FindStringSubmatch(m)
		var b strings.Builder
		if sm[2] == "" {
			b.WriteString(sm[1])
		}
		if sm[3] == "" {
			b.WriteString(sm[4])
		}
		return b.String()
	})
}

func isSpace(r rune) bool {
	// JavaScript's \s: Unicode White_Space plus U+FEFF.
	return unicode.IsSpace(r) || r == 0xfeff
}

func isWord(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// trimSpaceJS trims as JavaScript's String.prototype.trim.
func trimSpaceJS(s string) string { return strings.TrimFunc(s, isSpace) }

// lex splits a template into tokens as the reference lexer does.
func lex(source string) ([]token, error) {
	src := preprocess(source)
	var toks []token
	pos, curly := 0, 0
	last := func() (tokType, bool) {
		if len(toks) == 0 {
			return 0, false
		}
		return toks[len(toks)-1].typ, true
	}
	stripTrailing := func() {
		if n := len(toks); n > 0 && toks[n-1].typ == tText {
			toks[n-1].val = strings.TrimRightFunc(toks[n-1].val, isSpace)
			if toks[n-1].val == "" {
				toks = toks[:n-1]
			}
		}
	}
	skipLeading := func() {
		for pos < len(src) {
			r, size := utf8.DecodeRuneInString(src[pos:])
			if !isSpace(r) {
				return
			}
			pos += size
		}
	}
	for pos < len(src) {
		if lt, ok := last(); !ok || lt == tCloseStmt || lt == tCloseExpr || lt == tComment {
			start := pos
			for pos < len(src) && !(src[pos] == '{' && pos+1 < len(src) && (src[pos+1] == '%' || src[pos+1] == '{' || src[pos+1] == '#')) {
				pos++
			}
			if pos > start {
				toks = append(toks, token{src[start:pos], tText})
				continue
			}
		}
		if strings.HasPrefix(src[pos:], "{#") {
			pos += 2
			stripBefore := pos < len(src) && src[pos] == '-'
			if stripBefore {
				pos++
			}
			end := strings.Index(src[pos:], "#}")
			if end < 0 {
				return nil, fmt.Errorf("missing end of comment tag")
			}
			comment := src[pos : pos+end]
			pos += end + 2
			stripAfter := strings.HasSuffix(comment, "-")
			if stripAfter {
				comment = comment[:len(comment)-1]
			}
			if stripBefore {
				stripTrailing()
			}
			toks = append(toks, token{comment, tComment})
			if stripAfter {
				skipLeading()
			}
			continue
		}
		if strings.HasPrefix(src[pos:], "{%-") {
			stripTrailing()
			toks = append(toks, token{"{%", tOpenStmt})
			pos += 3
			continue
		}
		if strings.HasPrefix(src[pos:], "{{-") {
			stripTrailing()
			toks = append(toks, token{"{{", tOpenExpr})
			curly = 0
			pos += 3
			continue
		}
		skipLeading()
		if pos >= len(src) {
			return nil, fmt.Errorf("unexpected end of input")
		}
		if strings.HasPrefix(src[pos:], "-%}") {
			toks = append(toks, token{"%}", tCloseStmt})
			pos += 3
			skipLeading()
			continue
		}
		if strings.HasPrefix(src[pos:], "-}}") {
			toks = append(toks, token{"}}", tCloseExpr})
			pos += 3
			skipLeading()
			continue
		}
		c := src[pos]
		if c == '-' || c == '+' {
			lt, ok := last()
			if !ok || lt == tText {
				return nil, fmt.Errorf("unexpected character: %c", c)
			}
			switch lt {
			case tIdent, tNumber, tString, tCloseParen, tCloseBracket:
			default:
				pos++
				start := pos
				for pos < len(src) && isDigit(src[pos]) {
					pos++
				}
				num := src[start:pos]
				if num != "" && pos+1 < len(src) && src[pos] == '.' && isDigit(src[pos+1]) {
					pos++
					for pos < len(src) && isDigit(src[pos]) {
						pos++
					}
					num = src[start:pos]
				}
				if num != "" {
					toks = append(toks, token{string(c) + num, tNumber})
				} else {
					toks = append(toks, token{string(c), tUnary})
				}
				continue
			}
		}
		matched := false
		for _, sy := range symbols {
			if sy.s == "}}" && curly > 0 {
				continue
			}
			if strings.HasPrefix(src[pos:], sy.s) {
				toks = append(toks, token{sy.s, sy.t})
				switch sy.t {
				case tOpenExpr:
					curly = 0
				case tOpenCurly:
					curly++
				case tCloseCurly:
					curly--
				}
				pos += len(sy.s)
				matched = true
				break
			}
		}
		if matched {
			continue
		}
		if c == '\'' || c == '"' {
			pos++
			s, n, err := unquote(src[pos:], c)
			if err != nil {
				return nil, err
			}
			pos += n + 1
			toks = append(toks, token{s, tString})
			continue
		}
		if isDigit(c) {
			start := pos
			for pos < len(src) && isDigit(src[pos]) {
				pos++
			}
			if (len(toks) == 0 || toks[len(toks)-1].typ != tDot) && pos+1 < len(src) && src[pos] == '.' && isDigit(src[pos+1]) {
				pos++
				for pos < len(src) && isDigit(src[pos]) {
					pos++
				}
			}
			toks = append(toks, token{src[start:pos], tNumber})
			continue
		}
		if isWord(c) {
			start := pos
			for pos < len(src) && isWord(src[pos]) {
				pos++
			}
			toks = append(toks, token{src[start:pos], tIdent})
			continue
		}
		r, _ := utf8.DecodeRuneInString(src[pos:])
		return nil, fmt.Errorf("unexpected character: %q", r)
	}
	return toks, nil
}

// unquote reads a string literal body up to the closing quote q, resolving
// the escapes the reference resolves; it returns the string and the bytes
// consumed before the closing quote.
func unquote(s string, q byte) (string, int, error) {
	var b strings.Builder
	i := 0
	for {
		if i >= len(s) {
			return "", 0, fmt.Errorf("unexpected end of input in a string literal")
		}
		c := s[i]
		if c == q {
			return b.String(), i, nil
		}
		if c != '\\' {
			b.WriteByte(c)
			i++
			continue
		}
		i++
		if i >= len(s) {
			return "", 0, fmt.Errorf("unexpected end of input")
		}
		e := s[i]
		i++
		switch e {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'v':
			b.WriteByte('\v')
		case '\'', '"', '\\':
			b.WriteByte(e)
		case 'x', 'u':
			n := 2
			if e == 'u' {
				n = 4
			}
			if i+n > len(s) {
				return "", 0, fmt.Errorf("invalid hexadecimal escape sequence")
			}
			v, err := strconv.ParseUint(s[i:i+n], 16, 32)
			if err != nil {
				return "", 0, fmt.Errorf("invalid hexadecimal escape sequence: \\%c%s", e, s[i:i+n])
			}
			b.WriteRune(rune(v))
			i += n
		default:
			return "", 0, fmt.Errorf("unexpected escaped character: %c", e)
		}
	}
}
