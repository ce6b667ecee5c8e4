//go:build !race && !invariants

package shard

import (
	"testing"
	"time"

	"github.com/kvroute/kvroute/radix"
	"github.com/kvroute/kvroute/wire"
)

// Allocation gates for the hot paths, in steady state: every pooled work
// item in circulation (at most the queue's capacity plus a few) has grown
// its buffers, which the warm-up loops ensure.

const warmup = 500

func TestIndexHotPathsDoNotAllocate(t *testing.T) {
	load := makeLoad(16, 64, 32)
	for _, shards := range []int{1, 2} {
		ix := newTestIndex(t, Config{Shards: shards, QueueSize: 16})
		for i := range warmup {
			if err := ix.Apply(load.batches[i%len(load.batches)]); err != nil {
				t.Fatal(err)
			}
		}
		if err := ix.Flush(); err != nil {
			t.Fatal(err)
		}
		probe := load.probes[0]
		var ov []radix.Overlap
		ov, _ = ix.Match(ov, probe)
		if len(ov) == 0 {
			t.Fatal("probe matches nothing")
		}
		if a := testing.AllocsPerRun(200, func() { ov, _ = ix.Match(ov[:0], probe) }); a != 0 {
			t.Errorf("shards=%d: Match allocates %v times per call", shards, a)
		}
		reqs := make([]MatchRequest, 8)
		batch := func() {
			for i := range reqs {
				reqs[i].Hashes, reqs[i].Overlaps = load.probes[i], reqs[i].Overlaps[:0]
			}
			_ = ix.MatchBatch(reqs)
		}
		batch()
		if a := testing.AllocsPerRun(200, batch); a != 0 {
			t.Errorf("shards=%d: MatchBatch allocates %v times per batch", shards, a)
		}
		var ws []radix.Overlap
		ws, _ = ix.Workers(ws)
		if a := testing.AllocsPerRun(100, func() { ws, _ = ix.Workers(ws[:0]) }); a != 0 {
			t.Errorf("shards=%d: Workers allocates %v times per call", shards, a)
		}
		i := 0
		if a := testing.AllocsPerRun(200, func() {
			_ = ix.Apply(load.batches[i%len(load.batches)])
			i++
		}); a != 0 {
			t.Errorf("shards=%d: Apply allocates %v times per batch", shards, a)
		}
		loc := probe
		seq := wire.SequenceHashes(nil, loc)
		now := time.Now()
		for range warmup {
			_ = ix.RecordDecisionAt(wire.WorkerKey{Worker: 1000}, loc, seq, now)
		}
		if a := testing.AllocsPerRun(200, func() {
			_ = ix.RecordDecisionAt(wire.WorkerKey{Worker: 1000}, loc, seq, now)
		}); a != 0 {
			t.Errorf("shards=%d: RecordDecision allocates %v times per call", shards, a)
		}
	}
}

func TestCoreApproxDoesNotAllocate(t *testing.T) {
	// Blocks live 3 s and a cycle advances 2 s, recording half the probes
	// (alternating halves) twice, so each cycle expires the previous one's
	// blocks while every worker keeps some: the radix tree never empties
	// or frees a worker's slot, which it reallocates on reuse.
	c := NewCore(CoreConfig{Approx: ApproxConfig{TTL: 3 * time.Second, MaxBlocks: 250}})
	load := makeLoad(4, 8, 8)
	seqs := make([][]wire.SeqHash, len(load.probes))
	for i, p := range load.probes {
		seqs[i] = wire.SequenceHashes(nil, p)
	}
	now, n := time.Duration(0), 0
	cycle := func() {
		for i, p := range load.probes {
			if (i/4)%2 != n%2 {
				continue
			}
			_ = c.RecordDecision(wire.WorkerKey{Worker: uint64(i % 4)}, p, seqs[i], now) // new blocks, then pruning
			_ = c.RecordDecision(wire.WorkerKey{Worker: uint64(i % 4)}, p, seqs[i], now) // refresh
		}
		n++
		now += 2 * time.Second
		c.Tick(now) // expire the previous cycle's blocks
	}
	for range 10 {
		cycle()
	}
	if a := testing.AllocsPerRun(50, cycle); a != 0 {
		t.Errorf("record/refresh/prune/expire cycle allocates %v times", a)
	}
	if c.Counters().BlocksPruned == 0 || c.Counters().BlocksExpired == 0 {
		t.Fatalf("cycle did not exercise pruning and expiry: %+v", c.Counters())
	}
	if err := c.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}
