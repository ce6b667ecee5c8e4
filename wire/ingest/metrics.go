package ingest

import (
	"fmt"
	"io"
	"strconv"

	"github.com/VictoriaMetrics/metrics"
)

// WriteMetrics writes the counters in Prometheus text format (names
// kvroute_ingest_*, listed in the package doc), read at call time. Register it
// with metrics.RegisterMetricsWriter(in.WriteMetrics).
func (in *Ingest) WriteMetrics(w io.Writer) {
	st := in.Stats()
	running := uint64(0)
	if st.Running {
		running = 1
	}
	metrics.WriteGaugeUint64(w, "kvroute_ingest_running", running)
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
	counter("duplicate_events_total", s.Duplicates)
	counter("gaps_total", s.Gaps)
	counter("missing_events_total", s.MissingEvents)
	counter("missing_batches_total", s.MissingBatches)
	counter("restarts_total", s.Restarts)
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
