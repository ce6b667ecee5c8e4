// Package plane provides kvroute's control plane on NATS: the subjects, the
// JSON messages workers and routers exchange (registration and heartbeat,
// withdrawal, load metrics, all-workers-busy), and a Registry that turns
// heartbeats into a live worker set with expiry.
//
// Subjects, for namespace ns and component comp:
//
//	namespace.{ns}.component.{comp}.kv-events         KV events, Dynamo's msgpack event plane (or older Dynamo's JSON)
//	namespace.{ns}.component.{comp}.kv_events         KV events, older Dynamo's JSON RouterEvents (KVEventsLegacy)
//	namespace.{ns}.component.{comp}.kv-events.native  KV events, kvroute's native binary batch
//	namespace.{ns}.component.{comp}.load-metrics      Load (JSON), per worker and dp rank, on change
//	namespace.{ns}.component.{comp}.workers.heartbeat Registration (JSON), at start and every heartbeat interval
//	namespace.{ns}.component.{comp}.workers.leave     Registration (JSON), once at shutdown
//	namespace.{ns}.component.{comp}.all-workers-busy  AllWorkersBusy (JSON), from routers
//	namespace.{ns}.component.{comp}.router.sync       replica-sync batches (binary, sync.go), from routers
//	namespace.{ns}.component.{comp}.kv-recover.{id}   KV recovery requests to worker id (binary, request/reply)
//
// # KV recovery (version 1)
//
// A router that lost events of (worker, dp rank) after id N sends a 24-byte
// request (AppendRecoverRequest) with a reply inbox. The worker answers with
// one or more reply messages (AppendRecoverReply: a 40-byte header, then a
// native batch): kind events (ids N+1..at, empty when nothing is missing),
// kind dump (when N is older than its ring of recent events or newer than
// its last id: Stored events rebuilding the rank's cache, each block after
// its parent, consistent at id at) or kind error (a message). Answers are
// split into chunks of at most RecoverChunkBytes, numbered from 0, the last
// flagged; a receiver that misses a chunk asks again. The header's epoch
// names the worker's engine incarnation (it changes on restart). See
// recover.go for the byte layout; FuzzRecoverRequest and FuzzRecoverReply
// fuzz the decoders.
//
// Index queries (query.go): routers started with --use-remote-indexer look
// prompts up in a serving index by NATS request/reply on IndexSubject, in
// the queue group QueueGroup: AppendMatchQuery (a batch of prompts' local
// block hashes, with model and tenant), AppendRecordQuery (an approximate-
// mode decision; local and sequence hashes must come 1:1, checked on both
// sides), AppendWorkersQuery (every worker key's tree size) and
// AppendPingQuery; replies carry the overlaps and tree sizes per worker key,
// or an error. Requests and replies start with a version byte and a flags
// field: FlagTiers asks for, and marks, host and disk blocks after each
// overlap; unknown versions and flags are errors, so an older server
// refuses a newer flag instead of misreading it. FuzzDecodeQuery fuzzes the
// request decoder.
//
// Replica sync (sync.go): routers started with --router-replica-sync
// publish batches of bookings (SyncBook with worker, prompt length,
// overlap, prefill tokens and sequence hashes; SyncPrefillDone; SyncFree)
// on SyncSubject, written with a SyncWriter (no allocation once grown) and
// read with DecodeSync. The header names the router, its instance (drawn at
// start), a message number (gaps are lost messages) and a leaving flag; a
// message without items is a heartbeat. Lengths are checked against the
// bytes left before anything is allocated; FuzzDecodeSync fuzzes the
// decoder (decode, re-encode, decode again: the same message).
//
// A worker that has not sent a heartbeat for ExpiryFactor heartbeat intervals
// (default 3) is considered gone.
//
// A Registration is valid (ValidateRanks) with a worker id > 0, an http or
// https URL with a host, 1 to a bound of distinct dp ranks, a known event
// transport (zmq with a tcp://host:port endpoint), a block size, bounded
// strings and heartbeat. The Registry gives a live worker id to its URL: a
// heartbeat for it from another URL is ErrConflict (never a takeover); a new
// instance_id at the same URL is a restart (Restarted); a withdrawal must
// name the live URL and, when registered with one, the instance id
// (ErrLeaveMismatch); MaxWorkers bounds the live set (ErrFull).
// FuzzRegistration, FuzzLoad and FuzzAllWorkersBusy fuzz the JSON messages.
//
// # Disaggregated prefill/decode
//
// A registration may declare three more fields, all optional, so that a
// worker that declares none is an aggregated worker exactly as before (it
// encodes to the same JSON, and the Registry treats it the same):
//
//   - role: "prefill", "decode" or "both" (RolePrefill, RoleDecode, RoleBoth;
//     absent: both). A prefill worker computes prompts' KV caches for
//     decode workers; a decode worker pulls them and generates.
//   - pd_protocol: "vllm-nixl" (absent: the default) or "sglang"
//     (ProtocolVLLMNIXL, ProtocolSGLang): how the two legs of a request are
//     sent, as vLLM's NIXL example proxy or SGLang's mini_lb do it.
//   - bootstrap_port: an SGLang worker's --disaggregation-bootstrap-port,
//     in [1, 65535], refused with any other protocol (a vLLM worker has no
//     such port, and the field there betrays a missing pd_protocol). It is
//     not required for an SGLang prefill worker: SGLang's mini_lb makes
//     --prefill-bootstrap-ports optional and then sends bootstrap_port
//     null, which the engine replaces by its own setting (8998,
//     SGLangDefaultBootstrapPort, unless changed).
//
// Values are matched exactly (lower case, as the engines spell them);
// anything else is refused with an error naming the field, and
// FuzzRegistration restates these rules. RoleOrDefault and
// ProtocolOrDefault resolve the defaults. A change of any of the three is a
// change of registration (Updated), so a router moves the worker between
// pools. The fields cost nothing on a hot path: they are read when a
// registration arrives, not per request.
package plane
