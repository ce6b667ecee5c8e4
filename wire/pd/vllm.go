package pd

import (
	"errors"
	"fmt"

	"github.com/kvroute/kvroute/internal/jsonscan"
)

// PrefillTransferParams is the kv_transfer_params object of a vLLM prefill
// leg: compute the prompt's KV cache and keep it for a remote decode.
const PrefillTransferParams = `{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`

// Member names the vLLM legs read or write.
const (
	fieldTransfer     = "kv_transfer_params"
	fieldStream       = "stream"
	fieldMaxTokens    = "max_tokens"
	fieldMaxCompl     = "max_completion_tokens"
	fieldStreamOpts   = "stream_options"
	fieldMinTokens    = "min_tokens"
	fieldMinComplToks = "min_completion_tokens"
)

// ErrNoTransferParams is the error TransferParams wraps when a prefill answer
// carries no kv_transfer_params (absent, null or {}): the worker runs
// without a KV connector, so it cannot serve a prefill leg.
var ErrNoTransferParams = errors.New("prefill answer has no kv_transfer_params")

// AppendVLLMPrefill appends to dst the body of a vLLM (NIXL connector)
// prefill leg made from the client's completion or chat body: the client's
// members as sent, except that kv_transfer_params is PrefillTransferParams,
// "stream" is false, "max_tokens" is 1 (and "max_completion_tokens" is 1 when
// the client sent it), and stream_options, min_tokens and
// min_completion_tokens are removed. The members it sets come last; every
// other member is copied byte for byte, in order. It does not allocate
// beyond growing dst. A body that is not a JSON object is a 400 error
// (wrapping openai.ErrBadRequest); dst is then returned unchanged.
func AppendVLLMPrefill(dst, body []byte) ([]byte, error) {
	s, err := object(body)
	if err != nil {
		return dst, err
	}
	open := len(dst)
	dst = append(dst, '{')
	maxCompl := false
	for {
		m, ok := s.next()
		if !ok {
			break
		}
		switch {
		case keyIs(m.key, fieldMaxCompl):
			maxCompl = true
		case keyIs(m.key, fieldTransfer), keyIs(m.key, fieldStream), keyIs(m.key, fieldMaxTokens),
			keyIs(m.key, fieldStreamOpts), keyIs(m.key, fieldMinTokens), keyIs(m.key, fieldMinComplToks):
		default:
			dst = append(sep(dst, open), body[m.start:m.end]...)
		}
	}
	dst = append(sep(dst, open), `"`+fieldTransfer+`":`+PrefillTransferParams+`,"stream":false,"max_tokens":1`...)
	if maxCompl {
		dst = append(dst, `,"max_completion_tokens":1`...)
	}
	return append(dst, '}'), nil
}

// AppendVLLMDecode appends to dst the body of a vLLM decode leg: the
// client's body with kv_transfer_params set to params, the object the
// prefill answer returned (see TransferParams), copied as is. A
// kv_transfer_params the client sent is replaced; every other member is
// copied byte for byte, in order. It does not allocate beyond growing dst.
// A body that is not a JSON object is a 400 error (wrapping
// openai.ErrBadRequest); params that are not a JSON object are an error
// naming kv_transfer_params. On error dst is returned unchanged.
func AppendVLLMDecode(dst, body, params []byte) ([]byte, error) {
	params, err := transferObject(params)
	if err != nil {
		return dst, err
	}
	s, err := object(body)
	if err != nil {
		return dst, err
	}
	open := len(dst)
	dst = append(dst, '{')
	for {
		m, ok := s.next()
		if !ok {
			break
		}
		if !keyIs(m.key, fieldTransfer) {
			dst = append(sep(dst, open), body[m.start:m.end]...)
		}
	}
	dst = append(sep(dst, open), `"`+fieldTransfer+`":`...)
	dst = append(dst, params...)
	return append(dst, '}'), nil
}

// transferObject checks that params is one JSON object and returns it
// without surrounding whitespace.
func transferObject(params []byte) ([]byte, error) {
	s, valid := open(params)
	if !valid || s.b == nil {
		return nil, fmt.Errorf("pd: kv_transfer_params must be a JSON object, got %q", brief(params))
	}
	return params[s.i-1 : end(jsonscan.ValueEnd(params, s.i-1))], nil
}

// TransferParams returns the kv_transfer_params object of a vLLM prefill
// answer (a completion or chat completion response body), as its bytes in
// answer: what the decode leg forwards. It does not allocate; the slice
// aliases answer. It fails, wrapping ErrNoTransferParams, when the member is
// absent, null or an empty object, and otherwise names kv_transfer_params
// when it is not an object; an answer that is not a JSON object is an error
// too. None of these wraps openai.ErrBadRequest: the worker, not the client,
// is at fault. Of repeated
// members the last counts, as in Python's json.
func TransferParams(answer []byte) ([]byte, error) {
	s, valid := open(answer)
	switch {
	case !valid:
		return nil, errors.New("pd: prefill answer is not valid JSON")
	case s.b == nil:
		return nil, fmt.Errorf("pd: prefill answer must be a JSON object, got %q", brief(answer))
	}
	var v []byte
	for {
		m, ok := s.next()
		if !ok {
			break
		}
		if keyIs(m.key, fieldTransfer) {
			v = answer[m.vstart:m.end]
		}
	}
	switch {
	case v == nil || string(v) == "null":
		return nil, ErrNoTransferParams
	case v[0] != '{':
		return nil, fmt.Errorf("pd: prefill answer: kv_transfer_params must be an object, got %s", brief(v))
	}
	if objectLen(v) == 0 {
		return nil, fmt.Errorf("%w (an empty object)", ErrNoTransferParams)
	}
	return v, nil
}

// objectLen returns the number of members of the validated object v.
func objectLen(v []byte) int {
	s := scanner{b: v, i: 1}
	n := 0
	for {
		if _, ok := s.next(); !ok {
			return n
		}
		n++
	}
}

// brief returns the start of a JSON value for an error message.
func brief(v []byte) string {
	if len(v) > 40 {
		return string(v[:40]) + "..."
	}
	return string(v)
}
