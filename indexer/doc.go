// Package indexer provides kvroute's standalone indexer service (`kvroute
// indexer`): a process that only ingests KV events (NATS and ZMQ, through
// the same node.Node assembly of NATS + sharded index + ingest as the
// router) and answers index queries, on NATS with the plane query protocol
// (the one `kvroute serve --use-remote-indexer` speaks, node.IndexServer)
// and on HTTP.
//
// # HTTP API
//
// The HTTP API follows Dynamo's standalone KV indexer (`dynamo-kv-indexer`,
// docs/components/router/standalone-indexer.md in ai-dynamo/dynamo), which
// follows the Mooncake KV Indexer RFC (kvcache-ai/Mooncake#1403):
//
//	POST /register     {instance_id, endpoint, model_name, block_size, tenant_id?, dp_rank?}
//	                   subscribes to the engine's ZMQ KV events (rank dp_rank)
//	POST /unregister   {instance_id, model_name, tenant_id?, dp_rank?}
//	GET  /workers      [{instance_id, model_name, tenant_id, endpoints: {"<dp_rank>": endpoint}}]
//	POST /query        {token_ids, model_name, tenant_id?, lora_name?}
//	POST /query_by_hash {block_hashes, model_name, tenant_id?}
//	GET  /dump         {"<model_name>:<tenant_id>": [event, ...]}
//	GET  /health       200 {"status":"ok"} once ready, else 503 {"status": why}:
//	                   "starting: waiting for JetStream: ...", "starting: loading
//	                   a peer's dump (--peers)", "event plane down: ..."
//	GET  /ready        the same as /health
//	GET  /metrics      Prometheus text
//
// A query answers
//
//	{"scores": {"<instance_id>": {"<dp_rank>": tokens}},
//	 "frequencies": [workers holding block 0, block 1, ...],
//	 "tree_sizes": {"<instance_id>": {"<dp_rank>": blocks}}}
//
// with scores in matched tokens (matched leading blocks × block size), as
// that API defines. The block hashes of /query_by_hash are local block
// hashes (xxh3 of a block's tokens, wire.LocalHashes), the hashes the
// router computes and /query computes from token_ids (with the LoRA seed
// of lora_name).
//
// NATS queries are not scoped by model or tenant (the router sends none):
// they answer every worker key, and the router keeps the workers its own
// table allows for the request's model.
//
// Differences from Dynamo, deliberate: the index is one sharded tree
// shared by every (model, tenant); a query's answer is restricted to the
// workers registered for its model and tenant: over HTTP, or on NATS (the
// workers' heartbeats, as the router reads them: their model, tenant
// "default"; a ZMQ publisher named there is subscribed to, and a worker
// that leaves or expires is dropped); workers known from neither (KV
// events only) match every model. That
// gives the RFC's isolation of answers without a tree per pair. block_size
// is the process's --block-size: a /register with another is rejected
// (400). /dump events are kvroute's JSON form of wire.Event (worker_id,
// dp_rank, parent_hash, blocks of {engine_hash, local_hash}, lora_name),
// not Dynamo's RouterEvent serialization; peers (--peers) read it.
//
// # Peers
//
// With --peers URL,... the indexer loads the first answering peer's /dump
// into its index at start, before it reports ready (/health) and before it
// answers NATS queries, so that a new or restarted indexer joins warm.
//
// Errors are OpenAI-style JSON bodies ({"error": {"message": ...}}) with a
// 4xx status for bad input.
package indexer
