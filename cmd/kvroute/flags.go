package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// envName is the environment variable that stands for a flag:
// --kv-blocks → KVROUTE_KV_BLOCKS.
func envName(flagName string) string {
	return "KVROUTE_" + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(flagName))
}

// parseFlags parses args into fs, then fills every flag not given on the
// command line from its KVROUTE_* environment variable. Errors name the flag
// and the variable.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || set[f.Name] {
			return
		}
		v, ok := os.LookupEnv(envName(f.Name))
		if !ok {
			return
		}
		if e := fs.Set(f.Name, v); e != nil {
			err = fmt.Errorf("%s=%q (for --%s): %v", envName(f.Name), v, f.Name, e)
		}
	})
	return err
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }
