package pd

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"testing"
)

// kv is one top-level member as encoding/json reads it: the key decoded,
// the value's exact bytes.
type kv struct {
	key string
	raw string
}

// members lists the top-level members of the JSON object b in order,
// repeated keys included, with encoding/json (an independent parser).
func members(b []byte) ([]kv, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false
	}
	var out []kv
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, false
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, false
		}
		out = append(out, kv{t.(string), string(raw)})
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') {
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, false // trailing data
	}
	return out, true
}

func mustMembers(t *testing.T, b []byte) []kv {
	t.Helper()
	if !json.Valid(b) {
		t.Fatalf("output is not valid JSON: %s", b)
	}
	m, ok := members(b)
	if !ok {
		t.Fatalf("output is not a JSON object: %s", b)
	}
	return m
}

// get returns the values of key in order.
func get(m []kv, key string) []string {
	var out []string
	for _, e := range m {
		if e.key == key {
			out = append(out, e.raw)
		}
	}
	return out
}

// without returns m less the members whose key is in drop.
func without(m []kv, drop ...string) []kv {
	var out []kv
next:
	for _, e := range m {
		for _, d := range drop {
			if e.key == d {
				continue next
			}
		}
		out = append(out, e)
	}
	return out
}

// checkOne fails unless key occurs exactly once in m, with value want.
func checkOne(t *testing.T, m []kv, key, want string) {
	t.Helper()
	got := get(m, key)
	if len(got) != 1 || got[0] != want {
		t.Errorf("%s = %q, want exactly one %s", key, got, want)
	}
}

// checkKept fails unless the members of out that are not in set are the
// members of in that are not in set, in order and byte for byte.
func checkKept(t *testing.T, in, out []kv, set ...string) {
	t.Helper()
	a, b := without(in, set...), without(out, set...)
	if len(a) != len(b) {
		t.Fatalf("kept %d members, want %d:\n got %q\nwant %q", len(b), len(a), b, a)
	}
	for i := range a {
		if a[i] != b[i] {
			t.Errorf("member %d = %q, want %q as sent", i, b[i], a[i])
		}
	}
}

func itoa(v int64) string  { return strconv.FormatInt(v, 10) }
func utoa(v uint64) string { return strconv.FormatUint(v, 10) }
