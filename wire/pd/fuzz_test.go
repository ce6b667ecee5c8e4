package pd

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/kvroute/kvroute/wire/openai"
)

var seeds = []string{
	chatBody, `{}`, `{"prompt":"x","stream":true,"max_completion_tokens":3}`,
	`{"text":["a","b"]}`, `{"input_ids":[[1],[2,3]]}`, `{"input_ids":[1,2]}`, `{"text":"t"}`,
	`{"str\u0065am":1,"kv_transfer_params":{"a":[1,{"b":"}"}]}}`, `[1]`, `{"a":`, ` { "a" : [ ] } `,
	`{"bootstrap_room":[1,2],"text":[]}`,
}

// checkErr fails unless err is a bad request, dst came back unchanged, and
// the body really is not a JSON object (encoding/json agrees).
func checkErr(t *testing.T, body, out []byte, err error) {
	t.Helper()
	if string(out) != "dst" {
		t.Fatalf("dst changed on error: %q", out)
	}
	if !errors.Is(err, openai.ErrBadRequest) {
		t.Fatalf("error %v is not a bad request", err)
	}
	if openai.ParamOf(err) == "" {
		if _, ok := members(body); ok {
			t.Fatalf("refused a JSON object %q: %v", body, err)
		}
	}
}

func FuzzVLLMPrefill(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		out, err := AppendVLLMPrefill([]byte("dst"), body)
		if err != nil {
			checkErr(t, body, out, err)
			return
		}
		in, ok := members(body)
		if !ok {
			t.Fatalf("accepted %q, which encoding/json does not read as an object", body)
		}
		m := mustMembers(t, out[3:])
		checkOne(t, m, "stream", "false")
		checkOne(t, m, "max_tokens", "1")
		checkOne(t, m, "kv_transfer_params", PrefillTransferParams)
		if get(in, "max_completion_tokens") != nil {
			checkOne(t, m, "max_completion_tokens", "1")
		} else if get(m, "max_completion_tokens") != nil {
			t.Fatal("max_completion_tokens added")
		}
		for _, k := range []string{"stream_options", "min_tokens", "min_completion_tokens"} {
			if get(m, k) != nil {
				t.Fatalf("%s not removed", k)
			}
		}
		checkKept(t, in, m, prefillSet...)
	})
}

func FuzzVLLMDecode(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s), []byte(`{"remote_engine_id":"e","remote_block_ids":[1]}`))
	}
	f.Add([]byte(`{}`), []byte(` {"a":null} `))
	f.Fuzz(func(t *testing.T, body, params []byte) {
		out, err := AppendVLLMDecode([]byte("dst"), body, params)
		if err != nil {
			if string(out) != "dst" {
				t.Fatalf("dst changed on error: %q", out)
			}
			if _, ok := members(params); !ok {
				return
			}
			checkErr(t, body, out, err)
			return
		}
		in, ok := members(body)
		if !ok {
			t.Fatalf("accepted body %q, which encoding/json does not read as an object", body)
		}
		if _, ok := members(params); !ok {
			t.Fatalf("accepted params %q, which encoding/json does not read as an object", params)
		}
		m := mustMembers(t, out[3:])
		checkOne(t, m, "kv_transfer_params", string(bytes.TrimSpace(params)))
		checkKept(t, in, m, "kv_transfer_params")
	})
}

func FuzzTransferParams(f *testing.F) {
	f.Add([]byte(completionAnswer))
	f.Add([]byte(chatAnswer))
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, answer []byte) {
		got, err := TransferParams(answer)
		m, ok := members(answer)
		if err != nil {
			if errors.Is(err, openai.ErrBadRequest) {
				t.Fatalf("answer error %v is a bad request", err)
			}
			if ok {
				if v := get(m, "kv_transfer_params"); v != nil {
					last := v[len(v)-1]
					if o, isObj := members([]byte(last)); isObj && len(o) > 0 {
						t.Fatalf("missed kv_transfer_params %s: %v", last, err)
					}
				}
			}
			return
		}
		if !ok {
			t.Fatalf("read params from %q, which is not a JSON object", answer)
		}
		v := get(m, "kv_transfer_params")
		if len(v) == 0 || v[len(v)-1] != string(got) {
			t.Fatalf("got %s, want the last kv_transfer_params of %q", got, v)
		}
		if o, isObj := members(got); !isObj || len(o) == 0 {
			t.Fatalf("got %s, not a non-empty object", got)
		}
	})
}

func FuzzSGLang(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s), "10.0.0.1", 8998, uint64(42))
	}
	f.Fuzz(func(t *testing.T, body []byte, host string, port int, room uint64) {
		b := Bootstrap{Host: host, Port: port, Room: room}
		out, err := AppendSGLang([]byte("dst"), body, b)
		if b.check() != nil {
			if err == nil {
				t.Fatalf("accepted %+v", b)
			}
			return
		}
		if err != nil {
			checkErr(t, body, out, err)
			return
		}
		in, ok := members(body)
		if !ok {
			t.Fatalf("accepted %q, which encoding/json does not read as an object", body)
		}
		m := mustMembers(t, out[3:])
		checkKept(t, in, m, sglangSet...)
		n, _ := BatchSize(body)
		var h, p, r any
		for k, dst := range map[string]*any{"bootstrap_host": &h, "bootstrap_port": &p, "bootstrap_room": &r} {
			v := get(m, k)
			if len(v) != 1 {
				t.Fatalf("%s = %q, want exactly one", k, v)
			}
			d := json.NewDecoder(bytes.NewReader([]byte(v[0])))
			d.UseNumber()
			if err := d.Decode(dst); err != nil {
				t.Fatal(err)
			}
		}
		want := func(i int) (any, any, any) {
			var port any = json.Number(itoa(int64(b.Port)))
			if b.Port == 0 {
				port = nil
			}
			return string([]rune(host)), port, json.Number(utoa((room + uint64(i)) & MaxRoom))
		}
		check := func(i int, gh, gp, gr any) {
			wh, wp, wr := want(i)
			if gh != wh || gp != wp || gr != wr {
				t.Fatalf("element %d: %v %v %v, want %s %v %v", i, gh, gp, gr, wh, wp, wr)
			}
		}
		if n == 0 {
			check(0, h, p, r)
			return
		}
		hl, pl, rl := h.([]any), p.([]any), r.([]any)
		if len(hl) != n || len(pl) != n || len(rl) != n {
			t.Fatalf("lists of %d, %d, %d, want %d", len(hl), len(pl), len(rl), n)
		}
		for i := range n {
			check(i, hl[i], pl[i], rl[i])
		}
	})
}
