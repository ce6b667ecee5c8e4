package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// InvalidJSON describes why body is not valid JSON and where it broke, for
// a client to act on: "invalid character '}' looking for beginning of object
// key string at byte 34 (line 1, column 35)", the byte offset counted from 0
// and the column from 1. It never quotes the body. It
// wraps ErrBadRequest. Slow path: called only once a parse has failed.
func InvalidJSON(body []byte) error {
	var raw json.RawMessage
	err := json.Unmarshal(body, &raw)
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		// encoding/json accepts what the fast parser refused (a
		// difference of the two parsers), or failed otherwise.
		return fmt.Errorf("%w: body is not valid JSON", ErrBadRequest)
	}
	// Offset counts the bytes read, the offending one included; at the end
	// of the input it is the body's length.
	off := int(min(max(se.Offset-1, 0), int64(len(body))))
	if se.Error() == "unexpected end of JSON input" {
		off = len(body)
	}
	line := 1 + bytes.Count(body[:off], []byte{'\n'})
	col := off - bytes.LastIndexByte(body[:off], '\n')
	return fmt.Errorf("%w: body is not valid JSON: %s at byte %d (line %d, column %d)", ErrBadRequest, se.Error(), off, line, col)
}
