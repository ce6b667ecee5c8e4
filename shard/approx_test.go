package shard

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/kvroute/kvroute/radix"
	"github.com/kvroute/kvroute/wire"
)

// approxEnv runs approximate-mode scripts against one Core. Blocks are named
// by strings; a block's local hash is the hash of its name and its sequence
// hash chains over the names before it, as the router computes them.
type approxEnv struct {
	c     *Core
	names map[wire.SeqHash]string // sequence hash → "a.b.c"
}

func localOf(name string) wire.BlockHash {
	toks := make([]uint32, len(name))
	for i := range name {
		toks[i] = uint32(name[i])
	}
	return wire.BlockHashOf(toks, wire.Seed)
}

func (e *approxEnv) hashes(names []string) ([]wire.BlockHash, []wire.SeqHash) {
	local := make([]wire.BlockHash, len(names))
	for i, n := range names {
		local[i] = localOf(n)
	}
	seq := wire.SequenceHashes(nil, local)
	for i, s := range seq {
		e.names[s] = strings.Join(names[:i+1], ".")
	}
	return local, seq
}

func scanDur(t *testing.T, td *datadriven.TestData, key string) time.Duration {
	var s string
	td.ScanArgs(t, key, &s)
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("%s: %v", td.Pos, err)
	}
	return d
}

func fmtOverlaps(ov []radix.Overlap) string {
	slices.SortFunc(ov, func(a, b radix.Overlap) int {
		if a.Worker.Worker != b.Worker.Worker {
			return int(a.Worker.Worker) - int(b.Worker.Worker)
		}
		return int(a.Worker.Dp) - int(b.Worker.Dp)
	})
	if len(ov) == 0 {
		return "none\n"
	}
	var b strings.Builder
	for _, o := range ov {
		fmt.Fprintf(&b, "w%d/%d: %d blocks (tree %d)\n", o.Worker.Worker, o.Worker.Dp, o.Blocks, o.TreeSize)
	}
	return b.String()
}

// state lists the recorded entries in expiry-list order.
func (e *approxEnv) state() string {
	a := &e.c.ax
	var b strings.Builder
	for x := a.entries[0].next; x != 0; x = a.entries[x].next {
		en := &a.entries[x]
		k := a.workers[en.worker].key
		fmt.Fprintf(&b, "w%d/%d %s exp=%v\n", k.Worker, k.Dp, e.names[en.seq], en.expiry)
	}
	if b.Len() == 0 {
		return "empty\n"
	}
	return b.String()
}

func TestApproxScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if !strings.HasPrefix(strings.TrimPrefix(path, "testdata/"), "approx") {
			t.Skip("not an approx script")
		}
		e := &approxEnv{c: NewCore(CoreConfig{}), names: map[wire.SeqHash]string{}}
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			out := e.run(t, td)
			if err := e.c.CheckInvariants(); err != nil {
				t.Fatalf("%s: invariants: %v", td.Pos, err)
			}
			return out
		})
	})
}

func (e *approxEnv) run(t *testing.T, td *datadriven.TestData) string {
	worker := func() wire.WorkerKey {
		var k wire.WorkerKey
		td.ScanArgs(t, "w", &k.Worker)
		td.MaybeScanArgs(t, "dp", &k.Dp)
		return k
	}
	switch td.Cmd {
	case "config":
		var cfg ApproxConfig
		if td.HasArg("ttl") {
			cfg.TTL = scanDur(t, td, "ttl")
		}
		td.MaybeScanArgs(t, "max", &cfg.MaxBlocks)
		td.MaybeScanArgs(t, "target", &cfg.PruneTarget)
		e.c = NewCore(CoreConfig{Approx: cfg})
		a := cfg.withDefaults()
		return fmt.Sprintf("ttl=%v max=%d target=%d\n", a.TTL, e.c.ax.max, e.c.ax.target)
	case "record":
		var names []string
		td.MaybeScanArgs(t, "blocks", &names) // no blocks: an empty decision
		local, seq := e.hashes(names)
		if td.HasArg("drop-seq") {
			seq = seq[:len(seq)-1]
		}
		if err := e.c.RecordDecision(worker(), local, seq, scanDur(t, td, "at")); err != nil {
			return "error: " + err.Error() + "\n"
		}
		return fmt.Sprintf("recorded; %d blocks\n", e.c.ApproxBlocks())
	case "match":
		var names []string
		td.ScanArgs(t, "blocks", &names)
		local, _ := e.hashes(names)
		return fmtOverlaps(e.c.Match(nil, local))
	case "tick":
		n := e.c.Tick(scanDur(t, td, "at"))
		return fmt.Sprintf("expired %d; %d blocks\n", n, e.c.ApproxBlocks())
	case "state":
		return e.state()
	case "tree":
		return fmtOverlaps(e.c.Workers(nil))
	case "remove-worker":
		var w uint64
		td.ScanArgs(t, "w", &w)
		return fmt.Sprintf("removed %d; %d blocks\n", e.c.RemoveWorker(w), e.c.ApproxBlocks())
	case "remove-dp":
		return fmt.Sprintf("removed %d; %d blocks\n", e.c.RemoveDpRank(worker()), e.c.ApproxBlocks())
	case "counters":
		c := e.c.Counters()
		return fmt.Sprintf("decisions=%d recorded=%d refreshed=%d expired=%d pruned=%d tree-stored=%d tree-removed=%d tree-unknown=%d\n",
			c.Decisions, c.BlocksRecorded, c.BlocksRefreshed, c.BlocksExpired, c.BlocksPruned,
			c.BlocksStored, c.BlocksRemoved, c.BlocksUnknown)
	}
	t.Fatalf("%s: unknown command %q", td.Pos, td.Cmd)
	return ""
}
