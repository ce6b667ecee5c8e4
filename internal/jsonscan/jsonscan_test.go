package jsonscan

import "testing"

// TestValueEnd: each value ends where its text ends, strings with escaped
// quotes and nested containers included; unclosed ones report false.
func TestValueEnd(t *testing.T) {
	for _, c := range []struct {
		in   string
		end  int
		want bool
	}{
		{`"a\"b" ,`, 6, true},
		{`{"k":["}",{"x":1}]} ,`, 19, true},
		{`[1, [2, 3]]`, 11, true},
		{`true,`, 4, true},
		{`-1.5e3}`, 6, true},
		{`"open`, 5, false},
		{`{"k": [1, 2}`, 12, false},
		{`{"k": "}`, 8, false},
	} {
		end, ok := ValueEnd([]byte(c.in), 0)
		if end != c.end || ok != c.want {
			t.Errorf("ValueEnd(%q) = %d, %v; want %d, %v", c.in, end, ok, c.end, c.want)
		}
	}
	if i := SkipWS([]byte(" \t\r\n x"), 0); i != 5 {
		t.Errorf("SkipWS = %d, want 5", i)
	}
	if r, ok := Hex4([]byte("00e9")); r != 'é' || !ok {
		t.Errorf("Hex4(00e9) = %q, %v", r, ok)
	}
	if _, ok := Hex4([]byte("00g9")); ok {
		t.Error("Hex4(00g9) accepted a non-hex digit")
	}
}
