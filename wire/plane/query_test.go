package plane

import (
	"slices"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/wire"
)

func TestIndexSubject(t *testing.T) {
	s, err := SubjectsFor("ns", "comp")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := IndexSubject(s), "namespace.ns.component.comp.kv-indexer.query"; got != want {
		t.Fatalf("IndexSubject = %q, want %q", got, want)
	}
}

func TestQueryRoundTrip(t *testing.T) {
	prompts := [][]wire.BlockHash{{1, 2, 3}, nil, {0xffffffffffffffff}}
	b, err := AppendMatchQuery(nil, "llama", "t1", prompts)
	if err != nil {
		t.Fatal(err)
	}
	var q Query
	if err := DecodeQuery(b, &q); err != nil {
		t.Fatal(err)
	}
	if q.Kind != QueryMatch || string(q.Model) != "llama" || string(q.Tenant) != "t1" || q.Prompts() != 3 {
		t.Fatalf("decoded %+v", q)
	}
	for i, p := range prompts {
		if !slices.Equal(q.Prompt(i), p) {
			t.Fatalf("prompt %d = %v, want %v", i, q.Prompt(i), p)
		}
	}
	// The header + prompt form encodes the same bytes.
	b2, _ := AppendMatchHeader(nil, "llama", "t1", len(prompts))
	for _, p := range prompts {
		b2 = AppendMatchPrompt(b2, p)
	}
	if !slices.Equal(b, b2) {
		t.Fatal("AppendMatchHeader+AppendMatchPrompt differs from AppendMatchQuery")
	}

	b, err = AppendRecordQuery(nil, "", "", wire.WorkerKey{Worker: 7, Dp: 2}, []wire.BlockHash{4, 5}, []wire.SeqHash{6, 7})
	if err != nil {
		t.Fatal(err)
	}
	if err := DecodeQuery(b, &q); err != nil {
		t.Fatal(err)
	}
	if q.Kind != QueryRecord || q.Worker != (wire.WorkerKey{Worker: 7, Dp: 2}) || !slices.Equal(q.Hashes, []wire.BlockHash{4, 5}) || !slices.Equal(q.Seq, []wire.SeqHash{6, 7}) {
		t.Fatalf("decoded %+v", q)
	}
	if err := DecodeQuery(AppendPingQuery(nil), &q); err != nil || q.Kind != QueryPing {
		t.Fatalf("ping: %v %+v", err, q)
	}
}

func TestRecordQueryNotOneToOne(t *testing.T) {
	if _, err := AppendRecordQuery(nil, "", "", wire.WorkerKey{Worker: 1}, []wire.BlockHash{1, 2}, []wire.SeqHash{1}); err == nil || !strings.Contains(err.Error(), "1:1") {
		t.Fatalf("AppendRecordQuery with 2 local, 1 sequence hashes: %v", err)
	}
	// A hand-built message with a mismatch is rejected by the decoder too.
	b, _ := AppendRecordQuery(nil, "", "", wire.WorkerKey{Worker: 1}, []wire.BlockHash{1}, []wire.SeqHash{1})
	b = b[:len(b)-12]
	b = append(b, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0)
	var q Query
	if err := DecodeQuery(b, &q); err == nil || !strings.Contains(err.Error(), "1:1") {
		t.Fatalf("decoding a 1-local 2-sequence record: %v", err)
	}
}

func TestQueryRejects(t *testing.T) {
	good, _ := AppendMatchQuery(nil, "m", "", [][]wire.BlockHash{{1, 2}})
	var q Query
	for i := range len(good) {
		if err := DecodeQuery(good[:i], &q); err == nil {
			t.Errorf("truncated to %d bytes: no error", i)
		}
	}
	for name, mut := range map[string]func([]byte) []byte{
		"version":  func(b []byte) []byte { b[0] = 9; return b },
		"kind":     func(b []byte) []byte { b[1] = 9; return b },
		"flags":    func(b []byte) []byte { b[2] = 2; return b }, // 1 is FlagTiers
		"trailing": func(b []byte) []byte { return append(b, 0) },
		"count":    func(b []byte) []byte { b[7] = 0xff; return b },
	} {
		if err := DecodeQuery(mut(slices.Clone(good)), &q); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestQueryReplyRoundTrip(t *testing.T) {
	ovs := [][]wire.Overlap{
		{{Worker: wire.WorkerKey{Worker: 1, Dp: 0}, Blocks: 3, TreeSize: 10}, {Worker: wire.WorkerKey{Worker: 2, Dp: 1}, Blocks: 1, TreeSize: 4}},
		nil,
	}
	b := AppendReplyHeader(nil, len(ovs))
	for _, o := range ovs {
		b = AppendReplyPrompt(b, o)
	}
	var r QueryReply
	if err := DecodeQueryReply(b, QueryMatch, &r); err != nil {
		t.Fatal(err)
	}
	if r.Status != ReplyOK || len(r.Ends) != 2 || !slices.Equal(r.Prompt(0), ovs[0]) || len(r.Prompt(1)) != 0 {
		t.Fatalf("decoded %+v", r)
	}
	for i := range len(b) {
		if err := DecodeQueryReply(b[:i], QueryMatch, &r); err == nil {
			t.Errorf("reply truncated to %d bytes: no error", i)
		}
	}
	if err := DecodeQueryReply(AppendErrorReply(nil, "boom"), QueryMatch, &r); err != nil || r.Status != ReplyError || r.Err != "boom" {
		t.Fatalf("error reply: %v %+v", err, r)
	}
	if err := DecodeQueryReply(AppendPingReply(nil, true, "idx-1"), QueryPing, &r); err != nil || !r.Approx || r.ID != "idx-1" {
		t.Fatalf("ping reply: %v %+v", err, r)
	}
}

// With FlagTiers a match query asks for per-tier overlaps and the reply
// carries host and disk blocks; the flag is refused on other kinds, and an
// unknown flag is refused everywhere.
func TestQueryTiers(t *testing.T) {
	b, err := AppendMatchHeaderFlags(nil, "m", "", 1, FlagTiers)
	if err != nil {
		t.Fatal(err)
	}
	b = AppendMatchPrompt(b, []wire.BlockHash{1, 2})
	var q Query
	if err := DecodeQuery(b, &q); err != nil || q.Flags != FlagTiers || q.Prompts() != 1 {
		t.Fatalf("tiered query: %v %+v", err, q)
	}
	if _, err := AppendMatchHeaderFlags(nil, "m", "", 1, 2); err == nil {
		t.Fatal("an unknown request flag was encoded")
	}
	bad := slices.Clone(b)
	bad[2] = 2
	if err := DecodeQuery(bad, &q); err == nil {
		t.Fatal("an unknown request flag was accepted")
	}
	ping := AppendPingQuery(nil)
	ping[2] = byte(FlagTiers)
	if err := DecodeQuery(ping, &q); err == nil {
		t.Fatal("FlagTiers on a ping was accepted")
	}

	ovs := []wire.Overlap{{Worker: wire.WorkerKey{Worker: 1, Dp: 2}, Blocks: 3, Host: 4, Disk: 5, TreeSize: 20}, {Worker: wire.WorkerKey{Worker: 7}, Host: 1, TreeSize: 1}}
	r := AppendReplyPromptFlags(AppendReplyHeaderFlags(nil, 1, FlagTiers), ovs, FlagTiers)
	var rep QueryReply
	if err := DecodeQueryReply(r, QueryMatch, &rep); err != nil || rep.Flags != FlagTiers || !slices.Equal(rep.Prompt(0), ovs) {
		t.Fatalf("tiered reply: %v %+v", err, rep)
	}
	for i := range len(r) {
		if err := DecodeQueryReply(r[:i], QueryMatch, &rep); err == nil {
			t.Errorf("tiered reply truncated to %d bytes: no error", i)
		}
	}
	// Without the flag the tiers are not sent.
	plain := AppendReplyPrompt(AppendReplyHeader(nil, 1), ovs)
	if err := DecodeQueryReply(plain, QueryMatch, &rep); err != nil || rep.Prompt(0)[0].Host != 0 || rep.Prompt(0)[0].Blocks != 3 {
		t.Fatalf("plain reply: %v %+v", err, rep)
	}
	pr := AppendPingReply(nil, false, "x")
	pr[2] = byte(FlagTiers)
	if err := DecodeQueryReply(pr, QueryPing, &rep); err == nil {
		t.Fatal("FlagTiers on a ping reply was accepted")
	}
}

// A workers query has no body; its reply is a match reply of one prompt.
func TestWorkersQuery(t *testing.T) {
	var q Query
	if err := DecodeQuery(AppendWorkersQuery(nil), &q); err != nil || q.Kind != QueryWorkers {
		t.Fatalf("workers query: %v %+v", err, q)
	}
	if err := DecodeQuery(append(AppendWorkersQuery(nil), 0), &q); err == nil {
		t.Fatal("a workers query with a body was accepted")
	}
	ws := []wire.Overlap{{Worker: wire.WorkerKey{Worker: 1}, TreeSize: 30}, {Worker: wire.WorkerKey{Worker: 2, Dp: 1}, TreeSize: 5}}
	var r QueryReply
	if err := DecodeQueryReply(AppendReplyPrompt(AppendReplyHeader(nil, 1), ws), QueryWorkers, &r); err != nil || len(r.Ends) != 1 || !slices.Equal(r.Prompt(0), ws) {
		t.Fatalf("workers reply: %v %+v", err, r)
	}
}

// FuzzDecodeQuery: the decoder never panics, never grows its slices beyond
// what the input can hold, and what it accepts re-encodes to the same bytes.
func FuzzDecodeQuery(f *testing.F) {
	seed, _ := AppendMatchQuery(nil, "llama", "t", [][]wire.BlockHash{{1, 2, 3}, {4}})
	f.Add(seed)
	seed, _ = AppendMatchQuery(nil, "", "", nil)
	f.Add(seed)
	seed, _ = AppendRecordQuery(nil, "m", "", wire.WorkerKey{Worker: 3, Dp: 1}, []wire.BlockHash{9, 8}, []wire.SeqHash{7, 6})
	f.Add(seed)
	f.Add(AppendPingQuery(nil))
	f.Add(AppendWorkersQuery(nil))
	seed, _ = AppendMatchHeaderFlags(nil, "m", "", 1, FlagTiers)
	f.Add(AppendMatchPrompt(seed, []wire.BlockHash{5, 6}))
	f.Add([]byte{1, 1, 0, 0, 0, 0, 0xff, 0xff})
	f.Add([]byte{1, 1, 0, 0, 0, 0, 1, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		var q Query
		if err := DecodeQuery(b, &q); err != nil {
			return
		}
		if len(q.Hashes)*8 > len(b) || len(q.Seq)*8 > len(b) {
			t.Fatalf("decoded %d hashes from %d bytes", len(q.Hashes), len(b))
		}
		var re []byte
		var err error
		switch q.Kind {
		case QueryMatch:
			re, err = AppendMatchHeaderFlags(nil, string(q.Model), string(q.Tenant), q.Prompts(), q.Flags)
			for i := range q.Prompts() {
				re = AppendMatchPrompt(re, q.Prompt(i))
			}
		case QueryRecord:
			re, err = AppendRecordQuery(nil, string(q.Model), string(q.Tenant), q.Worker, q.Hashes, q.Seq)
		case QueryWorkers:
			re, err = appendHeader(nil, QueryWorkers, string(q.Model), string(q.Tenant))
		case QueryPing:
			re, err = appendHeader(nil, QueryPing, string(q.Model), string(q.Tenant))
		}
		if err != nil || !slices.Equal(re, b) {
			t.Fatalf("accepted %x, re-encodes to %x (%v)", b, re, err)
		}
	})
}

// FuzzDecodeQueryReply: the reply decoder never panics and never decodes
// more overlaps than the input holds.
func FuzzDecodeQueryReply(f *testing.F) {
	b := AppendReplyHeader(nil, 2)
	b = AppendReplyPrompt(b, []wire.Overlap{{Worker: wire.WorkerKey{Worker: 1}, Blocks: 2, TreeSize: 3}})
	b = AppendReplyPrompt(b, nil)
	f.Add(b, uint8(QueryMatch))
	f.Add(AppendErrorReply(nil, "no"), uint8(QueryMatch))
	b = AppendReplyHeaderFlags(nil, 1, FlagTiers)
	f.Add(AppendReplyPromptFlags(b, []wire.Overlap{{Worker: wire.WorkerKey{Worker: 1}, Blocks: 2, TreeSize: 9, Host: 3, Disk: 1}}, FlagTiers), uint8(QueryMatch))
	f.Add(AppendPingReply(nil, true, "x"), uint8(QueryPing))
	f.Add([]byte{1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}, uint8(QueryMatch))
	f.Fuzz(func(t *testing.T, b []byte, kind uint8) {
		var r QueryReply
		if err := DecodeQueryReply(b, QueryKind(kind), &r); err != nil {
			return
		}
		if len(r.Overlaps)*20 > len(b) {
			t.Fatalf("decoded %d overlaps from %d bytes", len(r.Overlaps), len(b))
		}
	})
}
