//go:build chaos

package router

// Hostile input for `make chaos` (build tag chaos), at the scale that broke
// an unbounded router (floods of tens of thousands of ids, 16 MB bodies),
// against a real router, NATS and simulated fleet. Each
// scenario prints
//
//	chaos: <scenario> key=value ...
//
// and fails if a bound does not hold.

import (
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/node"
	"github.com/kvroute/kvroute/wire"
	"github.com/kvroute/kvroute/wire/plane"
)

// rssBytes is the process's resident set (Linux; 0 elsewhere).
func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

func (e *env) indexBlocks() (total uint32, workers int) {
	if err := e.svc.Index.Flush(); err != nil {
		e.t.Fatal(err)
	}
	ws, err := e.svc.Index.Workers(nil)
	if err != nil {
		e.t.Fatal(err)
	}
	seen := map[uint64]bool{}
	for _, w := range ws {
		total += w.TreeSize
		seen[w.Worker.Worker] = true
	}
	return total, len(seen)
}

// 20,000 unregistered worker ids × 100 blocks (424 MB, never freed, before).
func TestChaosUnregisteredFlood(t *testing.T) {
	e := startEnv(t, envOptions{workers: 2, node: func(c *node.Config) { c.Fleet.Grace = 2 * time.Second }})
	rss0 := rssBytes()
	const ids, blocks = 20_000, 100
	var buf []byte
	bl := make([]wire.Block, blocks)
	for w := uint64(1_000_000); w < 1_000_000+ids; w++ {
		for i := range bl {
			h := w<<20 | uint64(i+1)
			bl[i] = wire.Block{Engine: wire.EngineHash(h), Local: wire.BlockHash(h*0x9e3779b97f4a7c15 | 1)}
		}
		buf = wire.AppendNative(buf[:0], []wire.Event{{Worker: wire.WorkerKey{Worker: w}, ID: 1, Kind: wire.KindStored, Blocks: bl}})
		if err := e.nc.Publish(e.subj.KVEventsNative, buf); err != nil {
			t.Fatal(err)
		}
	}
	_ = e.nc.Flush()
	waitFor(t, "flood handled", func() bool {
		return e.refused("unknown_worker_events") >= ids-64
	})
	peak, peakWorkers := e.indexBlocks()
	waitFor(t, "graces over", func() bool { return e.metric("kvroute_unknown_workers_pending") == 0 })
	after, afterWorkers := e.indexBlocks()
	fmt.Printf("chaos: unregistered_flood ids=%d blocks_each=%d refused_events=%.0f index_blocks_peak=%d workers_peak=%d index_blocks_after_grace=%d workers_after=%d rss_delta_mb=%.1f\n",
		ids, blocks, e.refused("unknown_worker_events"), peak, peakWorkers, after, afterWorkers, float64(rssBytes()-rss0)/(1<<20))
	if peakWorkers > 64+2 || afterWorkers > 2 {
		t.Fatalf("unregistered workers in the index: %d at peak, %d after the grace", peakWorkers, afterWorkers)
	}
	e.complete(tokens(1, 0, 64, 4), 1)
}

// A registration with 100,000 dp ranks (589 KB; /workers timed out, 71%
// 502s before) and 10,000 fake registrations (every request broke).
func TestChaosForgedRegistrations(t *testing.T) {
	e := startEnv(t, envOptions{workers: 2, health: func(c *Config) { c.MaxWorkers = 4 }})
	huge := plane.Registration{WorkerID: 77, URL: "http://127.0.0.1:1", BlockSize: testBlockSize, KVBlocks: 16384,
		EventTransport: plane.TransportDynamo, HeartbeatMillis: 1000, DpRanks: make([]uint32, 100_000)}
	for i := range huge.DpRanks {
		huge.DpRanks[i] = uint32(i % 65536)
	}
	e.publish(e.subj.Heartbeat, huge)
	for id := uint64(10_000); id < 20_000; id++ {
		r := huge
		r.WorkerID, r.DpRanks = id, []uint32{0}
		e.publish(e.subj.Heartbeat, r)
	}
	waitFor(t, "forged registrations handled", func() bool {
		return e.refused("registration_invalid") == 1 && e.refused("too_many_workers") == 10_000-2
	})
	var lat []time.Duration
	for range 20 {
		start := time.Now()
		e.workers()
		lat = append(lat, time.Since(start))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	ok := 0
	for i := range 50 {
		code, _, _ := e.do("POST", "/v1/completions", fmt.Sprintf(`{"prompt":%s,"max_tokens":1}`, promptJSON(tokens(5, i, 32, 4))))
		if code == 200 {
			ok++
		}
	}
	fmt.Printf("chaos: forged_registrations refused_invalid=%.0f refused_too_many=%.0f workers=%d workers_p50=%s completions_ok=%d/50\n",
		e.refused("registration_invalid"), e.refused("too_many_workers"), len(e.workers().Workers), lat[len(lat)/2], ok)
	if ok < 45 {
		t.Fatalf("%d of 50 completions succeeded beside 2 forged workers", ok)
	}
}

// Five all-workers-busy messages from an unknown router (an idle fleet
// throttled for 9 s before).
func TestChaosSpoofedBusy(t *testing.T) {
	e := startEnv(t, envOptions{workers: 2})
	for range 5 {
		e.publish(e.subj.AllBusy, plane.AllWorkersBusy{Router: "intruder", QueueDepth: 1 << 20, AtUnixNano: time.Now().UnixNano(), WindowMillis: 3_600_000})
	}
	waitFor(t, "spoofed messages refused", func() bool { return e.refused("busy_unknown_router") == 5 })
	throttled := 0
	for i := range 20 {
		if code, _, _ := e.do("POST", "/v1/completions", fmt.Sprintf(`{"prompt":%s,"max_tokens":1}`, promptJSON(tokens(6, i, 32, 4)))); code == 429 {
			throttled++
		}
	}
	fmt.Printf("chaos: spoofed_busy refused=%.0f throttled=%d/20\n", e.refused("busy_unknown_router"), throttled)
	if throttled > 0 {
		t.Fatalf("%d requests throttled by a spoofed all-workers-busy", throttled)
	}
}

// 50 connections declaring 16 MiB bodies and trickling them (RSS 24 →
// 847 MB before).
func TestChaosSlowBodies(t *testing.T) {
	e := startEnv(t, envOptions{workers: 1})
	rss0 := rssBytes()
	var conns []net.Conn
	for range 50 {
		conns = append(conns, trickle(t, e.svc.Addr(), 16<<20))
	}
	waitFor(t, "bodies accounted", func() bool {
		return e.refused("body_budget")+e.metric("kvroute_http_inflight_body_bytes")/(16<<20) >= 50
	})
	stop := time.Now().Add(3 * time.Second)
	chunk := make([]byte, 64<<10)
	for time.Now().Before(stop) { // trickle 64 KiB per connection per 100 ms
		for _, c := range conns {
			_ = c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
			_, _ = c.Write(chunk)
		}
		time.Sleep(100 * time.Millisecond)
	}
	inflight := e.metric("kvroute_http_inflight_body_bytes")
	fmt.Printf("chaos: slow_bodies conns=50 declared_mb=16 inflight_body_mb=%.0f refused=%.0f rss_delta_mb=%.1f\n",
		inflight/(1<<20), e.refused("body_budget"), float64(rssBytes()-rss0)/(1<<20))
	if inflight > DefaultMaxInflightBodyBytes {
		t.Fatalf("%.0f bytes of bodies in flight, over the budget", inflight)
	}
	for _, c := range conns {
		c.Close()
	}
	waitFor(t, "budget released", func() bool { return e.metric("kvroute_http_inflight_body_bytes") == 0 })
	e.complete(tokens(1, 0, 64, 4), 1)
}
