package kvmodel

import (
	"slices"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/wire"
)

func TestModelRejects(t *testing.T) {
	w := wire.WorkerKey{Worker: 1}
	stored := func(id uint64, parent wire.EngineHash, has bool, engines ...wire.EngineHash) *wire.Event {
		ev := &wire.Event{Worker: w, ID: id, Kind: wire.KindStored, Parent: parent, HasParent: has}
		for _, e := range engines {
			ev.Blocks = append(ev.Blocks, wire.Block{Engine: e, Local: wire.BlockHash(e * 10)})
		}
		return ev
	}
	removed := func(id uint64, engines ...wire.EngineHash) *wire.Event {
		ev := &wire.Event{Worker: w, ID: id, Kind: wire.KindRemoved}
		for _, e := range engines {
			ev.Blocks = append(ev.Blocks, wire.Block{Engine: e})
		}
		return ev
	}
	var m Model
	for _, ev := range []*wire.Event{stored(1, 0, false, 1, 2), stored(2, 2, true, 3), stored(3, 1, true, 4)} {
		if err := m.Apply(ev); err != nil {
			t.Fatal(err)
		}
	}
	if p := m.Path(w, 3); !slices.Equal(p, []wire.BlockHash{10, 20, 30}) {
		t.Fatalf("path %v", p)
	}
	for _, c := range []struct {
		local []wire.BlockHash
		want  int
	}{{nil, 0}, {[]wire.BlockHash{10, 20, 30, 40}, 3}, {[]wire.BlockHash{10, 40}, 2}, {[]wire.BlockHash{20}, 0}} {
		if got := m.Match(w, c.local); got != c.want {
			t.Errorf("Match(%v) = %d, want %d", c.local, got, c.want)
		}
	}
	if m.Match(wire.WorkerKey{Worker: 2}, []wire.BlockHash{10}) != 0 {
		t.Error("unknown worker matched")
	}
	bad := []struct {
		ev  *wire.Event
		msg string
	}{
		{stored(5, 0, false, 9), "event id 5 after 3"},
		{stored(4, 77, true, 9), "unknown parent"},
		{stored(4, 0, false, 9, 9), "stored twice"},
		{stored(4, 3, true, 1), "stored twice"},
		{&wire.Event{Worker: w, ID: 4, Kind: wire.KindStored, Blocks: []wire.Block{{Engine: 99, Local: 10}}}, "local hash a stored twice under one parent"},
		{removed(4, 8), "removed unknown"},
		{removed(4, 2), "keeps 1 cached children"},
		{removed(4, 1, 2), "keeps 1 cached children"}, // 4 is still under 1
	}
	for _, c := range bad {
		if err := m.Apply(c.ev); err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%+v: error %v, want %q", c.ev, err, c.msg)
		}
	}
	if err := m.Apply(removed(4, 3, 2)); err != nil {
		t.Fatal(err)
	}
	want := []Block{{Engine: 1, Local: 10}, {Engine: 4, Local: 40, Parent: 1, HasParent: true}}
	if err := m.Check(w, want); err != nil {
		t.Fatal(err)
	}
	if err := m.Check(w, want[:1]); err == nil {
		t.Fatal("Check missed an extra block")
	}
	if err := m.Apply(&wire.Event{Worker: w, ID: 5, Kind: wire.KindCleared}); err != nil || len(m.Blocks(w)) != 0 {
		t.Fatalf("clear: %v, %d blocks", err, len(m.Blocks(w)))
	}
	if m.Events() != 5 {
		t.Fatalf("%d events applied", m.Events())
	}
}
