package router

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/sched"
	"github.com/kvroute/kvroute/wire"
)

// The ring keeps the last decisions, newest first, takes a report only for
// the decision still in its slot, and says the rule.
func TestDecisionRing(t *testing.T) {
	d := newDecisionRing(3, 100, nil) // rounded up to 4 slots
	p := &pending{}
	p.ovs = []sched.Overlap{{Worker: wire.WorkerKey{Worker: 1}, Device: 3}, {Worker: wire.WorkerKey{Worker: 2}}}
	var seqs []uint64
	for i := range 6 {
		p.id = uint64(i + 1)
		p.admitted = i == 4
		rule := ruleOf(p)
		routed := i != 5
		if !routed {
			rule = ruleShed
		}
		seqs = append(seqs, d.record(p, sched.Decision{Worker: wire.WorkerKey{Worker: 1}, Overlap: 3}, rule, routed, int64(i)))
	}
	d.report(seqs[0], 1, 48) // overwritten: ignored
	d.report(seqs[3], 4, 32)
	d.report(seqs[4], 5, -1)
	var got []struct {
		ID       uint64 `json:"id"`
		Rule     string `json:"rule"`
		Worker   *uint64
		Reported *int  `json:"reported_cached_tokens"`
		Verified *bool `json:"verified"`
		Cands    []struct {
			Worker uint64 `json:"worker_id"`
			Chosen bool   `json:"chosen"`
		} `json:"candidates"`
	}
	b := d.appendLast(nil, 100)
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if len(got) != 4 || got[0].ID != 6 || got[3].ID != 3 {
		t.Fatalf("ring %s", b)
	}
	if got[0].Rule != "shed" || got[1].Rule != "queue" || got[2].Rule != "cost" {
		t.Fatalf("rules %s", b)
	}
	if got[2].Reported == nil || *got[2].Reported != 32 || !*got[2].Verified || got[1].Reported != nil || *got[1].Verified || got[3].Verified != nil {
		t.Fatalf("reports %s", b)
	}
	if len(got[2].Cands) != 2 || !got[2].Cands[0].Chosen || got[2].Cands[1].Chosen || got[0].Cands[0].Chosen {
		t.Fatalf("candidates %s", b)
	}
	if n := len(d.appendLast(nil, 2)); n == 0 {
		t.Fatal("n=2 empty")
	}
	// One decision in the sample is logged at debug level.
	var logs bytes.Buffer
	d = newDecisionRing(4, 2, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	for i := range 4 {
		p.id = uint64(i + 1)
		d.record(p, sched.Decision{Worker: wire.WorkerKey{Worker: 1}}, ruleCost, true, 0)
	}
	if n := strings.Count(logs.String(), `msg="routing decision"`); n != 2 || !strings.Contains(logs.String(), `\"id\":4`) {
		t.Fatalf("%d lines logged: %s", n, logs.String())
	}
	var two []json.RawMessage
	_ = json.Unmarshal(d.appendLast(nil, 2), &two)
	if len(two) != 2 {
		t.Fatalf("n=2 gave %d", len(two))
	}
}
