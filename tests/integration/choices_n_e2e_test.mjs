// OpenAI's `n` (several choices of one prompt) through the `openai` npm
// client against `floe local --builtin tiny`:
//   - seeded, each choice is reproducible and equals the n = 1 request
//     seeded seed + i (so choices differ, and batching them changes nothing);
//   - usage counts the prompt once and every choice's completion;
//   - streamed chat: each choice's deltas (by index) add up to the whole
//     response's choice, one finish per choice, one usage chunk at the end;
//   - one prefill: the worker computes the prompt once plus at most a
//     block's tail per further choice (floe_prompt_tokens_total), where n
//     separate requests would compute it n times;
//   - a stop string ending one choice leaves the others running;
//   - n above 16 is a 400 naming n.
// Exits 1 on any failed check, printing what failed.
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';
import path from 'node:path';
import { checks, scrapeMetrics, sourceDir, startFloeLocal, sumMetric } from './floe_local.mjs';

const require = createRequire(path.join(sourceDir, 'third_party/npm/package.json'));
const OpenAI = require('openai');

const checked = checks();
const check = checked.check;
const BLOCK = 16;  // floe local's KV block size

const cluster = await startFloeLocal(['--builtin', 'tiny', '--workers', '1', '--http-port', '0', '--speculative', 'off']);
try {
  const client = new OpenAI({ baseURL: `http://${cluster.http}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
  const model = (await client.models.list()).data[0].id;

  await check('seeded choices: reproducible, each equal to n = 1 seeded seed + i', async () => {
    const body = { model, prompt: 'Once upon a time', max_tokens: 8, temperature: 1, seed: 7, ignore_eos: true,
      return_token_ids: true };
    const r = await client.completions.create({ ...body, n: 4 });
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2, 3]);
    const again = await client.completions.create({ ...body, n: 4 });
    assert.deepEqual(again.choices.map((c) => c.token_ids), r.choices.map((c) => c.token_ids));
    for (let i = 0; i < 4; ++i) {
      const one = await client.completions.create({ ...body, seed: 7 + i });
      assert.deepEqual(r.choices[i].token_ids, one.choices[0].token_ids, `choice ${i}`);
      assert.equal(r.choices[i].text, one.choices[0].text);
      if (i === 0) assert.equal(r.usage.prompt_tokens, one.usage.prompt_tokens);
    }
    assert.equal(new Set(r.choices.map((c) => c.token_ids.join())).size, 4, 'choices differ');
    assert.equal(r.usage.completion_tokens, 32);
  });

  await check('streamed chat: per-index deltas add up to the whole response', async () => {
    const body = { model, messages: [{ role: 'user', content: 'Tell me a story.' }], max_tokens: 6, temperature: 1,
      seed: 3, n: 3, ignore_eos: true };
    const whole = await client.chat.completions.create(body);
    const stream = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
    const text = ['', '', ''];
    const finish = [[], [], []];
    let usage = null;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        text[c.index] += c.delta.content ?? '';
        if (c.finish_reason) finish[c.index].push(c.finish_reason);
      }
    }
    whole.choices.forEach((c, i) => {
      assert.equal(c.index, i);
      assert.equal(text[i], c.message.content, `choice ${i}`);
      assert.deepEqual(finish[i], [c.finish_reason]);
    });
    assert.equal(usage.completion_tokens, 18);
    assert.equal(usage.prompt_tokens, whole.usage.prompt_tokens);
  });

  await check('one prefill: the prompt is computed once, not n times', async () => {
    const prompt = Array.from({ length: 60 }, (_, i) => `w${i} ${(i * 7919) % 1000}`).join(' ');
    const computed = async () => sumMetric(await scrapeMetrics(cluster.metrics['worker-0']), 'floe_prompt_tokens_total');
    const before = await computed();
    const r = await client.completions.create({ model, prompt, max_tokens: 2, n: 4, ignore_eos: true });
    const used = (await computed()) - before;
    const p = r.usage.prompt_tokens;
    assert.ok(p > 8 * BLOCK, `prompt of ${p} tokens`);
    assert.ok(used >= p && used <= p + 3 * BLOCK, `computed ${used} prompt tokens for n = 4 of a ${p}-token prompt`);
    console.log(`     n = 4 over a ${p}-token prompt: ${used} prompt tokens computed (n requests: ${4 * p})`);
  });

  await check('a stop string ends one choice, the others go on', async () => {
    const base = { model, prompt: 'Count', max_tokens: 12, temperature: 1, seed: 11, ignore_eos: true };
    const free = await client.completions.create({ ...base, n: 3 });
    const stop = free.choices[1].text.slice(2, 4);
    assert.ok(stop.length > 0);
    const r = await client.completions.create({ ...base, n: 3, stop: [stop] });
    const want = free.choices.map((c) => {
      const at = c.text.indexOf(stop);
      return at < 0 ? [c.text, 'length'] : [c.text.slice(0, at), 'stop'];
    });
    assert.deepEqual(r.choices.map((c) => [c.text, c.finish_reason]), want);
  });

  await check('n above 16 is refused naming n', async () => {
    await assert.rejects(client.completions.create({ model, prompt: 'x', n: 17 }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'n');
  });
} catch (e) {
  checked.failed = true;
  console.log(`FAIL setup: ${e.stack || e}`);
} finally {
  await cluster.stop();
}
process.exit(checked.failed ? 1 : 0);
