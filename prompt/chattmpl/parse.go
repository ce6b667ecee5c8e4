package chattmpl

import (
	"fmt"
	"strconv"
	"strings"
)

type nodeKind uint8

const (
	// statements
	nText nodeKind = iota
	nIf
	nFor
	nSet
	nMacro
	nBreak
	nContinue
	nComment
	// expressions
	eString
	eInt
	eFloat
	eIdent
	eArray
	eTuple
	eObject
	eMember // a[b] (computed) or a.b
	eSlice  // a[start:stop:step]: a, then list = start, stop, step (nil: absent)
	eCall   // a(list...)
	eUnary
	eBinary
	eFilter // a | s  or  a | s(list...) (call = true)
	eTest   // a is [not] s
	eSelect // a if b  (no else)
	eTernary
	eKwarg  // s = a
	eSpread // *a (positional) or **a (keyword: s == "**")
)

// node is one node of the syntax tree, statements and expressions alike.
type node struct {
	kind     nodeKind
	s        string // text, identifier, string literal, operator, filter or test name
	n        int64
	f        float64
	a, b, c  *node
	list     []*node // body, arguments, elements
	alt      []*node // else body; object literal values
	computed bool    // eMember: a[b]
	neg      bool    // eTest: is not
	call     bool    // eFilter: with arguments
}

type parser struct {
	toks []token
	cur  int
}

// errSyntax is a parse error; it says where.
func (p *parser) errorf(format string, args ...any) error {
	near := "end of template"
	if p.cur < len(p.toks) {
		t := p.toks[p.cur]
		v := t.val
		if len(v) > 30 {
			v = v[:30] + "…"
		}
		near = fmt.Sprintf("%s %q (token %d)", t.typ, v, p.cur)
	}
	return fmt.Errorf(format+" near "+near, args...)
}

func parseTemplate(toks []token) (body []*node, err error) {
	p := &parser{toks: toks}
	defer func() {
		if r := recover(); r != nil {
			pe, ok := r.(parseError)
			if !ok {
				panic(r)
			}
			err = pe.err
		}
	}()
	for p.cur < len(p.toks) {
		body = append(body, p.parseAny())
	}
	return body, nil
}

// parseError carries a syntax error up the recursive descent.
type parseError struct{ err error }

func (p *parser) fail(format string, args ...any) {
	panic(parseError{p.errorf(format, args...)})
}

func (p *parser) is(types ...tokType) bool {
	if p.cur+len(types) > len(p.toks) {
		return false
	}
	for i, t := range types {
		if p.toks[p.cur+i].typ != t {
			return false
		}
	}
	return true
}

func (p *parser) isIdent(names ...string) bool {
	if p.cur+len(names) > len(p.toks) {
		return false
	}
	for i, n := range names {
		t := p.toks[p.cur+i]
		if t.typ != tIdent || t.val != n {
			return false
		}
	}
	return true
}

func (p *parser) isStatement(names ...string) bool {
	if p.cur+1 >= len(p.toks) || p.toks[p.cur].typ != tOpenStmt || p.toks[p.cur+1].typ != tIdent {
		if p.cur >= len(p.toks) {
			p.fail("unexpected end of template: expected {%% %s %%}", strings.Join(names, " or "))
		}
		return false
	}
	for _, n := range names {
		if p.toks[p.cur+1].val == n {
			return true
		}
	}
	return false
}

func (p *parser) expect(t tokType, what string) token {
	if p.cur >= len(p.toks) || p.toks[p.cur].typ != t {
		p.fail("expected %s", what)
	}
	p.cur++
	return p.toks[p.cur-1]
}

func (p *parser) expectIdent(name string) {
	if !p.isIdent(name) {
		p.fail("expected %s", name)
	}
	p.cur++
}

func (p *parser) parseAny() *node {
	t := p.toks[p.cur]
	switch t.typ {
	case tComment:
		p.cur++
		return &node{kind: nComment}
	case tText:
		p.cur++
		return &node{kind: nText, s: t.val}
	case tOpenStmt:
		return p.parseStatement()
	case tOpenExpr:
		p.cur++
		e := p.parseExpression()
		p.expect(tCloseExpr, "}}")
		return e
	}
	p.fail("unexpected token")
	return nil
}

func (p *parser) parseStatement() *node {
	p.expect(tOpenStmt, "{%")
	if p.cur >= len(p.toks) || p.toks[p.cur].typ != tIdent {
		p.fail("expected a statement name")
	}
	name := p.toks[p.cur].val
	p.cur++
	var n *node
	switch name {
	case "set":
		n = p.parseSet()
	case "if":
		n = p.parseIf()
		p.expect(tOpenStmt, "{%")
		p.expectIdent("endif")
		p.expect(tCloseStmt, "%}")
	case "for":
		n = p.parseFor()
		p.expect(tOpenStmt, "{%")
		p.expectIdent("endfor")
		p.expect(tCloseStmt, "%}")
	case "macro":
		n = p.parseMacro()
		p.expect(tOpenStmt, "{%")
		p.expectIdent("endmacro")
		p.expect(tCloseStmt, "%}")
	case "break", "continue":
		p.expect(tCloseStmt, "%}")
		n = &node{kind: nBreak}
		if name == "continue" {
			n.kind = nContinue
		}
	default:
		p.cur--
		p.fail("unsupported statement %q", name)
	}
	return n
}

func (p *parser) parseSet() *node {
	left := p.parseExpressionSequence(false)
	n := &node{kind: nSet, a: left}
	if p.is(tEquals) {
		p.cur++
		n.b = p.parseExpressionSequence(false)
	} else {
		p.expect(tCloseStmt, "%}")
		for !p.isStatement("endset") {
			n.list = append(n.list, p.parseAny())
		}
		p.expect(tOpenStmt, "{%")
		p.expectIdent("endset")
	}
	p.expect(tCloseStmt, "%}")
	switch left.kind {
	case eIdent, eTuple:
	case eMember:
		if left.computed {
			p.fail("cannot assign to a computed member")
		}
	default:
		p.fail("invalid left-hand side of set")
	}
	return n
}

func (p *parser) parseIf() *node {
	n := &node{kind: nIf, a: p.parseExpression()}
	p.expect(tCloseStmt, "%}")
	for !p.isStatement("elif", "else", "endif") {
		n.list = append(n.list, p.parseAny())
	}
	if p.isStatement("elif") {
		p.cur += 2
		n.alt = []*node{p.parseIf()}
	} else if p.isStatement("else") {
		p.cur += 2
		p.expect(tCloseStmt, "%}")
		for !p.isStatement("endif") {
			n.alt = append(n.alt, p.parseAny())
		}
	}
	return n
}

func (p *parser) parseFor() *node {
	v := p.parseExpressionSequence(true)
	if v.kind != eIdent && v.kind != eTuple {
		p.fail("expected identifier/tuple for the loop variable")
	}
	if v.kind == eTuple {
		for _, e := range v.list {
			if e.kind != eIdent {
				p.fail("loop variables must be identifiers")
			}
		}
	}
	if !p.isIdent("in") {
		p.fail("expected `in` keyword following loop variable")
	}
	p.cur++
	n := &node{kind: nFor, a: v, b: p.parseExpression()}
	p.expect(tCloseStmt, "%}")
	for !p.isStatement("endfor", "else") {
		n.list = append(n.list, p.parseAny())
	}
	if p.isStatement("else") {
		p.cur += 2
		p.expect(tCloseStmt, "%}")
		for !p.isStatement("endfor") {
			n.alt = append(n.alt, p.parseAny())
		}
	}
	return n
}

func (p *parser) parseMacro() *node {
	name := p.parsePrimary()
	if name.kind != eIdent {
		p.fail("expected identifier following macro statement")
	}
	n := &node{kind: nMacro, s: name.s}
	n.alt = p.parseArgs(true)
	for _, a := range n.alt {
		if a.kind != eIdent && a.kind != eKwarg {
			p.fail("expected identifier for parameter declaration")
		}
	}
	p.expect(tCloseStmt, "%}")
	for !p.isStatement("endmacro") {
		n.list = append(n.list, p.parseAny())
	}
	return n
}

func (p *parser) parseExpressionSequence(primary bool) *node {
	parse := p.parseExpression
	if primary {
		parse = p.parsePrimary
	}
	first := parse()
	if !p.is(tComma) {
		return first
	}
	t := &node{kind: eTuple, list: []*node{first}}
	for p.is(tComma) {
		p.cur++
		t.list = append(t.list, parse())
	}
	return t
}

func (p *parser) parseExpression() *node {
	a := p.parseOr()
	if p.isIdent("if") {
		p.cur++
		test := p.parseOr()
		if p.isIdent("else") {
			p.cur++
			return &node{kind: eTernary, a: test, b: a, c: p.parseExpression()}
		}
		return &node{kind: eSelect, a: a, b: test}
	}
	return a
}

func (p *parser) parseOr() *node {
	l := p.parseAnd()
	for p.isIdent("or") {
		p.cur++
		l = &node{kind: eBinary, s: "or", a: l, b: p.parseAnd()}
	}
	return l
}

func (p *parser) parseAnd() *node {
	l := p.parseNot()
	for p.isIdent("and") {
		p.cur++
		l = &node{kind: eBinary, s: "and", a: l, b: p.parseNot()}
	}
	return l
}

func (p *parser) parseNot() *node {
	if p.isIdent("not") {
		p.cur++
		return &node{kind: eUnary, s: "not", a: p.parseNot()}
	}
	return p.parseComparison()
}

func (p *parser) parseComparison() *node {
	l := p.parseAdditive()
	for {
		var op string
		switch {
		case p.isIdent("not", "in"):
			op = "not in"
			p.cur += 2
		case p.isIdent("in"):
			op = "in"
			p.cur++
		case p.is(tComparison):
			op = p.toks[p.cur].val
			p.cur++
		default:
			return l
		}
		l = &node{kind: eBinary, s: op, a: l, b: p.parseAdditive()}
	}
}

func (p *parser) parseAdditive() *node {
	l := p.parseMultiplicative()
	for p.is(tAdditive) {
		op := p.toks[p.cur].val
		p.cur++
		l = &node{kind: eBinary, s: op, a: l, b: p.parseMultiplicative()}
	}
	return l
}

func (p *parser) parseMultiplicative() *node {
	l := p.parsePower()
	for p.is(tMultiplicative) {
		op := p.toks[p.cur].val
		p.cur++
		l = &node{kind: eBinary, s: op, a: l, b: p.parsePower()}
	}
	return l
}

func (p *parser) parsePower() *node {
	l := p.parseTest()
	for p.is(tPower) {
		p.cur++
		l = &node{kind: eBinary, s: "**", a: l, b: p.parseTest()}
	}
	return l
}

func (p *parser) parseTest() *node {
	l := p.parseFilter()
	for p.isIdent("is") {
		p.cur++
		neg := p.isIdent("not")
		if neg {
			p.cur++
		}
		t := p.parsePrimary()
		if t.kind != eIdent {
			p.fail("expected identifier for the test")
		}
		l = &node{kind: eTest, s: t.s, a: l, neg: neg}
	}
	return l
}

func (p *parser) parseFilter() *node {
	l := p.parseUnarySign()
	for p.is(tPipe) {
		p.cur++
		f := p.parsePrimary()
		if f.kind != eIdent {
			p.fail("expected identifier for the filter")
		}
		n := &node{kind: eFilter, s: f.s, a: l}
		if p.is(tOpenParen) {
			n.call = true
			n.list = p.parseArgs(false)
		}
		l = n
	}
	return l
}

func (p *parser) parseUnarySign() *node {
	if p.cur < len(p.toks) {
		t := p.toks[p.cur]
		if (t.typ == tUnary || t.typ == tAdditive) && (t.val == "-" || t.val == "+") {
			p.cur++
			return &node{kind: eUnary, s: t.val, a: p.parseUnarySign()}
		}
	}
	return p.parseCallMember()
}

func (p *parser) parseCallMember() *node {
	m := p.parseMember(p.parsePrimary())
	for p.is(tOpenParen) {
		m = p.parseMember(&node{kind: eCall, a: m, list: p.parseArgs(false)})
	}
	return m
}

func (p *parser) parseArgs(params bool) []*node {
	p.expect(tOpenParen, "(")
	var args []*node
	sawKw := false
	for !p.is(tCloseParen) {
		if p.cur >= len(p.toks) {
			p.fail("expected )")
		}
		if !params && p.is(tPower) {
			p.cur++
			args = append(args, &node{kind: eSpread, s: "**", a: p.parseExpression()})
			if p.is(tComma) {
				p.cur++
			}
			continue
		}
		if !params && p.is(tMultiplicative) && p.toks[p.cur].val == "*" {
			p.cur++
			args = append(args, &node{kind: eSpread, s: "*", a: p.parseExpression()})
			if p.is(tComma) {
				p.cur++
			}
			continue
		}
		a := p.parseExpression()
		if p.is(tEquals) {
			p.cur++
			if a.kind != eIdent {
				p.fail("expected identifier for keyword argument")
			}
			a = &node{kind: eKwarg, s: a.s, a: p.parseExpression()}
			sawKw = true
		} else if sawKw {
			p.fail("positional arguments must come before keyword arguments")
		}
		args = append(args, a)
		if p.is(tComma) {
			p.cur++
		}
	}
	p.cur++
	return args
}

func (p *parser) parseMember(obj *node) *node {
	for p.is(tDot) || p.is(tOpenBracket) {
		computed := p.toks[p.cur].typ == tOpenBracket
		p.cur++
		if computed {
			obj = p.parseSubscript(obj)
			p.expect(tCloseBracket, "]")
			continue
		}
		prop := p.parsePrimary()
		if prop.kind != eIdent && prop.kind != eInt {
			p.fail("expected identifier or integer following dot operator")
		}
		obj = &node{kind: eMember, a: obj, b: prop}
	}
	return obj
}

func (p *parser) parseSubscript(obj *node) *node {
	var parts []*node
	slice := false
	for !p.is(tCloseBracket) {
		if p.cur >= len(p.toks) {
			p.fail("expected ]")
		}
		if p.is(tColon) {
			parts = append(parts, nil)
			p.cur++
			slice = true
			continue
		}
		parts = append(parts, p.parseExpression())
		if p.is(tColon) {
			p.cur++
			slice = true
		}
	}
	if len(parts) == 0 {
		p.fail("expected at least one argument for member/slice expression")
	}
	if slice {
		if len(parts) > 3 {
			p.fail("expected 0-3 arguments for slice expression")
		}
		for len(parts) < 3 {
			parts = append(parts, nil)
		}
		return &node{kind: eSlice, a: obj, list: parts}
	}
	return &node{kind: eMember, a: obj, b: parts[0], computed: true}
}

func (p *parser) parsePrimary() *node {
	if p.cur >= len(p.toks) {
		p.fail("unexpected end of template")
	}
	t := p.toks[p.cur]
	p.cur++
	switch t.typ {
	case tNumber:
		if strings.Contains(t.val, ".") {
			f, err := strconv.ParseFloat(t.val, 64)
			if err != nil {
				p.fail("bad number %q", t.val)
			}
			return &node{kind: eFloat, f: f}
		}
		n, err := strconv.ParseInt(t.val, 10, 64)
		if err != nil {
			p.fail("bad number %q", t.val)
		}
		return &node{kind: eInt, n: n}
	case tString:
		s := t.val
		for p.is(tString) {
			s += p.toks[p.cur].val
			p.cur++
		}
		return &node{kind: eString, s: s}
	case tIdent:
		return &node{kind: eIdent, s: t.val}
	case tOpenParen:
		e := p.parseExpressionSequence(false)
		p.expect(tCloseParen, ")")
		return e
	case tOpenBracket:
		n := &node{kind: eArray}
		for !p.is(tCloseBracket) {
			if p.cur >= len(p.toks) {
				p.fail("expected ]")
			}
			n.list = append(n.list, p.parseExpression())
			if p.is(tComma) {
				p.cur++
			}
		}
		p.cur++
		return n
	case tOpenCurly:
		n := &node{kind: eObject}
		for !p.is(tCloseCurly) {
			if p.cur >= len(p.toks) {
				p.fail("expected }")
			}
			k := p.parseExpression()
			p.expect(tColon, "a colon between key and value in object literal")
			n.list = append(n.list, k)
			n.alt = append(n.alt, p.parseExpression())
			if p.is(tComma) {
				p.cur++
			}
		}
		p.cur++
		return n
	}
	p.cur--
	p.fail("unexpected token")
	return nil
}
