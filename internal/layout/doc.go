// Package layout holds no code: its test checks that the module's imports
// run downward only (docs/ARCHITECTURE.md, "Layout"):
//
//	cmd → services (router, node, the indexer) → bench → shard, sched, wire/* → radix → wire
//
// with internal/* importable from anywhere, wire/* packages free to import
// each other, bench/* likewise, and router (a service) building on node.
package layout
