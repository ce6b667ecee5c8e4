#!/usr/bin/env bash
# test-plain.sh [LOG]: the pass of `make test` built as a release is, without
# -race and without tags, over what the -race pass never builds:
#   - by name, each Test and Fuzz function of a _test.go file that the race
#     build leaves out (//go:build !race, or !race && !invariants): the
#     allocation gates and the heap accounting;
#   - whole, each package with a file left out of the race build that holds
#     no such function: a constant that changes the code (internal/cow's
#     reader handshake) or that shortens the package's tests under -race
#     (prompt/tokenizer's generic-path checks, bench/tracestream's replay of
#     the full shipped trace).
# The go tool itself decides which files each build takes (go list with and
# without -race), so a new gate is picked up without editing a list. A
# package where the selection runs nothing fails the pass, and so does a
# test that skips itself when CI=true. The verbose log is in LOG (default
# out/test-plain.log); the pass prints the package lines and any skip.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
log=${1:-out/test-plain.log}
mkdir -p "$(dirname "$log")"

# One line per package: its directory, then every file the build takes.
files() {
	"$GO" list "$@" -f '{{$d := .Dir}}{{$d}}{{range .GoFiles}} {{$d}}/{{.}}{{end}}{{range .TestGoFiles}} {{$d}}/{{.}}{{end}}{{range .XTestGoFiles}} {{$d}}/{{.}}{{end}}' ./...
}
plain=$(files)
race=$(files -race)

declare -A named whole
names=()
while read -r dir rest; do
	racefiles=" $(awk -v d="$dir" '$1 == d { $1 = ""; print }' <<<"$race") "
	for f in $rest; do
		case "$racefiles" in *" $f "*) continue ;; esac
		found=$(grep -oE '^func (Test|Fuzz)[A-Z0-9_][A-Za-z0-9_]*\((t|f) \*testing\.[TF]\)' "$f" | sed -E 's/^func ([A-Za-z0-9_]+)\(.*/\1/' || true)
		pkg=./${dir#"$PWD"/}
		if [ -z "$found" ]; then
			whole[$pkg]=1
		else
			named[$pkg]=1
			names+=($found)
		fi
	done
done <<<"$plain"
for p in "${!whole[@]}"; do unset "named[$p]"; done
if [ ${#names[@]} -eq 0 ] || [ ${#named[@]} -eq 0 ]; then
	echo "test-plain: found no test that only a build without -race takes" >&2
	exit 1
fi
run="^($(printf '%s\n' "${names[@]}" | sort -u | paste -sd'|'))\$"
named_pkgs=$(printf '%s\n' "${!named[@]}" | sort)
whole_pkgs=$(printf '%s\n' "${!whole[@]}" | sort)
echo "test-plain: ${#names[@]} tests by name in $(wc -w <<<"$named_pkgs") packages; whole: $(echo $whole_pkgs)"

rc=0
{
	"$GO" test -count=1 -timeout 10m -v -run "$run" $named_pkgs || rc=$?
	if [ -n "$whole_pkgs" ]; then
		"$GO" test -count=1 -timeout 10m -v $whole_pkgs || rc=$?
	fi
} >"$log" 2>&1 || true
grep -E '^(ok|FAIL|---  ?FAIL|--- SKIP|panic:)|^    --- (FAIL|SKIP)|no tests to run' "$log" || true
fail=0
if [ $rc -ne 0 ]; then
	# Each failing test's output (from its === RUN line), build errors, panics.
	awk '/^=== RUN   [^\/]*$/ { buf = "" } { buf = buf $0 "\n" }
		/^--- FAIL/ { printf "%s", buf; buf = "" }
		/^[^ ].*\.go:[0-9]+:[0-9]+: |^panic:/ { print }' "$log" | tail -60
	echo "test-plain: tests failed" >&2
	fail=1
fi
if grep -q 'no tests to run' "$log"; then
	echo "test-plain: a package above ran none of its selected tests" >&2
	fail=1
fi
if [ "${CI:-}" = true ] && grep -qE '^ *--- SKIP' "$log"; then
	echo "test-plain: CI=true and a test skipped" >&2
	fail=1
fi
if [ $fail -ne 0 ]; then
	echo "test-plain: FAIL (full log: $log)" >&2
	exit 1
fi
