package layout

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/kvroute/kvroute"

// rank places a package of the module in its layer; a package may import
// only packages of a lower rank, or of its own family within a rank that
// allows it (see sameFamilyOK).
func rank(pkg string) int {
	switch {
	case strings.HasPrefix(pkg, "internal/"):
		return -1
	case pkg == "wire":
		return 0
	case strings.HasPrefix(pkg, "wire/"):
		return 1
	case pkg == "radix":
		return 2
	case pkg == "shard", pkg == "sched", pkg == "verify",
		pkg == "ingest", strings.HasPrefix(pkg, "ingest/"),
		pkg == "prompt", strings.HasPrefix(pkg, "prompt/"):
		return 3
	case strings.HasPrefix(pkg, "bench/"), strings.HasPrefix(pkg, "perf/"):
		return 4
	case pkg == "node":
		return 5
	case pkg == "router", strings.HasPrefix(pkg, "router/"), pkg == "indexer":
		return 6
	case strings.HasPrefix(pkg, "cmd/"), pkg == "cluster":
		return 7
	}
	return 100 // unknown: a new top-level package must be placed here
}

// family groups packages that may import each other within a rank.
func family(pkg string) string {
	if i := strings.IndexByte(pkg, '/'); i >= 0 {
		return pkg[:i]
	}
	return pkg
}

// sameFamilyOK reports whether from may import to, a package of the same
// rank: only within one family (wire/plane → wire/zmq, ingest/recovery →
// ingest, bench/replay → bench/engine), never across (shard ↔ sched,
// ingest ↔ prompt).
func sameFamilyOK(from, to string) bool {
	return family(from) == family(to)
}

func TestImportsRunDownward(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	var pkgs int
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		pkgs++
		from := strings.TrimPrefix(f[0], module+"/")
		if rank(from) == 100 {
			t.Errorf("package %s has no layer: add it to rank()", from)
			continue
		}
		for _, imp := range f[1:] {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			to := strings.TrimPrefix(imp, module+"/")
			rf, rt := rank(from), rank(to)
			if rt < rf || (rt == rf && sameFamilyOK(from, to)) {
				continue
			}
			t.Errorf("%s imports %s: imports must run downward (rank %d → %d)", from, to, rf, rt)
		}
	}
	if pkgs < 20 {
		t.Fatalf("go list found %d packages; expected the whole module", pkgs)
	}
}
