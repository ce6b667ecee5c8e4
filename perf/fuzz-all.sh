#!/usr/bin/env bash
# fuzz-all.sh FUZZTIME: runs every Fuzz target in the module for FUZZTIME
# each (make fuzz: 10s; make fuzz-long: 10m), one after the other, going on
# after a failure, and ends with one line per target (ok / FAIL) and a
# non-zero exit if any failed. A failing input is kept by go test under the
# package's testdata/fuzz/<target>/ (commit it with the fix: it becomes a
# seed that every `go test` runs).
set -uo pipefail
t=${1:-10s}
cd "$(git rev-parse --show-toplevel)"
summary=()
failed=0
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    echo "== $pkg $f ($t)"
    if go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" "$pkg"; then
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
