package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/kvroute/kvroute/shard"
)

// runSnapshot is `kvroute snapshot inspect FILE`.
func runSnapshot(args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintf(os.Stderr, "usage: kvroute snapshot inspect FILE\n\n  inspect  read a whole index snapshot, verify its checksums and print its header and counts\n")
		if len(args) == 0 {
			return errors.New("missing subcommand (inspect)")
		}
		return nil
	}
	if args[0] != "inspect" {
		return fmt.Errorf("unknown snapshot subcommand %q (want inspect)", args[0])
	}
	if len(args) != 2 {
		return errors.New("usage: kvroute snapshot inspect FILE")
	}
	return inspectSnapshot(os.Stdout, args[1])
}

func inspectSnapshot(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := shard.InspectSnapshot(f)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	h := info.Header
	fmt.Fprintf(w, "file             %s\n", path)
	fmt.Fprintf(w, "format version   %d\n", h.Version)
	fmt.Fprintf(w, "block size       %d\n", h.BlockSize)
	fmt.Fprintf(w, "stream sequence  %d\n", h.StreamSeq)
	fmt.Fprintf(w, "shards           %d\n", h.Shards)
	fmt.Fprintf(w, "workers          %d\n", h.Workers)
	fmt.Fprintf(w, "nodes            %d\n", h.Nodes)
	fmt.Fprintf(w, "blocks           %d\n", h.Blocks)
	fmt.Fprintf(w, "entries          %d\n", h.Entries)
	fmt.Fprintf(w, "approx entries   %d\n", h.ApproxEntries)
	per := 0.0
	if h.Entries > 0 {
		per = float64(info.Compressed) / float64(h.Entries)
	}
	fmt.Fprintf(w, "compressed size  %d bytes (%.2f per entry)\n", info.Compressed, per)
	fmt.Fprintf(w, "raw size         %d bytes\n", info.Raw)
	fmt.Fprintf(w, "checksums        ok\n")
	for i, s := range info.Shards {
		fmt.Fprintf(w, "shard %-3d        workers %d, nodes %d, blocks %d, entries %d, approx entries %d, engine hashes literal/sequence/shared %d/%d/%d runs\n",
			i, s.Workers, s.Nodes, s.Blocks, s.Entries, info.Approx[i], s.EngineModes[0], s.EngineModes[1], s.EngineModes[2])
	}
	return nil
}
