// Package jsonscan steps over JSON text without decoding it: whitespace,
// strings and whole values, by index into the caller's bytes. It serves
// code that reads or edits a body's top-level members in place (the
// prompt-length precheck in wire/openai, the P/D leg bodies in wire/pd).
// It allocates nothing and does not validate: on text that is not JSON the
// indexes it returns are only bounded by len(b).
package jsonscan

// SkipWS returns the index of the first byte at or after i that is not
// JSON whitespace.
func SkipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
		i++
	}
	return i
}

// StringEnd returns the index after the closing quote of the string that
// opens at b[i] (a quote), and false with len(b) when it is not closed.
func StringEnd(b []byte, i int) (int, bool) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, true
		}
	}
	return len(b), false
}

// ValueEnd returns the index after the value that starts at b[i] (a
// string, an object or array with everything in it, or a literal or
// number), and false with len(b) when a string, object or array is not
// closed, or the literal is empty.
func ValueEnd(b []byte, i int) (int, bool) {
	switch b[i] {
	case '"':
		return StringEnd(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				e, ok := StringEnd(b, j)
				if !ok {
					return len(b), false
				}
				j = e - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1, true
				}
			}
		}
		return len(b), false
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\n' && b[j] != '\r' && b[j] != '\t' {
		j++
	}
	return j, j > i
}

// Hex4 returns the code unit of the four hex digits of a \uXXXX escape,
// and false when one is not a hex digit.
func Hex4(b []byte) (rune, bool) {
	var r rune
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
