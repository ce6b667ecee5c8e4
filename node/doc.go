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
// (the stream costs ingest throughput; docs/ARCHITECTURE.md): to every
// KV-event subject of Config.Subjects, older Dynamo's JSON subject
// (...kv_events, Subjects.KVEventsLegacy) included.
//
// # Snapshots
//
// With JetStream and Config.Snapshot.Bucket (--snapshot-bucket; snapshot.go)
// the index is snapshotted into a NATS object store bucket (created if
// missing, with the stream's replicas). The ingest's JetStream handler calls
// the node after every applied message (ingest.Config.AfterApply); when a
// snapshot is due (a ticker every Snapshot.Interval sets an atomic flag, or
// Snapshot.Events messages passed since the last one, or TriggerSnapshot) it
// calls shard.Index.Capture(seq) there, so the capture is exactly the index
// after stream sequence seq, and hands it to a goroutine that streams
// Capture.WriteTo into the object snapshot-<seq, 20 digits>, then rewrites
// the object "current" to name it and deletes all but the newest two
// snapshot objects: the previous snapshot stays current until the new one is
// complete. If an upload is still running when the next is due, that one is
// skipped and counted; a failed upload is logged and counted and the next
// due time tries again; ingest never waits for either. No snapshot is taken
// while no message arrives.
//
// At Start, after the stream is bound and before the consumer starts, the
// current snapshot is restored into the fresh index (shard.Index.Restore)
// and ingest starts at its sequence + 1 (Config.StartSeq is ignored). No
// snapshot, or one that cannot be read or restored (corrupt, another shard
// count or block size): logged (Error), counted, and ingest starts at 1 (the
// stream's oldest message) with the index empty; Start does not fail. The
// stream's last KV-event sequence at start is noted; until ingest applied
// it, EventPlane reports "replaying KV events from the JetStream stream (at
// sequence N of M)", which makes the router's /ready answer 503 (CaughtUp).
// WriteMetrics adds SnapshotFamilies: snapshots stored, failed and
// skipped, the newest one's size, duration, sequence and age, and the
// restore's duration, failures, messages replayed and replay time.
package node
