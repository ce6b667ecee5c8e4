package chattmpl

import (
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/valyala/fastjson"
)

// Kind is the type of a Value.
type Kind uint8

// The kinds of Value, as @huggingface/jinja names its runtime values.
const (
	Undefined Kind = iota
	Null
	Bool
	Int
	Float
	String
	Array
	Tuple
	Object
	Namespace
	Func
)

var kindNames = [...]string{"UndefinedValue", "NullValue", "BooleanValue", "IntegerValue", "FloatValue",
	"StringValue", "ArrayValue", "TupleValue", "ObjectValue", "NamespaceValue", "FunctionValue"}

func (k Kind) String() string { return kindNames[k] }

// Value is a template value. The zero Value is Undefined. Arrays share their
// backing slice and objects their map when a Value is copied (Jinja values
// are references); nothing in a render mutates them except namespace
// attribute assignment.
type Value struct {
	kind Kind
	n    int64 // Int; Bool (0/1)
	f    float64
	s    string
	list []Value
	obj  *object
	fn   builtin
}

// builtin is a function value: positional arguments and keyword arguments.
type builtin func(r *renderer, args []Value, kw *object) (Value, error)

// object is an insertion-ordered map, like a Python dict or a JS Map: tojson
// and items() keep the order of the request's JSON. Lookups scan: message
// and tool objects have a handful of keys.
type object struct {
	keys []string
	vals []Value
}

func (o *object) get(k string) (Value, bool) {
	for i, key := range o.keys {
		if key == k {
			return o.vals[i], true
		}
	}
	return Value{}, false
}

func (o *object) set(k string, v Value) {
	for i, key := range o.keys {
		if key == k {
			o.vals[i] = v
			return
		}
	}
	o.keys = append(o.keys, k)
	o.vals = append(o.vals, v)
}

func (o *object) len() int { return len(o.keys) }

// Constructors.

// StringValue returns a string Value.
func StringValue(s string) Value { return Value{kind: String, s: s} }

// BoolValue returns a boolean Value.
func BoolValue(b bool) Value {
	if b {
		return Value{kind: Bool, n: 1}
	}
	return Value{kind: Bool}
}

// IntValue returns an integer Value.
func IntValue(n int64) Value { return Value{kind: Int, n: n} }

// NullValue is None.
func NullValue() Value { return Value{kind: Null} }

func floatValue(f float64) Value    { return Value{kind: Float, f: f} }
func arrayValue(l []Value) Value    { return Value{kind: Array, list: l} }
func objectValue(o *object) Value   { return Value{kind: Object, obj: o} }
func funcValue(fn builtin) Value    { return Value{kind: Func, fn: fn} }
func (v Value) Kind() Kind          { return v.kind }
func (v Value) isList() bool        { return v.kind == Array || v.kind == Tuple }
func (v Value) isMap() bool         { return v.kind == Object || v.kind == Namespace }
func (v Value) isNumber() bool      { return v.kind == Int || v.kind == Float }
func (v Value) isNumericLike() bool { return v.kind == Int || v.kind == Float || v.kind == Bool }
func (v Value) num() float64 {
	if v.kind == Float {
		return v.f
	}
	return float64(v.n)
}

// FromJSON converts a parsed JSON value; objects keep their key order.
func FromJSON(j *fastjson.Value) Value {
	if j == nil {
		return Value{}
	}
	switch j.Type() {
	case fastjson.TypeNull:
		return NullValue()
	case fastjson.TypeTrue:
		return BoolValue(true)
	case fastjson.TypeFalse:
		return BoolValue(false)
	case fastjson.TypeString:
		return StringValue(string(j.GetStringBytes()))
	case fastjson.TypeNumber:
		f := j.GetFloat64()
		// As JavaScript (and so the reference) does: an integral number is an integer.
		if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return IntValue(int64(f))
		}
		return floatValue(f)
	case fastjson.TypeArray:
		arr := j.GetArray()
		l := make([]Value, len(arr))
		for i, e := range arr {
			l[i] = FromJSON(e)
		}
		return arrayValue(l)
	case fastjson.TypeObject:
		o := j.GetObject()
		ob := &object{keys: make([]string, 0, o.Len()), vals: make([]Value, 0, o.Len())}
		o.Visit(func(k []byte, v *fastjson.Value) {
			ob.set(string(k), FromJSON(v))
		})
		return objectValue(ob)
	}
	return Value{}
}

// truth is Python's truthiness.
func (v Value) truth() bool {
	switch v.kind {
	case Bool, Int:
		return v.n != 0
	case Float:
		return v.f != 0
	case String:
		return v.s != ""
	case Array, Tuple:
		return len(v.list) > 0
	case Object:
		return v.obj.len() > 0
	case Namespace, Func:
		return true
	}
	return false
}

// appendString appends v as {{ v }} prints it (the reference's toString):
// none and undefined print nothing.
func (v Value) appendString(dst []byte) []byte {
	switch v.kind {
	case Undefined, Null:
		return dst
	case Bool:
		if v.n != 0 {
			return append(dst, "true"...)
		}
		return append(dst, "false"...)
	case Int:
		return strconv.AppendInt(dst, v.n, 10)
	case Float:
		return appendFloat(dst, v.f)
	case String:
		return append(dst, v.s...)
	case Array, Tuple, Object, Namespace:
		return appendJSON(dst, v, jsonOpts{undefinedAsNull: false}, 0)
	case Func:
		return append(dst, "[object Function]"...)
	}
	return dst
}

func (v Value) String() string {
	if v.kind == String {
		return v.s
	}
	return string(v.appendString(nil))
}

// appendFloat prints a float as the reference does: integral values with .0.
func appendFloat(dst []byte, f float64) []byte {
	if f == 0 && math.Signbit(f) {
		return append(dst, "-0.0"...)
	}
	if f == math.Trunc(f) && math.Abs(f) < 1e21 {
		dst = strconv.AppendFloat(dst, f, 'f', -1, 64)
		return append(dst, ".0"...)
	}
	return appendJSNumber(dst, f)
}

// appendJSNumber formats f as JavaScript's Number.prototype.toString.
func appendJSNumber(dst []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, "NaN"...)
	case math.IsInf(f, 1):
		return append(dst, "Infinity"...)
	case math.IsInf(f, -1):
		return append(dst, "-Infinity"...)
	}
	a := math.Abs(f)
	if a != 0 && (a < 1e-6 || a >= 1e21) {
		s := strconv.FormatFloat(f, 'e', -1, 64)
		// Go: 1e-07 / 1e+21; JS: 1e-7 / 1e+21.
		if i := strings.IndexByte(s, 'e'); i >= 0 {
			exp := s[i+2:]
			exp = strings.TrimLeft(exp, "0")
			if exp == "" {
				exp = "0"
			}
			s = s[:i+2] + exp
		}
		return append(dst, s...)
	}
	return strconv.AppendFloat(dst, f, 'f', -1, 64)
}

type jsonOpts struct {
	indent          int
	hasIndent       bool
	ensureASCII     bool
	sortKeys        bool
	itemSep, keySep string
	undefinedAsNull bool
}

func (o *jsonOpts) fill() {
	if o.itemSep == "" && o.keySep == "" {
		if o.hasIndent && o.indent > 0 {
			o.itemSep, o.keySep = ",", ": "
		} else {
			o.itemSep, o.keySep = ", ", ": "
		}
	}
}

// appendJSON appends v as the reference's toJSON (Python json.dumps with
// ensure_ascii=False by default: ", " and ": " separators).
func appendJSON(dst []byte, v Value, o jsonOpts, depth int) []byte {
	o.fill()
	return appendJSONFilled(dst, v, &o, depth)
}

func appendJSONFilled(dst []byte, v Value, o *jsonOpts, depth int) []byte {
	switch v.kind {
	case Null:
		return append(dst, "null"...)
	case Undefined:
		if o.undefinedAsNull {
			return append(dst, "null"...)
		}
		return append(dst, "undefined"...)
	case Int:
		return strconv.AppendInt(dst, v.n, 10)
	case Float:
		return appendJSNumber(dst, v.f)
	case Bool:
		if v.n != 0 {
			return append(dst, "true"...)
		}
		return append(dst, "false"...)
	case String:
		return appendJSONString(dst, v.s, o.ensureASCII)
	case Array, Tuple:
		indent := o.hasIndent && o.indent > 0
		if len(v.list) == 0 {
			return append(dst, "[]"...)
		}
		dst = append(dst, '[')
		for i, e := range v.list {
			if i > 0 {
				dst = append(dst, o.itemSep...)
			}
			if indent {
				dst = appendPad(dst, o.indent, depth+1)
			}
			dst = appendJSONFilled(dst, e, o, depth+1)
		}
		if indent {
			dst = appendPad(dst, o.indent, depth)
		}
		return append(dst, ']')
	case Object, Namespace:
		indent := o.hasIndent && o.indent > 0
		ob := v.obj
		if ob.len() == 0 {
			return append(dst, "{}"...)
		}
		order := make([]int, ob.len())
		for i := range order {
			order[i] = i
		}
		if o.sortKeys {
			sortByKey(order, ob.keys)
		}
		dst = append(dst, '{')
		for n, i := range order {
			if n > 0 {
				dst = append(dst, o.itemSep...)
			}
			if indent {
				dst = appendPad(dst, o.indent, depth+1)
			}
			dst = appendJSONString(dst, ob.keys[i], o.ensureASCII)
			dst = append(dst, o.keySep...)
			dst = appendJSONFilled(dst, ob.vals[i], o, depth+1)
		}
		if indent {
			dst = appendPad(dst, o.indent, depth)
		}
		return append(dst, '}')
	}
	return append(dst, "null"...)
}

func sortByKey(order []int, keys []string) {
	// insertion sort: key lists are short. localeCompare on ASCII keys
	// orders as a case-insensitive compare first; plain order is close enough
	// for the JSON schemas templates print.
	for i := 1; i < len(order); i++ {
		for j := i; j > 0 && keys[order[j]] < keys[order[j-1]]; j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
}

func appendPad(dst []byte, indent, depth int) []byte {
	dst = append(dst, '\n')
	for range indent * depth {
		dst = append(dst, ' ')
	}
	return dst
}

const hexDigits = "0123456789abcdef"

// appendJSONString quotes s as JSON.stringify does (and, with ensureASCII,
// escapes every code unit ≥ 0x7f as \uXXXX, as the reference's makeAsciiSafe).
func appendJSONString(dst []byte, s string, ensureASCII bool) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"':
				dst = append(dst, '\\', '"')
			case c == '\\':
				dst = append(dst, '\\', '\\')
			case c == '\n':
				dst = append(dst, '\\', 'n')
			case c == '\r':
				dst = append(dst, '\\', 'r')
			case c == '\t':
				dst = append(dst, '\\', 't')
			case c == '\b':
				dst = append(dst, '\\', 'b')
			case c == '\f':
				dst = append(dst, '\\', 'f')
			case c < 0x20 || (ensureASCII && c == 0x7f):
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&15])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if ensureASCII {
			if r >= 0x10000 {
				r -= 0x10000
				dst = appendU4(dst, 0xd800+(r>>10))
				dst = appendU4(dst, 0xdc00+(r&0x3ff))
			} else {
				dst = appendU4(dst, r)
			}
		} else {
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}

func appendU4(dst []byte, r rune) []byte {
	return append(dst, '\\', 'u', hexDigits[r>>12&15], hexDigits[r>>8&15], hexDigits[r>>4&15], hexDigits[r&15])
}
