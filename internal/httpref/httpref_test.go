package httpref

import "testing"

func TestPrefix(t *testing.T) {
	for _, c := range []struct {
		path, prefix string
		param        bool
	}{
		{"/route", "/route", false},
		{"/route/{request_id}/{action}", "/route/", true},
		{"/{x}", "/", true},
	} {
		r := Route{Path: c.path}
		if p, ok := r.Prefix(); p != c.prefix || ok != c.param {
			t.Errorf("%s: Prefix() = %q, %v; want %q, %v", c.path, p, ok, c.prefix, c.param)
		}
	}
}

func TestFill(t *testing.T) {
	defaults := func(status int) (string, string) {
		if status == 404 {
			return "not_found_error", "not_found"
		}
		return "invalid_request_error", "invalid_request_error"
	}
	in := []Error{
		{Status: 404},
		{Status: 404, Type: "invalid_request_error", Code: "model_not_found"},
		{Status: 400, Code: "context_length_exceeded"},
		{Status: 503, Plain: true},
	}
	got := Fill(in, defaults)
	want := []Error{
		{Status: 404, Type: "not_found_error", Code: "not_found"},
		{Status: 404, Type: "invalid_request_error", Code: "model_not_found"},
		{Status: 400, Type: "invalid_request_error", Code: "context_length_exceeded"},
		{Status: 503, Plain: true},
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("Fill[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
	if in[0].Type != "" {
		t.Error("Fill changed its argument")
	}
}
