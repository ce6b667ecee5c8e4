package shard

import (
	"fmt"
	"io"

	"github.com/VictoriaMetrics/metrics"

	"github.com/kvroute/kvroute/wire"
)

// WriteMetrics writes every shard's counters and gauges in Prometheus text
// format, read at call time from the shards (see Stats). Register it with
// metrics.RegisterMetricsWriter(ix.WriteMetrics) to export at scrape time.
// A closed Index writes nothing.
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
