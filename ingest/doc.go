// Package ingest provides kvroute's KV-event ingest: it subscribes to a
// fleet's KV events on NATS (Dynamo's msgpack event plane, older Dynamo's
// JSON RouterEvents on ...kv-events and ...kv_events, kvroute's native
// batches) and on engines' ZMQ PUB sockets (vLLM, SGLang), decodes them on
// the receiving goroutine, checks event ids per (worker, dp rank) and
// source, and hands the events to a Sink (a *shard.Index), counting and
// logging everything that goes wrong. Lost events are fetched back by
// ingest/recovery, which hooks in through SetLostHook and Resync.
//
//	subjects, err := plane.SubjectsFor("kvroute", "backend")
//	in, err := ingest.New(ingest.Config{BlockSize: 16, Subjects: subjects}, index)
//	defer in.Close()
//	err = in.SubscribeNATS(nc)             // or ConsumeJetStream, SubscribeLive
//	err = in.AddZMQ(ingest.ZMQWorker{...}) // one per engine rank
//
// # Threading and copies
//
// Each NATS subscription (nats.go runs one goroutine per async
// subscription) and each ZMQ subscriber (wire/zmq, one goroutine per engine
// rank) owns a pipe: a reused wire.Batch, its source's id tracker and a
// decoder. A message is decoded into the batch, filtered and passed to
// Sink.Apply on that goroutine; shard.Index.Apply copies the blocks once
// into its per-shard batches, so the batch is reused for the next message.
// In steady state the handler allocates nothing (TestHandlerAllocs,
// TestJetStreamHandlerAllocs). Counters are atomics added once per message
// or coalesced batch, after the sink took its events. An Ingest (from New,
// closed with Close) is goroutine-safe.
//
// Coalescing (core NATS only): a callback that finds more messages of its
// subscription already queued in the client (Subscription.Pending > 1)
// decodes into the pipe's batch and returns; the first callback that finds
// the queue empty, or the batch at 64 messages or 1024 events, hands them
// all to one Apply. A held message always has a queued successor, and every
// other user of a pipe (Close, Forget, MarkReconnected, Checkpoint, Resync,
// Tracked, RestartJetStream) flushes held events first (TestCoalescing,
// TestHeldEventsFlushed). The JetStream consumer does not coalesce: its only
// hint, the stream's pending count, can be false, and a held message would
// hold LastSeq and /ready back.
//
// Backpressure: a callback blocks only while the index's queue for the
// worker's shard is full (shard.Index never drops). The NATS pending limits
// (Config.PendingMsgs/PendingBytes, default 64Ki messages / 64 MiB) are the
// only place messages are dropped; the drops are counted and, since their
// ids never arrive, show up as gaps. Every callback is timed
// (kvroute_ingest_dispatch_seconds and its maximum).
//
// # Three ways to read NATS
//
//   - SubscribeNATS (the default): core subscriptions to every KV-event
//     subject of Config.Subjects, the legacy ...kv_events included. Nothing
//     published while the connection is down comes back; MarkReconnected
//     marks every tracked key so the next event is checked as after a loss.
//   - ConsumeJetStream (--events-jetstream --events-live=false): one ordered
//     consumer (ephemeral, no acks, pulling Config.FetchBatch = 500 ahead)
//     over the stream that EnsureStream creates or binds. StreamName is
//     KVROUTE_EVENTS_<namespace>_<component>; it captures Subjects.KVEvents,
//     Subjects.KVEventsNative and the catch-up marker subject, not ZMQ (which
//     has its own replay socket) nor the legacy subject; retention by limits,
//     oldest discarded (--events-max-age 1 h, --events-max-bytes 1 GiB),
//     --events-replicas; file storage, asynchronous for one replica. An
//     existing stream must capture both KV subjects (the error names
//     --namespace/--component); its limits are updated to the flags'. A
//     stream holding nothing else is consumed unfiltered. The handler routes
//     each message by subject to the Dynamo or native pipe. The consumer
//     recreates itself from the last delivered sequence + 1 after two missed
//     heartbeats (Config.Heartbeat, 2 s). Config.StartSeq is the first
//     sequence applied (0: new messages only); LastSeq is the sequence of the
//     last message the sink took, and a message at or below it is dropped as
//     a stream duplicate. Config.AfterApply runs on the handler goroutine
//     after each message: node captures snapshots there, where
//     shard.Index.Capture is exact. A StartSeq that aged out starts at the
//     oldest message, with a warning. A stream lost with its server's store
//     is recreated by the owner (node), which calls RestartJetStream: a new
//     consumer from the first sequence, tracking kept, every key marked as
//     after a lost connection.
//   - SubscribeLive (--events-jetstream, --events-live default): core
//     subscriptions carry the live events at core speed while the stream
//     keeps them; the stream is read only to catch up, at start from a
//     given sequence and after every reconnection (CatchUp) from
//     SafeSeq()+1. Hold (on a lost connection, and inside CatchUp) makes the
//     callbacks buffer their messages (at most Config.PendingMsgs per
//     source; beyond, dropped, counted, and seen as gaps). A catch-up
//     flushes the connection, publishes an empty marker on MarkSubject with
//     a JetStream publish, replays the stream up to the marker through an
//     ordered consumer and the same pipes, then applies the held messages
//     in arrival order. nats-server routes a message to every matching
//     subscription in one step, the stream's included, and stores in that
//     order: what precedes the marker is in the replay, what follows reached
//     the core path, and the few between the flush and the marker reach both
//     and are dropped by the event-id tracking. In a cluster, interest
//     reaches the other servers a little later; a message lost in between
//     comes back as a gap. SafeSeq (sampled every Config.SafeInterval, 1 s:
//     the stream's last sequence L, a server round trip, then the messages
//     received by then applied) is a lower bound of what was applied;
//     snapshots are taken inside Checkpoint at SafeSeq. A failed catch-up is
//     logged at Error and counted; the held messages are applied and every
//     key is marked as after a lost connection.
//
// # Event ids: gaps, duplicates and restarts
//
// NATS publishers number each WorkerKey's events 1, 2, 3, ... For each
// source and key the last id is kept. The first id seen is accepted (the
// router may join a running fleet); last+1 is in order; a larger id is a gap
// (the missing ids are counted, logged, kept in the Gaps ring, and the event
// is applied); id 1 is a restart (tracking starts again; a Stored id 1 right
// after id 1 is a duplicate of it); any other id ≤ last is a duplicate,
// counted, logged (not during a live catch-up, where duplicates are
// expected) and dropped; id 0 is not tracked. After MarkReconnected a key's
// next id is checked against the last seen before the loss: a skip is a
// gap, and an id at or below it is a restart during the loss. Events
// without ids, and a worker's event 1 replayed while tracking is above 1
// (TestLiveReplayFromFirstID), may be applied twice; applying again, in
// order, a run of a worker's events that ends with the last one applied
// leaves its blocks as they were, so only the counters show it. Forget
// drops a departed worker's tracking. An event of an unknown Dynamo kind
// carries an id the tracker never sees: the next event reports a gap of one.
// Checkpoint and Config.Tracked carry the tracking across a snapshot
// (AppendTracking, DecodeTracking), so a restore replays without dumps.
//
// ZMQ: wire/zmq's Subscriber drops repeated sequence numbers and fills holes
// from the engine's replay socket; the vLLM decoder numbers events itself. A
// hole not filled (or a malformed batch) is a gap of batches (Gap.Batches,
// kvroute_ingest_missing_batches_total). A sequence number going backwards
// is a new engine process: a fresh decoder, and if the sink is a
// DpRankRemover (*shard.Index is) the old process's blocks of that rank are
// removed, since a restarted vLLM sends no AllBlocksCleared.
//
// # Bad input
//
// A malformed message is counted, logged and dropped; ingest goes on. A vLLM
// event whose block size differs from Config.BlockSize is rejected by the
// decoder, counted in kvroute_ingest_block_size_mismatches_total and logged
// with both sizes ("event block_size 16, configured block size 4"). Problem
// logs are rate-limited to one line per problem, source and worker key per
// Config.LogInterval (one minute), each saying how many were suppressed. A
// failing Sink.Apply (a closed index) is counted and logged.
//
// # Metrics
//
// WriteMetrics writes the kvroute_ingest_* samples at scrape time, with
// source="nats-dynamo", "nats-native" or "zmq"; MetricFamilies holds their
// HELP and TYPE for a promtext.Registry. docs/reference/metrics.md lists
// them (make docs).
//
// # Decisions
//
// The measured choices (decoding on the receiving goroutine, coalescing,
// JetStream opt-in and its live path, file storage) are recorded in
// docs/decisions/, among them 0035-ingest-on-the-receiving-goroutine.md;
// docs/benchmarks.md has the current figures of BenchmarkNATSIngest and
// BenchmarkHandler.
package ingest
