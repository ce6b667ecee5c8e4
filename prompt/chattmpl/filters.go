package chattmpl

import (
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// stringMethods are the Python str methods templates call (the reference's
// StringValue builtins; strip/lstrip/rstrip take Python's optional chars
// argument, which the reference ignores: see doc.go).
var stringMethods map[string]method

// objectMethods are the dict methods templates call.
var objectMethods map[string]method

func init() {
	stringMethods = map[string]method{
		"upper": func(_ *renderer, s Value, _ []Value, _ *object) Value { return StringValue(strings.ToUpper(s.s)) },
		"lower": func(_ *renderer, s Value, _ []Value, _ *object) Value { return StringValue(strings.ToLower(s.s)) },
		"strip": func(_ *renderer, s Value, a []Value, _ *object) Value {
			return StringValue(pyStrip(s.s, a, true, true))
		},
		"lstrip": func(_ *renderer, s Value, a []Value, _ *object) Value {
			return StringValue(pyStrip(s.s, a, true, false))
		},
		"rstrip": func(_ *renderer, s Value, a []Value, _ *object) Value {
			return StringValue(pyStrip(s.s, a, false, true))
		},
		"title":      func(_ *renderer, s Value, _ []Value, _ *object) Value { return StringValue(titleCase(s.s)) },
		"capitalize": func(_ *renderer, s Value, _ []Value, _ *object) Value { return StringValue(capitalize(s.s)) },
		"startswith": func(_ *renderer, s Value, a []Value, _ *object) Value {
			return BoolValue(affix(s.s, a, "startswith", strings.HasPrefix))
		},
		"endswith": func(_ *renderer, s Value, a []Value, _ *object) Value {
			return BoolValue(affix(s.s, a, "endswith", strings.HasSuffix))
		},
		"split":   strSplit,
		"replace": strReplace,
		"find": func(_ *renderer, s Value, a []Value, _ *object) Value {
			if len(a) == 0 || a[0].kind != String {
				fail("find() argument must be a string")
			}
			i := strings.Index(s.s, a[0].s)
			if i > 0 {
				i = utf8.RuneCountInString(s.s[:i])
			}
			return IntValue(int64(i))
		},
		"count": func(_ *renderer, s Value, a []Value, _ *object) Value {
			if len(a) == 0 || a[0].kind != String {
				fail("count() argument must be a string")
			}
			if a[0].s == "" {
				return IntValue(int64(runeLen(s.s) + 1))
			}
			return IntValue(int64(strings.Count(s.s, a[0].s)))
		},
	}
	objectMethods = map[string]method{
		"get": func(_ *renderer, o Value, a []Value, kw *object) Value {
			if len(a) == 0 || a[0].kind != String {
				fail("Object key must be a string")
			}
			if v, ok := o.obj.get(a[0].s); ok {
				return v
			}
			if len(a) > 1 {
				return a[1]
			}
			return NullValue()
		},
		"items":  func(_ *renderer, o Value, _ []Value, _ *object) Value { return items(o.obj) },
		"keys":   func(_ *renderer, o Value, _ []Value, _ *object) Value { return keys(o.obj) },
		"values": func(_ *renderer, o Value, _ []Value, _ *object) Value { return values(o.obj) },
	}
}

func items(o *object) Value {
	l := make([]Value, len(o.keys))
	for i, k := range o.keys {
		l[i] = arrayValue([]Value{StringValue(k), o.vals[i]})
	}
	return arrayValue(l)
}

func keys(o *object) Value {
	l := make([]Value, len(o.keys))
	for i, k := range o.keys {
		l[i] = StringValue(k)
	}
	return arrayValue(l)
}

func values(o *object) Value {
	return arrayValue(append([]Value(nil), o.vals...))
}

// pyStrip is Python's str.strip/lstrip/rstrip: whitespace, or the given chars.
func pyStrip(s string, args []Value, left, right bool) string {
	if len(args) == 0 || args[0].kind == Null || args[0].kind == Undefined {
		if left {
			s = strings.TrimLeftFunc(s, isSpace)
		}
		if right {
			s = strings.TrimRightFunc(s, isSpace)
		}
		return s
	}
	if args[0].kind != String {
		fail("strip arg must be None or str")
	}
	cut := args[0].s
	if left {
		s = strings.TrimLeft(s, cut)
	}
	if right {
		s = strings.TrimRight(s, cut)
	}
	return s
}

func affix(s string, a []Value, name string, has func(string, string) bool) bool {
	if len(a) == 0 {
		fail("%s() requires at least one argument", name)
	}
	switch p := a[0]; {
	case p.kind == String:
		return has(s, p.s)
	case p.isList():
		for _, e := range p.list {
			if e.kind != String {
				fail("%s() tuple elements must be strings", name)
			}
			if has(s, e.s) {
				return true
			}
		}
		return false
	}
	fail("%s() argument must be a string or tuple of strings", name)
	return false
}

func strSplit(_ *renderer, s Value, a []Value, kw *object) Value {
	sep := NullValue()
	if len(a) > 0 {
		sep = a[0]
	}
	maxsplit := int64(-1)
	if len(a) > 1 {
		if a[1].kind != Int {
			fail("maxsplit argument must be a number")
		}
		maxsplit = a[1].n
	}
	var parts []string
	switch sep.kind {
	case Null, Undefined:
		text := strings.TrimLeftFunc(s.s, isSpace)
		for text != "" {
			if maxsplit >= 0 && int64(len(parts)) >= maxsplit {
				parts = append(parts, text)
				break
			}
			i := strings.IndexFunc(text, isSpace)
			if i < 0 {
				parts = append(parts, text)
				break
			}
			parts = append(parts, text[:i])
			text = strings.TrimLeftFunc(text[i:], isSpace)
		}
	case String:
		if sep.s == "" {
			fail("empty separator")
		}
		if maxsplit < 0 {
			parts = strings.Split(s.s, sep.s)
		} else {
			parts = strings.SplitN(s.s, sep.s, int(maxsplit)+1)
		}
	default:
		fail("sep argument must be a string or null")
	}
	l := make([]Value, len(parts))
	for i, p := range parts {
		l[i] = StringValue(p)
	}
	return arrayValue(l)
}

func strReplace(_ *renderer, s Value, a []Value, kw *object) Value {
	if len(a) < 2 {
		fail("replace() requires at least two arguments")
	}
	if a[0].kind != String || a[1].kind != String {
		fail("replace() arguments must be strings")
	}
	count := -1
	if len(a) > 2 {
		if a[2].kind != Int {
			fail("replace() count argument must be a number or null")
		}
		count = int(a[2].n)
	} else if kw != nil {
		if c, ok := kw.get("count"); ok && c.kind == Int {
			count = int(c.n)
		}
	}
	if n := strings.Count(s.s, a[0].s); n > 0 && len(a[1].s) > len(a[0].s) {
		checkLen(len(s.s) + n*(len(a[1].s)-len(a[0].s)))
	}
	return StringValue(strings.Replace(s.s, a[0].s, a[1].s, count))
}

func titleCase(s string) string {
	// The reference: /\b\w/g upper-cased.
	b := []byte(s)
	prevWord := false
	for i, c := range b {
		w := isWord(c)
		if w && !prevWord && c >= 'a' && c <= 'z' {
			b[i] = c - 32
		}
		prevWord = w
	}
	return string(b)
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToUpper(r)) + s[n:]
}

// test is `v is name`.
func (r *renderer) test(v Value, name string) bool {
	switch name {
	case "boolean":
		return v.kind == Bool
	case "callable":
		return v.kind == Func
	case "odd", "even":
		if v.kind != Int {
			fail("cannot %s on %s", name, v.kind)
		}
		return (v.n%2 != 0) == (name == "odd")
	case "false":
		return v.kind == Bool && v.n == 0
	case "true":
		return v.kind == Bool && v.n != 0
	case "none":
		return v.kind == Null
	case "string":
		return v.kind == String
	case "number":
		return v.isNumber()
	case "integer":
		return v.kind == Int
	case "iterable":
		return v.kind == Array || v.kind == String
	case "mapping":
		return v.kind == Object
	case "sequence":
		return v.isList() || v.kind == Object || v.kind == String
	case "lower":
		return v.kind == String && v.s == strings.ToLower(v.s)
	case "upper":
		return v.kind == String && v.s == strings.ToUpper(v.s)
	case "defined":
		return v.kind != Undefined
	case "undefined":
		return v.kind == Undefined
	}
	fail("Unknown test: %s", name)
	return false
}

// applyFilter is `v | name` or `v | name(args)`.
func (r *renderer) applyFilter(v Value, n *node) Value {
	name := n.s
	if !n.call {
		return r.simpleFilter(v, name)
	}
	args, kw := r.evalArgs(n.list)
	kwarg := func(k string) (Value, bool) {
		if kw == nil {
			return Value{}, false
		}
		return kw.get(k)
	}
	switch name {
	case "tojson":
		o := jsonOpts{undefinedAsNull: true}
		if x, ok := kwarg("indent"); ok && x.kind != Null {
			if x.kind != Int {
				fail("If set, indent must be a number")
			}
			if x.n > 64 {
				fail("tojson indent %d is too large (at most 64)", x.n)
			}
			o.indent, o.hasIndent = int(x.n), true
		}
		if x, ok := kwarg("ensure_ascii"); ok {
			if x.kind != Bool {
				fail("If set, ensure_ascii must be a boolean")
			}
			o.ensureASCII = x.n != 0
		}
		if x, ok := kwarg("sort_keys"); ok {
			if x.kind != Bool {
				fail("If set, sort_keys must be a boolean")
			}
			o.sortKeys = x.n != 0
		}
		if x, ok := kwarg("separators"); ok && x.kind != Null {
			if !x.isList() || len(x.list) != 2 || x.list[0].kind != String || x.list[1].kind != String {
				fail("separators must be a tuple of two strings")
			}
			o.itemSep, o.keySep = x.list[0].s, x.list[1].s
		}
		return StringValue(string(appendJSON(nil, v, o, 0)))
	case "join":
		var parts []string
		switch {
		case v.kind == String:
			for _, c := range v.s {
				parts = append(parts, string(c))
			}
		case v.isList():
			for _, e := range v.list {
				parts = append(parts, jsString(e))
			}
		default:
			fail("Cannot apply filter \"join\" to type: %s", v.kind)
		}
		sep := ""
		if len(args) > 0 {
			if args[0].kind != String {
				fail("separator must be a string")
			}
			sep = args[0].s
		} else if x, ok := kwarg("separator"); ok {
			if x.kind != String {
				fail("separator must be a string")
			}
			sep = x.s
		}
		checkLen(len(parts) * (len(sep) + 1))
		out := strings.Join(parts, sep)
		checkLen(len(out))
		return StringValue(out)
	case "default", "d":
		def := StringValue("")
		if len(args) > 0 {
			def = args[0]
		}
		boolean := false
		if len(args) > 1 {
			boolean = args[1].truth()
		} else if x, ok := kwarg("boolean"); ok {
			boolean = x.truth()
		}
		if v.kind == Undefined || boolean && !v.truth() {
			return def
		}
		return v
	case "indent":
		if v.kind != String {
			break
		}
		width := int64(4)
		if len(args) > 0 {
			width = args[0].n
		} else if x, ok := kwarg("width"); ok {
			width = x.n
		}
		first, blank := false, false
		if len(args) > 1 {
			first = args[1].truth()
		} else if x, ok := kwarg("first"); ok {
			first = x.truth()
		}
		if len(args) > 2 {
			blank = args[2].truth()
		} else if x, ok := kwarg("blank"); ok {
			blank = x.truth()
		}
		width = max(0, min(width, maxBytes))
		checkLen(int(width) * (strings.Count(v.s, "\n") + 1))
		return StringValue(indent(v.s, int(width), first, blank))
	case "replace":
		if v.kind == String {
			return strReplace(r, v, args, kw)
		}
	case "map":
		if !v.isList() {
			break
		}
		attr, ok := kwarg("attribute")
		if !ok {
			fail("`map` expressions without `attribute` set are not currently supported.")
		}
		def, hasDef := kwarg("default")
		l := make([]Value, len(v.list))
		for i, e := range v.list {
			if !e.isMap() {
				fail("items in map must be an object")
			}
			x := attrPath(e, attr.s)
			if x.kind == Undefined && hasDef {
				x = def
			}
			l[i] = x
		}
		return arrayValue(l)
	case "selectattr", "rejectattr":
		if !v.isList() {
			break
		}
		if len(args) == 0 || args[0].kind != String {
			fail("arguments of `%s` must be strings", name)
		}
		var out []Value
		for _, e := range v.list {
			if !e.isMap() {
				fail("`%s` can only be applied to array of objects", name)
			}
			a, _ := e.obj.get(args[0].s)
			var res bool
			if a.kind != Undefined {
				switch {
				case len(args) > 1 && (args[1].s == "equalto" || args[1].s == "eq"):
					res = len(args) > 2 && strictValueEqual(a, args[2])
				case len(args) > 1:
					res = r.test(a, args[1].s)
				default:
					res = a.truth()
				}
			}
			if res == (name == "selectattr") {
				out = append(out, e)
			}
		}
		return arrayValue(out)
	case "int", "float":
		return numFilter(v, name, args)
	case "items", "length", "trim", "string", "upper", "lower", "list", "first", "last", "reverse", "unique", "safe", "abs", "title", "capitalize":
		return r.simpleFilter(v, name)
	}
	fail("Cannot apply filter \"%s\" to type: %s", name, v.kind)
	return Value{}
}

func attrPath(v Value, path string) Value {
	for _, part := range strings.Split(path, ".") {
		switch {
		case v.isMap():
			v, _ = v.obj.get(part)
		case v.isList():
			i, err := strconv.Atoi(part)
			if err != nil || i < 0 || i >= len(v.list) {
				return Value{}
			}
			v = v.list[i]
		default:
			return Value{}
		}
	}
	return v
}

func indent(s string, width int, first, blank bool) string {
	lines := strings.Split(s, "\n")
	pad := strings.Repeat(" ", width)
	for i, l := range lines {
		if (i == 0 && !first) || (l == "" && !blank) {
			continue
		}
		lines[i] = pad + l
	}
	return strings.Join(lines, "\n")
}

func numFilter(v Value, name string, args []Value) Value {
	switch v.kind {
	case String:
		if name == "int" {
			if n, err := strconv.ParseInt(leadingInt(v.s), 10, 64); err == nil {
				return IntValue(n)
			}
		} else if f, err := strconv.ParseFloat(strings.TrimSpace(v.s), 64); err == nil {
			return floatValue(f)
		}
		if len(args) > 0 {
			return args[0]
		}
		if name == "int" {
			return IntValue(0)
		}
		return floatValue(0)
	case Int:
		if name == "float" {
			return floatValue(float64(v.n))
		}
		return v
	case Float:
		if name == "int" {
			return IntValue(int64(math.Floor(v.f)))
		}
		return v
	case Bool:
		if name == "int" {
			return IntValue(v.n)
		}
		return floatValue(float64(v.n))
	}
	fail("Cannot apply filter \"%s\" to type: %s", name, v.kind)
	return Value{}
}

func leadingInt(s string) string {
	s = strings.TrimLeftFunc(s, isSpace)
	i := 0
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		i++
	}
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	return s[:i]
}

// simpleFilter is a filter without arguments.
func (r *renderer) simpleFilter(v Value, name string) Value {
	switch name {
	case "safe":
		return v
	case "tojson":
		return StringValue(string(appendJSON(nil, v, jsonOpts{undefinedAsNull: true}, 0)))
	}
	switch {
	case v.isList():
		switch name {
		case "list":
			return v
		case "first":
			if len(v.list) == 0 {
				return Value{}
			}
			return v.list[0]
		case "last":
			if len(v.list) == 0 {
				return Value{}
			}
			return v.list[len(v.list)-1]
		case "length", "count":
			return IntValue(int64(len(v.list)))
		case "reverse":
			l := make([]Value, len(v.list))
			for i, e := range v.list {
				l[len(l)-1-i] = e
			}
			return arrayValue(l)
		case "join":
			var b strings.Builder
			for _, e := range v.list {
				b.WriteString(jsString(e))
			}
			return StringValue(b.String())
		case "string":
			return StringValue(string(appendJSON(nil, v, jsonOpts{}, 0)))
		case "sort":
			l := append([]Value(nil), v.list...)
			sort.SliceStable(l, func(i, j int) bool { return compareValues(l[i], l[j]) < 0 })
			return arrayValue(l)
		case "unique":
			var out []Value
			for _, e := range v.list {
				dup := false
				for _, o := range out {
					if strictValueEqual(o, e) {
						dup = true
						break
					}
				}
				if !dup {
					out = append(out, e)
				}
			}
			return arrayValue(out)
		}
		fail("Unknown ArrayValue filter: %s", name)
	case v.kind == String:
		switch name {
		case "length", "count":
			return IntValue(int64(runeLen(v.s)))
		case "upper":
			return StringValue(strings.ToUpper(v.s))
		case "lower":
			return StringValue(strings.ToLower(v.s))
		case "title":
			return StringValue(titleCase(v.s))
		case "capitalize":
			return StringValue(capitalize(v.s))
		case "trim":
			return StringValue(trimSpaceJS(v.s))
		case "indent":
			return StringValue(indent(v.s, 4, false, false))
		case "join", "string":
			return v
		case "int", "float":
			return numFilter(v, name, nil)
		case "list":
			var l []Value
			for _, c := range v.s {
				l = append(l, StringValue(string(c)))
			}
			return arrayValue(l)
		case "first":
			for _, c := range v.s {
				return StringValue(string(c))
			}
			return Value{}
		case "last":
			if v.s == "" {
				return Value{}
			}
			c, _ := utf8.DecodeLastRuneInString(v.s)
			return StringValue(string(c))
		case "reverse":
			rs := []rune(v.s)
			for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
				rs[i], rs[j] = rs[j], rs[i]
			}
			return StringValue(string(rs))
		}
		fail("Unknown StringValue filter: %s", name)
	case v.isNumber():
		switch name {
		case "abs":
			if v.kind == Int {
				if v.n < 0 {
					return IntValue(-v.n)
				}
				return v
			}
			return floatValue(math.Abs(v.f))
		case "int", "float":
			return numFilter(v, name, nil)
		case "string":
			return StringValue(v.String())
		}
		fail("Unknown NumericValue filter: %s", name)
	case v.kind == Object:
		switch name {
		case "items":
			return items(v.obj)
		case "length", "count":
			return IntValue(int64(v.obj.len()))
		case "keys":
			return keys(v.obj)
		case "values":
			return values(v.obj)
		case "string":
			return StringValue(v.String())
		}
		fail("Unknown ObjectValue filter: %s", name)
	case v.kind == Bool:
		switch name {
		case "bool":
			return v
		case "int":
			return IntValue(v.n)
		case "float":
			return floatValue(float64(v.n))
		case "string":
			return StringValue(v.String())
		}
		fail("Unknown BooleanValue filter: %s", name)
	}
	fail("Cannot apply filter \"%s\" to type: %s", name, v.kind)
	return Value{}
}

// compareValues orders values for |sort: numbers numerically, strings
// case-insensitively (the reference's default).
func compareValues(a, b Value) int {
	if a.isNumericLike() && b.isNumericLike() {
		x, y := a.num(), b.num()
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	}
	if a.kind == String && b.kind == String {
		return strings.Compare(strings.ToLower(a.s), strings.ToLower(b.s))
	}
	fail("Cannot compare %s with %s", a.kind, b.kind)
	return 0
}
