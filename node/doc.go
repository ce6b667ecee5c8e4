// Package node provides the part of a kvroute process that every service
// shares: the NATS connection (an embedded nats-server with JetStream, or an
// external server or cluster), the sharded KV index (shard.Index) and KV-event
// ingest (ingest) feeding it from NATS and ZMQ. The router service
// (package router) and the standalone indexer build on one Node each instead
// of assembling these parts themselves.
//
// Start brings the parts up in dependency order and, on any error, stops what
// it started (including the embedded server's temporary store) before it
// returns an error that names the flag at fault. Close stops them in reverse
// order. A Node is goroutine-safe; its exported fields are for reading.
//
//	n, err := node.Start(cfg) // NATS, index, ingest (and recovery, snapshots)
//	defer n.Close()
//	overlaps := n.Index.MatchBatch(...)
//
// The NATS connection reconnects forever. A loss is logged (Warn) and
// counted, a reconnection too (Info); EventPlane reports the loss (the
// router's /ready answers 503 meanwhile) and WriteMetrics exports
// kvroute_nats_{connected,disconnects_total,reconnects_total}. After a
// reconnection the ingest is told that events may have been lost
// (ingest.Ingest.MarkReconnected).
//
// ControlPlane reports the connection's state and its losses so far: the
// owners of worker registries (the router, the indexer) stop expiring
// workers while it is down, since no heartbeat can arrive, and give every
// worker a fresh grace after a loss (plane.Registry.Renew).
//
// Start waits for JetStream (jetstream.go): the stream, the snapshot bucket
// and the stream's last sequence are asked for again, with backoff, while
// the answer is none or one that waiting cures (a cluster without a
// JetStream leader yet), until Config.JetStreamWait (--jetstream-wait); each
// retry is logged with its deadline, and Config.Starting is told what Start
// waits for, for the services' /health while they start.
//
// With Config.JetStream and Config.LiveEvents (kvroute serve
// --events-jetstream; --events-live is the binary's default) the live KV
// events come from core NATS subscriptions while the stream keeps them
// (ingest.Ingest.SubscribeLive): Start catches up from the stream after a
// restored snapshot (from its sequence + 1), onDisconnect holds the core
// messages (ingest.Ingest.Hold) and onReconnect catches up from the live
// path's safe sequence (ingest.Ingest.CatchUp) before applying them;
// checkStream hands a recreated stream over with SetLiveStream. Snapshots
// are then taken from the snapshotter's loop (startLive: every Interval,
// after Events NATS messages or on TriggerSnapshot) inside ingest's
// Checkpoint at the safe sequence, not on a consumer goroutine.
//
// With Config.JetStream alone (--events-live=false) the KV
// events are consumed from the JetStream stream instead: Start creates or binds the
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
// (JetStream stays opt-in: it costs disk, and the consumer path throughput): to every
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
// Ingest's event-id tracking is part of each snapshot: the capture runs
// inside ingest.Checkpoint, and the ids go to the object tracking-<seq>,
// stored before the snapshot object; a restore seeds the new ingest with
// them (ingest.Config.Tracked), so the replay checks ids in order and asks
// no worker for a dump. Without a usable tracking object (an older
// snapshot) each worker key seen in the replay is a first sighting and is
// answered by a dump, as after a plain join.
// WriteMetrics adds SnapshotFamilies: snapshots stored, failed and
// skipped, the newest one's size, duration, sequence and age, and the
// restore's duration, failures, messages replayed and replay time.
//
// # Bounds (fleet.go, auth.go)
//
// With FleetConfig.Filter (set by the router service outside approximate
// mode) ingest asks the node about each NATS event's worker
// (ingest.Config.Admit): registered (WorkerJoined) and static workers pass
// lock-free; an unknown worker's events are applied for FleetConfig.Grace
// after its first one, capped at PendingCap blocks per rank, for at most
// MaxPending such workers at once; when the grace ends without a
// registration, its blocks are removed and its events dropped (counted as
// kvroute_refused_total{reason="unknown_worker_events"}) until it
// registers. A registered worker's entries per rank are capped at
// CapFactor × its kv_blocks (shard.Index.SetCap); Stored events beyond are
// refused (reason="worker_over_capacity") and come back as gaps, for which
// watchIndexGaps asks the worker for a dump as for a missing parent.
// Every index gap is counted (kvroute_index_gaps_total{action}), also
// for workers whose tracking was forgotten; the logs are rate-limited.
// Config.NATSAuth gives the embedded server a router and a worker user with
// subject permissions (authUsers) and writes the workers' URL to
// Config.NATSAuthFile.
//
// # Index queries (query.go)
//
// ServeIndex answers the index query protocol of wire/plane/query.go on
// NATS from the node's index: match queries (a batch of prompts' local
// hashes → overlaps and tree sizes per worker key), record queries
// (approximate mode: a routing decision, local and sequence hashes 1:1),
// workers queries (every worker key with its tree size) and pings. It
// subscribes Handlers times in the queue group plane.QueueGroup, so several serving processes (and several goroutines in one) share the
// queries; an approximate-mode server refuses to start when another serving
// index answers its ping, since decisions split between two indexes would
// each be half-recorded. RemoteIndex is the other side, used by the
// router's batcher (--use-remote-indexer): one request per batch, asking
// for per-tier overlaps (plane.FlagTiers: host and disk blocks besides the
// device's, so that a remote router weighs tiers as a local one does; a
// serving index of an older build refuses the flag once and is asked
// without it from then on, TestRemoteIndexOlderServer); Workers asks for
// every worker key's tree size (plane.QueryWorkers; the router polls it off
// its batcher); a failure
// leaves every prompt of the batch with zero overlap, counted by reason
// (QueryFamilies) and logged at most once per LogEvery.
//
// The served lookup is plain NATS request/reply, answered on the
// subscription's goroutine: shard.Index.MatchBatch runs on the caller's
// goroutine under the shard core lock, so there is nothing to hand off, and
// another hop would add a wake-up. RemoteIndex does not use
// nats.Conn.Request: it publishes with a reply subject of its own and waits
// on a channel subscription to its inbox, so the connection's reader hands
// the answer straight to the waiting batcher (no response-mux goroutine, no
// per-request token, channel and map entry: 7 allocations fewer per round
// trip), and it reuses that reply subject until a request fails (the NATS
// server routes the answers from its subject cache); a failed request
// retires the subject, so a late answer is dropped, never taken for the
// next one (TestRemoteIndexLateReply). This package's part of a lookup
// allocates nothing on either side (TestAllocsServeMatch: the handler's
// decode, lookup and encode; the client's encode and decode). The router's
// batcher is RemoteIndex's only caller, one request in flight, and a batch
// collects the decisions that arrived meanwhile: concurrent lookups are
// coalesced there, not here.
//
// BenchmarkRemoteLookup measures a 512-block prompt remotely against a
// local lookup, with the serving index in a process of its own (the test
// binary, startServeChild), at 1, 4 and 16 concurrent requesters and in
// batches of 32: latency percentiles, the requesters' CPU per lookup, the
// serving process's lookups per CPU-second, and per request each process's
// wake-ups and run-queue wait; KVROUTE_BENCH_NATS_PROC=1 runs the
// nats-server apart too. The serving process's CPU goes mostly to syscalls
// and to waking idle Ps for each hand-off, which is why a query-heavy
// `kvroute indexer` is better run as several narrow instances
// (GOMAXPROCS=1) than one wide one; the figures and the decision are in
// the served-index record under docs/decisions/.
package node
