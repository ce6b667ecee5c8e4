// Package layout holds no code: its test checks that the module's imports
// run downward only (docs/ARCHITECTURE.md, "Layers and layout"):
//
//	cmd, cluster → router, indexer → node → bench → shard, sched, ingest, prompt → radix → wire/* → wire
//
// with internal/* importable from anywhere, and packages of one family
// (wire/*, ingest/*, prompt/*, bench/*) free to import each other within
// their layer. Nothing under wire/ imports radix: wire describes bytes only.
package layout
