package router

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/plane"
	"github.com/kvroute/kvroute/wire/zmq"
)

// vllmWorker is a stand-in vLLM worker for tests that need exact event
// sequences: it registers over NATS with a ZMQ endpoint and publishes
// batches encoded by wire.AppendVLLMBatch (vLLM's kv_events.py array form,
// medium "GPU"/"CPU" as vLLM's offloading connector writes it).
type vllmWorker struct {
	e   *env
	id  uint64
	pub *zmq.Publisher
}

func startVLLMWorker(t *testing.T, e *env, id uint64) *vllmWorker {
	t.Helper()
	pub, err := zmq.NewPublisher(zmq.PublisherConfig{
		Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0",
		Topic: fmt.Sprintf("kv@%d@mock", id), Logger: quietLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	reg := plane.Registration{
		WorkerID: id, URL: fmt.Sprintf("http://127.0.0.1:%d", 9), Model: "mock", DpRanks: []uint32{0},
		BlockSize: testBlockSize, KVBlocks: 4096, EventTransport: plane.TransportZMQ,
		ZMQEndpoint: "tcp://" + pub.Addr(), ZMQReplay: "tcp://" + pub.ReplayAddr(), HeartbeatMillis: 60000,
	}
	if err := e.nc.Publish(e.subj.Heartbeat, plane.Encode(&reg)); err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf(`kvroute_ingest_zmq_connected{worker="%d",dp_rank="0"}`, id)
	waitFor(t, name, func() bool { return e.metric(name) == 1 })
	return &vllmWorker{e: e, id: id, pub: pub}
}

// publish sends one batch.
func (w *vllmWorker) publish(t *testing.T, evs ...wire.VLLMEvent) {
	t.Helper()
	b := wire.AppendVLLMBatch(nil, &wire.VLLMBatch{TS: float64(time.Now().UnixNano()) / 1e9, HasDPRank: true, Events: evs}, wire.VLLMEncoding{})
	if _, err := w.pub.Publish(b); err != nil {
		t.Fatal(err)
	}
}

// sync publishes a marker block on its own prefix and waits until the index
// holds it: every batch published before it has been applied.
func (w *vllmWorker) sync(t *testing.T, n int) {
	t.Helper()
	toks := tokens(900+int(w.id), n, testBlockSize, 0)
	w.publish(t, stored(toks, "GPU", wire.EngineHash(1<<40+uint64(n))))
	hashes := wire.LocalHashes(nil, toks, testBlockSize, wire.Seed)
	waitFor(t, "marker indexed", func() bool {
		ovs, err := w.e.svc.Index.Match(nil, hashes)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range ovs {
			if o.Worker.Worker == w.id && o.Blocks == 1 {
				return true
			}
		}
		return false
	})
}

// stored is a BlockStored of toks (whole blocks) with engine hashes h, h+1, ….
func stored(toks []uint32, medium string, h wire.EngineHash) wire.VLLMEvent {
	n := len(toks) / testBlockSize
	ev := wire.VLLMEvent{Kind: wire.KindStored, Tokens: toks, BlockSize: testBlockSize, Medium: medium}
	for i := range n {
		ev.BlockHashes = append(ev.BlockHashes, h+wire.EngineHash(i))
	}
	return ev
}

func removed(medium string, hs ...wire.EngineHash) wire.VLLMEvent {
	return wire.VLLMEvent{Kind: wire.KindRemoved, BlockHashes: hs, Medium: medium}
}

type explained struct {
	WorkerID   uint64 `json:"worker_id"`
	Overlap    int    `json:"overlap_blocks"`
	Candidates []struct {
		WorkerID uint64 `json:"worker_id"`
		Overlap  int    `json:"overlap_blocks"`
		Host     int    `json:"host_overlap_blocks"`
		Disk     int    `json:"disk_overlap_blocks"`
	} `json:"candidates"`
}

func (e *env) explainTiers(t *testing.T, toks []uint32, id string) explained {
	t.Helper()
	code, body, _ := e.do("POST", "/route", fmt.Sprintf(`{"token_ids":%s,"request_id":%q,"explain":true}`, promptJSON(toks), id))
	if code != 200 {
		t.Fatalf("/route: %d %s", code, body)
	}
	var d explained
	if err := json.Unmarshal(body, &d); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if code, body, _ := e.do("POST", "/route/"+id+"/free", ""); code != 200 {
		t.Fatalf("free %s: %d %s", id, code, body)
	}
	return d
}

func (d explained) candidate(t *testing.T, w uint64) (dev, host, disk int) {
	t.Helper()
	for _, c := range d.Candidates {
		if c.WorkerID == w {
			return c.Overlap, c.Host, c.Disk
		}
	}
	t.Fatalf("no candidate %d in %+v", w, d)
	return
}

// TestTierEventsThroughServe: vLLM events with a medium go
// to their tier. A GPU copy stored, then its CPU copy stored and removed,
// keeps the device overlap (it fell 3 → 0 when tiers were dropped; Dynamo
// keeps 3). Blocks stored only on CPU are host overlap, not device overlap,
// and a worker whose host extends the prefix wins the request.
func TestTierEventsThroughServe(t *testing.T) {
	e := startEnv(t, envOptions{noFleet: true})
	w1 := startVLLMWorker(t, e, 1)
	w2 := startVLLMWorker(t, e, 2)

	// w1: GPU copy of a 3-block prefix, then the CPU copy stored and evicted.
	prompt := tokens(1, 0, 3*testBlockSize, 0)
	w1.publish(t, stored(prompt, "GPU", 100))
	w1.publish(t, stored(prompt, "CPU", 100))
	w1.publish(t, removed("CPU", 100, 101, 102))
	w1.sync(t, 1)
	d := e.explainTiers(t, append(prompt, 7, 7, 7), "fix1")
	if dev, host, _ := d.candidate(t, 1); dev != 3 || host != 0 {
		t.Errorf("w1 after its CPU copy was removed: device %d host %d, want 3 and 0", dev, host)
	}
	if d.WorkerID != 1 || d.Overlap != 3 {
		t.Errorf("routed to %d with overlap %d, want w1 with 3", d.WorkerID, d.Overlap)
	}

	// w2 holds a 4-block prefix on CPU only; w1 its first block on GPU.
	long := tokens(2, 0, 4*testBlockSize, 0)
	rest := stored(long[testBlockSize:], "CPU", 201)
	rest.HasParent, rest.Parent = true, 200
	w2.publish(t, stored(long[:testBlockSize], "GPU", 200), rest)
	// Offloaded, then evicted from the GPU (the offload comes first, as an
	// offloading engine copies before it frees).
	w2.publish(t, stored(long[:testBlockSize], "CPU", 200))
	w2.publish(t, removed("GPU", 200))
	w1.publish(t, stored(long[:testBlockSize], "GPU", 300))
	w1.sync(t, 2)
	w2.sync(t, 3)
	d = e.explainTiers(t, append(long, 9, 9), "host")
	if dev, host, disk := d.candidate(t, 2); dev != 0 || host != 4 || disk != 0 {
		t.Errorf("w2 (CPU only): device %d host %d disk %d, want 0 4 0", dev, host, disk)
	}
	if dev, host, _ := d.candidate(t, 1); dev != 1 || host != 0 {
		t.Errorf("w1: device %d host %d, want 1 0", dev, host)
	}
	// 4 host blocks earn 0.75 × 4 = 3 cached blocks against w1's 1.
	if d.WorkerID != 2 {
		t.Errorf("routed to %d, want w2 (its host tier holds the prefix)", d.WorkerID)
	}
}

// TestHostTierFleet: a simulated fleet with a host tier behind small GPU
// caches. A prompt served once and then pushed off its worker's GPU by
// other prompts is offloaded to that worker's host memory: /route explain
// shows it as host overlap (device 0), and the request goes back there.
func TestHostTierFleet(t *testing.T) {
	for _, transport := range []string{plane.TransportDynamo, plane.TransportZMQ} {
		t.Run(transport, func(t *testing.T) {
			e := startEnv(t, envOptions{workers: 2, kvBlocks: 64, hostKV: 2048, transport: transport})
			if transport == plane.TransportZMQ {
				for _, w := range e.fleet.Workers() {
					name := fmt.Sprintf(`kvroute_ingest_zmq_connected{worker="%d",dp_rank="0"}`, w.ID())
					waitFor(t, name, func() bool { return e.metric(name) == 1 })
				}
			}
			const n = 40 // blocks of the prompt: two such prompts do not fit one GPU
			first, w := e.pushToHost(t, n)
			d := e.explainTiers(t, append(first, 5, 5, 5), "back")
			if dev, host, _ := d.candidate(t, w); dev != 0 || host != n {
				t.Errorf("worker %d: device %d host %d, want 0 and %d", w, dev, host, n)
			}
			if d.WorkerID != w {
				t.Errorf("routed to %d, want %d (its host memory holds the prompt)", d.WorkerID, w)
			}
		})
	}
}

// pushToHost completes a prompt of n blocks (two such prompts must not fit
// one GPU), then other prompts until its worker's GPU no longer holds it,
// and waits until the index has it on that worker's host tier only. It
// returns the prompt and the worker.
func (e *env) pushToHost(t *testing.T, n int) ([]uint32, uint64) {
	t.Helper()
	first := tokens(1, 0, n*testBlockSize, 0)
	w, _ := e.complete(first, 1)
	e.indexed(first, n)
	hashes := wire.LocalHashes(nil, first, testBlockSize, wire.Seed)
	onGPU := func() bool {
		for _, b := range e.fleet.Worker(w).Held(nil) {
			if b.Local == hashes[0] {
				return true
			}
		}
		return false
	}
	for f := 2; onGPU(); f++ {
		if f > 40 {
			t.Fatal("the first prompt never left its worker's GPU")
		}
		e.complete(tokens(f, 0, n*testBlockSize, 0), 1)
	}
	waitFor(t, "the first prompt indexed on the host", func() bool {
		ovs, err := e.svc.Index.Match(nil, hashes)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range ovs {
			if o.Worker.Worker == w && o.Blocks == 0 && int(o.Host) == n {
				return true
			}
		}
		return false
	})
	return first, w
}
