package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvroute/kvroute/node"
	"github.com/kvroute/kvroute/shard"
)

const snapshotUsage = "usage: kvroute snapshot inspect FILE | kvroute snapshot inspect --bucket NAME [--nats URL] [--nats-creds FILE]"

// runSnapshot is `kvroute snapshot inspect FILE` or `kvroute snapshot
// inspect --bucket NAME --nats URL` (the current snapshot in a NATS object
// store bucket, kvroute serve --snapshot-bucket).
func runSnapshot(args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintf(os.Stderr, "%s\n\n  inspect  read a whole index snapshot (a file, or a bucket's current one), verify its checksums and print its header and counts\n", snapshotUsage)
		if len(args) == 0 {
			return errors.New("missing subcommand (inspect)")
		}
		return nil
	}
	if args[0] != "inspect" {
		return fmt.Errorf("unknown snapshot subcommand %q (want inspect)", args[0])
	}
	fs := newFlagSet("kvroute snapshot inspect")
	bucket := fs.String("bucket", "", "NATS object store bucket (kvroute serve --snapshot-bucket): inspect its current snapshot")
	natsURL := fs.String("nats", nats.DefaultURL, "NATS URL (with --bucket)")
	creds := fs.String("nats-creds", "", "NATS credentials file (with --bucket)")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	switch {
	case *bucket != "" && fs.NArg() == 0:
		return inspectBucket(os.Stdout, *natsURL, *creds, *bucket)
	case *bucket == "" && fs.NArg() == 1:
		return inspectSnapshot(os.Stdout, fs.Arg(0))
	}
	return errors.New(snapshotUsage)
}

func inspectSnapshot(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return printSnapshot(w, "file             "+path, f)
}

// inspectBucket inspects the current snapshot of an object store bucket.
func inspectBucket(w io.Writer, url, creds, bucket string) error {
	opts := []nats.Option{nats.Name("kvroute snapshot inspect"), nats.Timeout(5 * time.Second)}
	if creds != "" {
		opts = append(opts, nats.UserCredentials(creds))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return fmt.Errorf("--nats %s: %w", url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("--nats %s: %w", url, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	obs, err := js.ObjectStore(ctx, bucket)
	if err != nil {
		return fmt.Errorf("--bucket %s: %w", bucket, err)
	}
	r, err := node.OpenCurrentSnapshot(ctx, obs)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("--bucket %s: no snapshot yet (no %q object)", bucket, node.SnapshotCurrent)
	}
	if err != nil {
		return fmt.Errorf("--bucket %s: %w", bucket, err)
	}
	defer r.Close()
	oi, err := r.Info()
	if err != nil {
		return fmt.Errorf("--bucket %s: %w", bucket, err)
	}
	if err := printSnapshot(w, fmt.Sprintf("object           %s/%s (stored %s)", bucket, oi.Name, oi.ModTime.UTC().Format(time.RFC3339)), r); err != nil {
		return err
	}
	tname := node.TrackingObjectFor(oi.Name)
	keys, err := node.ReadTracking(ctx, obs, oi.Name)
	if err != nil {
		fmt.Fprintf(w, "event-id tracking  unusable (%s: %v): a restore asks every worker seen in the replay for a dump\n", tname, err)
		return nil
	}
	fmt.Fprintf(w, "event-id tracking  %d worker keys (%s, checksum ok)\n", len(keys), tname)
	return nil
}

func printSnapshot(w io.Writer, source string, r io.Reader) error {
	info, err := shard.InspectSnapshot(r)
	if err != nil {
		return fmt.Errorf("%s: %w", source[17:], err)
	}
	h := info.Header
	fmt.Fprintf(w, "%s\n", source)
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
