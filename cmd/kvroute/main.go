// Command kvroute is the KV-cache-aware router for LLM inference fleets.
//
// Subcommands are listed by `kvroute help`; each takes flags with KVROUTE_*
// environment equivalents (docs/reference/flags.md).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
)

// command is one subcommand: its name, a one-line summary and its entry point.
type command struct {
	name    string
	summary string
	run     func(args []string) error
}

func commands() []command {
	return []command{
		{"bench", "benchmarks against real traces (bench index)", runBench},
		{"epp", "run the endpoint picker for Kubernetes inference gateways (Envoy ext_proc), with serve's index and scheduler", runEpp},
		{"epp-check", "check an endpoint picker's protocol (--target ADDR), or play Envoy in front of one (--serve-envoy)", runEppCheck},
		{"indexer", "run the standalone indexer: KV-event ingest, NATS index queries and the indexer HTTP API", runIndexer},
		{"mock", "run a simulated vLLM-like fleet", runMock},
		{"nats", "run one embedded nats-server node with JetStream (a cluster node with --cluster-port and --routes)", runNats},
		{"replay", "replay a trace against routing policies and report (offline or online)", runReplay},
		{"snapshot", "inspect an index snapshot file (snapshot inspect FILE)", runSnapshot},
		{"serve", "run the router: HTTP proxy and decision API over the index and scheduler", runServe},
		{"version", "print the module version, VCS revision and Go version (also --version)", runVersion},
	}
}

func usage() {
	fmt.Fprintf(os.Stderr, "kvroute: a KV-cache-aware router for LLM inference fleets\n\nusage: kvroute <command> [flags]\n\ncommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(os.Stderr, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(os.Stderr, "\nEvery flag can also be set by the environment: --kv-blocks is KVROUTE_KV_BLOCKS.\nRun `kvroute <command> -h` for a command's flags.\n")
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "help" || os.Args[1] == "-h" || os.Args[1] == "--help" {
		usage()
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	if os.Args[1] == "--version" || os.Args[1] == "-version" {
		writeVersion(os.Stdout)
		return
	}
	for _, c := range commands() {
		if c.name == os.Args[1] {
			if err := c.run(os.Args[2:]); errors.Is(err, flag.ErrHelp) {
				return // -h: the flag set printed the usage
			} else if err != nil {
				fmt.Fprintf(os.Stderr, "kvroute %s: %v\n", c.name, err)
				os.Exit(1)
			}
			return
		}
	}
	fmt.Fprintf(os.Stderr, "kvroute: unknown command %q\n\n", os.Args[1])
	usage()
	os.Exit(2)
}
