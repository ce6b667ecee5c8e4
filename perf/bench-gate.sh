#!/usr/bin/env bash
# bench-gate.sh BASE [MARGIN]
# bench-gate.sh --files OLD.txt NEW.txt [MARGIN]
# The regression gate for hot-path changes (make bench-gate): runs the gated
# benchmarks of BASE (a git revision) and of the work tree interleaved in one
# run (perf/bench-compare.sh, BENCHTIME and COUNT from the environment), then
# exits 1 if any gated metric is worse by more than MARGIN (default 0.05) with
# benchstat's p < 0.05, naming each (perf/benchgate). With --files it judges
# two existing benchmark outputs instead. Not for CI: these machines are too
# noisy to gate every commit on; run it before a hot-path change lands.
set -euo pipefail
top=$(git rev-parse --show-toplevel)
cd "$top"
# The gated set: index Match and Apply (MatchShared: an answer naming
# most of the fleet), lookup from tokens through the shards, the
# scheduler's Decide, the /route handler, NATS ingest, and the index
# replays (TraceReplay: the Mooncake trace; SharedPrefixReplay: the
# shared-prefix workload; both at 256 and 7,000 workers, blockops/s).
GATE_BENCH=${GATE_BENCH:-'^Benchmark(Match|MatchShared|Apply|IndexMatch|IndexApply|Decide|Route|NATSIngest|TraceReplay|SharedPrefixReplay)$'}
GATE_PKGS=${GATE_PKGS:-"./radix ./shard ./sched ./router ./ingest ./bench/indexbench"}
if [ "${1:-}" = --files ]; then
  old=$2 new=$3 margin=${4:-0.05}
else
  base=${1:?usage: bench-gate.sh BASE [MARGIN] | bench-gate.sh --files OLD NEW [MARGIN]}
  margin=${2:-0.05}
  # shellcheck disable=SC2086 # GATE_PKGS is a list
  perf/bench-compare.sh "$base" "$GATE_BENCH" "${BENCHTIME:-100ms}" "${COUNT:-10}" $GATE_PKGS
  old=$top/out/compare/old.txt new=$top/out/compare/new.txt
fi
go tool benchstat -format csv old="$old" new="$new" 2>/dev/null | go run ./perf/benchgate -margin "$margin"
