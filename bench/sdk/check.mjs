// check.mjs: kvroute's OpenAI surface seen through the official OpenAI Node
// SDK (npm "openai"). Not part of `make test`; see README.md here.
//
//   cd /tmp/sdk && node /path/to/kvroute/bench/sdk/check.mjs [http://127.0.0.1:18431/v1]
//
// The SDK is resolved from the current directory (where `npm i openai` ran),
// so the script can stay in the repository without a node_modules there.
import { createRequire } from 'node:module';

const require = createRequire(process.cwd() + '/');
const { default: OpenAI } = await import(require.resolve('openai'));

const baseURL = process.argv[2] ?? process.env.KVROUTE_URL ?? 'http://127.0.0.1:18431/v1';
let calls = 0; // HTTP requests the SDK made, retries included
const client = new OpenAI({
  baseURL,
  apiKey: 'unused',
  timeout: 60_000,
  fetch: (url, init) => { calls++; return fetch(url, init); },
});

let failed = 0;
function check(name, ok, detail) {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${name}: ${detail}`);
  if (!ok) failed++;
}

// step runs one check; an unexpected exception fails it, not the script.
async function step(name, fn) {
  try {
    await fn();
  } catch (e) {
    check(name, false, `${e.constructor.name}: ${e.message}`);
  }
}

// 1. The fleet's models.
const models = [];
await step('models.list', async () => {
  for await (const m of client.models.list()) models.push(m);
  check('models.list', models.length > 0 && models.every((m) => m.object === 'model' && m.owned_by === 'kvroute'),
    JSON.stringify(models));
});
const model = models[0]?.id ?? 'mock';

// 2. A chat completion.
const messages = [{ role: 'user', content: 'Say something about KV caches.' }];
await step('chat.completions.create', async () => {
  const res = await client.chat.completions.create({ model, messages, max_tokens: 8 });
  check('chat.completions.create', res.choices[0].message.content.length === 8 && res.usage.completion_tokens === 8,
    `content ${JSON.stringify(res.choices[0].message.content)}, usage ${JSON.stringify(res.usage)}`);
});

// 3. The same, streamed.
await step('chat.completions.create stream', async () => {
  const stream = await client.chat.completions.create({ model, messages, max_tokens: 8, stream: true });
  let text = '';
  let chunks = 0;
  for await (const c of stream) {
    chunks++;
    text += c.choices[0]?.delta?.content ?? '';
  }
  check('chat.completions.create stream', chunks === 8 && text.length === 8, `${chunks} chunks, text ${JSON.stringify(text)}`);
});

// 4. A model no worker serves: 404 model_not_found, not retried.
calls = 0;
try {
  await client.chat.completions.create({ model: 'no-such-model', messages, max_tokens: 1 });
  check('unknown model', false, 'no error');
} catch (e) {
  check('unknown model', e instanceof OpenAI.NotFoundError && e.status === 404 && e.code === 'model_not_found' && calls === 1,
    `${e.constructor.name} status ${e.status} code ${e.code} param ${e.param} after ${calls} request(s): ${e.message}`);
}

// 5. A prompt over --max-body-bytes (16 MiB by default): a 413 APIError at
// the first attempt, not connection resets and retries.
calls = 0;
const big = 'x'.repeat(17 << 20);
const t0 = Date.now();
try {
  await client.completions.create({ model, prompt: big, max_tokens: 1 });
  check('oversized prompt', false, 'no error');
} catch (e) {
  check('oversized prompt', e instanceof OpenAI.APIError && e.status === 413 && e.code === 'request_too_large' && calls === 1,
    `${e.constructor.name} status ${e.status} code ${e.code} after ${calls} request(s) in ${Date.now() - t0} ms: ${e.message}`);
}

console.log(failed ? `${failed} check(s) failed` : 'all checks passed');
process.exit(failed ? 1 : 0);
