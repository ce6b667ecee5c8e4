// golden.mjs: the reference token ids for the parity test (parity_test.go).
//
// Usage (from the repository root): make golden, which runs
//   node prompt/tokenizer/testdata/golden.mjs out/tokenizers out/tokref
// It writes prompt/tokenizer/testdata/golden.json.gz.
//
// The reference is Hugging Face tokenizers (Rust) through its Node binding,
// @anush008/tokenizers. Each corpus case is read as bytes and decoded with
// TextDecoder (invalid UTF-8 becomes U+FFFD per maximal subpart, as the Go
// encoder does), then encoded with add_special_tokens=false ("ids") and
// add_special_tokens=true ("special", omitted for the file cases).
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';

const here = path.dirname(fileURLToPath(import.meta.url));
// argv: the tokenizer files (make tokenizers: DIR/NAME/tokenizer.json) and
// where the reference is installed (npm install --prefix REFDIR, make golden).
const root = process.argv[2] || 'out/tokenizers';
const refdir = process.argv[3] || 'out/tokref';
const { Tokenizer } = createRequire(path.resolve(refdir) + '/')('@anush008/tokenizers');
export const TOKENIZERS = ['qwen3', 'llama3', 'deepseek_v3', 'llama2', 'gemma3'];

const corpus = JSON.parse(fs.readFileSync(path.join(here, 'corpus.json'), 'utf8'));
const dec = new TextDecoder('utf-8');
const texts = corpus.map((c) => {
  let b;
  if (c.file) b = fs.readFileSync(path.join(here, c.file));
  else if (c.base64 !== undefined) b = Buffer.from(c.base64, 'base64');
  else b = Buffer.from(c.text, 'utf8');
  return dec.decode(b);
});

// Metaspace pre-tokenizers (as newer Llama 2 / Mistral files have them),
// made from llama2's file: its Prepend/Replace normalizer swapped for a
// Metaspace pre-tokenizer. parity_test.go's metaspaceVariant makes the same.
const VARIANTS = {
  'llama2-metaspace-first': ['llama2', 'first', false],
  'llama2-metaspace-always-split': ['llama2', 'always', true],
};
function load(name) {
  if (!VARIANTS[name]) return Tokenizer.fromFile(path.join(root, name, 'tokenizer.json'));
  const [base, scheme, split] = VARIANTS[name];
  const j = JSON.parse(fs.readFileSync(path.join(root, base, 'tokenizer.json'), 'utf8'));
  j.normalizer = null;
  j.pre_tokenizer = { type: 'Metaspace', replacement: '\u2581', prepend_scheme: scheme, split };
  j.decoder = { type: 'Metaspace', replacement: '\u2581', prepend_scheme: scheme, split };
  return Tokenizer.fromString(JSON.stringify(j));
}

const out = { reference: '@anush008/tokenizers', tokenizers: {} };
for (const name of [...TOKENIZERS, ...Object.keys(VARIANTS)]) {
  const tok = load(name);
  const cases = {};
  for (let i = 0; i < corpus.length; i++) {
    const e = await tok.encode(texts[i], null, { addSpecialTokens: false });
    const c = { ids: Array.from(e.getIds()) };
    if (!corpus[i].file) {
      const s = await tok.encode(texts[i], null, { addSpecialTokens: true });
      c.special = Array.from(s.getIds());
    }
    cases[corpus[i].name] = c;
  }
  out.tokenizers[name] = cases;
  process.stderr.write(`${name}: ${corpus.length} cases\n`);
}
fs.writeFileSync(path.join(here, 'golden.json.gz'), zlib.gzipSync(JSON.stringify(out), { level: 9 }));
