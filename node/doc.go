// Package node provides the part of a kvroute process that every service
// shares: the NATS connection (an embedded nats-server with JetStream, or an
// external server or cluster), the sharded KV index (shard.Index) and KV-event
// ingest (wire/ingest) feeding it from NATS and ZMQ. The router service
// (package router) and the standalone indexer build on one Node each instead
// of assembling these parts themselves.
//
// Start brings the parts up in dependency order and, on any error, stops what
// it started (including the embedded server's temporary store) before it
// returns an error that names the flag at fault. Close stops them in reverse
// order. A Node is goroutine-safe; its exported fields are for reading.
//
// The NATS connection reconnects forever. A loss is logged (Warn, with the
// error) and counted, a reconnection too (Info); EventPlane reports the loss
// (the router's /ready answers 503 meanwhile) and WriteMetrics exports
// kvroute_nats_connected, kvroute_nats_disconnects_total and
// kvroute_nats_reconnects_total. After a reconnection the ingest is told that
// events may have been lost (ingest.Ingest.MarkReconnected) and a warning
// says so.
//
// With Config.JetStream (kvroute serve --events-jetstream, off by default) the KV
// events are kept in a JetStream stream instead: Start creates or binds the
// stream (ingest.EnsureStream, named KVROUTE_EVENTS_<namespace>_<component>,
// limits from Config.Stream: --events-max-age, --events-max-bytes,
// --events-replicas) on the embedded server or the external one (--nats, a
// single server or a cluster given by several URLs) and starts ingest's
// ordered consumer at Config.StartSeq (0: new messages only). Nothing
// published during a disconnection is lost then: the consumer resumes after
// the last sequence it delivered, and the reconnection is logged at Info
// with that sequence. On the embedded server the stream outlives a restart
// of the process only with a --data-dir (the temporary store is removed at
// Close). The zero Config subscribes with core NATS, kvroute serve's default
// (the stream costs ingest throughput; docs/ARCHITECTURE.md).
package node
