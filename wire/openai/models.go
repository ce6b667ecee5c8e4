package openai

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/valyala/fastjson"
)

// Model is one entry of a GET /v1/models answer.
type Model struct {
	ID      string
	Created int64 // unix seconds
	OwnedBy string
}

// AppendModelList appends a GET /v1/models answer in OpenAI's list shape:
// {"object":"list","data":[{"id","object":"model","created","owned_by"}, ...]}.
func AppendModelList(dst []byte, models []Model) []byte {
	dst = append(dst, `{"object":"list","data":[`...)
	for i, m := range models {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"id":`...)
		dst = AppendJSONString(dst, m.ID)
		dst = append(dst, `,"object":"model","created":`...)
		dst = strconv.AppendInt(dst, m.Created, 10)
		dst = append(dst, `,"owned_by":`...)
		dst = AppendJSONString(dst, m.OwnedBy)
		dst = append(dst, '}')
	}
	return append(dst, "]}"...)
}

// ParseModelIDs appends the model ids of a GET /v1/models answer (OpenAI's
// list shape, as vLLM and SGLang serve it) to dst.
func ParseModelIDs(dst []string, body []byte) ([]string, error) {
	v, err := fastjson.ParseBytes(body)
	if err != nil {
		return dst, fmt.Errorf("models list is not JSON: %w", err)
	}
	data := v.Get("data")
	if data == nil || data.Type() != fastjson.TypeArray {
		return dst, errors.New(`models list has no "data" array`)
	}
	for i, m := range data.GetArray() {
		id := m.Get("id")
		if id == nil || id.Type() != fastjson.TypeString || len(id.GetStringBytes()) == 0 {
			return dst, fmt.Errorf("models list: data[%d].id is not a non-empty string", i)
		}
		dst = append(dst, string(id.GetStringBytes()))
	}
	return dst, nil
}
