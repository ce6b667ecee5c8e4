package pd

import (
	"fmt"
	"strconv"

	"github.com/kvroute/kvroute/wire/openai"
)

// MaxRoom is the largest bootstrap_room: SGLang draws rooms from [0, 2^63-1].
const MaxRoom = 1<<63 - 1

// Bootstrap is what an SGLang PD pair meets on: the prefill worker's
// bootstrap server and a room number. The zero value is not valid (Host is
// required).
type Bootstrap struct {
	// Host is the prefill worker's host as SGLang reads it: a name or an
	// address, an IPv6 address in brackets ("[::1]").
	Host string
	// Port is the prefill worker's disaggregation bootstrap port, 1..65535;
	// 0 sends null, which the decode worker reads as its default port.
	Port int
	// Room identifies the transfer, 0..MaxRoom, drawn at random by the
	// caller. Element i of a batch gets (Room+i) mod 2^63, as SGLang's own
	// router numbers a batch's rooms from one draw.
	Room uint64
}

// Member names the SGLang legs read or write.
const (
	fieldHost     = "bootstrap_host"
	fieldPort     = "bootstrap_port"
	fieldRoom     = "bootstrap_room"
	fieldText     = "text"
	fieldInputIDs = "input_ids"
)

// AppendSGLang appends to dst the body both legs of an SGLang PD request
// carry (the same bytes go to the prefill and the decode worker): the
// client's body plus bootstrap_host, bootstrap_port and bootstrap_room from
// b, replacing any the client sent. A batch, a "text" that is a list or an
// "input_ids" that is a list of lists, gets a list of each of the three, one
// per element (BatchSize). The members it sets come last; every other member
// is copied byte for byte, in order. It does not allocate beyond growing
// dst. A body that is not a JSON object, or whose text or input_ids is
// neither a request nor a non-empty batch, is a 400 error (wrapping
// openai.ErrBadRequest, naming the field); a Bootstrap out of range is an
// error naming its field. On error dst is returned unchanged.
func AppendSGLang(dst, body []byte, b Bootstrap) ([]byte, error) {
	if err := b.check(); err != nil {
		return dst, err
	}
	s, err := object(body)
	if err != nil {
		return dst, err
	}
	open := len(dst)
	dst = append(dst, '{')
	var text, ids []byte
	for {
		m, ok := s.next()
		if !ok {
			break
		}
		switch {
		case keyIs(m.key, fieldHost), keyIs(m.key, fieldPort), keyIs(m.key, fieldRoom):
			continue
		case keyIs(m.key, fieldText):
			text = body[m.vstart:m.end]
		case keyIs(m.key, fieldInputIDs):
			ids = body[m.vstart:m.end]
		}
		dst = append(sep(dst, open), body[m.start:m.end]...)
	}
	n, err := batchSize(text, ids)
	if err != nil {
		return dst[:open], err
	}
	dst = append(sep(dst, open), `"`+fieldHost+`":`...)
	dst = appendList(dst, n, func(dst []byte, _ int) []byte { return openai.AppendJSONString(dst, b.Host) })
	dst = append(dst, `,"`+fieldPort+`":`...)
	dst = appendList(dst, n, func(dst []byte, _ int) []byte {
		if b.Port == 0 {
			return append(dst, "null"...)
		}
		return strconv.AppendInt(dst, int64(b.Port), 10)
	})
	dst = append(dst, `,"`+fieldRoom+`":`...)
	dst = appendList(dst, n, func(dst []byte, i int) []byte {
		return strconv.AppendUint(dst, (b.Room+uint64(i))&MaxRoom, 10)
	})
	return append(dst, '}'), nil
}

// appendList appends one value for a single request (n == 0) or a JSON list
// of n values.
func appendList(dst []byte, n int, value func([]byte, int) []byte) []byte {
	if n == 0 {
		return value(dst, 0)
	}
	dst = append(dst, '[')
	for i := range n {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = value(dst, i)
	}
	return append(dst, ']')
}

func (b Bootstrap) check() error {
	switch {
	case b.Host == "":
		return fmt.Errorf("pd: %s is empty", fieldHost)
	case b.Port < 0 || b.Port > 65535:
		return fmt.Errorf("pd: %s %d is out of range 0..65535", fieldPort, b.Port)
	case b.Room > MaxRoom:
		return fmt.Errorf("pd: %s %d is over 2^63-1", fieldRoom, b.Room)
	}
	return nil
}

// BatchSize returns how many requests an SGLang body holds as a batch, or 0
// for a single request, the way SGLang's router reads it: a non-null "text"
// decides (a string is one request, a list a batch); otherwise a non-null
// "input_ids" (a list of ids is one request, a list of lists a batch); a
// body with neither is one request. Of repeated members the last counts.
// An empty list or a value of another type is a 400 naming the field.
func BatchSize(body []byte) (int, error) {
	s, err := object(body)
	if err != nil {
		return 0, err
	}
	var text, ids []byte
	for {
		m, ok := s.next()
		if !ok {
			break
		}
		switch {
		case keyIs(m.key, fieldText):
			text = body[m.vstart:m.end]
		case keyIs(m.key, fieldInputIDs):
			ids = body[m.vstart:m.end]
		}
	}
	return batchSize(text, ids)
}

// batchSize reads the last "text" and "input_ids" values (nil if absent)
// as BatchSize says.
func batchSize(text, ids []byte) (int, error) {
	if text != nil && string(text) != "null" {
		switch text[0] {
		case '"':
			return 0, nil
		case '[':
			if n, _ := arrayLen(text); n > 0 {
				return n, nil
			}
			return 0, &openai.FieldError{Param: fieldText, Msg: "text is an empty list"}
		}
		return 0, &openai.FieldError{Param: fieldText, Msg: "text must be a string or a list of strings, got " + brief(text)}
	}
	if ids != nil && string(ids) != "null" {
		if ids[0] != '[' {
			return 0, &openai.FieldError{Param: fieldInputIDs, Msg: "input_ids must be a list, got " + brief(ids)}
		}
		n, first := arrayLen(ids)
		switch {
		case n == 0:
			return 0, &openai.FieldError{Param: fieldInputIDs, Msg: "input_ids is an empty list"}
		case first == '[':
			return n, nil
		case first == '-' || first >= '0' && first <= '9':
			return 0, nil
		}
		return 0, &openai.FieldError{Param: fieldInputIDs, Msg: "input_ids must be a list of token ids or of lists, got " + brief(ids)}
	}
	return 0, nil
}
