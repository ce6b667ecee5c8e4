// Package recovery provides kvroute's recovery of lost KV events: a
// Requester that asks a worker, over NATS request/reply on its
// kv-recover.<worker_id> subject (wire/plane's recovery protocol), for the
// events of a (worker, dp rank) after the last id the index has in order,
// and applies the answer so that the worker's blocks in the index equal its
// cache at the answer's id.
//
// # Triggers
//
// ingest's lost hook (ingest.Ingest.SetLostHook: a gap, a restart during a
// connection loss, the first sight of a worker above id 1), a worker joining
// (Joined, from node.WorkerJoined), a NATS reconnection (Sweep) and a
// periodic sweep (Config.Interval, default 10 s) that probes every tracked
// key after its last id: the loss of a worker's last events shows no gap.
//
// # Applying an answer
//
// The answer is fetched without locks, then applied inside
// ingest.Ingest.Resync, which holds the NATS pipes so that no live event is
// applied meanwhile: an events answer (ids after+1..at) is queued with
// Index.Apply (replaying that range in order makes every block it touches
// right, the ones applied out of order included); a dump replaces the
// worker key's blocks with Index.Replace, one shard work item, so lookups
// never see half of it. The tracker then takes at as the key's last id, so
// live events at or below it that arrive later are dropped as duplicates.
// An events answer whose at is below the tracker's last was overtaken by
// live events: it is asked for again (twice), then a dump is asked for
// (DumpAll), as when the worker's epoch changed (it restarted). A dump whose
// at is below last is applied all the same (the dump of a restarted worker
// is legitimately below it, and refusing an overtaken dump could repeat
// forever under steady traffic), but it replaced the effects of the live
// events after at, which are not sent again: the tracker takes at as the
// key's last, and the key's next request, queued at once, asks for the
// events after at, whatever id a request queued meanwhile named (a gap the
// live stream showed above at). Without that, the index would keep the
// dump's state for those events while its last id matched the worker's.
//
// # Bounds
//
// At most Config.Concurrency requests in flight; one per worker key, with
// later asks merged into one queued request (the smallest after wins);
// failures back off exponentially from MinBackoff to MaxBackoff; after
// Attempts failures a key is given up until the next sweep, which then asks
// for a dump.
//
// # Metrics
//
//	kvroute_recovery_requests_total              requests sent
//	kvroute_recovery_answers_total{kind}         events, dump, nothing
//	kvroute_recovery_events_total                events replayed from rings
//	kvroute_recovery_dump_blocks_total           blocks in applied dumps
//	kvroute_recovery_failures_total{reason}      timeout, error, apply, stale, gave_up
//	kvroute_recovery_in_flight                   requests in flight (gauge)
//	kvroute_recovery_pending                     keys queued or in flight (gauge)
package recovery
