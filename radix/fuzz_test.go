package radix

import (
	"testing"

	"github.com/kvroute/kvroute/wire"
)

// FuzzModel reads an event sequence from the input and checks the tree
// against the naive model (results, sizes, matches, invariants) after every
// event. Each op takes 4 bytes plus up to 7 block bytes:
//
//	b0: op (store, remove, clear, remove-dp, remove-worker), a conflict bit
//	    (bit 3) and the tier of a store or removal (bits 4-5)
//	b1: worker key (4 keys), b2: parent / removal choice, b3: block count
func FuzzModel(f *testing.F) {
	f.Add([]byte{0, 0, 0, 3, 1, 2, 3, 0, 1, 0, 2, 1, 2})
	f.Add([]byte{0, 0, 0, 4, 1, 1, 1, 1, 0, 1, 0, 4, 1, 1, 2, 2, 1, 0, 1, 0, 3, 0, 0, 0})
	f.Add([]byte{0, 2, 0, 5, 3, 1, 2, 1, 3, 0, 3, 0, 2, 1, 2, 2, 0, 9, 1, 1, 4, 0, 0, 0})
	f.Add([]byte{8, 1, 0, 2, 1, 1, 0, 1, 1, 3, 1, 2, 0, 1, 0, 0, 0, 0})
	f.Add([]byte{0, 0, 0, 3, 1, 2, 3, 16, 0, 0, 3, 1, 2, 3, 0, 0, 1, 1, 2, 19, 0, 0, 1, 3, 0, 1, 0, 0}) // host copies, a host removal
	f.Add([]byte{16, 0, 0, 2, 1, 2, 0, 0, 1, 2, 3, 35, 0, 1, 1, 3, 0, 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		keys := []wire.WorkerKey{{Worker: 1}, {Worker: 1, Dp: 1}, {Worker: 2}, {Worker: 3}}
		tr, m := New(), newModel()
		for len(data) >= 4 {
			op, k, choice, n := data[0], keys[int(data[1])%len(keys)], int(data[2]), 1+int(data[3])%7
			data = data[4:]
			paths := m.heldPaths(k)
			var ev wire.Event
			switch op % 8 {
			case 0, 1, 2: // store
				ev = wire.Event{Worker: k, Kind: wire.KindStored, Tier: wire.Tier(op >> 4 & 3)}
				path := ""
				if choice%4 != 0 && len(paths) > 0 {
					path = paths[choice%len(paths)]
					ev.HasParent, ev.Parent = true, m.held[k][path]
				} else if choice%8 == 4 {
					ev.HasParent, ev.Parent = true, 2 // never held: engine hashes are odd
				}
				for i := 0; i < n && len(data) > 0; i++ {
					h := wire.BlockHash(1 + data[0]%4)
					data = data[1:]
					path = pathAppend(path, h)
					e := engineFor(k, path)
					if op&8 != 0 && len(paths) > 0 { // conflict: reuse a held engine hash
						e = m.held[k][paths[(choice+i)%len(paths)]]
					}
					ev.Blocks = append(ev.Blocks, wire.Block{Engine: e, Local: h})
				}
			case 3, 4, 5: // remove
				ev = wire.Event{Worker: k, Kind: wire.KindRemoved, Tier: wire.Tier(op >> 4 & 3)}
				for i := range n % 3 {
					if len(paths) == 0 {
						ev.Blocks = append(ev.Blocks, wire.Block{Engine: 4})
						continue
					}
					ev.Blocks = append(ev.Blocks, wire.Block{Engine: m.held[k][paths[(choice+i*7)%len(paths)]]})
				}
			case 6:
				ev = wire.Event{Worker: k, Kind: wire.KindCleared}
			default:
				ev = wire.Event{Worker: k, Kind: wire.Kind(100 + choice%2)} // RemoveDpRank / RemoveWorker
			}
			applyBoth(t, tr, m, &ev)
			var probes [][]wire.BlockHash
			for _, kk := range keys {
				for _, p := range m.heldPaths(kk) {
					probes = append(probes, append(pathHashes(p), 1))
				}
			}
			compareTree(t, tr, m, probes)
		}
		events := tr.Dump(nil)
		re := New()
		for i := range events {
			if _, err := re.Apply(&events[i]); err != nil {
				t.Fatalf("rebuild: %v", err)
			}
		}
		if a, b := treeString(tr), treeString(re); a != b {
			t.Fatalf("rebuilt tree differs:\n%s\nvs\n%s", a, b)
		}
	})
}
