// bench.mjs: the reference's time to encode the benchmark prompt
// (english32k.txt), to compare with `go test -bench Encode ./prompt/tokenizer/`.
//   node prompt/tokenizer/testdata/bench.mjs out/tokenizers out/tokref [iterations]
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';

const here = path.dirname(fileURLToPath(import.meta.url));
// argv: the tokenizer files (make tokenizers: DIR/NAME/tokenizer.json) and
// where the reference is installed (npm install --prefix REFDIR, make golden).
const root = process.argv[2] || 'out/tokenizers';
const refdir = process.argv[3] || 'out/tokref';
const { Tokenizer } = createRequire(path.resolve(refdir) + '/')('@anush008/tokenizers');
const iters = Number(process.argv[4] || 200);
const text = fs.readFileSync(path.join(here, 'english32k.txt'), 'utf8');
for (const name of ['qwen3', 'llama3', 'deepseek_v3', 'llama2', 'gemma3']) {
  const tok = Tokenizer.fromFile(path.join(root, name, 'tokenizer.json'));
  let n = 0;
  for (let i = 0; i < 20; i++) n = (await tok.encode(text, null, { addSpecialTokens: false })).getIds().length;
  const t0 = process.hrtime.bigint();
  const c0 = process.cpuUsage();
  for (let i = 0; i < iters; i++) await tok.encode(text, null, { addSpecialTokens: false });
  const us = Number(process.hrtime.bigint() - t0) / 1e3 / iters;
  const c = process.cpuUsage(c0);
  const cpu = (c.user + c.system) / iters;
  // cpu: the process's CPU time per op (all threads: the binding encodes on
  // libuv's pool), to compare with the Go benchmark's cpu-ns/op.
  console.log(`reference ${name}: ${text.length} bytes, ${n} tokens, ${us.toFixed(1)} µs/op, cpu ${cpu.toFixed(1)} µs/op`);
}
