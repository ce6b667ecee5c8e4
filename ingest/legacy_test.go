package ingest

import (
	"sync"
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

// tierSink records the tier of every event it is handed.
type tierSink struct {
	mu    sync.Mutex
	tiers []wire.Tier
}

func (s *tierSink) Apply(evs []wire.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range evs {
		s.tiers = append(s.tiers, evs[i].Tier)
	}
	return nil
}

func (s *tierSink) got() []wire.Tier {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]wire.Tier(nil), s.tiers...)
}

// TestZMQSGLangCPUPinned: SGLang's HiCache publishes its host copies with
// medium CPU_PINNED (python/sglang/srt/disaggregation/kv_events.py
// StorageMedium; mem_cache hiradix_cache.py write-back); over a real ZMQ
// subscription they reach the sink as host-tier events, not external.
func TestZMQSGLangCPUPinned(t *testing.T) {
	ep := freeEndpoint(t)
	p := zpub(t, ep, "kv@12@m")
	defer p.Close()
	sink := &tierSink{}
	in := newIngest(t, Config{}, sink)
	if err := in.AddZMQ(ZMQWorker{Worker: 12, Endpoint: ep, Model: "m"}); err != nil {
		t.Fatal(err)
	}
	warmZMQ(t, in, p, wire.WorkerKey{Worker: 12})
	st := vllmStored(testBlockSize, 0x71)
	st.Medium = "CPU_PINNED"
	publishVLLM(t, p, st, wire.VLLMEvent{Kind: wire.KindRemoved, BlockHashes: []wire.EngineHash{0x71}, Medium: "CPU_PINNED"})
	waitFor(t, func() bool { return len(sink.got()) >= 2 }, func() string { return "two events" })
	if got := sink.got(); got[0] != wire.TierHost || got[1] != wire.TierHost {
		t.Fatalf("tiers %v, want host, host", got)
	}
}
