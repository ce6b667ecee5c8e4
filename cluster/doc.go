// Package cluster provides the end-to-end tests of kvroute's scale-out
// topology and holds no code: its tests run the topology in one process,
// on real parts: a 3-node NATS cluster
// (in-process nats-server/v2 nodes on loopback, internal/natstest), the
// standalone indexer (indexer.Service, `kvroute indexer`), router replicas
// (router.Service, `kvroute serve`) with --router-replica-sync and
// --use-remote-indexer, and the simulated fleet (bench/mock). It sits with
// cmd at the top of the import ranks (internal/layout), as the only place
// besides the binary that imports both services.
//
// TestClusterKills (make test; 4–20 s on the loaded 2-vCPU machine) and,
// with the chaos build tag, TestChaosClusterKills (make chaos, longer)
// drive traffic through the replicas, kill a replica and then the NATS
// node a surviving replica is connected to mid-traffic, and check that
//
//   - every request sent to a live replica is answered 200; only requests
//     in flight on the killed replica may fail, and each such failure is
//     counted against the requests that were in flight there;
//   - the surviving replicas drop the killed one's bookings (expiry) and end
//     with no load left once traffic stops;
//   - routing quality recovers: the hit ratio reported by the engines
//     (cached_tokens over prompt tokens) of a phase after the kills is
//     within a bound of the phase before them. Both phases are measured the
//     same way (new prefix families, the first request of each awaited in
//     the indexer's index before the rest are sent), so the bound holds on
//     a loaded machine: no wall-clock figure is asserted.
package cluster
