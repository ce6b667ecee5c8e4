package layout

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// mdLink matches a Markdown link's target: ](target) or ](target#anchor).
var mdLink = regexp.MustCompile(`\]\(([^)#\s]+)(#[^)\s]*)?\)`)

// TestDocLinksResolve fails on a relative link in the project's Markdown
// (README.md, DEVELOPERS.md, docs/**) whose file does not exist, so moving
// or renaming a document cannot leave the front page or a decision record
// pointing nowhere.
func TestDocLinksResolve(t *testing.T) {
	const root = "../.."
	var files []string
	for _, f := range []string{"README.md", "DEVELOPERS.md"} {
		files = append(files, filepath.Join(root, f))
	}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var links int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			if _, err := os.Stat(filepath.Join(filepath.Dir(f), target)); err != nil {
				rel, _ := filepath.Rel(root, f)
				t.Errorf("%s: link %q points at no file", rel, target)
			}
		}
	}
	if links < 50 {
		t.Fatalf("found %d relative links in %d documents; expected the docs' links", links, len(files))
	}
}
