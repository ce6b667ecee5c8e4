package chattmpl

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// scope is one level of variables: the render's globals, a for loop, a macro
// call. The first few variables live in the scope itself (a for loop sets
// loop, its variable and a couple of locals): setting them allocates nothing.
type scope struct {
	parent *scope
	vars   []entry
	inl    [4]entry
}

type entry struct {
	name string
	val  Value
}

func newScope(parent *scope) *scope {
	s := &scope{parent: parent}
	s.vars = s.inl[:0]
	return s
}

func (s *scope) lookup(name string) (Value, bool) {
	for ; s != nil; s = s.parent {
		for i := len(s.vars) - 1; i >= 0; i-- {
			if s.vars[i].name == name {
				return s.vars[i].val, true
			}
		}
	}
	return Value{}, false
}

func (s *scope) set(name string, v Value) {
	for i := range s.vars {
		if s.vars[i].name == name {
			s.vars[i].val = v
			return
		}
	}
	s.vars = append(s.vars, entry{name, v})
}

// RenderError is a template that failed on a conversation: raise_exception,
// a type error, an unknown filter. Its message is the template's or the
// reference renderer's wording where one exists.
type RenderError struct{ Msg string }

func (e *RenderError) Error() string { return e.Msg }

type renderPanic struct{ err error }

func fail(format string, args ...any) {
	panic(renderPanic{&RenderError{Msg: fmt.Sprintf(format, args...)}})
}

type ctl uint8

const (
	ctlNone ctl = iota
	ctlBreak
	ctlContinue
)

// renderer is the state of one render. Not goroutine-safe; one per call.
type renderer struct {
	out   []byte
	sc    *scope
	now   func() time.Time
	steps int // loop iterations and macro calls so far (maxSteps)
	depth int // macro calls in progress (maxDepth)
}

// Bounds of one render: a template looping without end, or recursing, fails
// the request instead of holding a core or overflowing the stack. A chat
// template scans its messages a few times; 1<<20 steps allow 1,000 messages
// scanned pairwise.
const (
	maxSteps = 1 << 20
	maxDepth = 200
	maxBytes = 32 << 20 // output, and any string or list built, in bytes or items
)

// checkLen fails a render whose output or a value built in it grew past maxBytes.
func checkLen(n int) {
	if n > maxBytes {
		fail("the template built more than %d bytes", maxBytes)
	}
}

func (r *renderer) step() {
	r.steps++
	if r.steps > maxSteps {
		fail("the template ran more than %d loop iterations and macro calls", maxSteps)
	}
}

// builtins are the globals every render sees (the reference's setupGlobals).
var builtins = newScope(nil)

func init() {
	builtins.set("false", BoolValue(false))
	builtins.set("true", BoolValue(true))
	builtins.set("none", NullValue())
	builtins.set("False", BoolValue(false))
	builtins.set("True", BoolValue(true))
	builtins.set("None", NullValue())
	builtins.set("namespace", funcValue(fnNamespace))
	builtins.set("raise_exception", funcValue(func(_ *renderer, args []Value, _ *object) (Value, error) {
		msg := ""
		if len(args) > 0 {
			msg = args[0].String()
		}
		return Value{}, &RenderError{Msg: msg}
	}))
	builtins.set("range", funcValue(fnRange))
	builtins.set("strftime_now", funcValue(func(r *renderer, args []Value, _ *object) (Value, error) {
		if len(args) == 0 || args[0].kind != String {
			return Value{}, &RenderError{Msg: "strftime_now expects a format string"}
		}
		return StringValue(strftime(r.now(), args[0].s)), nil
	}))
}

func fnNamespace(_ *renderer, args []Value, kw *object) (Value, error) {
	if len(args) > 1 {
		return Value{}, &RenderError{Msg: fmt.Sprintf("namespace expected at most 1 argument, got %d", len(args))}
	}
	ns := &object{}
	if len(args) == 1 {
		src := args[0]
		switch {
		case src.kind == Object:
			for i, k := range src.obj.keys {
				ns.set(k, src.obj.vals[i])
			}
		default:
			return Value{}, &RenderError{Msg: fmt.Sprintf("'%s' object is not iterable", src.kind)}
		}
	}
	if kw != nil {
		for i, k := range kw.keys {
			ns.set(k, kw.vals[i])
		}
	}
	return Value{kind: Namespace, obj: ns}, nil
}

func fnRange(_ *renderer, args []Value, _ *object) (Value, error) {
	var start, stop, step int64 = 0, 0, 1
	for _, a := range args {
		if a.kind != Int {
			return Value{}, &RenderError{Msg: "range() arguments must be integers"}
		}
	}
	switch len(args) {
	case 1:
		stop = args[0].n
	case 2:
		start, stop = args[0].n, args[1].n
	case 3:
		start, stop, step = args[0].n, args[1].n, args[2].n
	default:
		return Value{}, &RenderError{Msg: "range() takes 1 to 3 arguments"}
	}
	if step == 0 {
		return Value{}, &RenderError{Msg: "range() step must not be zero"}
	}
	var l []Value
	for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
		if len(l) > 1<<20 {
			return Value{}, &RenderError{Msg: "range() too long"}
		}
		l = append(l, IntValue(i))
	}
	return arrayValue(l), nil
}

// strftime formats t with the directives the reference supports.
func strftime(t time.Time, f string) string {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		if f[i] != '%' || i+1 >= len(f) {
			b.WriteByte(f[i])
			continue
		}
		i++
		switch f[i] {
		case 'Y':
			b.WriteString(strconv.Itoa(t.Year()))
		case 'm':
			fmt.Fprintf(&b, "%02d", int(t.Month()))
		case 'd':
			fmt.Fprintf(&b, "%02d", t.Day())
		case 'b':
			b.WriteString(t.Month().String()[:3])
		case 'B':
			b.WriteString(t.Month().String())
		case 'H':
			fmt.Fprintf(&b, "%02d", t.Hour())
		case 'M':
			fmt.Fprintf(&b, "%02d", t.Minute())
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(f[i])
		}
	}
	return b.String()
}

// exec runs a block, appending its output to r.out.
func (r *renderer) exec(body []*node) ctl {
	for _, n := range body {
		switch n.kind {
		case nText:
			r.out = append(r.out, n.s...)
			checkLen(len(r.out))
		case nComment:
		case nIf:
			var c ctl
			if r.eval(n.a).truth() {
				c = r.exec(n.list)
			} else {
				c = r.exec(n.alt)
			}
			if c != ctlNone {
				return c
			}
		case nFor:
			r.execFor(n)
		case nSet:
			r.execSet(n)
		case nMacro:
			r.defineMacro(n)
		case nBreak:
			return ctlBreak
		case nContinue:
			return ctlContinue
		default:
			r.out = r.eval(n).appendString(r.out)
			checkLen(len(r.out))
		}
	}
	return ctlNone
}

func (r *renderer) execSet(n *node) {
	var v Value
	if n.b != nil {
		v = r.eval(n.b)
	} else {
		v = r.capture(n.list)
	}
	switch lhs := n.a; lhs.kind {
	case eIdent:
		r.sc.set(lhs.s, v)
	case eTuple:
		if !v.isList() {
			fail("Cannot unpack non-iterable type in set: %s", v.kind)
		}
		if len(v.list) != len(lhs.list) {
			fail("Too %s items to unpack in set", fewMany(len(lhs.list), len(v.list)))
		}
		for i, e := range lhs.list {
			if e.kind != eIdent {
				fail("Cannot unpack to non-identifier in set")
			}
			r.sc.set(e.s, v.list[i])
		}
	case eMember:
		obj := r.eval(lhs.a)
		if obj.kind != Namespace {
			fail("cannot assign attribute on non-namespace object")
		}
		if lhs.b.kind != eIdent {
			fail("Cannot assign to member with non-identifier property")
		}
		obj.obj.set(lhs.b.s, v)
	}
}

func fewMany(want, got int) string {
	if want > got {
		return "few"
	}
	return "many"
}

// capture renders body into a string.
func (r *renderer) capture(body []*node) Value {
	start := len(r.out)
	r.exec(body)
	s := string(r.out[start:])
	r.out = r.out[:start]
	return StringValue(s)
}

func (r *renderer) execFor(n *node) {
	outer := r.sc
	sc := newScope(outer)
	r.sc = sc
	defer func() { r.sc = outer }()
	var items []Value
	test := (*node)(nil)
	iterExpr := n.b
	if iterExpr.kind == eSelect {
		test = iterExpr.b
		iterExpr = iterExpr.a
	}
	it := r.eval(iterExpr)
	switch it.kind {
	case Array, Tuple:
		items = it.list
	case Object:
		items = make([]Value, len(it.obj.keys))
		for i, k := range it.obj.keys {
			items[i] = StringValue(k)
		}
	default:
		fail("Expected iterable or object type in for loop: got %s", it.kind)
	}
	if test != nil {
		var kept []Value
		for _, v := range items {
			r.step()
			r.bindLoopVar(n.a, v)
			if r.eval(test).truth() {
				kept = append(kept, v)
			}
		}
		items = kept
	}
	loopVal := Value{kind: Object, obj: &object{keys: loopKeys[:], vals: make([]Value, len(loopKeys))}}
	ran := false
	for i, v := range items {
		r.step()
		fillLoop(loopVal.obj.vals, items, i)
		sc.set("loop", loopVal)
		r.bindLoopVar(n.a, v)
		c := r.exec(n.list)
		ran = true
		if c == ctlBreak {
			break
		}
	}
	if !ran {
		r.exec(n.alt)
	}
}

var loopKeys = [...]string{"index", "index0", "revindex", "revindex0", "first", "last", "length", "previtem", "nextitem"}

func fillLoop(vals []Value, items []Value, i int) {
	n := len(items)
	vals[0] = IntValue(int64(i + 1))
	vals[1] = IntValue(int64(i))
	vals[2] = IntValue(int64(n - i))
	vals[3] = IntValue(int64(n - i - 1))
	vals[4] = BoolValue(i == 0)
	vals[5] = BoolValue(i == n-1)
	vals[6] = IntValue(int64(n))
	if i > 0 {
		vals[7] = items[i-1]
	} else {
		vals[7] = Value{}
	}
	if i < n-1 {
		vals[8] = items[i+1]
	} else {
		vals[8] = Value{}
	}
}

func (r *renderer) bindLoopVar(target *node, v Value) {
	if target.kind == eIdent {
		r.sc.set(target.s, v)
		return
	}
	if !v.isList() {
		fail("Cannot unpack non-iterable type: %s", v.kind)
	}
	if len(v.list) != len(target.list) {
		fail("Too %s items to unpack", fewMany(len(target.list), len(v.list)))
	}
	for i, e := range target.list {
		r.sc.set(e.s, v.list[i])
	}
}

func (r *renderer) defineMacro(n *node) {
	params := n.alt
	body := n.list
	name := n.s
	r.sc.set(name, funcValue(func(r *renderer, args []Value, kw *object) (Value, error) {
		r.step()
		if r.depth >= maxDepth {
			return Value{}, &RenderError{Msg: fmt.Sprintf("macro %s: calls nested more than %d deep", name, maxDepth)}
		}
		r.depth++
		defer func() { r.depth-- }()
		outer := r.sc
		sc := newScope(outer)
		r.sc = sc
		defer func() { r.sc = outer }()
		var pending []*node
		for i, p := range params {
			pname := p.s
			var v Value
			have := false
			if i < len(args) {
				v, have = args[i], true
			} else if kw != nil {
				if kv, ok := kw.get(pname); ok {
					v, have = kv, true
				}
			}
			if !have && p.kind == eKwarg {
				pending = append(pending, p)
			}
			sc.set(pname, v)
		}
		if len(args) > len(params) {
			return Value{}, &RenderError{Msg: fmt.Sprintf("macro '%s' takes not more than %d argument(s)", name, len(params))}
		}
		for _, p := range pending {
			sc.set(p.s, r.eval(p.a))
		}
		return r.capture(body), nil
	}))
}

// eval evaluates an expression.
func (r *renderer) eval(n *node) Value {
	switch n.kind {
	case eString, nText:
		return StringValue(n.s)
	case eInt:
		return IntValue(n.n)
	case eFloat:
		return floatValue(n.f)
	case eIdent:
		v, _ := r.sc.lookup(n.s)
		return v
	case eArray, eTuple:
		l := make([]Value, len(n.list))
		for i, e := range n.list {
			l[i] = r.eval(e)
		}
		if n.kind == eTuple {
			return Value{kind: Tuple, list: l}
		}
		return arrayValue(l)
	case eObject:
		o := &object{}
		for i, k := range n.list {
			kv := r.eval(k)
			if kv.kind != String {
				fail("Object keys must be strings: got %s", kv.kind)
			}
			o.set(kv.s, r.eval(n.alt[i]))
		}
		return objectValue(o)
	case eMember:
		return r.evalMember(n)
	case eSlice:
		return r.evalSlice(n)
	case eCall:
		return r.evalCall(n)
	case eUnary:
		return r.evalUnary(n)
	case eBinary:
		return r.evalBinary(n)
	case eFilter:
		return r.applyFilter(r.eval(n.a), n)
	case eTest:
		return BoolValue(r.test(r.eval(n.a), n.s) != n.neg)
	case eSelect:
		if !r.eval(n.b).truth() {
			return Value{}
		}
		return r.eval(n.a)
	case eTernary:
		if r.eval(n.a).truth() {
			return r.eval(n.b)
		}
		return r.eval(n.c)
	case nIf, nFor, nSet, nMacro, nBreak, nContinue, nComment:
		fail("statement used as an expression")
	}
	fail("cannot evaluate node %d", n.kind)
	return Value{}
}

func (r *renderer) evalMember(n *node) Value {
	obj := r.eval(n.a)
	var prop Value
	switch {
	case n.computed:
		prop = r.eval(n.b)
	case n.b.kind == eInt:
		prop = IntValue(n.b.n)
	default:
		prop = StringValue(n.b.s)
	}
	return member(obj, prop)
}

// member is obj[prop] / obj.prop as the reference resolves it.
func member(obj, prop Value) Value {
	switch obj.kind {
	case Object, Namespace:
		if prop.kind != String {
			fail("Cannot access property with non-string: got %s", prop.kind)
		}
		if v, ok := obj.obj.get(prop.s); ok {
			return v
		}
		if obj.kind == Object {
			if m, ok := objectMethods[prop.s]; ok {
				return boundMethod(obj, m)
			}
		}
		return Value{}
	case Array, Tuple, String:
		switch prop.kind {
		case Int:
			if obj.kind == String {
				rs := []rune(obj.s)
				i := prop.n
				if i < 0 {
					i += int64(len(rs))
				}
				if i < 0 || i >= int64(len(rs)) {
					return Value{}
				}
				return StringValue(string(rs[i]))
			}
			i := prop.n
			if i < 0 {
				i += int64(len(obj.list))
			}
			if i < 0 || i >= int64(len(obj.list)) {
				return Value{}
			}
			return obj.list[i]
		case String:
			if prop.s == "length" {
				if obj.kind == String {
					return IntValue(int64(runeLen(obj.s)))
				}
				return IntValue(int64(len(obj.list)))
			}
			if obj.kind == String {
				if m, ok := stringMethods[prop.s]; ok {
					return boundMethod(obj, m)
				}
			}
			return Value{}
		}
		fail("Cannot access property with non-string/non-number: got %s", prop.kind)
	}
	if prop.kind != String {
		fail("Cannot access property with non-string: got %s", prop.kind)
	}
	return Value{}
}

type method func(r *renderer, self Value, args []Value, kw *object) Value

func boundMethod(self Value, m method) Value {
	return funcValue(func(r *renderer, args []Value, kw *object) (Value, error) {
		return m(r, self, args, kw), nil
	})
}

func runeLen(s string) int {
	n := 0
	for range s {
		n++
	}
	return n
}

func (r *renderer) evalSlice(n *node) Value {
	obj := r.eval(n.a)
	if !obj.isList() && obj.kind != String {
		fail("Slice object must be an array or string")
	}
	var bounds [3]*int64
	for i, e := range n.list {
		if e == nil {
			continue
		}
		v := r.eval(e)
		switch v.kind {
		case Int:
			x := v.n
			bounds[i] = &x
		case Undefined:
		default:
			fail("Slice %s must be numeric or undefined", [...]string{"start", "stop", "step"}[i])
		}
	}
	if obj.kind == String {
		rs := []rune(obj.s)
		idx := sliceIndexes(len(rs), bounds)
		out := make([]rune, 0, len(idx))
		for _, i := range idx {
			out = append(out, rs[i])
		}
		return StringValue(string(out))
	}
	idx := sliceIndexes(len(obj.list), bounds)
	l := make([]Value, len(idx))
	for j, i := range idx {
		l[j] = obj.list[i]
	}
	return arrayValue(l)
}

// sliceIndexes is the reference's (and Python's) slice index selection.
func sliceIndexes(n int, b [3]*int64) []int {
	step := int64(1)
	if b[2] != nil {
		step = *b[2]
	}
	if step == 0 {
		fail("slice step cannot be zero")
	}
	ln := int64(n)
	var start, stop int64
	if step > 0 {
		start, stop = 0, ln
		if b[0] != nil {
			start = *b[0]
			if start < 0 {
				start = max(ln+start, 0)
			} else {
				start = min(start, ln)
			}
		}
		if b[1] != nil {
			stop = *b[1]
			if stop < 0 {
				stop = max(ln+stop, 0)
			} else {
				stop = min(stop, ln)
			}
		}
	} else {
		start, stop = ln-1, -1
		if b[0] != nil {
			start = *b[0]
			if start < 0 {
				start = max(ln+start, -1)
			} else {
				start = min(start, ln-1)
			}
		}
		if b[1] != nil {
			stop = *b[1]
			if stop < -1 {
				stop = max(ln+stop, -1)
			} else {
				stop = min(stop, ln-1)
			}
		}
	}
	var idx []int
	for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
		idx = append(idx, int(i))
	}
	return idx
}

// evalArgs evaluates call arguments into positional values and keywords.
func (r *renderer) evalArgs(args []*node) ([]Value, *object) {
	var pos []Value
	var kw *object
	if len(args) > 0 {
		pos = make([]Value, 0, len(args))
	}
	for _, a := range args {
		switch a.kind {
		case eKwarg:
			if kw == nil {
				kw = &object{}
			}
			if _, dup := kw.get(a.s); dup {
				fail("Got multiple values for keyword argument '%s'", a.s)
			}
			kw.set(a.s, r.eval(a.a))
		case eSpread:
			v := r.eval(a.a)
			if a.s == "*" {
				if !v.isList() {
					fail("Cannot unpack non-iterable type: %s", v.kind)
				}
				pos = append(pos, v.list...)
			} else {
				if v.kind != Object {
					fail("Argument after ** must be a mapping, not %s", v.kind)
				}
				if kw == nil {
					kw = &object{}
				}
				for i, k := range v.obj.keys {
					kw.set(k, v.obj.vals[i])
				}
			}
		default:
			pos = append(pos, r.eval(a))
		}
	}
	return pos, kw
}

func (r *renderer) evalCall(n *node) Value {
	// obj.method(...): dispatch without a bound closure.
	if c := n.a; c.kind == eMember && !c.computed && c.b.kind == eIdent {
		obj := r.eval(c.a)
		var m method
		switch obj.kind {
		case String:
			m = stringMethods[c.b.s]
		case Object:
			if _, ok := obj.obj.get(c.b.s); !ok {
				m = objectMethods[c.b.s]
			}
		}
		if m != nil {
			args, kw := r.evalArgs(n.list)
			return m(r, obj, args, kw)
		}
		return r.call(member(obj, StringValue(c.b.s)), n.list)
	}
	return r.call(r.eval(n.a), n.list)
}

func (r *renderer) call(fn Value, argNodes []*node) Value {
	args, kw := r.evalArgs(argNodes)
	if fn.kind != Func {
		fail("Cannot call something that is not a function: got %s", fn.kind)
	}
	v, err := fn.fn(r, args, kw)
	if err != nil {
		panic(renderPanic{err})
	}
	return v
}

func (r *renderer) evalUnary(n *node) Value {
	v := r.eval(n.a)
	switch n.s {
	case "not":
		return BoolValue(!v.truth())
	case "-", "+":
		sign := int64(1)
		if n.s == "-" {
			sign = -1
		}
		switch v.kind {
		case Int, Bool:
			return IntValue(sign * v.n)
		case Float:
			return floatValue(float64(sign) * v.f)
		}
		fail("Unknown operator \"%s\" for %s", n.s, v.kind)
	}
	fail("Unknown operator: %s", n.s)
	return Value{}
}

// looseEqual is the reference's ==: JavaScript's loose equality of the
// underlying values.
func looseEqual(a, b Value) bool {
	an, bn := a.kind == Null || a.kind == Undefined, b.kind == Null || b.kind == Undefined
	if an || bn {
		return an && bn
	}
	if a.isNumericLike() && b.isNumericLike() {
		return a.num() == b.num()
	}
	if a.kind == String && b.kind == String {
		return a.s == b.s
	}
	if a.kind == String && b.isNumericLike() {
		return jsNumber(a.s) == b.num()
	}
	if b.kind == String && a.isNumericLike() {
		return jsNumber(b.s) == a.num()
	}
	if a.isList() && b.isList() {
		return len(a.list) == len(b.list) && (len(a.list) == 0 && a.list == nil && b.list == nil || len(a.list) > 0 && &a.list[0] == &b.list[0])
	}
	if a.isMap() && b.isMap() {
		return a.obj == b.obj
	}
	return false
}

func jsNumber(s string) float64 {
	s = trimSpaceJS(s)
	if s == "" {
		return 0
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return math.NaN()
	}
	return f
}

// jsString is String(value) of the reference's underlying JavaScript value.
func jsString(v Value) string {
	switch v.kind {
	case String:
		return v.s
	case Int:
		return strconv.FormatInt(v.n, 10)
	case Float:
		return string(appendJSNumber(nil, v.f))
	case Bool:
		if v.n != 0 {
			return "true"
		}
		return "false"
	case Array, Tuple:
		// Array.prototype.toString: the elements' toString joined by ",".
		var b []byte
		for i, e := range v.list {
			if i > 0 {
				b = append(b, ',')
			}
			b = e.appendString(b)
		}
		return string(b)
	case Object, Namespace:
		return "[object Map]"
	case Null:
		return "null"
	}
	return "undefined"
}

func (r *renderer) evalBinary(n *node) Value {
	l := r.eval(n.a)
	switch n.s {
	case "and":
		if !l.truth() {
			return l
		}
		return r.eval(n.b)
	case "or":
		if l.truth() {
			return l
		}
		return r.eval(n.b)
	}
	rv := r.eval(n.b)
	op := n.s
	switch op {
	case "==":
		return BoolValue(looseEqual(l, rv))
	case "!=":
		return BoolValue(!looseEqual(l, rv))
	}
	if l.kind == Undefined || rv.kind == Undefined {
		if rv.kind == Undefined && (op == "in" || op == "not in") {
			return BoolValue(op == "not in")
		}
		fail("Cannot perform operation %s on undefined values", op)
	}
	if l.kind == Null || rv.kind == Null {
		fail("Cannot perform operation on null values")
	}
	if op == "~" {
		a, b := jsString(l), jsString(rv)
		checkLen(len(a) + len(b))
		return StringValue(a + b)
	}
	if op == "**" && l.isNumericLike() && rv.isNumericLike() {
		a, b := l.num(), rv.num()
		if a == 0 && b < 0 {
			fail("0.0 cannot be raised to a negative power")
		}
		res := math.Pow(a, b)
		if math.IsInf(res, 0) || math.IsNaN(res) {
			fail("Exponentiation result is not a finite real number")
		}
		if l.kind == Float || rv.kind == Float || b < 0 {
			return floatValue(res)
		}
		return IntValue(int64(res))
	}
	if l.isNumber() && rv.isNumber() {
		isFloat := l.kind == Float || rv.kind == Float
		if !isFloat {
			a, b := l.n, rv.n
			switch op {
			case "+":
				return IntValue(a + b)
			case "-":
				return IntValue(a - b)
			case "*":
				return IntValue(a * b)
			case "/":
				return floatValue(float64(a) / float64(b))
			case "//":
				if b == 0 {
					fail("integer division by zero")
				}
				return IntValue(int64(math.Floor(float64(a) / float64(b))))
			case "%":
				if b == 0 {
					fail("integer modulo by zero")
				}
				return IntValue(a % b)
			case "<":
				return BoolValue(a < b)
			case ">":
				return BoolValue(a > b)
			case "<=":
				return BoolValue(a <= b)
			case ">=":
				return BoolValue(a >= b)
			}
		} else {
			a, b := l.num(), rv.num()
			switch op {
			case "+":
				return floatValue(a + b)
			case "-":
				return floatValue(a - b)
			case "*":
				return floatValue(a * b)
			case "/":
				return floatValue(a / b)
			case "//":
				return floatValue(math.Floor(a / b))
			case "%":
				return floatValue(math.Mod(a, b))
			case "<":
				return BoolValue(a < b)
			case ">":
				return BoolValue(a > b)
			case "<=":
				return BoolValue(a <= b)
			case ">=":
				return BoolValue(a >= b)
			}
		}
	} else if l.isList() && rv.isList() {
		if op == "+" {
			checkLen(len(l.list) + len(rv.list))
			out := make([]Value, 0, len(l.list)+len(rv.list))
			return arrayValue(append(append(out, l.list...), rv.list...))
		}
	} else if rv.isList() {
		if op == "in" || op == "not in" {
			found := false
			for _, e := range rv.list {
				if strictValueEqual(e, l) {
					found = true
					break
				}
			}
			return BoolValue(found == (op == "in"))
		}
	}
	if l.kind == String || rv.kind == String {
		if op == "+" {
			a, b := jsString(l), jsString(rv)
			checkLen(len(a) + len(b))
			return StringValue(a + b)
		}
	}
	if l.kind == String && rv.kind == String {
		switch op {
		case "in":
			return BoolValue(strings.Contains(rv.s, l.s))
		case "not in":
			return BoolValue(!strings.Contains(rv.s, l.s))
		}
	}
	if l.kind == String && rv.kind == Object {
		_, ok := rv.obj.get(l.s)
		switch op {
		case "in":
			return BoolValue(ok)
		case "not in":
			return BoolValue(!ok)
		}
	}
	fail("Unknown operator \"%s\" between %s and %s", op, l.kind, rv.kind)
	return Value{}
}

// strictValueEqual is JavaScript's === on the underlying values (the
// reference's `in` over an array).
func strictValueEqual(a, b Value) bool {
	switch {
	case a.kind == String && b.kind == String:
		return a.s == b.s
	case a.isNumericLike() && b.isNumericLike():
		if (a.kind == Bool) != (b.kind == Bool) {
			return false
		}
		return a.num() == b.num()
	case a.kind == Null && b.kind == Null, a.kind == Undefined && b.kind == Undefined:
		return true
	case a.isList() && b.isList(), a.isMap() && b.isMap():
		return looseEqual(a, b)
	}
	return false
}
