package ingest

import (
	"fmt"
	"io"
	"strconv"

	"github.com/VictoriaMetrics/metrics"

	"github.com/kvroute/kvroute/internal/promtext"
)

// MetricFamilies describes what WriteMetrics writes; a promtext.Registry
// built with it adds the # HELP and # TYPE lines and groups the sources'
// samples by family.
var MetricFamilies = []promtext.Family{
	{Name: "kvroute_ingest_running", Type: promtext.Gauge, Help: "1 while KV-event ingest runs"},
	{Name: "kvroute_ingest_stream_seq", Type: promtext.Gauge, Help: "JetStream stream sequence of the last KV-event message applied (0 without JetStream)"},
	{Name: "kvroute_ingest_stream_duplicates_total", Type: promtext.Counter, Help: "JetStream messages dropped as already applied (redelivered after a consumer reset)"},
	{Name: "kvroute_ingest_stream_restarts_total", Type: promtext.Counter, Help: "JetStream consumers restarted on a recreated KV-event stream (the NATS server lost its store)"},
	{Name: "kvroute_ingest_live_safe_seq", Type: promtext.Gauge, Help: "JetStream live path: stream sequence up to which every message is in the index (a catch-up starts after it)"},
	{Name: "kvroute_ingest_live_catchups_total", Type: promtext.Counter, Help: "JetStream live path: catch-ups from the stream (at start, after reconnections)"},
	{Name: "kvroute_ingest_live_catchup_failures_total", Type: promtext.Counter, Help: "JetStream live path: catch-ups that failed (the workers are asked for the missing events)"},
	{Name: "kvroute_ingest_live_held_messages_total", Type: promtext.Counter, Help: "JetStream live path: core messages held during catch-ups"},
	{Name: "kvroute_ingest_live_held_dropped_total", Type: promtext.Counter, Help: "JetStream live path: core messages dropped because the catch-up's hold was full"},
	{Name: "kvroute_ingest_messages_total", Type: promtext.Counter, Help: "KV-event messages (NATS) or batches (ZMQ) received, by source"},
	{Name: "kvroute_ingest_events_total", Type: promtext.Counter, Help: "KV events handed to the index, by source"},
	{Name: "kvroute_ingest_blocks_total", Type: promtext.Counter, Help: "Blocks in the KV events handed to the index, by source"},
	{Name: "kvroute_ingest_malformed_messages_total", Type: promtext.Counter, Help: "Messages dropped as malformed, by source"},
	{Name: "kvroute_ingest_rejected_events_total", Type: promtext.Counter, Help: "KV events rejected by the decoder, by source"},
	{Name: "kvroute_ingest_block_size_mismatches_total", Type: promtext.Counter, Help: "Rejected KV events whose block size differs from the router's, by source"},
	{Name: "kvroute_ingest_ignored_events_total", Type: promtext.Counter, Help: "KV events of unknown kinds, ignored, by source"},
	{Name: "kvroute_ingest_other_group_events_total", Type: promtext.Counter, Help: "KV events of a hybrid model's non-main KV cache groups, not indexed, by source"},
	{Name: "kvroute_ingest_duplicate_events_total", Type: promtext.Counter, Help: "Duplicate KV events dropped, by source"},
	{Name: "kvroute_ingest_gaps_total", Type: promtext.Counter, Help: "Gaps in a worker's event ids or batch sequence numbers, by source"},
	{Name: "kvroute_ingest_missing_events_total", Type: promtext.Counter, Help: "Event ids skipped by gaps (NATS), by source"},
	{Name: "kvroute_ingest_missing_batches_total", Type: promtext.Counter, Help: "Event batches lost (ZMQ), by source"},
	{Name: "kvroute_ingest_restarts_total", Type: promtext.Counter, Help: "Workers seen starting their event numbering over, by source"},
	{Name: "kvroute_ingest_first_sightings_total", Type: promtext.Counter, Help: "Worker keys first seen at an event id above 1 (a running worker joined, or a restart without its snapshot's tracking); each is asked for a dump"},
	{Name: "kvroute_ingest_sink_errors_total", Type: promtext.Counter, Help: "Messages whose events the index refused (a failed apply), by source"},
	{Name: "kvroute_ingest_dropped_messages_total", Type: promtext.Counter, Help: "NATS messages dropped by the slow-consumer limit, or ZMQ batches lost, by source"},
	{Name: "kvroute_ingest_pending_messages", Type: promtext.Gauge, Help: "NATS messages waiting for the ingest callback, by source"},
	{Name: "kvroute_ingest_pending_messages_high_water", Type: promtext.Gauge, Help: "Largest number of NATS messages waiting for the ingest callback, by source"},
	{Name: "kvroute_ingest_dispatch_max_seconds", Type: promtext.Gauge, Help: "Longest ingest callback, by source"},
	{Name: "kvroute_ingest_dispatch_seconds", Type: promtext.Histogram, Help: "Duration of the ingest callback per message, by source"},
	{Name: "kvroute_ingest_zmq_connected", Type: promtext.Gauge, Help: "1 while the ZMQ SUB socket to the worker is dialed"},
	{Name: "kvroute_ingest_zmq_batches_total", Type: promtext.Counter, Help: "ZMQ event batches by how they arrived: live, replayed, or lost"},
	{Name: "kvroute_ingest_zmq_seq_gaps_total", Type: promtext.Counter, Help: "Sequence gaps seen by the ZMQ subscriber"},
	{Name: "kvroute_ingest_zmq_restarts_total", Type: promtext.Counter, Help: "Engine restarts seen by the ZMQ subscriber"},
	{Name: "kvroute_ingest_zmq_reconnects_total", Type: promtext.Counter, Help: "ZMQ re-dials after the first"},
	{Name: "kvroute_ingest_zmq_malformed_frames_total", Type: promtext.Counter, Help: "ZMQ messages with bad framing"},
}

// WriteMetrics writes the counters as Prometheus samples (names
// kvroute_ingest_*, listed in the package doc), read at call time. It writes
// no metadata: expose it through a promtext.Registry holding MetricFamilies,
// which adds it.
func (in *Ingest) WriteMetrics(w io.Writer) {
	st := in.Stats()
	running := uint64(0)
	if st.Running {
		running = 1
	}
	metrics.WriteGaugeUint64(w, "kvroute_ingest_running", running)
	metrics.WriteGaugeUint64(w, "kvroute_ingest_stream_seq", st.StreamSeq)
	metrics.WriteCounterUint64(w, "kvroute_ingest_stream_duplicates_total", st.StreamDuplicates)
	metrics.WriteCounterUint64(w, "kvroute_ingest_stream_restarts_total", st.StreamRestarts)
	ls := in.LiveStats() // zero without the live path
	metrics.WriteGaugeUint64(w, "kvroute_ingest_live_safe_seq", ls.SafeSeq)
	metrics.WriteCounterUint64(w, "kvroute_ingest_live_catchups_total", ls.CatchUps)
	metrics.WriteCounterUint64(w, "kvroute_ingest_live_catchup_failures_total", ls.CatchUpFailures)
	metrics.WriteCounterUint64(w, "kvroute_ingest_live_held_messages_total", ls.Buffered)
	metrics.WriteCounterUint64(w, "kvroute_ingest_live_held_dropped_total", ls.BufferDropped)
	for i := range st.Sources {
		writeSourceMetrics(w, &st.Sources[i])
	}
	for i := range st.ZMQ {
		z := &st.ZMQ[i]
		l := fmt.Sprintf(`worker="%d",dp_rank="%d"`, z.Worker, z.DpRank)
		conn := uint64(0)
		if z.Connected {
			conn = 1
		}
		metrics.WriteGaugeUint64(w, `kvroute_ingest_zmq_connected{`+l+`}`, conn)
		metrics.WriteCounterUint64(w, `kvroute_ingest_zmq_batches_total{`+l+`,how="live"}`, z.Received)
		metrics.WriteCounterUint64(w, `kvroute_ingest_zmq_batches_total{`+l+`,how="replayed"}`, z.Replayed)
		metrics.WriteCounterUint64(w, `kvroute_ingest_zmq_batches_total{`+l+`,how="lost"}`, z.Lost)
		metrics.WriteCounterUint64(w, `kvroute_ingest_zmq_seq_gaps_total{`+l+`}`, z.Gaps)
		metrics.WriteCounterUint64(w, `kvroute_ingest_zmq_restarts_total{`+l+`}`, z.Restarts)
		metrics.WriteCounterUint64(w, `kvroute_ingest_zmq_reconnects_total{`+l+`}`, z.Reconnects)
		metrics.WriteCounterUint64(w, `kvroute_ingest_zmq_malformed_frames_total{`+l+`}`, z.Malformed)
	}
}

func writeSourceMetrics(w io.Writer, s *SourceStats) {
	l := `source="` + s.Source.String() + `"`
	counter := func(name string, v uint64) {
		metrics.WriteCounterUint64(w, "kvroute_ingest_"+name+"{"+l+"}", v)
	}
	counter("messages_total", s.Messages)
	counter("events_total", s.Events)
	counter("blocks_total", s.Blocks)
	counter("malformed_messages_total", s.Malformed)
	counter("rejected_events_total", s.Rejected)
	counter("block_size_mismatches_total", s.SizeMismatches)
	counter("ignored_events_total", s.Ignored)
	counter("other_group_events_total", s.OtherGroups)
	counter("duplicate_events_total", s.Duplicates)
	counter("gaps_total", s.Gaps)
	counter("missing_events_total", s.MissingEvents)
	counter("missing_batches_total", s.MissingBatches)
	counter("restarts_total", s.Restarts)
	counter("first_sightings_total", s.FirstSightings)
	counter("sink_errors_total", s.SinkErrors)
	counter("dropped_messages_total", s.Dropped)
	metrics.WriteGaugeUint64(w, "kvroute_ingest_pending_messages{"+l+"}", uint64(s.Pending))
	metrics.WriteGaugeUint64(w, "kvroute_ingest_pending_messages_high_water{"+l+"}", uint64(s.PendingHighWater))
	metrics.WriteGaugeFloat64(w, "kvroute_ingest_dispatch_max_seconds{"+l+"}", s.DispatchMax.Seconds())
	// A Prometheus histogram: cumulative buckets, then sum and count.
	var cum uint64
	for i, ub := range DispatchBuckets {
		cum += s.Buckets[i]
		metrics.WriteCounterUint64(w, `kvroute_ingest_dispatch_seconds_bucket{`+l+`,le="`+
			strconv.FormatFloat(ub.Seconds(), 'g', -1, 64)+`"}`, cum)
	}
	cum += s.Buckets[len(DispatchBuckets)]
	metrics.WriteCounterUint64(w, `kvroute_ingest_dispatch_seconds_bucket{`+l+`,le="+Inf"}`, cum)
	metrics.WriteCounterFloat64(w, "kvroute_ingest_dispatch_seconds_sum{"+l+"}", s.DispatchSum.Seconds())
	metrics.WriteCounterUint64(w, "kvroute_ingest_dispatch_seconds_count{"+l+"}", cum)
}
