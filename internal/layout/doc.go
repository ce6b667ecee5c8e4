// Package layout provides the module's structure tests and holds no code.
//
// TestImportsRunDownward checks that imports run downward only
// (docs/ARCHITECTURE.md, "Layers and layout"):
//
//	cmd, cluster → router, indexer → node → bench → shard, sched, ingest, prompt → radix → wire/* → wire
//
// with internal/* importable from anywhere, and packages of one family
// (wire/*, ingest/*, prompt/*, bench/*) free to import each other within
// their layer. Nothing under wire/ imports radix: wire describes bytes only.
// A new top-level package fails it until rank places it.
//
// TestNoHistoryWords checks that the module's text speaks of the code, not
// of the work's history: Go files (code, comments, strings, test names),
// Markdown (README.md, DEVELOPERS.md, docs/, decision records included),
// scripts and the Makefile carry no numbered sessions, issue numbers or
// their § sections, numbered fixes, or a helper or agent named as an author
// (historyWords lists the patterns; DEVELOPERS.md shows them). History
// lives in git log and in docs/decisions/, which cite commits and dates.
//
//	go test -run TestNoHistoryWords ./internal/layout/
package layout
