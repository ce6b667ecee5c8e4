package kvcache

import (
	"testing"

	"github.com/kvroute/kvroute/wire"
)

// ClearSilently drops every cached block without an event or an event id.
func TestClearSilently(t *testing.T) {
	m := New(Config{Capacity: 16, BlockSize: 4, Worker: wire.WorkerKey{Worker: 1}})
	local := []wire.BlockHash{1, 2, 3}
	if _, err := m.Allocate(7, local, 12); err != nil {
		t.Fatal(err)
	}
	m.Free(7)
	if m.Match(local) != 3 {
		t.Fatalf("cached %d blocks before the clear", m.Match(local))
	}
	m.Reset()
	next := m.NextEventID()
	m.ClearSilently()
	if n := m.Match(local); n != 0 {
		t.Fatalf("%d blocks still cached", n)
	}
	if len(m.Events()) != 0 || m.NextEventID() != next {
		t.Fatalf("events %v, next id %d (was %d)", m.Events(), m.NextEventID(), next)
	}
	if used, _ := m.Usage(); used != 0 {
		t.Fatalf("%d blocks in use", used)
	}
}
