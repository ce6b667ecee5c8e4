#!/usr/bin/env bash
# scaling.sh build DIR            build the static binaries into DIR (needs Go)
# scaling.sh run DIR [OUT]        run the scaling table from DIR (needs only
#                                 taskset; no Go, no module proxy)
# scaling.sh all                  both, here (make bench-scaling)
#
# The many-core table: BenchmarkRoute (router: POST /route end to end) at
# -cpu N, and `kvroute bench index` on the shared-prefix workload (7,000
# workers) and the Mooncake trace (256 workers) with 1..8 shards, each run
# pinned with taskset to CPUs 0..N-1. Prints one line per run with the
# throughput, the throughput per core and, for the index, block ops per
# CPU second of the process (steadier than wall time on a shared host),
# and writes the raw outputs to OUT (default DIR/out).
#
# Environment: CPUS (default "1 2", the CPU counts to run at; on a 16-core
# host "1 4 8 16"), SHARDS (default "1 2"; "1 2 4 8" there), BENCHTIME
# (BenchmarkRoute's, default 1s), SECONDS_MIN (bench index --seconds,
# default 2), REPLAYERS (default: as many as shards).
# Binaries are CGO_ENABLED=0 static builds, so DIR can be copied to a host
# with no Go toolchain: see DEVELOPERS.md, "Scaling on many cores".
set -euo pipefail
mode=${1:?usage: scaling.sh build DIR | run DIR [OUT] | all}
top=$(cd "$(dirname "$0")/.." && pwd)

build() {
  local dir=$1
  mkdir -p "$dir"
  (cd "$top" && CGO_ENABLED=0 go build -o "$dir/kvroute" ./cmd/kvroute)
  (cd "$top" && CGO_ENABLED=0 go test -c -o "$dir/router.test" ./router)
  cp "$top/bench/traces/mooncake_synthetic_trace.jsonl" "$dir/"
  cp "$0" "$dir/scaling.sh"
  echo "scaling: binaries in $dir (copy it to the host, then: $dir/scaling.sh run $dir)"
}

run() {
  local dir=$1 out=${2:-$1/out}
  mkdir -p "$out"
  local cpus=${CPUS:-"1 2"} shards=${SHARDS:-"1 2"} ncpu
  ncpu=$(nproc)
  echo "scaling: $(uname -n), $ncpu CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
  printf '%-40s %5s %14s %14s %16s\n' run cpus throughput per-core per-CPU-second
  for n in $cpus; do
    if [ "$n" -gt "$ncpu" ]; then echo "scaling: skip $n CPUs (only $ncpu)"; continue; fi
    local set="0-$((n - 1))"
    (cd "$dir" && taskset -c "$set" ./router.test -test.run '^$' -test.bench '^BenchmarkRoute$' \
      -test.benchtime "${BENCHTIME:-1s}" -test.cpu "$n" >"$out/route-cpu$n.txt" 2>"$out/route-cpu$n.err") || true
    awk -v n="$n" '/^BenchmarkRoute.*handler=route/ { for (i = 1; i < NF; i++) if ($(i+1) == "req/s") printf "%-40s %5d %12.0f/s %12.0f/s\n", $1, n, $i, $i / n }' "$out/route-cpu$n.txt"
    for s in $shards; do
      [ "$s" -le "$n" ] || continue
      local rp=${REPLAYERS:-$s}
      for w in shared 256; do
        local args=(--workers 256 --trace "$dir/mooncake_synthetic_trace.jsonl")
        [ "$w" = shared ] && args=(--shared-prefix --workers 1000 --duplicate 7)
        (cd "$dir" && taskset -c "$set" ./kvroute bench index "${args[@]}" --shards "$s" --replayers "$rp" \
          --cpus "$set" --seconds "${SECONDS_MIN:-2}" --repeat 1 --json >"$out/index-$w-cpu$n-s$s.json" 2>"$out/index-$w-cpu$n-s$s.err") || true
        tail -1 "$out/index-$w-cpu$n-s$s.json" | awk -v n="$n" -v name="index/$w/shards=$s/replayers=$rp" '
          { c = 0; if (match($0, /"block_ops_per_cpu_sec":[0-9.e+]+/)) c = substr($0, RSTART + 24, RLENGTH - 24) + 0;
            if (match($0, /"block_ops_per_sec":[0-9.e+]+/)) { v = substr($0, RSTART + 20, RLENGTH - 20) + 0;
            printf "%-40s %5d %10.2fM b/s %10.2fM b/s %12.2fM b/s\n", name, n, v / 1e6, v / 1e6 / n, c / 1e6 } }'
      done
    done
  done
}

case $mode in
  build) build "${2:?DIR}" ;;
  run) run "${2:?DIR}" "${3:-}" ;;
  all) d=$top/out/scaling; build "$d" >/dev/null; run "$d" ;;
  *) echo "usage: scaling.sh build DIR | run DIR [OUT] | all" >&2; exit 2 ;;
esac
