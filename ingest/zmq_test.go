package ingest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/bench/mock"
	"github.com/kvroute/kvroute/internal/promtext"
	"github.com/kvroute/kvroute/internal/promtext/promtexttest"
	"github.com/kvroute/kvroute/shard"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/plane"
	"github.com/kvroute/kvroute/wire/zmq"
)

var httpClient = &http.Client{Timeout: 30 * time.Second}

// complete sends a four-token completion (a request that finishes in its
// prefill step has its prompt blocks published with synthetic tokens by
// bench/mock: its token map entries are dropped before the step's events are
// encoded) of prompt to a mock worker.
func complete(t *testing.T, url string, prompt []uint32) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 4})
	resp, err := httpClient.Post(url+"/v1/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("completion: status %d", resp.StatusCode)
	}
}

func prompt(seed, n int) []uint32 {
	p := make([]uint32, n)
	for i := range p {
		p[i] = uint32(seed*1000 + i + 1)
	}
	return p
}

// promptHeld reports whether k holds every block of prompt.
func promptHeld(t *testing.T, ix *shard.Index, k wire.WorkerKey, p []uint32) bool {
	t.Helper()
	hs := wire.LocalHashes(nil, p, testBlockSize, wire.Seed)
	ov, err := ix.Match(nil, hs)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range ov {
		if o.Worker == k && int(o.Blocks) == len(hs) {
			return true
		}
	}
	return false
}

// sendUntilSeen sends distinct prompts to a mock worker until one shows up in
// the index under k (PUB/SUB loses what is sent before the subscription
// reaches the engine), then one more that must show up.
func sendUntilSeen(t *testing.T, ix *shard.Index, url string, k wire.WorkerKey, seed int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for i := 0; ; i++ {
		p := prompt(seed+i, 3*testBlockSize)
		complete(t, url, p)
		until := time.Now().Add(300 * time.Millisecond)
		for time.Now().Before(until) && !promptHeld(t, ix, k, p) {
			time.Sleep(2 * time.Millisecond)
		}
		if promptHeld(t, ix, k, p) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no prompt of worker %v reached the index", k)
		}
	}
	p := prompt(seed+999, 5*testBlockSize)
	complete(t, url, p)
	waitFor(t, func() bool { return promptHeld(t, ix, k, p) }, func() string { return fmt.Sprintf("prompt of %v", k) })
}

func startFleet(t *testing.T, n int) *mock.Fleet {
	t.Helper()
	f, err := mock.Start(mock.Config{
		Workers: n, Host: "127.0.0.1", BlockSize: testBlockSize, KVBlocks: 4096, Speedup: 1000,
		Transport: plane.TransportZMQ, Logger: quiet,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestZMQFromMockFleet: the vLLM-format events of bench/mock workers reach
// the index over ZMQ, with and without a topic filter, and a dp rank given
// on the flag applies to payloads that carry rank 0.
func TestZMQFromMockFleet(t *testing.T) {
	f := startFleet(t, 2)
	w1, w2 := f.Workers()[0], f.Workers()[1]
	ix := newIndex(t)
	in := newIngest(t, Config{}, ix)
	z1 := ZMQWorker{Worker: w1.ID(), Endpoint: w1.ZMQEndpoint(), Replay: w1.ZMQReplay(), Model: w1.Config().Model}
	z2 := ZMQWorker{Worker: w2.ID(), DpRank: 3, Endpoint: w2.ZMQEndpoint()}
	if z1.Topic() != w1.Topic() {
		t.Fatalf("topic %q, the worker publishes %q", z1.Topic(), w1.Topic())
	}
	for _, z := range []ZMQWorker{z1, z2} {
		if err := in.AddZMQ(z); err != nil {
			t.Fatal(err)
		}
	}
	if !in.Running() {
		t.Error("not running after AddZMQ")
	}
	sendUntilSeen(t, ix, w1.URL(), wire.WorkerKey{Worker: w1.ID()}, 1)
	sendUntilSeen(t, ix, w2.URL(), wire.WorkerKey{Worker: w2.ID(), Dp: 3}, 2000)
	st := in.Stats()
	z := st.Sources[SourceZMQ]
	if z.Events == 0 || z.Blocks == 0 || z.Malformed != 0 || z.Rejected != 0 || z.Duplicates != 0 || z.DispatchCount != z.Messages {
		t.Errorf("zmq stats %+v", z)
	}
	if len(st.ZMQ) != 2 || st.ZMQ[0].ZMQWorker != z1 || st.ZMQ[1].ZMQWorker != z2 || !st.ZMQ[0].Connected || st.ZMQ[0].Received == 0 {
		t.Errorf("zmq subscriptions %+v", st.ZMQ)
	}
	var buf bytes.Buffer
	in.WriteMetrics(&buf)
	mustContain(t, buf.String(), fmt.Sprintf(`kvroute_ingest_zmq_connected{worker="%d",dp_rank="0"} 1`, w1.ID()),
		fmt.Sprintf(`kvroute_ingest_zmq_batches_total{worker="%d",dp_rank="3",how="live"}`, w2.ID()))
	var expo bytes.Buffer
	promtext.NewRegistry(MetricFamilies).Write(&expo, in.WriteMetrics)
	promtexttest.Check(t, "the ingest metrics with ZMQ subscriptions", expo.Bytes())
	for _, f := range MetricFamilies {
		if !strings.Contains(expo.String(), "# TYPE "+f.Name+" ") {
			t.Errorf("family %s not written", f.Name)
		}
	}
}

// consecutivePorts returns a free port p with p+1 free too (a mock worker
// publishes on p and replays on p+1).
func consecutivePorts(t *testing.T) int {
	t.Helper()
	for range 50 {
		l1, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l1.Addr().(*net.TCPAddr).Port
		l2, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+1))
		l1.Close()
		if err == nil {
			l2.Close()
			return p
		}
	}
	t.Fatal("no two consecutive free ports")
	return 0
}

// TestZMQEngineComesUpLater: AddZMQ before the engine binds its socket; the
// subscriber keeps dialing and ingest starts when the engine is up.
func TestZMQEngineComesUpLater(t *testing.T) {
	port := consecutivePorts(t)
	ix := newIndex(t)
	in := newIngest(t, Config{}, ix)
	z := ZMQWorker{Worker: 5, Endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", port), Replay: fmt.Sprintf("tcp://127.0.0.1:%d", port+1), Model: "mock"}
	if err := in.AddZMQ(z); err != nil {
		t.Fatal(err)
	}
	if st := in.Stats(); !st.Running || len(st.ZMQ) != 1 || st.ZMQ[0].Connected {
		t.Fatalf("before the engine is up: %+v", st)
	}
	w, err := mock.StartWorker(mock.WorkerConfig{
		ID: 5, BlockSize: testBlockSize, KVBlocks: 4096, Speedup: 1000, Transport: plane.TransportZMQ, ZMQPort: port, Logger: quiet,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	sendUntilSeen(t, ix, w.URL(), wire.WorkerKey{Worker: 5}, 7)
}

// zpub is a wire/zmq Publisher standing in for one engine rank.
func zpub(t *testing.T, ep, topic string) *zmq.Publisher {
	t.Helper()
	p, err := zmq.NewPublisher(zmq.PublisherConfig{Endpoint: ep, Topic: topic, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func freeEndpoint(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "tcp://" + l.Addr().String()
}

var emptyBatch = wire.AppendVLLMBatch(nil, &wire.VLLMBatch{}, wire.VLLMEncoding{})

// warmZMQ publishes empty batches until the subscription of k has received
// one (PUB/SUB drops what is sent before the subscription arrives).
func warmZMQ(t *testing.T, in *Ingest, p *zmq.Publisher, k wire.WorkerKey) {
	t.Helper()
	received := func() uint64 {
		for _, z := range in.Stats().ZMQ {
			if z.key() == k {
				return z.Received
			}
		}
		return 0
	}
	base := received()
	deadline := time.Now().Add(10 * time.Second)
	for received() == base {
		if time.Now().After(deadline) {
			t.Fatalf("subscription %v never received a batch", k)
		}
		if _, err := p.Publish(emptyBatch); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func vllmStored(bs int, hashes ...wire.EngineHash) wire.VLLMEvent {
	toks := make([]uint32, bs*len(hashes))
	for i := range toks {
		toks[i] = uint32(hashes[0]) + uint32(i)
	}
	return wire.VLLMEvent{Kind: wire.KindStored, BlockHashes: hashes, Tokens: toks, BlockSize: bs}
}

func publishVLLM(t *testing.T, p *zmq.Publisher, evs ...wire.VLLMEvent) {
	t.Helper()
	if _, err := p.Publish(wire.AppendVLLMBatch(nil, &wire.VLLMBatch{Events: evs}, wire.VLLMEncoding{})); err != nil {
		t.Fatal(err)
	}
}

func localOf(ev wire.VLLMEvent) []wire.Block {
	hs := wire.LocalHashes(nil, ev.Tokens, ev.BlockSize, wire.Seed)
	bl := make([]wire.Block, len(hs))
	for i := range hs {
		bl[i] = wire.Block{Engine: ev.BlockHashes[i], Local: hs[i]}
	}
	return bl
}

// TestZMQBlockSizeMismatchAndMalformed: an event of another block size is
// rejected, counted and logged with both sizes while the rest of its batch is
// applied; a malformed payload is counted and logged; ingest goes on.
func TestZMQBlockSizeMismatchAndMalformed(t *testing.T) {
	ep := freeEndpoint(t)
	p := zpub(t, ep, "kv@9@m")
	defer p.Close()
	ix := newIndex(t)
	lb := &logBuf{}
	in := newIngest(t, Config{Logger: lb.logger()}, ix)
	if err := in.AddZMQ(ZMQWorker{Worker: 9, Endpoint: ep, Model: "m"}); err != nil {
		t.Fatal(err)
	}
	k := wire.WorkerKey{Worker: 9}
	warmZMQ(t, in, p, k)
	good := vllmStored(testBlockSize, 0x51, 0x52)
	publishVLLM(t, p, vllmStored(16, 0x41), good)
	if _, err := p.Publish([]byte("garbage")); err != nil {
		t.Fatal(err)
	}
	after := vllmStored(testBlockSize, 0x61)
	publishVLLM(t, p, after, vllmStored(8, 0x42))
	// A batch lost on the live socket (no replay configured).
	p.Skip(wire.AppendVLLMBatch(nil, &wire.VLLMBatch{Events: []wire.VLLMEvent{vllmStored(testBlockSize, 0x63)}}, wire.VLLMEncoding{}))
	last := vllmStored(testBlockSize, 0x62)
	publishVLLM(t, p, last)
	waitFor(t, func() bool { return in.Stats().Sources[SourceZMQ].Events >= 3 }, func() string { return "zmq events" })
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, ev := range []wire.VLLMEvent{good, after, last} {
		if !holds(t, ix, k, localOf(ev)) {
			t.Errorf("valid event %x around the rejected ones not applied", ev.BlockHashes)
		}
	}
	// The malformed batch and the skipped one are gaps of one batch each;
	// rejected events are no gap.
	z := in.Stats().Sources[SourceZMQ]
	if z.SizeMismatches != 2 || z.Rejected != 2 || z.Malformed != 1 || z.Events != 3 || z.Gaps != 2 || z.MissingBatches != 2 || z.MissingEvents != 0 {
		t.Errorf("stats %+v, want 2 size mismatches, 1 malformed, 3 events, 2 gaps of 1 batch", z)
	}
	gaps := in.Gaps()
	if len(gaps) != 2 || !gaps[0].Batches || gaps[0].Worker != k || gaps[1].Got-gaps[1].Expected != 1 || gaps[0].Source != SourceZMQ {
		t.Errorf("gaps %+v", gaps)
	}
	mustContain(t, lb.String(), "block size differs from --block-size", "configured_block_size=4",
		"event block_size 16, configured block size 4", "worker=9",
		"malformed KV event message dropped", "source=zmq")
}

// TestZMQEngineRestart: an engine whose sequence numbers start over (a new
// process) has its old blocks dropped and its ids tracked afresh: no gap, no
// duplicate.
func TestZMQEngineRestart(t *testing.T) {
	ep := freeEndpoint(t)
	p1 := zpub(t, ep, "")
	ix := newIndex(t)
	in := newIngest(t, Config{}, ix)
	if err := in.AddZMQ(ZMQWorker{Worker: 4, DpRank: 1, Endpoint: ep}); err != nil {
		t.Fatal(err)
	}
	k := wire.WorkerKey{Worker: 4, Dp: 1}
	warmZMQ(t, in, p1, k)
	for range 50 { // a high sequence number, so the new process's first ones are lower
		if _, err := p1.Publish(emptyBatch); err != nil {
			t.Fatal(err)
		}
	}
	old := vllmStored(testBlockSize, 0x71, 0x72)
	publishVLLM(t, p1, old)
	waitFor(t, func() bool { return in.Stats().Sources[SourceZMQ].Events >= 1 }, func() string { return "old event" })
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	if !holds(t, ix, k, localOf(old)) {
		t.Fatalf("old event not applied: %+v", match(t, ix, localOf(old)))
	}
	p1.Close()

	p2 := zpub(t, ep, "")
	defer p2.Close()
	warmZMQ(t, in, p2, k)
	fresh := vllmStored(testBlockSize, 0x81)
	publishVLLM(t, p2, fresh)
	waitFor(t, func() bool { return in.Stats().Sources[SourceZMQ].Events >= 2 }, func() string { return "new event" })
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	if ov := match(t, ix, localOf(old)); len(ov) != 0 {
		t.Errorf("the old process's blocks survived the restart: %+v", ov)
	}
	if !holds(t, ix, k, localOf(fresh)) {
		t.Errorf("new process's event not applied: %+v", match(t, ix, localOf(fresh)))
	}
	if z := in.Stats().Sources[SourceZMQ]; z.Restarts != 1 || z.Gaps != 0 || z.Duplicates != 0 || z.Rejected != 0 {
		t.Errorf("stats %+v, want 1 restart, no gap or duplicate", z)
	}
}

// TestZMQAddRemoveClose: re-adding is a no-op, another endpoint replaces,
// RemoveZMQ stops every rank of a worker, Close stops the rest, and no
// goroutine is left behind.
func TestZMQAddRemoveClose(t *testing.T) {
	ix := newIndex(t)
	eps := []string{freeEndpoint(t), freeEndpoint(t), freeEndpoint(t), freeEndpoint(t)}
	pubs := make([]*zmq.Publisher, len(eps))
	for i, ep := range eps {
		pubs[i] = zpub(t, ep, "")
		defer pubs[i].Close()
	}
	// After the publishers: go-zeromq/zmq4 leaves one goroutine per PUB
	// socket behind after Close (pubMWriter.run), which is not ours to check.
	base := runtime.NumGoroutine()
	in, err := New(Config{BlockSize: testBlockSize, Logger: quiet, ZMQRetryInterval: 20 * time.Millisecond}, ix)
	if err != nil {
		t.Fatal(err)
	}
	ws := []ZMQWorker{
		{Worker: 1, Endpoint: eps[0]}, {Worker: 1, DpRank: 1, Endpoint: eps[1]}, {Worker: 2, Endpoint: eps[2]},
	}
	for i, z := range ws {
		if err := in.AddZMQ(z); err != nil {
			t.Fatal(err)
		}
		warmZMQ(t, in, pubs[i], z.key())
	}
	sub := func(k wire.WorkerKey) *zmqSub {
		in.mu.Lock()
		defer in.mu.Unlock()
		return in.mu.zmq[k]
	}
	before := sub(ws[2].key())
	if err := in.AddZMQ(ws[2]); err != nil || sub(ws[2].key()) != before {
		t.Errorf("re-adding the same worker replaced it (err %v)", err)
	}
	moved := ZMQWorker{Worker: 2, Endpoint: eps[3]}
	if err := in.AddZMQ(moved); err != nil {
		t.Fatal(err)
	}
	if s := sub(moved.key()); s == before || s.w != moved {
		t.Errorf("another endpoint did not replace the subscription: %+v", s)
	}
	warmZMQ(t, in, pubs[3], moved.key())

	in.RemoveZMQ(1)
	st := in.Stats()
	if len(st.ZMQ) != 1 || st.ZMQ[0].ZMQWorker != moved {
		t.Errorf("after RemoveZMQ(1): %+v", st.ZMQ)
	}
	in.RemoveZMQ(99) // unknown: nothing happens
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	if st := in.Stats(); len(st.ZMQ) != 0 || st.Running {
		t.Errorf("after Close: %+v", st)
	}
	if n := in.Stats().Sources[SourceZMQ].Messages; n < 4 {
		t.Errorf("%d zmq messages, want the 4 warm-ups at least", n)
	}
	checkGoroutines(t, base)
}
