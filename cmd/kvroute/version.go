package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
)

// revision and buildTime are set by `make build` through -ldflags -X when the
// toolchain records no VCS stamp (GOFLAGS=-buildvcs=false, or a build
// outside a git checkout).
var revision, buildTime string

// versionInfo is what `kvroute version` prints.
type versionInfo struct {
	Module, Version, Revision, Time, Go, Platform string
	Modified                                      bool
}

func readVersion() versionInfo {
	v := versionInfo{Module: "github.com/kvroute/kvroute", Version: "(devel)", Revision: revision, Time: buildTime,
		Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Path != "" {
			v.Module = bi.Main.Path
		}
		if bi.Main.Version != "" {
			v.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Revision = s.Value
			case "vcs.time":
				v.Time = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	if v.Revision == "" {
		v.Revision = "unknown"
	}
	return v
}

func writeVersion(w io.Writer) {
	v := readVersion()
	rev := v.Revision
	if v.Modified {
		rev += " (modified)"
	}
	fmt.Fprintf(w, "kvroute %s\nmodule   %s\nrevision %s\n", v.Version, v.Module, rev)
	if v.Time != "" {
		fmt.Fprintf(w, "built    %s\n", v.Time)
	}
	fmt.Fprintf(w, "go       %s %s\n", v.Go, v.Platform)
}

func runVersion(args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("takes no arguments (got %q)", args[0])
	}
	writeVersion(os.Stdout)
	return nil
}
