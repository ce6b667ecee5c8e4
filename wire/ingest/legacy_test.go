package ingest

import (
	"testing"

	"github.com/kvroute/kvroute/wire"
)

// TestDynamoLegacyJSON: older Dynamo published each RouterEvent as JSON
// (serde_json of lib/llm/src/kv_router/protocols.rs RouterEvent
// {worker_id, event: {event_id, data: {stored: {parent_hash, blocks:
// [{block_hash, tokens_hash}]}}}}, Dynamo ≤ 0.3 on
// namespace.{ns}.component.{comp}.kv_events, later on ...kv-events before
// the msgpack event plane). Both reach the index, under the Dynamo source's
// id tracking: one worker's ids continue across the two subjects.
func TestDynamoLegacyJSON(t *testing.T) {
	h := newNATSHarness(t, Config{})
	if h.in.cfg.Subjects.KVEventsLegacy == "" {
		t.Fatal("no legacy subject")
	}
	a, b := blocks(1, 4), blocks(2, 3)
	e2 := stored(5, 0, 2, b)
	e2.HasParent, e2.Parent = true, a[len(a)-1].Engine
	e1 := stored(5, 0, 1, a)
	h.publish(t, h.in.cfg.Subjects.KVEventsLegacy, wire.AppendDynamoJSON(nil, &e1))
	waitMessages(t, h.in, h.ix, SourceNATSDynamo, 1) // two subscriptions: no order between them
	h.publish(t, h.in.cfg.Subjects.KVEvents, append([]byte(" \n"), wire.AppendDynamoJSON(nil, &e2)...))
	waitMessages(t, h.in, h.ix, SourceNATSDynamo, 2)
	if !holds(t, h.ix, wire.WorkerKey{Worker: 5}, append(a[:len(a):len(a)], b...)) {
		t.Fatalf("worker 5 does not hold its chain: %+v", match(t, h.ix, append(a[:len(a):len(a)], b...)))
	}
	st := h.in.Stats().Sources[SourceNATSDynamo]
	if st.Events != 2 || st.Malformed != 0 || st.Gaps != 0 {
		t.Fatalf("dynamo source: %+v", st)
	}
	// msgpack on kv-events still decodes.
	e3 := stored(5, 0, 3, blocks(3, 2))
	h.dynamo(t, e3)
	waitMessages(t, h.in, h.ix, SourceNATSDynamo, 3)
	if st := h.in.Stats().Sources[SourceNATSDynamo]; st.Events != 3 || st.Malformed != 0 || st.Gaps != 0 {
		t.Fatalf("dynamo source after msgpack: %+v", st)
	}
}
