#!/usr/bin/env bash
# fuzz-all.sh FUZZTIME: runs every Fuzz target in the module for FUZZTIME
# each (make fuzz: 10s; make fuzz-long: 10m), one after the other, going on
# after a failure, and ends with one line per target (ok / FAIL) and a
# non-zero exit if any failed. A failing input is kept by go test under the
# package's testdata/fuzz/<target>/ (commit it with the fix: it becomes a
# seed that every `go test` runs).
#
# FUZZ_SHARD=i/n runs only every n-th target starting at the i-th (0-based),
# so n machines or cores can split make fuzz-long: FUZZ_SHARD=0/2 and
# FUZZ_SHARD=1/2 together cover every target once. FUZZ_PARALLEL sets go
# test's -parallel (default: GOMAXPROCS).
set -uo pipefail
t=${1:-10s}
shard=${FUZZ_SHARD:-0/1}
si=${shard%/*}
sn=${shard#*/}
if ! [[ $si =~ ^[0-9]+$ && $sn =~ ^[1-9][0-9]*$ ]] || ((si >= sn)); then
  echo "fuzz-all.sh: FUZZ_SHARD=$shard: want i/n with 0 <= i < n" >&2
  exit 2
fi
par=()
if [[ -n ${FUZZ_PARALLEL:-} ]]; then par=(-parallel "$FUZZ_PARALLEL"); fi
cd "$(git rev-parse --show-toplevel)"
summary=()
failed=0
k=0
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    k=$((k + 1))
    if (((k - 1) % sn != si)); then continue; fi
    echo "== $pkg $f ($t) $(date -u +%H:%M:%S)"
    if go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" "${par[@]}" "$pkg"; then
      summary+=("ok   $pkg $f")
    else
      summary+=("FAIL $pkg $f")
      failed=1
    fi
  done
done
echo
printf '%s\n' "${summary[@]}"
exit $failed
