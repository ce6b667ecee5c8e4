package pd

import (
	"fmt"

	"github.com/valyala/fastjson"

	"github.com/kvroute/kvroute/internal/jsonscan"
	"github.com/kvroute/kvroute/wire/openai"
)

// object opens the client's JSON object body for scanning: it validates
// the whole body (fastjson's validator, the one the request parser agrees
// with) and returns a scanner positioned after the opening brace. The error
// is a 400 (it wraps openai.ErrBadRequest) that says where the JSON broke,
// or that the body is not an object.
func object(body []byte) (scanner, error) {
	s, valid := open(body)
	switch {
	case !valid:
		return s, openai.InvalidJSON(body)
	case s.b == nil:
		return s, fmt.Errorf("%w: body must be a JSON object", openai.ErrBadRequest)
	}
	return s, nil
}

// open validates b and returns a scanner after its opening brace; the
// scanner's b is nil when b is valid JSON but not an object.
func open(b []byte) (s scanner, valid bool) {
	if fastjson.ValidateBytes(b) != nil {
		return scanner{}, false
	}
	i := jsonscan.SkipWS(b, 0)
	if b[i] != '{' {
		return scanner{}, true
	}
	return scanner{b: b, i: i + 1}, true
}

// scanner walks the members of a validated JSON object in order. It never
// allocates; the slices it returns point into the body.
type scanner struct {
	b []byte
	i int
}

// member is one member of an object: key is the key's raw text between its
// quotes (still escaped); the member's bytes are b[start:end] (key, colon and
// value as sent) and its value b[vstart:end].
type member struct {
	key                []byte
	start, vstart, end int
}

// next returns the next member, or false after the last one.
func (s *scanner) next() (member, bool) {
	b := s.b
	i := jsonscan.SkipWS(b, s.i)
	if b[i] == ',' {
		i = jsonscan.SkipWS(b, i+1)
	}
	if b[i] == '}' {
		s.i = i
		return member{}, false
	}
	m := member{start: i}
	ke := end(jsonscan.StringEnd(b, i))
	m.key = b[i+1 : ke-1]
	i = jsonscan.SkipWS(b, ke)
	i = jsonscan.SkipWS(b, i+1) // the colon
	m.vstart = i
	m.end = end(jsonscan.ValueEnd(b, i))
	s.i = m.end
	return m, true
}

// arrayLen returns the number of elements of the validated JSON array v and
// the first element's first byte (0 when empty).
func arrayLen(v []byte) (n int, first byte) {
	i := jsonscan.SkipWS(v, 1)
	if v[i] == ']' {
		return 0, 0
	}
	first = v[i]
	for {
		i = jsonscan.SkipWS(v, end(jsonscan.ValueEnd(v, i)))
		n++
		if v[i] == ']' {
			return n, first
		}
		i = jsonscan.SkipWS(v, i+1)
	}
}

// keyIs reports whether the raw (still escaped) key names name. A key with
// escapes is decoded into a stack buffer first, so "str\u0065am" is "stream"
// as a JSON parser reads it.
func keyIs(raw []byte, name string) bool {
	if len(raw) == len(name) && string(raw) == name {
		return true
	}
	if len(raw) <= len(name) || !hasEscape(raw) {
		return false
	}
	var buf [32]byte
	n := 0
	for i := 0; i < len(raw); i++ {
		if n >= len(name) || n >= len(buf) {
			return false
		}
		c := raw[i]
		if c == '\\' {
			i++
			switch raw[i] {
			case 'u':
				r, _ := jsonscan.Hex4(raw[i+1 : i+5])
				i += 4
				if r >= 0x80 {
					return false // every name here is ASCII
				}
				c = byte(r)
			case 'b':
				c = '\b'
			case 'f':
				c = '\f'
			case 'n':
				c = '\n'
			case 'r':
				c = '\r'
			case 't':
				c = '\t'
			default: // '"', '\\', '/'
				c = raw[i]
			}
		}
		buf[n] = c
		n++
	}
	return string(buf[:n]) == name
}

func hasEscape(raw []byte) bool {
	for _, c := range raw {
		if c == '\\' {
			return true
		}
	}
	return false
}

// sep appends the comma that goes before a member when the object dst is
// writing from dst[open] (its '{') already has one.
func sep(dst []byte, open int) []byte {
	if len(dst) > open+1 {
		return append(dst, ',')
	}
	return dst
}

// end drops the ok of a jsonscan index: the bodies scanned here are
// validated JSON, so every string and value is closed.
func end(i int, _ bool) int { return i }
