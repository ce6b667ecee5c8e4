// Package plane provides kvroute's control plane on NATS: the subjects, the
// JSON messages workers and routers exchange (registration and heartbeat,
// withdrawal, load metrics, all-workers-busy), and a Registry that turns
// heartbeats into a live worker set with expiry.
//
// Subjects, for namespace ns and component comp:
//
//	namespace.{ns}.component.{comp}.kv-events         KV events, Dynamo's msgpack event plane
//	namespace.{ns}.component.{comp}.kv-events.native  KV events, kvroute's native binary batch
//	namespace.{ns}.component.{comp}.load-metrics      Load (JSON), per worker and dp rank, on change
//	namespace.{ns}.component.{comp}.workers.heartbeat Registration (JSON), at start and every heartbeat interval
//	namespace.{ns}.component.{comp}.workers.leave     Registration (JSON), once at shutdown
//	namespace.{ns}.component.{comp}.all-workers-busy  AllWorkersBusy (JSON), from routers
//
// A worker that has not sent a heartbeat for ExpiryFactor heartbeat intervals
// (default 3) is considered gone.
package plane
