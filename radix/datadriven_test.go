package radix

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/kvroute/kvroute/wire"
)

// TestScripts runs testdata/*.txt. Commands:
//
//	store w=1 [dp=0] [tier=host] [parent=e1] blocks=(e2:h2,e3:h3)
//	remove w=1 [dp=0] [tier=host] blocks=(e2,e3)
//	clear w=1
//	remove-worker w=1
//	remove-dp w=1 dp=0
//	match h1 h2 h3
//	tree | dump | stats | workers | rebuild
//
// Engine hashes are written eN, local hashes hN. Every command is followed by
// CheckInvariants. Regenerate expectations with -rewrite.
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if !strings.HasSuffix(path, ".txt") {
			t.Skip("not a script") // e.g. testdata/fuzz corpora
		}
		tr := New()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			out := runCmd(t, tr, d)
			if err := tr.CheckInvariants(); err != nil {
				t.Fatalf("%s: %v", d.Pos, err)
			}
			return out
		})
	})
}

func runCmd(t *testing.T, tr *Tree, d *datadriven.TestData) string {
	key := func() wire.WorkerKey {
		var k wire.WorkerKey
		d.ScanArgs(t, "w", &k.Worker)
		if d.HasArg("dp") {
			d.ScanArgs(t, "dp", &k.Dp)
		}
		return k
	}
	tier := func() wire.Tier {
		if !d.HasArg("tier") {
			return wire.TierDevice
		}
		var name string
		d.ScanArgs(t, "tier", &name)
		for k := range wire.Tier(numTiers) {
			if k.String() == name {
				return k
			}
		}
		t.Fatalf("%s: unknown tier %q", d.Pos, name)
		return 0
	}
	switch d.Cmd {
	case "store":
		ev := wire.Event{Worker: key(), Kind: wire.KindStored, Tier: tier()}
		if d.HasArg("parent") {
			var p string
			d.ScanArgs(t, "parent", &p)
			ev.HasParent, ev.Parent = true, wire.EngineHash(parseHash(t, p, 'e'))
		}
		arg, _ := d.Arg("blocks")
		for _, v := range arg.Vals {
			if v == "" {
				continue
			}
			e, h, ok := strings.Cut(v, ":")
			if !ok {
				t.Fatalf("%s: block %q is not eN:hN", d.Pos, v)
			}
			ev.Blocks = append(ev.Blocks, wire.Block{Engine: wire.EngineHash(parseHash(t, e, 'e')), Local: wire.BlockHash(parseHash(t, h, 'h'))})
		}
		return fmtResult(tr.Apply(&ev))
	case "remove":
		ev := wire.Event{Worker: key(), Kind: wire.KindRemoved, Tier: tier()}
		arg, _ := d.Arg("blocks")
		for _, v := range arg.Vals {
			ev.Blocks = append(ev.Blocks, wire.Block{Engine: wire.EngineHash(parseHash(t, v, 'e'))})
		}
		return fmtResult(tr.Apply(&ev))
	case "clear":
		return fmtResult(tr.Apply(&wire.Event{Worker: key(), Kind: wire.KindCleared}))
	case "bad":
		return fmtResult(tr.Apply(&wire.Event{Worker: key(), Kind: 99}))
	case "remove-worker":
		return fmt.Sprintf("removed=%d", tr.RemoveWorker(key().Worker))
	case "remove-dp":
		return fmt.Sprintf("removed=%d", tr.RemoveDpRank(key()))
	case "match":
		var hs []wire.BlockHash
		for _, a := range d.CmdArgs {
			hs = append(hs, wire.BlockHash(parseHash(t, a.Key, 'h')))
		}
		return fmtOverlaps(tr.Match(nil, hs))
	case "workers":
		return fmtOverlaps(tr.Workers(nil))
	case "stats":
		st := tr.Stats()
		return fmt.Sprintf("nodes=%d entries=%d workers=%d blocks=%d", st.Nodes, st.Entries, st.Workers, st.Blocks)
	case "tree":
		return treeString(tr)
	case "dump":
		var b strings.Builder
		for _, ev := range tr.Dump(nil) {
			b.WriteString(fmtEvent(ev))
			b.WriteByte('\n')
		}
		return b.String()
	case "rebuild":
		re := New()
		for _, ev := range tr.Dump(nil) {
			if _, err := re.Apply(&ev); err != nil {
				t.Fatalf("%s: rebuilding: %v", d.Pos, err)
			}
		}
		if err := re.CheckInvariants(); err != nil {
			t.Fatalf("%s: rebuilt tree: %v", d.Pos, err)
		}
		if a, b := treeString(tr), treeString(re); a != b {
			t.Fatalf("%s: rebuilt tree differs:\n%s\nvs\n%s", d.Pos, a, b)
		}
		return "equal"
	}
	t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	return ""
}

func parseHash(t testing.TB, s string, prefix byte) uint64 {
	if len(s) < 2 || s[0] != prefix {
		t.Fatalf("%q: want %cN", s, prefix)
	}
	v, err := strconv.ParseUint(s[1:], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func fmtResult(r Result, err error) string {
	s := fmt.Sprintf("stored=%d removed=%d unknown=%d", r.Stored, r.Removed, r.Unknown)
	if r.Conflicts != 0 {
		s += fmt.Sprintf(" conflicts=%d", r.Conflicts)
	}
	if err != nil {
		s += "\nerror: " + err.Error()
	}
	return s
}

func keyString(k wire.WorkerKey) string { return fmt.Sprintf("w%d/%d", k.Worker, k.Dp) }

func cmpKey(a, b wire.WorkerKey) int {
	return cmp.Or(cmp.Compare(a.Worker, b.Worker), cmp.Compare(a.Dp, b.Dp))
}

func sortOverlaps(o []Overlap) []Overlap {
	slices.SortFunc(o, func(a, b Overlap) int { return cmpKey(a.Worker, b.Worker) })
	return o
}

func fmtOverlaps(o []Overlap) string {
	if len(o) == 0 {
		return "none"
	}
	var b strings.Builder
	for _, v := range sortOverlaps(o) {
		fmt.Fprintf(&b, "%s: blocks=%d", keyString(v.Worker), v.Blocks)
		if v.Host != 0 || v.Disk != 0 {
			fmt.Fprintf(&b, " host=%d disk=%d", v.Host, v.Disk)
		}
		fmt.Fprintf(&b, " size=%d\n", v.TreeSize)
	}
	return b.String()
}

func fmtEvent(ev wire.Event) string {
	var b strings.Builder
	b.WriteString(keyString(ev.Worker))
	if ev.Tier != wire.TierDevice {
		fmt.Fprintf(&b, " tier=%v", ev.Tier)
	}
	if ev.HasParent {
		fmt.Fprintf(&b, " parent=e%d", ev.Parent)
	}
	b.WriteString(" blocks=(")
	for i, bl := range ev.Blocks {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "e%d:h%d", bl.Engine, bl.Local)
	}
	b.WriteByte(')')
	return b.String()
}

// treeString prints the tree, children sorted by head: each node's local
// hashes and its worker keys (sorted).
func treeString(tr *Tree) string {
	if tr.nodes == nil {
		return "empty"
	}
	var b strings.Builder
	var walk func(x uint32, depth int)
	walk = func(x uint32, depth int) {
		var kids []uint32
		for c := tr.nodes[x].first; c != 0; c = tr.nodes[c].next {
			kids = append(kids, c)
		}
		slices.SortFunc(kids, func(a, c uint32) int { return cmp.Compare(tr.nodes[a].head, tr.nodes[c].head) })
		for _, c := range kids {
			b.WriteString(strings.Repeat("  ", depth))
			loc, _ := tr.runOf(c)
			for i, h := range loc {
				if i > 0 {
					b.WriteByte(' ')
				}
				fmt.Fprintf(&b, "h%d", h)
			}
			var ks []wire.WorkerKey
			masks := map[wire.WorkerKey]uint8{}
			for s := range tr.slots {
				if tr.slots[s].live && tr.has(c, uint32(s)) {
					ks = append(ks, tr.slots[s].key)
					masks[tr.slots[s].key] = tr.maskOf(c, uint32(s))
				}
			}
			slices.SortFunc(ks, cmpKey)
			b.WriteString(" {")
			for i, k := range ks {
				if i > 0 {
					b.WriteByte(' ')
				}
				b.WriteString(keyString(k))
				if m := masks[k]; m != devBit {
					b.WriteString(tierString(m))
				}
			}
			b.WriteString("}\n")
			walk(c, depth+1)
		}
	}
	walk(rootID, 0)
	if b.Len() == 0 {
		return "empty"
	}
	return b.String()
}

// tierString writes a tier mask as [device+host].
func tierString(m uint8) string {
	var ts []string
	for k := range wire.Tier(numTiers) {
		if m&tierBit(k) != 0 {
			ts = append(ts, k.String())
		}
	}
	return "[" + strings.Join(ts, "+") + "]"
}
