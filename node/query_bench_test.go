package node

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/kvroute/kvroute/internal/natstest"
	"github.com/kvroute/kvroute/radix"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/plane"
)

const benchBlocks = 512

// benchIndex returns an index where 8 workers hold prefixes (64..512
// blocks) of one 512-block prompt, and the prompt.
func benchIndex() (*shard.Index, []wire.BlockHash, error) {
	ix, err := shard.NewIndex(shard.Config{Shards: 1})
	if err != nil {
		return nil, nil, err
	}
	prompt := make([]wire.BlockHash, benchBlocks)
	blocks := make([]wire.Block, benchBlocks)
	for i := range prompt {
		prompt[i] = wire.BlockHash(0x9e3779b97f4a7c15 * uint64(i+1))
		blocks[i] = wire.Block{Engine: wire.EngineHash(i + 1), Local: prompt[i]}
	}
	var evs []wire.Event
	for w := range 8 {
		evs = append(evs, wire.Event{Worker: wire.WorkerKey{Worker: uint64(w + 1)}, Kind: wire.KindStored, Blocks: blocks[:64*(w+1)]})
	}
	if err := ix.Apply(evs); err == nil {
		err = ix.Flush()
	}
	if err != nil {
		_ = ix.Close()
		return nil, nil, err
	}
	return ix, prompt, nil
}

// servedIndex is benchIndex served on an in-process nats-server.
func servedIndex(tb testing.TB) (*server.Server, *shard.Index, *IndexServer, string, []wire.BlockHash) {
	tb.Helper()
	ix, prompt, err := benchIndex()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = ix.Close() })
	ns := natstest.Server(tb)
	subj, _ := plane.SubjectsFor("bench", "backend")
	subject := plane.IndexSubject(subj)
	srv, err := ServeIndex(natstest.Connect(tb, ns), ix, IndexServerConfig{Subject: subject, ID: "bench"})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = srv.Close() })
	return ns, ix, srv, subject, prompt
}

func TestServedIndexMatchesLocal(t *testing.T) {
	ns, ix, _, subject, prompt := servedIndex(t)
	ri := NewRemoteIndex(natstest.Connect(t, ns), RemoteIndexConfig{Subject: subject, Timeout: 5 * time.Second})
	want, err := ix.Match(nil, prompt)
	if err != nil {
		t.Fatal(err)
	}
	reqs := []shard.MatchRequest{{Hashes: prompt}, {Hashes: prompt[:100]}, {Hashes: nil}}
	if err := ri.MatchBatch(reqs); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(reqs[0].Overlaps, want) || len(want) != 8 {
		t.Fatalf("remote %+v, local %+v", reqs[0].Overlaps, want)
	}
	want100, _ := ix.Match(nil, prompt[:100])
	if !slices.Equal(reqs[1].Overlaps, want100) || len(reqs[2].Overlaps) != 0 {
		t.Fatalf("remote %+v / %+v, local %+v", reqs[1].Overlaps, reqs[2].Overlaps, want100)
	}
	// A record query to an index fed by KV events is refused (the reply
	// says why) and counted.
	b, _ := plane.AppendRecordQuery(nil, "", "", wire.WorkerKey{Worker: 1}, prompt[:1], []wire.SeqHash{1})
	msg, err := natstest.Connect(t, ns).Request(subject, b, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var r plane.QueryReply
	if err := plane.DecodeQueryReply(msg.Data, plane.QueryRecord, &r); err != nil || r.Status != plane.ReplyError {
		t.Fatalf("record on a KV-event index: %v %+v", err, r)
	}
}

// BenchmarkRemoteLookup compares a lookup of a 512-block prompt in the
// local index with the same lookup through NATS request/reply to one
// serving index (an IndexServer in a process of its own, the test binary
// run by startServeChild, as a `kvroute indexer` would be; the nats-server
// runs in this process, on loopback, or with KVROUTE_BENCH_NATS_PROC=1 in
// a third process). Sub-benchmarks:
//
//   - local: shard.Index.MatchBatch of one prompt, the ratio's base;
//   - remote/c=N: N requesters, each on its own connection as N routers
//     would be, one prompt per request, back to back;
//   - batch-32/c=N: the same with 32 prompts per request (the router's
//     batcher sends a whole batch in one request).
//
// Each reports lookups/s (prompts looked up per second, summed over the
// requesters); cpu-µs/lookup, this process's CPU time per lookup
// (requesters and nats-server; on this shared machine it moves far less
// than lookups/s); serve-lookups/cpu-s, the lookups the serving process
// answered per second of its own CPU time (what one core buys: the serving
// instance's capacity apart from the requesters and the nats-server it
// shares this machine with); sleeps/req and serve-sleeps/req, the times a
// thread of this process and of the serving process went to sleep per
// request (voluntary context switches, each one a wake-up the round trip
// pays for); runq-µs/req and serve-runq-µs/req, the time their threads
// waited on a run queue per request (runnable, not running: the machine's
// other load); with the nats-server apart, nats-cpu-µs/req,
// nats-sleeps/req and nats-runq-µs/req, the same of its process; and the
// p50, p99 and p99.9 of one request's latency, from every request of the
// measured run sorted (thousands with the default benchtime), after a
// warm-up of 200 requests per requester that is not counted.
func BenchmarkRemoteLookup(b *testing.B) {
	ns, ix, _, _, prompt := servedIndex(b)
	subj, _ := plane.SubjectsFor("bench-proc", "backend")
	subject := plane.IndexSubject(subj)
	url := ns.ClientURL()
	var procs benchProcs
	if os.Getenv(natsProcEnv) != "" {
		procs.nats, url = startNATSChild(b)
	}
	procs.serve = startServeChild(b, url, subject)
	b.Run("local", func(b *testing.B) {
		reqs := []shard.MatchRequest{{Hashes: prompt}}
		lookupClients(b, benchProcs{}, 1, 1, func(int) func() error {
			return func() error {
				err := ix.MatchBatch(reqs)
				reqs[0].Overlaps = reqs[0].Overlaps[:0]
				return err
			}
		})
	})
	remote := func(prompts int) func(int) func() error {
		return func(int) func() error {
			nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(nc.Close)
			ri := NewRemoteIndex(nc, RemoteIndexConfig{Subject: subject, Timeout: 10 * time.Second})
			reqs := make([]shard.MatchRequest, prompts)
			for i := range reqs {
				reqs[i].Hashes = prompt
			}
			return func() error { return ri.MatchBatch(reqs) }
		}
	}
	for _, c := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("remote/c=%d", c), func(b *testing.B) { lookupClients(b, procs, c, 1, remote(1)) })
	}
	for _, c := range []int{1, 4} {
		b.Run(fmt.Sprintf("batch-32/c=%d", c), func(b *testing.B) { lookupClients(b, procs, c, 32, remote(32)) })
	}
}

// benchProcs are the processes of BenchmarkRemoteLookup besides this one:
// the serving index and, with KVROUTE_BENCH_NATS_PROC set, the nats-server
// (0: none, or in this process).
type benchProcs struct{ serve, nats int }

// lookupClients runs b.N requests of prompts lookups each, spread over
// clients goroutines, each running its own request function from
// newClient, and reports the metrics of BenchmarkRemoteLookup (those of
// the other processes when they run). Setup and a warm-up of 200 requests
// per client are not timed.
func lookupClients(b *testing.B, procs benchProcs, clients, prompts int, newClient func(int) func() error) {
	const warm = 200
	dos := make([]func() error, clients)
	for i := range dos {
		dos[i] = newClient(i)
		for range warm {
			if err := dos[i](); err != nil {
				b.Fatal(err)
			}
		}
	}
	lat := make([][]time.Duration, clients)
	per := (b.N + clients - 1) / clients
	for i := range lat {
		lat[i] = make([]time.Duration, 0, per)
	}
	var wg sync.WaitGroup
	b.ResetTimer()
	self0 := sampleSelf()
	serve0, nats0 := sample(procs.serve), sample(procs.nats)
	for i, do := range dos {
		wg.Go(func() {
			for range per {
				t0 := time.Now()
				if err := do(); err != nil {
					b.Error(err)
					return
				}
				lat[i] = append(lat[i], time.Since(t0))
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	self := sampleSelf().sub(self0)
	serve, nats := sample(procs.serve).sub(serve0), sample(procs.nats).sub(nats0)
	all := slices.Concat(lat...)
	if len(all) == 0 {
		return
	}
	reqs := float64(len(all))
	lookups := reqs * float64(prompts)
	slices.Sort(all)
	q := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))].Nanoseconds()) / 1e3 }
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
	b.ReportMetric(q(0.999), "p99.9-µs")
	b.ReportMetric(lookups/b.Elapsed().Seconds(), "lookups/s")
	if self.cpu > 0 {
		b.ReportMetric(float64(self.cpu.Nanoseconds())/1e3/lookups, "cpu-µs/lookup")
	}
	if procs.serve == 0 {
		return
	}
	if self.sleeps > 0 {
		b.ReportMetric(float64(self.sleeps)/reqs, "sleeps/req")
		b.ReportMetric(float64(self.wait.Nanoseconds())/1e3/reqs, "runq-µs/req")
	}
	if serve.cpu > 0 {
		b.ReportMetric(lookups/serve.cpu.Seconds(), "serve-lookups/cpu-s")
	}
	if serve.sleeps > 0 {
		b.ReportMetric(float64(serve.sleeps)/reqs, "serve-sleeps/req")
		b.ReportMetric(float64(serve.wait.Nanoseconds())/1e3/reqs, "serve-runq-µs/req")
	}
	if procs.nats != 0 && nats.cpu > 0 {
		b.ReportMetric(float64(nats.cpu.Nanoseconds())/1e3/reqs, "nats-cpu-µs/req")
		b.ReportMetric(float64(nats.sleeps)/reqs, "nats-sleeps/req")
		b.ReportMetric(float64(nats.wait.Nanoseconds())/1e3/reqs, "nats-runq-µs/req")
	}
}

// procSample is a process's CPU time, thread sleeps and run-queue wait so
// far.
type procSample struct {
	cpu    time.Duration
	sleeps int64
	wait   time.Duration
}

// sample samples process pid from /proc (in ticks of 10 ms); pid 0: none,
// the zero sample.
func sample(pid int) procSample {
	if pid == 0 {
		return procSample{}
	}
	sleeps, wait := procSched(pid)
	return procSample{procCPU(pid), sleeps, wait}
}

// sampleSelf samples this process (its CPU from getrusage, precise).
func sampleSelf() procSample {
	sleeps, wait := procSched(0)
	return procSample{processCPU(), sleeps, wait}
}

func (s procSample) sub(t procSample) procSample {
	return procSample{s.cpu - t.cpu, s.sleeps - t.sleeps, s.wait - t.wait}
}

// Queries spread over the serving instances (NATS queue group): with two
// servers, each answers some of 200 batch queries.
func TestServedIndexSpread(t *testing.T) {
	ns, ix, first, subject, prompt := servedIndex(t)
	second, err := ServeIndex(natstest.Connect(t, ns), ix, IndexServerConfig{Subject: subject, ID: "second", Handlers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	ri := NewRemoteIndex(natstest.Connect(t, ns), RemoteIndexConfig{Subject: subject, Timeout: 10 * time.Second})
	reqs := []shard.MatchRequest{{Hashes: prompt[:8]}}
	for range 200 {
		if err := ri.MatchBatch(reqs); err != nil {
			t.Fatal(err)
		}
		if len(reqs[0].Overlaps) != 8 {
			t.Fatalf("overlaps %+v", reqs[0].Overlaps)
		}
	}
	a, b := first.seen.served.Load(), second.seen.served.Load()
	if a == 0 || b == 0 || a+b != 201 { // 200 + the second's start-up ping
		t.Fatalf("served %d and %d of 200 queries; want both > 0", a, b)
	}
}

// A reply that comes after its request timed out is not taken for the
// answer to the next request, although it reaches the same inbox first.
func TestRemoteIndexLateReply(t *testing.T) {
	ns := natstest.Server(t)
	nc := natstest.Connect(t, ns)
	queries := make(chan *nats.Msg, 4)
	if _, err := nc.ChanSubscribe("late.query", queries); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	answer := func(worker uint64) []byte {
		ovs := []radix.Overlap{{Worker: wire.WorkerKey{Worker: worker}, Blocks: 1, TreeSize: 1}}
		return plane.AppendReplyPromptFlags(plane.AppendReplyHeaderFlags(nil, 1, plane.FlagTiers), ovs, plane.FlagTiers)
	}
	ri := NewRemoteIndex(natstest.Connect(t, ns), RemoteIndexConfig{Subject: "late.query", Timeout: 20 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	reqs := []shard.MatchRequest{{Hashes: []wire.BlockHash{1}}}
	if err := ri.MatchBatch(reqs); !errors.Is(err, nats.ErrTimeout) { // nobody answers yet
		t.Fatalf("first query: %v, want a timeout", err)
	}
	first := <-queries
	ri.cfg.Timeout = 10 * time.Second
	go func() {
		second := <-queries
		_ = first.Respond(answer(1)) // late: after its request timed out
		_ = second.Respond(answer(2))
	}()
	if err := ri.MatchBatch(reqs); err != nil {
		t.Fatal(err)
	}
	if len(reqs[0].Overlaps) != 1 || reqs[0].Overlaps[0].Worker.Worker != 2 {
		t.Fatalf("second query answered %+v; want worker 2's answer, not the late one of worker 1", reqs[0].Overlaps)
	}
	if ri.Failures() != 1 {
		t.Fatalf("Failures() = %d, want 1", ri.Failures())
	}
}

// Failures are counted per prompt and logged at a bounded rate: 50 failed
// batches of 2 prompts count 100 and log one line.
func TestRemoteIndexFailuresLogBounded(t *testing.T) {
	ns := natstest.Server(t)
	var buf bytes.Buffer
	ri := NewRemoteIndex(natstest.Connect(t, ns), RemoteIndexConfig{Subject: "nobody.listens", Timeout: time.Second,
		LogEvery: time.Hour, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	reqs := []shard.MatchRequest{{Hashes: []wire.BlockHash{1}}, {Hashes: []wire.BlockHash{2}}}
	for range 50 {
		if err := ri.MatchBatch(reqs); err == nil {
			t.Fatal("a query nobody answers succeeded")
		}
		if len(reqs[0].Overlaps)+len(reqs[1].Overlaps) != 0 {
			t.Fatal("a failed query left overlaps")
		}
	}
	if got := ri.Failures(); got != 100 {
		t.Fatalf("Failures() = %d, want 100", got)
	}
	if n := strings.Count(buf.String(), "remote index query failed"); n != 1 {
		t.Fatalf("%d log lines, want 1:\n%s", n, buf.String())
	}
	var m bytes.Buffer
	ri.WriteMetrics(&m)
	if !strings.Contains(m.String(), `kvroute_remote_index_failures_total{reason="no_responders"} 100`) {
		t.Fatalf("metrics:\n%s", m.String())
	}
}

// A remote lookup carries the per-tier overlaps (plane.FlagTiers): a worker
// whose prompt sits on the host after a device prefix answers with Host
// set, as the local index does.
func TestRemoteIndexTiers(t *testing.T) {
	ns, ix, _, subject, prompt := servedIndex(t)
	w := wire.WorkerKey{Worker: 42}
	blocks := make([]wire.Block, 100)
	for i := range blocks {
		blocks[i] = wire.Block{Engine: wire.EngineHash(1000 + i), Local: prompt[i]}
	}
	if err := ix.Apply([]wire.Event{
		{Worker: w, Kind: wire.KindStored, Tier: wire.TierDevice, Blocks: blocks[:10]},
		{Worker: w, Kind: wire.KindStored, Tier: wire.TierHost, HasParent: true, Parent: blocks[9].Engine, Blocks: blocks[10:40]},
		{Worker: w, Kind: wire.KindStored, Tier: wire.TierDisk, HasParent: true, Parent: blocks[39].Engine, Blocks: blocks[40:100]},
	}); err != nil {
		t.Fatal(err)
	}
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	want, err := ix.Match(nil, prompt)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(want, func(o radix.Overlap) bool { return o.Worker == w })
	if i < 0 || want[i].Blocks != 10 || want[i].Host == 0 || want[i].Disk == 0 {
		t.Fatalf("local overlap of worker 42: %+v", want)
	}
	ri := NewRemoteIndex(natstest.Connect(t, ns), RemoteIndexConfig{Subject: subject, Timeout: 5 * time.Second})
	reqs := []shard.MatchRequest{{Hashes: prompt}}
	if err := ri.MatchBatch(reqs); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(reqs[0].Overlaps, want) {
		t.Fatalf("remote %+v, local %+v", reqs[0].Overlaps, want)
	}
}

// Against a serving index of an older build, which refuses the tiers flag,
// the remote index asks again without it (device overlaps and tree sizes,
// as before) and keeps doing so: one refused query, not one per batch.
func TestRemoteIndexOlderServer(t *testing.T) {
	ns := natstest.Server(t)
	nc := natstest.Connect(t, ns)
	var refused, plain int
	var mu sync.Mutex
	ov := []radix.Overlap{{Worker: wire.WorkerKey{Worker: 3}, Blocks: 2, TreeSize: 7}}
	if _, err := nc.Subscribe("old.query", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		if m.Data[2] != 0 || m.Data[3] != 0 { // the old decoder's check
			refused++
			_ = m.Respond(plane.AppendErrorReply(nil, "plane: index query flags 0x1 not supported"))
			return
		}
		plain++
		_ = m.Respond(plane.AppendReplyPrompt(plane.AppendReplyHeader(nil, 1), ov))
	}); err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	ri := NewRemoteIndex(natstest.Connect(t, ns), RemoteIndexConfig{Subject: "old.query", Timeout: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	for range 3 {
		reqs := []shard.MatchRequest{{Hashes: []wire.BlockHash{1, 2}}}
		if err := ri.MatchBatch(reqs); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(reqs[0].Overlaps, ov) {
			t.Fatalf("overlaps %+v, want %+v", reqs[0].Overlaps, ov)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if refused != 1 || plain != 3 || ri.Failures() != 0 {
		t.Fatalf("%d refused and %d plain queries, %d failures; want 1, 3, 0", refused, plain, ri.Failures())
	}
}

// Workers answers every worker key of the served index with its tree size.
func TestRemoteIndexWorkers(t *testing.T) {
	ns, ix, srv, subject, _ := servedIndex(t)
	ri := NewRemoteIndex(natstest.Connect(t, ns), RemoteIndexConfig{Subject: subject, Timeout: 5 * time.Second})
	want, err := ix.Workers(nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ri.Workers(nil)
	if err != nil {
		t.Fatal(err)
	}
	order := func(a, b radix.Overlap) int { return int(a.Worker.Worker) - int(b.Worker.Worker) }
	slices.SortFunc(want, order)
	slices.SortFunc(got, order)
	if len(want) != 8 || !slices.Equal(got, want) {
		t.Fatalf("remote %+v, local %+v", got, want)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := ri.Workers(nil); err == nil {
		t.Fatal("Workers with no serving index: no error")
	}
}
