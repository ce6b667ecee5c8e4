package pd

import (
	"errors"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/wire/openai"
)

var sglangSet = []string{"bootstrap_host", "bootstrap_port", "bootstrap_room"}

func TestSGLangSingle(t *testing.T) {
	for name, body := range map[string]string{
		"chat":             chatBody,
		"text":             `{"text":"The capital of France is","sampling_params":{"max_new_tokens":16,"temperature":0.0}}`,
		"input_ids":        `{"input_ids":[1, 2, 3],"stream":true}`,
		"text null":        `{"text":null,"input_ids":[-0]}`,
		"neither":          `{"model":"m","prompt":["a","b"]}`,
		"client bootstrap": `{"text":"x","bootstrap_host":"evil","bootstrap_port":1,"bootstrap_room":[5]}`,
	} {
		t.Run(name, func(t *testing.T) {
			b := Bootstrap{Host: "10.0.0.7", Port: 8998, Room: 1234567890123456789}
			out, err := AppendSGLang(nil, []byte(body), b)
			if err != nil {
				t.Fatal(err)
			}
			m := mustMembers(t, out)
			checkOne(t, m, "bootstrap_host", `"10.0.0.7"`)
			checkOne(t, m, "bootstrap_port", "8998")
			checkOne(t, m, "bootstrap_room", "1234567890123456789")
			checkKept(t, mustMembers(t, []byte(body)), m, sglangSet...)
		})
	}
}

func TestSGLangBatch(t *testing.T) {
	for name, c := range map[string]struct {
		body string
		n    int
	}{
		"text":      {`{"text":["a", "b","c"],"sampling_params":{}}`, 3},
		"input_ids": {`{"input_ids":[[1,2],[3], [4,5,6],[7]]}`, 4},
		"text wins": {`{"input_ids":[[1],[2]],"text":["x"]}`, 1},
		"last text": {`{"text":"x","text":["a","b"]}`, 2},
	} {
		t.Run(name, func(t *testing.T) {
			if n, err := BatchSize([]byte(c.body)); n != c.n || err != nil {
				t.Fatalf("BatchSize = %d, %v; want %d", n, err, c.n)
			}
			out, err := AppendSGLang(nil, []byte(c.body), Bootstrap{Host: "[::1]", Room: MaxRoom - 1})
			if err != nil {
				t.Fatal(err)
			}
			m := mustMembers(t, out)
			hosts, ports, rooms := make([]string, c.n), make([]string, c.n), make([]string, c.n)
			for i := range c.n {
				hosts[i], ports[i] = `"[::1]"`, "null"
			}
			// Rooms count up from Room and wrap within 63 bits.
			room := []string{"9223372036854775806", "9223372036854775807", "0", "1"}
			copy(rooms, room)
			checkOne(t, m, "bootstrap_host", "["+strings.Join(hosts, ",")+"]")
			checkOne(t, m, "bootstrap_port", "["+strings.Join(ports, ",")+"]")
			checkOne(t, m, "bootstrap_room", "["+strings.Join(rooms, ",")+"]")
			checkKept(t, mustMembers(t, []byte(c.body)), m, sglangSet...)
		})
	}
}

func TestSGLangHostEscaped(t *testing.T) {
	out, err := AppendSGLang(nil, []byte(`{}`), Bootstrap{Host: `a"b`, Port: 1, Room: 0})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"bootstrap_host":"a\"b","bootstrap_port":1,"bootstrap_room":0}`; string(out) != want {
		t.Errorf("got %s, want %s", out, want)
	}
}

func TestSGLangBadBatch(t *testing.T) {
	for body, field := range map[string]string{
		`{"text":[]}`:                 "text",
		`{"text":5}`:                  "text",
		`{"text":{"a":1}}`:            "text",
		`{"input_ids":[]}`:            "input_ids",
		`{"input_ids":"1 2"}`:         "input_ids",
		`{"input_ids":["a"]}`:         "input_ids",
		`{"input_ids":[{}]}`:          "input_ids",
		`{"text":null,"input_ids":7}`: "input_ids",
	} {
		out, err := AppendSGLang([]byte("keep"), []byte(body), Bootstrap{Host: "h"})
		if !errors.Is(err, openai.ErrBadRequest) || openai.ParamOf(err) != field {
			t.Errorf("%s: err = %v (param %q), want a bad request naming %s", body, err, openai.ParamOf(err), field)
		}
		if string(out) != "keep" {
			t.Errorf("%s: dst = %q, want it unchanged", body, out)
		}
	}
}

func TestSGLangBadBootstrap(t *testing.T) {
	for field, b := range map[string]Bootstrap{
		"bootstrap_host": {Port: 1},
		"bootstrap_port": {Host: "h", Port: 65536},
		"bootstrap_room": {Host: "h", Room: MaxRoom + 1},
	} {
		_, err := AppendSGLang(nil, []byte(`{}`), b)
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%+v: err = %v, want one naming %s", b, err, field)
		}
	}
	if _, err := AppendSGLang(nil, []byte(`{}`), Bootstrap{Host: "h", Port: -1}); err == nil {
		t.Error("port -1 accepted")
	}
}
