// Package httpreftest provides the test that keeps an HTTP API's error
// table (httpref.Error) true to its code: CheckErrorTable compares the table
// with the statuses and error codes the service's source files write.
package httpreftest

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/internal/httpref"
)

// GoFiles returns the non-test Go files of dir but those named in except
// (the file that holds the error table, which is no code that writes).
func GoFiles(t testing.TB, dir string, except ...string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	files = slices.DeleteFunc(files, func(f string) bool {
		return strings.HasSuffix(f, "_test.go") || slices.Contains(except, filepath.Base(f))
	})
	if len(files) == 0 {
		t.Fatalf("no Go files in %s", dir)
	}
	return files
}

var (
	statusRE  = regexp.MustCompile(`fasthttp\.(Status[A-Z]\w*)`)
	codeRE    = regexp.MustCompile(`openai\.(Code[A-Z]\w*)|Code:\s*"([a-z_]+)"`)
	codeDefRE = regexp.MustCompile(`(Code[A-Z]\w*)\s*=\s*"([a-z_]+)"`)
)

// CheckErrorTable fails t unless table (as declared, before httpref.Fill)
// lists every error status (a fasthttp.StatusX constant of 400 or more)
// and every error code (an openai.CodeX constant, or a Code: "literal")
// that files write, and lists no status and no code that they never write.
// A code the table leaves empty is its status's default, which WriteError
// writes without naming it. openaiSrc is wire/openai's file that defines
// the CodeX constants.
func CheckErrorTable(t testing.TB, table []httpref.Error, openaiSrc string, files ...string) {
	t.Helper()
	statusOf := map[string]int{}
	for c := 100; c < 600; c++ {
		statusOf["Status"+strings.NewReplacer(" ", "", "-", "", "'", "").Replace(fasthttp.StatusMessage(c))] = c
	}
	defs, err := os.ReadFile(openaiSrc)
	if err != nil {
		t.Fatal(err)
	}
	codeOf := map[string]string{}
	for _, m := range codeDefRE.FindAllStringSubmatch(string(defs), -1) {
		codeOf[m[1]] = m[2]
	}
	if len(codeOf) == 0 {
		t.Fatalf("%s defines no Code constants", openaiSrc)
	}
	written, writtenCodes := map[int]bool{}, map[string]bool{}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range statusRE.FindAllStringSubmatch(string(src), -1) {
			if m[1] == "StatusMessage" || m[1] == "StatusCode" { // functions
				continue
			}
			c, ok := statusOf[m[1]]
			switch {
			case !ok:
				t.Errorf("%s: fasthttp.%s is not a status CheckErrorTable knows", f, m[1])
			case c >= 400:
				written[c] = true
			}
		}
		for _, m := range codeRE.FindAllStringSubmatch(string(src), -1) {
			switch {
			case m[2] != "":
				writtenCodes[m[2]] = true
			case codeOf[m[1]] != "":
				writtenCodes[codeOf[m[1]]] = true
			default:
				t.Errorf("%s: openai.%s is not defined in %s", f, m[1], openaiSrc)
			}
		}
	}
	listed, listedCodes := map[int]bool{}, map[string]bool{}
	for _, e := range table {
		if e.When == "" {
			t.Errorf("error table: status %d %s has no When", e.Status, e.Code)
		}
		if !e.Stream {
			listed[e.Status] = true
		}
		if e.Code == "" {
			continue
		}
		listedCodes[e.Code] = true
		if !writtenCodes[e.Code] {
			t.Errorf("error table: code %s is listed but never written", e.Code)
		}
	}
	for c := range written {
		if !listed[c] {
			t.Errorf("status %d (%s) is written but not in the error table", c, fasthttp.StatusMessage(c))
		}
	}
	for c := range listed {
		if !written[c] {
			t.Errorf("error table: status %d is listed but never written", c)
		}
	}
	for c := range writtenCodes {
		if !listedCodes[c] {
			t.Errorf("code %s is written but not in the error table", c)
		}
	}
}
