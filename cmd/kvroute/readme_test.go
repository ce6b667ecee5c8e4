package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestREADMEDocumentsEveryFlag: every flag of every subcommand, as its -h
// prints it, is named in README.md (as --name, or -name), so a new flag
// cannot land undocumented.
func TestREADMEDocumentsEveryFlag(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	flagLine := regexp.MustCompile(`(?m)^  --?([a-z0-9][a-z0-9-]*)`)
	for _, cmd := range [][]string{{"serve"}, {"mock"}, {"indexer"}, {"nats"}, {"replay"}, {"bench", "index"}, {"snapshot", "inspect"}} {
		stdout, stderr, _ := runMain(t, t.TempDir(), append(cmd, "-h")...)
		flags := flagLine.FindAllStringSubmatch(stdout+stderr, -1)
		if len(flags) == 0 {
			t.Errorf("kvroute %s -h listed no flags:\n%s%s", strings.Join(cmd, " "), stdout, stderr)
			continue
		}
		for _, f := range flags {
			name := f[1]
			if !regexp.MustCompile(`(^|[^a-z0-9-])--?` + regexp.QuoteMeta(name) + `($|[^a-z0-9-])`).Match(readme) {
				t.Errorf("kvroute %s: flag --%s is not documented in README.md", strings.Join(cmd, " "), name)
			}
		}
	}
}
