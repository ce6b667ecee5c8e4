// Package promtext provides Prometheus text exposition (format 0.0.4) that
// passes `promtool check metrics`: a Registry of metric families (name, type,
// HELP text) whose Write runs sample writers (a metrics.Set, scrape-time
// writers using metrics.WriteCounterUint64 and friends, the Go runtime and
// process metrics) into a scratch buffer, groups their sample lines by family
// and writes each family once, contiguous, after one # HELP and one # TYPE
// line. Check is the pure-Go verifier of that property (plus histogram
// bucket sanity), used by the tests of every package that exposes metrics;
// promtexttest runs promtool itself. Histograms with le buckets come from
// internal/promhist.
//
// Families are declared next to the code that writes them (router/metrics.go,
// shard/metrics.go, ingest/metrics.go, bench/mock/http.go, and
// ProcessFamilies here) and combined by NewRegistry, which panics on a
// duplicate. A sample of an undeclared family is still written, under
// UnregisteredHelp and an inferred type, and Check reports it with where to
// declare it, so adding a counter without its HELP text fails the tests of the
// package that exposes it.
//
// Write allocates little per scrape (its buffers are pooled) and never runs on
// a hot path: counters are bumped by their owners, Write only reads.
package promtext
