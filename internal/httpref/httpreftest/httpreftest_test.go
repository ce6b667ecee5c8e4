package httpreftest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/internal/httpref"
)

// recorder collects a check's failures instead of failing the test.
type recorder struct {
	*testing.T
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recorder) Helper() {}

const codes = `package openai
const (
	CodeNotFound      = "not_found"
	CodeModelNotFound = "model_not_found"
)
`

const handler = `package x
func h() {
	proxy.WriteError(ctx, fasthttp.StatusNotFound, "no such endpoint")
	proxy.WriteAPIError(ctx, fasthttp.StatusBadRequest, openai.Error{Code: "context_length_exceeded"})
	proxy.WriteAPIError(ctx, fasthttp.StatusNotFound, openai.Error{Code: openai.CodeModelNotFound})
	ctx.SetStatusCode(fasthttp.StatusOK)
	_ = fasthttp.StatusMessage(200)
}
`

func write(t *testing.T, dir, name, src string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckErrorTable(t *testing.T) {
	dir := t.TempDir()
	defs := write(t, dir, "response.go", codes)
	src := write(t, dir, "handler.go", handler)
	write(t, dir, "handler_test.go", "package x // fasthttp.StatusTeapot")
	if files := GoFiles(t, dir, "response.go"); !slices.Equal(files, []string{src}) {
		t.Fatalf("GoFiles = %v, want [%s]", files, src)
	}
	full := []httpref.Error{
		{Status: 400, Code: "context_length_exceeded", When: "too long"},
		{Status: 404, When: "no such path"},
		{Status: 404, Code: "model_not_found", When: "unknown model"},
	}
	for _, c := range []struct {
		name  string
		table []httpref.Error
		want  []string // substrings of the failures, in order
	}{
		{"complete", full, nil},
		{"status missing", full[1:], []string{"status 400 (Bad Request) is written but not in the error table",
			"code context_length_exceeded is written but not in the error table"}},
		{"code missing", full[:2], []string{"code model_not_found is written but not in the error table"}},
		{"never written", append(slices.Clone(full), httpref.Error{Status: 503, When: "x"}, httpref.Error{Status: 200, Stream: true, Code: "gone", When: "y"}),
			[]string{"code gone is listed but never written", "status 503 is listed but never written"}},
		{"no when", []httpref.Error{full[0], {Status: 404}, full[2]}, []string{"has no When"}},
	} {
		r := &recorder{T: t}
		CheckErrorTable(r, c.table, defs, src)
		slices.Sort(r.errs)
		want := slices.Clone(c.want)
		slices.Sort(want)
		ok := len(r.errs) == len(want)
		for i := 0; ok && i < len(want); i++ {
			ok = strings.Contains(r.errs[i], want[i])
		}
		if !ok {
			t.Errorf("%s: failures %q, want %q", c.name, r.errs, want)
		}
	}
}
