package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvroute/kvroute/ingest"
	"github.com/kvroute/kvroute/internal/natstest"
	"github.com/kvroute/kvroute/node"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire"
)

func TestSnapshotInspect(t *testing.T) {
	ix, err := shard.NewIndex(shard.Config{Shards: 2, BlockSize: 16, TickInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	k := wire.WorkerKey{Worker: 7}
	err = ix.Apply([]wire.Event{{Worker: k, Kind: wire.KindStored, Blocks: []wire.Block{{Engine: 1, Local: 10}, {Engine: 2, Local: 11}}}})
	if err != nil {
		t.Fatal(err)
	}
	local := []wire.BlockHash{10, 11, 12}
	if err := ix.RecordDecisionAt(wire.WorkerKey{Worker: 8}, local, wire.SequenceHashes(nil, local), time.Now()); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "index.snap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Snapshot(f, 4242); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var out bytes.Buffer
	if err := inspectSnapshot(&out, path); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"stream sequence  4242", "block size       16", "shards           2", "workers          2",
		"entries          5", "approx entries   3", "checksums        ok", "shard 1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// A damaged file names the problem.
	data, _ := os.ReadFile(path)
	data[0] ^= 1
	os.WriteFile(path, data, 0o644)
	if err := inspectSnapshot(&out, path); err == nil || !strings.Contains(err.Error(), "not a kvroute snapshot") {
		t.Fatalf("damaged file: %v", err)
	}
	if err := runSnapshot([]string{"frobnicate"}); err == nil {
		t.Fatal("unknown subcommand accepted")
	}
}

// `kvroute snapshot inspect --bucket NAME --nats URL` reads the bucket's
// current snapshot (the object "current" names) and prints what the file
// form prints; an empty bucket and a missing one are clear errors.
func TestSnapshotInspectBucket(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Connect(t, s)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := runSnapshot([]string{"inspect", "--bucket", "NOPE", "--nats", s.ClientURL()}); err == nil || !strings.Contains(err.Error(), "--bucket NOPE: nats: bucket not found") {
		t.Errorf("missing bucket: %v", err)
	}
	obs, err := node.OpenSnapshotBucket(ctx, js, "SNAPS", 1, true)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := inspectBucket(&out, s.ClientURL(), "", "SNAPS"); err == nil || !strings.Contains(err.Error(), "no snapshot yet") {
		t.Errorf("empty bucket: %v", err)
	}
	ix, err := shard.NewIndex(shard.Config{Shards: 2, BlockSize: 16, TickInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	err = ix.Apply([]wire.Event{{Worker: wire.WorkerKey{Worker: 7}, Kind: wire.KindStored, Blocks: []wire.Block{{Engine: 1, Local: 10}, {Engine: 2, Local: 11}}}})
	if err != nil {
		t.Fatal(err)
	}
	var snap bytes.Buffer
	if err := ix.Snapshot(&snap, 99); err != nil {
		t.Fatal(err)
	}
	if _, err := obs.PutBytes(ctx, node.SnapshotObjectName(99), snap.Bytes()); err != nil {
		t.Fatal(err)
	}
	if _, err := obs.PutString(ctx, node.SnapshotCurrent, node.SnapshotObjectName(99)); err != nil {
		t.Fatal(err)
	}
	if err := inspectBucket(&out, s.ClientURL(), "", "SNAPS"); err != nil {
		t.Fatal(err)
	}
	if want := "event-id tracking  unusable"; !strings.Contains(out.String(), want) {
		t.Errorf("no tracking object: output lacks %q:\n%s", want, out.String())
	}
	tracking := ingest.AppendTracking(nil, []ingest.SourceKey{{Source: ingest.SourceNATSNative, Worker: wire.WorkerKey{Worker: 7}, Last: 5}})
	if _, err := obs.PutBytes(ctx, node.TrackingObjectName(99), tracking); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := inspectBucket(&out, s.ClientURL(), "", "SNAPS"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SNAPS/" + node.SnapshotObjectName(99), "stream sequence  99", "entries          2", "checksums        ok",
		"event-id tracking  1 worker keys"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
