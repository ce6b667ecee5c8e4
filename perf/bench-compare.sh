#!/usr/bin/env bash
# bench-compare.sh BASE BENCH BENCHTIME COUNT PKG...
# Builds the benchmark test binaries of BASE (a git revision) and of the work
# tree, runs them alternately COUNT times in one run (so machine noise hits both
# alike), and prints a benchstat comparison old=BASE new=work tree.
set -euo pipefail
base=$1 bench=$2 benchtime=$3 count=$4
shift 4
top=$(git rev-parse --show-toplevel)
out=$top/out/compare
rm -rf "$out" && mkdir -p "$out/old" "$out/new"
wt=$(mktemp -d)
trap 'git -C "$top" worktree remove --force "$wt" >/dev/null 2>&1 || true' EXIT
git -C "$top" worktree add --detach "$wt" "$base" >/dev/null
pkgs=()
for p in "$@"; do
  while read -r pkg; do pkgs+=("$pkg"); done < <(cd "$top" && go list "$p")
done
for pkg in "${pkgs[@]}"; do
  rel=${pkg#github.com/kvroute/kvroute}
  name=$(echo "${rel#/}" | tr / _)
  [ -n "$name" ] || name=root
  (cd "$top" && go test -c -o "$out/new/$name.test" "$pkg") || continue
  if [ -d "$wt/${rel#/}" ]; then
    (cd "$wt" && go test -c -o "$out/old/$name.test" "./${rel#/}") || true
  fi
done
: > "$out/old.txt"; : > "$out/new.txt"
for i in $(seq "$count"); do
  for bin in "$out"/new/*.test; do
    name=$(basename "$bin" .test)
    dir=$top/$(echo "$name" | tr _ /)
    [ -f "$out/old/$name.test" ] && (cd "$dir" && "$out/old/$name.test" -test.run '^$' -test.bench "$bench" -test.benchtime "$benchtime" -test.count 1 >> "$out/old.txt")
    (cd "$dir" && "$bin" -test.run '^$' -test.bench "$bench" -test.benchtime "$benchtime" -test.count 1 >> "$out/new.txt")
  done
done
cd "$top" && go tool benchstat old="$out/old.txt" new="$out/new.txt"
