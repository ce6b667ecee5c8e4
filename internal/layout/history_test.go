package layout

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// historyWord is one pattern of words that tell the work's history instead
// of the code: who wrote a line or in which step of the work. History lives
// in git log and in the decision records (docs/decisions/), which cite
// commits and dates.
type historyWord struct {
	name string
	re   *regexp.Regexp
	// allow, when set, is removed from a line before re is tried: the
	// legitimate uses that share re's shape.
	allow *regexp.Regexp
}

// historyWords is the list DEVELOPERS.md shows. Every pattern is
// case-insensitive where the word may start a sentence. The ordinary word
// "issue" ("a known issue"), user sessions ("the next turn of a session"),
// test helpers (t.Helper, helpers_test.go, "the helper returns") and
// commits and dates (which decision records and docs/benchmarks.md cite)
// pass.
var historyWords = []historyWord{
	{name: "numbered session", re: regexp.MustCompile(`(?i)\bsessions?[ -]#?[0-9]`)},
	{name: "issue number", re: regexp.MustCompile(`(?i)\bissues?[ -]#?[0-9]|Issue[0-9]`)},
	{name: "cited targets or findings", re: regexp.MustCompile(`(?i)\bthe issue's\b|\bissue'?s? (targets?|findings?|scale|remainder)\b|Issue(Targets?|Findings?)`)},
	{
		name: "section cite (§N)", re: regexp.MustCompile(`§ ?[0-9]`),
		// A section of a document in this repository may be cited by
		// number: "ARCHITECTURE.md §5", "docs/ARCHITECTURE.md § 6".
		allow: regexp.MustCompile(`[A-Za-z0-9_]\.md ?§ ?[0-9]+`),
	},
	{name: "numbered fix of a finding", re: regexp.MustCompile(`\b[Ff]ix(es)? [0-9]+\b[:).,–-]`)},
	{name: "agent as an author", re: regexp.MustCompile(`(?i)\bsub-?agents?\b`)},
	{name: "helper as an author", re: regexp.MustCompile("(?i)\\bhelpers? [`\"'][A-Za-z]|\\bhelper(s|'s)? (measured|found|wrote|ran|reported|argued|suggested|proposed|measurement|branch|area|notes?|report|finding)s?\\b")},
}

// historyFile reports whether path (slash-separated, relative to the module
// root) is text the history-word rule covers: Go files (code, comments,
// strings, test names), Markdown anywhere (README.md, DEVELOPERS.md,
// docs/**, docs/decisions/** included, testdata READMEs), shell scripts,
// the Makefile, the JavaScript tools and the CI entry point.
func historyFile(path string) bool {
	switch filepath.Ext(path) {
	case ".go", ".md", ".sh", ".mjs":
		return true
	}
	return path == "Makefile" || path == ".ci/run"
}

// skipDir reports whether a directory holds no text of the project's own:
// build outputs, fetched files, version control.
func skipDir(path string) bool {
	switch path {
	case ".git", "out", "bin", "node_modules":
		return true
	}
	return filepath.Base(path) == "node_modules"
}

// historyHits returns, for one line, the names of the patterns it matches.
func historyHits(line string) []string {
	var hits []string
	for _, w := range historyWords {
		l := line
		if w.allow != nil {
			l = w.allow.ReplaceAllString(l, "")
		}
		if w.re.MatchString(l) {
			hits = append(hits, w.name)
		}
	}
	return hits
}

// TestNoHistoryWords fails on words that tell the work's history in the
// module's text: numbered sessions, issue numbers and their sections,
// agents named as authors (the patterns in historyWords). Decision
// records are held to the same list: they cite history by commit and date.
func TestNoHistoryWords(t *testing.T) {
	const root = "../.."
	self := filepath.ToSlash(filepath.Join("internal", "layout", "history_test.go"))
	var files int
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && skipDir(rel) {
				return filepath.SkipDir
			}
			return nil
		}
		if !historyFile(rel) || rel == self {
			return nil
		}
		files++
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
		for n := 1; sc.Scan(); n++ {
			for _, name := range historyHits(sc.Text()) {
				t.Errorf("%s:%d: %s: %s", rel, n, name, strings.TrimSpace(sc.Text()))
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("found %d files to check; expected the whole module", files)
	}
}

// TestHistoryWordPatterns pins what the patterns catch and what they let
// pass, so that a change to the list cannot silently widen or blind it.
func TestHistoryWordPatterns(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "history_words.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var flagged, passed []string
	var list *[]string
	for line := range strings.Lines(string(b)) {
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case line == "flagged:":
			list = &flagged
		case line == "passed:":
			list = &passed
		case list == nil:
			t.Fatalf("testdata/history_words.txt: %q before flagged: or passed:", line)
		default:
			*list = append(*list, line)
		}
	}
	if len(flagged) < 10 || len(passed) < 10 {
		t.Fatalf("testdata/history_words.txt: %d flagged and %d passed examples; expected the lists", len(flagged), len(passed))
	}
	for _, s := range flagged {
		if len(historyHits(s)) == 0 {
			t.Errorf("not flagged: %q", s)
		}
	}
	for _, s := range passed {
		if h := historyHits(s); len(h) != 0 {
			t.Errorf("flagged %q as %v", s, h)
		}
	}
}
