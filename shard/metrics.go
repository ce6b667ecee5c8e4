package shard

import (
	"fmt"
	"io"

	"github.com/VictoriaMetrics/metrics"

	"github.com/kvroute/kvroute/internal/promtext"
	"github.com/kvroute/kvroute/wire"
)

// MetricFamilies describes what WriteMetrics writes; a promtext.Registry
// built with it adds the # HELP and # TYPE lines and groups the shards'
// samples by family.
var MetricFamilies = []promtext.Family{
	{Name: "kvroute_shard_events_total", Type: promtext.Counter, Help: "KV events applied by the shard, by kind and outcome (ok, parent_missing, bad)"},
	{Name: "kvroute_shard_blocks_total", Type: promtext.Counter, Help: "Blocks by operation: stored, removed, unknown (removed but not indexed), conflicting, and in approximate mode recorded, refreshed, expired, pruned"},
	{Name: "kvroute_shard_gaps_dropped_total", Type: promtext.Counter, Help: "Gap notices lost because the shard's outbox was full"},
	{Name: "kvroute_shard_lookups_total", Type: promtext.Counter, Help: "Requests matched against the shard's tree"},
	{Name: "kvroute_shard_lookup_batches_total", Type: promtext.Counter, Help: "Batches the lookups came in"},
	{Name: "kvroute_shard_event_batches_total", Type: promtext.Counter, Help: "KV event batches applied"},
	{Name: "kvroute_shard_decisions_total", Type: promtext.Counter, Help: "Routing decisions recorded (approximate mode)"},
	{Name: "kvroute_shard_lookup_waits_total", Type: promtext.Counter, Help: "Match calls that found the shard's core taken (the busy part of an event, outside its quiet stretches, or another lookup) and waited for it"},
	{Name: "kvroute_shard_lookup_parks_total", Type: promtext.Counter, Help: "Match calls whose wait outlasted the short spin, so they waited in the shard's mutex and were woken (a scheduler hand-off of several µs)"},
	{Name: "kvroute_shard_runner_parks_total", Type: promtext.Counter, Help: "Event steps of the shard that waited in its mutex for Match calls holding the core"},
	{Name: "kvroute_shard_producer_stalls_total", Type: promtext.Counter, Help: "Times a producer found the shard's queue full and waited (backpressure)"},
	{Name: "kvroute_shard_workers", Type: promtext.Gauge, Help: "Worker ids assigned to the shard"},
	{Name: "kvroute_shard_tree_nodes", Type: promtext.Gauge, Help: "Live radix tree nodes (runs of blocks)"},
	{Name: "kvroute_shard_tree_entries", Type: promtext.Gauge, Help: "(block, worker) pairs in the tree"},
	{Name: "kvroute_shard_tree_workers", Type: promtext.Gauge, Help: "Worker keys (worker, dp rank) holding at least one block"},
	{Name: "kvroute_shard_tree_blocks", Type: promtext.Gauge, Help: "Distinct blocks in the tree"},
	{Name: "kvroute_shard_tree_bytes", Type: promtext.Gauge, Help: "Memory held by the tree's arenas and tables (capacity)"},
	{Name: "kvroute_shard_approx_blocks", Type: promtext.Gauge, Help: "(worker, block) entries recorded in approximate mode"},
	{Name: "kvroute_shard_pending_gaps", Type: promtext.Gauge, Help: "Gap notices waiting in the shard's outbox"},
	{Name: "kvroute_shard_event_queue_depth", Type: promtext.Gauge, Help: "Event batches queued behind the shard: its ingest lag, in batches"},
	{Name: "kvroute_shard_event_queue_high_water", Type: promtext.Gauge, Help: "Largest event queue depth seen"},
	{Name: "kvroute_shard_lookup_queue_high_water", Type: promtext.Gauge, Help: "Largest lookup queue depth seen (Stats, Gaps, Workers, TreeSize; Match uses the queue only with QueuedLookups)"},
	{Name: "kvroute_shard_pinned", Type: promtext.Gauge, Help: "1 when the shard's thread is pinned to CPUs"},
}

// WriteMetrics writes every shard's counters and gauges as Prometheus
// samples (no metadata: expose them through a promtext.Registry holding
// MetricFamilies, which adds it), read at call time from the shards (see
// Stats). A closed Index writes nothing.
func (ix *Index) WriteMetrics(w io.Writer) {
	stats, err := ix.Stats(nil)
	if err != nil {
		return
	}
	for i := range stats {
		writeShardMetrics(w, &stats[i])
	}
}

func writeShardMetrics(w io.Writer, s *ShardStats) {
	sh := s.Shard
	for k := range NumKinds {
		for o := range NumOutcomes {
			metrics.WriteCounterUint64(w, fmt.Sprintf(`kvroute_shard_events_total{shard="%d",kind="%s",outcome="%s"}`,
				sh, wire.Kind(k), o), s.Events[k][o])
		}
	}
	for _, b := range []struct {
		op string
		v  uint64
	}{
		{"stored", s.BlocksStored}, {"removed", s.BlocksRemoved}, {"unknown", s.BlocksUnknown},
		{"conflicting", s.BlocksConflicting},
		{"recorded", s.BlocksRecorded}, {"refreshed", s.BlocksRefreshed},
		{"expired", s.BlocksExpired}, {"pruned", s.BlocksPruned},
	} {
		metrics.WriteCounterUint64(w, fmt.Sprintf(`kvroute_shard_blocks_total{shard="%d",op="%s"}`, sh, b.op), b.v)
	}
	counter := func(name string, v uint64) {
		metrics.WriteCounterUint64(w, fmt.Sprintf(`kvroute_shard_%s{shard="%d"}`, name, sh), v)
	}
	gauge := func(name string, v uint64) {
		metrics.WriteGaugeUint64(w, fmt.Sprintf(`kvroute_shard_%s{shard="%d"}`, name, sh), v)
	}
	counter("gaps_dropped_total", s.GapsDropped)
	counter("lookups_total", s.Lookups)
	counter("lookup_batches_total", s.LookupBatches)
	counter("event_batches_total", s.EventBatches)
	counter("decisions_total", s.Decisions)
	counter("lookup_waits_total", s.LookupWaits)
	counter("lookup_parks_total", s.LookupParks)
	counter("runner_parks_total", s.RunnerParks)
	counter("producer_stalls_total", s.ProducerStalls)
	gauge("workers", uint64(s.Workers))
	gauge("tree_nodes", uint64(s.Tree.Nodes))
	gauge("tree_entries", uint64(s.Tree.Entries))
	gauge("tree_workers", uint64(s.Tree.Workers))
	gauge("tree_blocks", uint64(s.Tree.Blocks))
	gauge("tree_bytes", uint64(s.Tree.Bytes))
	gauge("approx_blocks", uint64(s.ApproxBlocks))
	gauge("pending_gaps", uint64(s.PendingGaps))
	gauge("event_queue_depth", uint64(s.EventQueueDepth))
	gauge("event_queue_high_water", uint64(s.EventQueueHighWater))
	gauge("lookup_queue_high_water", uint64(s.LookupQueueHighWater))
	pinned := uint64(0)
	if len(s.CPUs) > 0 {
		pinned = 1
	}
	gauge("pinned", pinned)
}
