//go:build !race && !invariants

package node

import (
	"testing"

	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire/plane"
)

// A served lookup allocates nothing in this package's part of it, on
// either side, once the scratch has grown: the serving index's decode,
// lookup and reply encoding (queryHandler.answer), and the remote router's
// request encoding and reply decoding (RemoteIndex.appendMatch and
// takeMatch). What nats.go allocates per message (the nats.Msg, its
// subject and a copy of its payload) is not ours to save; see
// BenchmarkRemoteLookup's allocs/op for the whole round trip.
func TestAllocsServeMatch(t *testing.T) {
	ix, prompt, err := benchIndex()
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	h := &queryHandler{s: &IndexServer{ix: ix}}
	ri := NewRemoteIndex(nil, RemoteIndexConfig{Subject: "unused"})
	for _, n := range []int{1, 32} {
		reqs := make([]shard.MatchRequest, n)
		for i := range reqs {
			reqs[i].Hashes = prompt[:len(prompt)-i]
		}
		var reply []byte
		round := func() {
			for i := range reqs {
				reqs[i].Overlaps = reqs[i].Overlaps[:0]
			}
			if err := ri.appendMatch(reqs, plane.FlagTiers); err != nil {
				t.Fatal(err)
			}
			reply = h.answer(ri.buf, true)
			if retry, err := ri.takeMatch(reply, reqs, plane.FlagTiers); retry || err != nil {
				t.Fatal(retry, err)
			}
		}
		round()
		if len(reqs[n-1].Overlaps) != 8 {
			t.Fatalf("batch of %d: overlaps %+v", n, reqs[n-1].Overlaps)
		}
		if a := testing.AllocsPerRun(100, func() { _ = ri.appendMatch(reqs, plane.FlagTiers) }); a != 0 {
			t.Errorf("batch of %d: RemoteIndex.appendMatch allocates %v times per call", n, a)
		}
		if a := testing.AllocsPerRun(100, func() { h.answer(ri.buf, true) }); a != 0 {
			t.Errorf("batch of %d: the serving index's answer allocates %v times per call", n, a)
		}
		if a := testing.AllocsPerRun(100, round); a != 0 {
			t.Errorf("batch of %d: a lookup round (encode, answer, decode) allocates %v times", n, a)
		}
	}
}
