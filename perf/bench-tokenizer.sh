#!/usr/bin/env bash
# bench-tokenizer.sh [ROUNDS] [REFDIR]
# prompt/tokenizer against the reference (Hugging Face tokenizers, Rust, as the
# Node binding @anush008/tokenizers) on the same 32 KiB English prompt
# (prompt/tokenizer/testdata/english32k.txt), in one run: ROUNDS rounds, each
# running BenchmarkEncode (-cpu 1) and testdata/bench.mjs one after the
# other, so machine load hits both alike. Prints per tokenizer the medians of
# wall µs/call and CPU µs/call (the process's CPU time per call: the Go
# benchmark's cpu-ns/op; the binding's, all threads) and the ratios
# reference/Go, and whether both made as many tokens. Needs the tokenizer files (make tokenizers) and the
# reference installed under REFDIR (default out/tokref; `make bench-tokenizer`
# installs it as `make golden` does). Raw output: out/bench-tokenizer/.
set -euo pipefail
rounds=${1:-5}
refdir=${2:-out/tokref}
top=$(git rev-parse --show-toplevel)
cd "$top"
out=out/bench-tokenizer
rm -rf "$out" && mkdir -p "$out"
[ -f out/tokenizers/qwen3/tokenizer.json ] || { echo "tokenizer files missing: run make tokenizers" >&2; exit 1; }
[ -d "$refdir/node_modules/@anush008/tokenizers" ] || { echo "reference missing under $refdir: run make bench-tokenizer" >&2; exit 1; }
go test -c -o "$out/tokenizer.test" ./prompt/tokenizer/
names=(qwen3 llama3 deepseek_v3 llama2 gemma3)
re="Encode/($(IFS='|'; echo "${names[*]}"))\$"
for i in $(seq "$rounds"); do
  (cd prompt/tokenizer && "$top/$out/tokenizer.test" -test.run '^$' -test.bench "$re" -test.cpu 1 -test.benchtime "${BENCHTIME:-1s}" -test.count 1) >> "$out/go.txt"
  node prompt/tokenizer/testdata/bench.mjs out/tokenizers "$refdir" "${REFITERS:-20}" >> "$out/ref.txt"
done
# BenchmarkEncode/NAME  N  ns/op  MB/s  cpu-ns/op  tokens ...
# reference NAME: B bytes, T tokens, X µs/op, cpu Y µs/op
awk -v names="${names[*]}" '
function median(s,   a, n, i, j, t) {
  n = split(s, a, " ")
  for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
  return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
}
FILENAME ~ /go.txt$/ && /^BenchmarkEncode\// {
  name = $1; sub(/^BenchmarkEncode\//, "", name); sub(/-[0-9]+$/, "", name)
  for (i = 3; i < NF; i++) {
    if ($(i+1) == "ns/op") gw[name] = gw[name] " " $i / 1000
    if ($(i+1) == "cpu-ns/op") gc[name] = gc[name] " " $i / 1000
    if ($(i+1) == "tokens") gt[name] = $i
    if ($(i+1) == "allocs/op") ga[name] = $i
  }
}
FILENAME ~ /ref.txt$/ && /^reference / {
  name = $2; sub(/:$/, "", name)
  for (i = 3; i < NF; i++) {
    if ($(i+1) == "µs/op," ) rw[name] = rw[name] " " $i
    if ($i == "cpu") rc[name] = rc[name] " " $(i+1)
    if ($(i+1) == "tokens,") rt[name] = $i
  }
}
END {
  printf "%-12s %7s %7s %9s %9s %9s %9s %8s %8s %7s\n", "tokenizer", "tokens", "allocs", "go µs", "go cpu", "ref µs", "ref cpu", "wall ×", "cpu ×", "n same"
  n = split(names, ns, " ")
  for (k = 1; k <= n; k++) {
    nm = ns[k]
    if (!(nm in gw) || !(nm in rw)) continue
    a = median(gw[nm]); b = median(gc[nm]); c = median(rw[nm]); d = median(rc[nm])
    printf "%-12s %7s %7s %9.1f %9.1f %9.1f %9.1f %7.1f× %7.1f× %7s\n", nm, gt[nm], ga[nm], a, b, c, d, c / a, d / b, (gt[nm] == rt[nm] ? "yes" : "NO")
  }
}' "$out/go.txt" "$out/ref.txt" | tee "$out/table.txt"
