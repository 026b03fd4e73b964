// The prompt's logprobs through the `openai` npm client against
// `floe local --builtin tiny` (--benchmark-forced-decoding):
//   - vLLM's prompt_logprobs: null for the first token, then each prompt
//     token with its logprob, rank and top alternatives; each equals what
//     decoding gives the same token after the same prefix (the request for
//     prompt[0..j) with forced_output_ids [prompt[j]] and logprobs): two
//     code paths (every prefill row vs one decode row), within 1e-3, and
//     rank 1 exactly where decoding's top alternative is that token;
//   - echo with logprobs on completions: the prompt's tokens first in
//     `logprobs` (token_logprobs[0] null), whole and streamed alike;
//   - chat: `prompt_logprobs` at the top of the response;
//   - prompt_logprobs above 20 is a 400 naming it.
// Exits 1 on any failed check, printing what failed.
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';
import path from 'node:path';
import { checks, sourceDir, startFloeLocal } from './floe_local.mjs';

const require = createRequire(path.join(sourceDir, 'third_party/npm/package.json'));
const OpenAI = require('openai');

const checked = checks();
const check = checked.check;

const cluster = await startFloeLocal(['--builtin', 'tiny', '--workers', '1', '--http-port', '0', '--speculative', 'off',
  '--benchmark-forced-decoding']);
try {
  const client = new OpenAI({ baseURL: `http://${cluster.http}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
  const model = (await client.models.list()).data[0].id;
  const ids = (await (await fetch(`http://${cluster.http}/tokenize`, { method: 'POST',
    body: JSON.stringify({ prompt: 'The quick brown fox jumps over the lazy dog near the river bank' }) })).json()).tokens;

  await check('prompt_logprobs: each equals decoding the same token after the same prefix', async () => {
    const r = await client.completions.create({ model, prompt: ids, max_tokens: 1, prompt_logprobs: 2 });
    const prompt = r.choices[0].prompt_logprobs;
    assert.equal(prompt.length, ids.length);
    assert.equal(prompt[0], null);
    let worst = 0;
    for (let j = 1; j < ids.length; ++j) {
      const entry = prompt[j][String(ids[j])];
      assert.ok(entry, `position ${j}: token ${ids[j]} missing`);
      assert.ok(Object.keys(prompt[j]).length >= 2 && Object.keys(prompt[j]).length <= 3);
      const ref = await client.completions.create({ model, prompt: ids.slice(0, j), max_tokens: 1, logprobs: 2,
        forced_output_ids: [ids[j]], return_token_ids: true });
      assert.deepEqual(ref.choices[0].token_ids, [ids[j]]);
      const logprob = ref.choices[0].logprobs.token_logprobs[0];
      worst = Math.max(worst, Math.abs(logprob - entry.logprob));
      const top = Object.entries(ref.choices[0].logprobs.top_logprobs[0]).sort((a, b) => b[1] - a[1]);
      assert.equal(entry.rank === 1, top[0][1] <= logprob + 1e-6, `position ${j}: rank ${entry.rank}`);
      assert.equal(entry.decoded_token, ref.choices[0].logprobs.tokens[0]);
    }
    assert.ok(worst < 1e-3, `largest difference ${worst}`);
    console.log(`     ${ids.length - 1} prompt positions, largest |prefill - decode| logprob difference ${worst.toExponential(2)}`);
  });

  await check('echo with logprobs: the prompt tokens first, whole and streamed', async () => {
    const body = { model, prompt: ids, max_tokens: 3, temperature: 0, ignore_eos: true, echo: true, logprobs: 1 };
    const whole = await client.completions.create(body);
    const lp = whole.choices[0].logprobs;
    assert.equal(lp.tokens.length, ids.length + 3);
    assert.equal(lp.token_logprobs[0], null);
    assert.equal(lp.top_logprobs[0], null);
    assert.ok(lp.token_logprobs.slice(1).every((x) => typeof x === 'number' && x <= 0));
    assert.equal(lp.tokens.join(''), whole.choices[0].text);
    const plain = await client.completions.create({ model, prompt: ids, max_tokens: 1, prompt_logprobs: 0 });
    for (let j = 1; j < ids.length; ++j)
      assert.ok(Math.abs(lp.token_logprobs[j] - plain.choices[0].prompt_logprobs[j][String(ids[j])].logprob) < 1e-6);
    const stream = await client.completions.create({ ...body, stream: true });
    const tokens = [], logprobs = [];
    for await (const chunk of stream) {
      const c = chunk.choices[0];
      if (!c?.logprobs) continue;
      tokens.push(...c.logprobs.tokens);
      logprobs.push(...c.logprobs.token_logprobs);
    }
    assert.deepEqual(tokens, lp.tokens);
    assert.deepEqual(logprobs, lp.token_logprobs);
  });

  await check('chat: prompt_logprobs at the top of the response', async () => {
    const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Hi there' }],
      max_tokens: 1, prompt_logprobs: 1 });
    assert.equal(r.prompt_logprobs.length, r.usage.prompt_tokens);
    assert.equal(r.prompt_logprobs[0], null);
    assert.ok(r.prompt_logprobs.slice(1).every((e) => Object.values(e).some((x) => x.rank >= 1)));
  });

  await check('prompt_logprobs above 20 is refused naming it', async () => {
    await assert.rejects(client.completions.create({ model, prompt: 'x', prompt_logprobs: 21 }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'prompt_logprobs');
  });
} catch (e) {
  checked.failed = true;
  console.log(`FAIL setup: ${e.stack || e}`);
} finally {
  await cluster.stop();
}
process.exit(checked.failed ? 1 : 0);
