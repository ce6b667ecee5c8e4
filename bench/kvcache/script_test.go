package kvcache

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/kvroute/kvroute/wire"
)

// TestScripts runs testdata/*.txt. Commands:
//
//	init capacity=N block=B          new manager (worker 1)
//	alloc seq=S tokens=T blocks=(a,b,...)
//	grow seq=S tokens=T blocks=(a,b,...)   blocks: the sequence's full list
//	free seq=S | preempt seq=S | clear
//	match blocks=(a,b,...)
//	held | queue | usage | stats
//
// Mutating commands print their result and the events they emitted; every
// command is followed by a replay check (events reproduce the held blocks)
// and CheckInvariants.
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var h *harness
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			var b strings.Builder
			seqArg := func() uint64 {
				var s uint64
				d.ScanArgs(t, "seq", &s)
				return s
			}
			blocksArg := func() []wire.BlockHash {
				var names []string
				if arg, ok := d.Arg("blocks"); ok {
					names = arg.Vals
				}
				return h.hashes(names)
			}
			switch d.Cmd {
			case "init":
				var c, bs int
				d.ScanArgs(t, "capacity", &c)
				d.ScanArgs(t, "block", &bs)
				h = newHarness(Config{Capacity: c, BlockSize: bs, Worker: wire.WorkerKey{Worker: 1}})
				return ""
			case "alloc", "grow":
				id := seqArg()
				var tokens int
				d.ScanArgs(t, "tokens", &tokens)
				local := blocksArg()
				var reused int
				var err error
				if d.Cmd == "alloc" {
					reused, err = h.m.Allocate(id, local, tokens)
				} else {
					reused, err = h.m.Grow(id, local, tokens)
				}
				if err != nil {
					fmt.Fprintf(&b, "error: %v\n", err)
				} else {
					fmt.Fprintf(&b, "reused=%d\n", reused)
				}
			case "free":
				fmt.Fprintf(&b, "%v\n", h.m.Free(seqArg()))
			case "preempt":
				fmt.Fprintf(&b, "%v\n", h.m.Preempt(seqArg()))
			case "clear":
				h.m.Clear()
			case "match":
				fmt.Fprintf(&b, "%d\n", h.m.Match(blocksArg()))
			case "held":
				b.WriteString(h.held())
			case "queue":
				b.WriteString(h.queue())
			case "usage":
				used, total := h.m.Usage()
				fmt.Fprintf(&b, "used=%d total=%d cached=%d seqs=%d", used, total, h.m.Cached(), h.m.Sequences())
			case "stats":
				fmt.Fprintf(&b, "%+v", h.m.Stats())
			default:
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			h.events(t, &b)
			return b.String()
		})
	})
}
