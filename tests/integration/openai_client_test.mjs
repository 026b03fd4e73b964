// The official `openai` npm client (nobody here wrote it) and curl against
// `floe local --http-port 0` on the built-in tiny model: completions, chat,
// streaming with usage, errors surfacing as the client's error classes, and
// raw server-sent events. Exits non-zero on the first failed check.
import { spawn, execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';
import path from 'node:path';

const source = process.env.FLOE_SOURCE_DIR;
const binary = process.env.FLOE_BINARY_DIR;
const require = createRequire(path.join(source, 'third_party/npm/package.json'));
const OpenAI = require('openai');

const local = spawn(path.join(binary, 'bin/floe'), ['local', '--builtin', 'tiny', '--workers', '1', '--port', '0',
  '--http-port', '0'], { stdio: ['ignore', 'pipe', 'pipe'] });
let stderr = '';
local.stderr.on('data', (d) => { stderr += d; });
const ready = new Promise((resolve, reject) => {
  let out = '';
  local.stdout.on('data', (d) => {
    out += d;
    const http = /^http listening on (\S+)$/m.exec(out);
    const grpc = /^router listening on (\S+)$/m.exec(out);
    if (http && grpc) resolve({ http: http[1], grpc: grpc[1] });
  });
  local.on('exit', (code) => reject(new Error(`floe local exited (${code}) before it was ready:\n${stderr}`)));
  setTimeout(() => reject(new Error('floe local not ready in 300 s')), 300000);
});

let failed = false;
async function check(name, body) {
  try {
    await body();
    console.log(`ok   ${name}`);
  } catch (e) {
    failed = true;
    console.log(`FAIL ${name}: ${e.stack || e}`);
  }
}

try {
  const { http } = await ready;
  const client = new OpenAI({ baseURL: `http://${http}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });

  let model;
  await check('models.list names the served model', async () => {
    const models = await client.models.list();
    assert.equal(models.data.length, 1);
    model = models.data[0].id;
    assert.ok(model.length > 0);
  });

  await check('completions: greedy, usage, finish_reason', async () => {
    const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 12, temperature: 0,
      ignore_eos: true });
    assert.equal(r.object, 'text_completion');
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.usage.completion_tokens, 12);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 12);
    const again = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 12,
      temperature: 0, ignore_eos: true });
    assert.equal(again.choices[0].text, r.choices[0].text);
  });

  await check('completions: streamed text equals the whole response; usage chunk last', async () => {
    const params = { model, prompt: 'The quick brown fox', max_tokens: 16, temperature: 0.7, seed: 42,
      ignore_eos: true };
    const whole = await client.completions.create(params);
    const stream = await client.completions.create({ ...params, stream: true,
      stream_options: { include_usage: true } });
    let text = '';
    let usage = null;
    for await (const chunk of stream) {
      if (chunk.choices.length) text += chunk.choices[0].text;
      if (chunk.usage) usage = chunk.usage;
    }
    assert.equal(text, whole.choices[0].text);
    assert.equal(usage.completion_tokens, 16);
  });

  await check('chat: completion and stream agree; role first', async () => {
    const messages = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Say hi 👋' }];
    const whole = await client.chat.completions.create({ model, messages, max_tokens: 10, temperature: 0,
      ignore_eos: true });
    assert.equal(whole.object, 'chat.completion');
    assert.equal(whole.choices[0].message.role, 'assistant');
    const stream = await client.chat.completions.create({ model, messages, max_tokens: 10, temperature: 0,
      ignore_eos: true, stream: true, stream_options: { include_usage: true } });
    let text = '';
    let role = null;
    let finish = null;
    let usage = null;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      if (!chunk.choices.length) continue;
      role = role ?? chunk.choices[0].delta.role;
      text += chunk.choices[0].delta.content ?? '';
      finish = chunk.choices[0].finish_reason ?? finish;
    }
    assert.equal(role, 'assistant');
    assert.equal(text, whole.choices[0].message.content);
    assert.equal(finish, 'length');
    assert.equal(usage.prompt_tokens, whole.usage.prompt_tokens);
  });

  await check('chat: logprobs with top alternatives', async () => {
    const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }],
      max_tokens: 4, temperature: 0, ignore_eos: true, logprobs: true, top_logprobs: 3 });
    const content = r.choices[0].logprobs.content;
    assert.equal(content.length, 4);
    for (const t of content) {
      assert.ok(t.logprob <= 0);
      assert.equal(t.top_logprobs.length, 3);
      assert.ok(t.top_logprobs[0].logprob >= t.logprob - 1e-5);  // greedy took the top token
    }
  });

  await check('errors surface as the client\'s classes', async () => {
    await assert.rejects(client.completions.create({ model, prompt: 'x', temperature: 9 }), (e) =>
      e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'temperature');
    await assert.rejects(client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }],
      n: 17 }), (e) => e instanceof OpenAI.BadRequestError && e.param === 'n');
    await assert.rejects(client.completions.create({ model: 'no-such-model', prompt: 'x' }), (e) =>
      e instanceof OpenAI.NotFoundError && e.code === 'model_not_found');
    await assert.rejects(client.completions.create({ model, prompt: 'x', frobnicate: 1 }), (e) =>
      e instanceof OpenAI.BadRequestError && e.param === 'frobnicate' && /unknown field/.test(e.message));
  });

  await check('models.retrieve: the served model, NotFoundError for another', async () => {
    const m = await client.models.retrieve(model);
    assert.equal(m.id, model);
    assert.equal(m.object, 'model');
    await assert.rejects(client.models.retrieve('gpt-7/turbo'), (e) =>
      e instanceof OpenAI.NotFoundError && e.code === 'model_not_found');
  });

  await check('what SDKs send by default is accepted and changes nothing', async () => {
    const base = { model, messages: [{ role: 'user', content: 'Say hi' }], max_tokens: 6, temperature: 0 };
    const plain = await client.chat.completions.create(base);
    const sdk = await client.chat.completions.create({ ...base, store: false, metadata: { run: 'r1' },
      service_tier: 'auto', prompt_cache_key: 'agent-7', safety_identifier: 'user-1', verbosity: 'low',
      reasoning_effort: 'low', parallel_tool_calls: true });
    assert.equal(sdk.choices[0].message.content, plain.choices[0].message.content);
  });

  await check('/tokenize and /detokenize in vLLM\'s shapes', async () => {
    const root = `http://${http}`;
    const post = async (p, body) => {
      const r = await fetch(root + p, { method: 'POST', body: JSON.stringify(body),
        headers: { 'content-type': 'application/json' } });
      return { status: r.status, body: await r.json() };
    };
    const t = await post('/tokenize', { model, prompt: 'Hello there' });
    assert.equal(t.status, 200);
    assert.equal(t.body.count, t.body.tokens.length);
    const c = await client.completions.create({ model, prompt: 'Hello there', max_tokens: 1 });
    assert.equal(c.usage.prompt_tokens, t.body.count);
    const d = await post('/detokenize', { model, tokens: t.body.tokens });
    assert.equal(d.status, 200);
    assert.ok(d.body.prompt.endsWith('Hello there'), d.body.prompt);
    const m = await post('/tokenize', { model, messages: [{ role: 'user', content: 'Hi' }] });
    const chat = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Hi' }],
      max_tokens: 1 });
    assert.equal(chat.usage.prompt_tokens, m.body.count);
  });

  await check('logit_bias: +100 forces its token at temperature 0', async () => {
    const forcedId = 9906;  // "Hello"
    const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 4, temperature: 0,
      logit_bias: { [forcedId]: 100 }, return_token_ids: true });
    assert.deepEqual(r.choices[0].token_ids, [forcedId, forcedId, forcedId, forcedId]);
    await assert.rejects(client.completions.create({ model, prompt: 'x', logit_bias: { 5: 101 } }), (e) =>
      e instanceof OpenAI.BadRequestError && e.param === 'logit_bias');
  });

  await check('echo: the prompt before the completion, whole and streamed', async () => {
    const prompt = 'Echo this: ';
    const plain = await client.completions.create({ model, prompt, max_tokens: 5, temperature: 0, ignore_eos: true });
    const echoed = await client.completions.create({ model, prompt, max_tokens: 5, temperature: 0, ignore_eos: true,
      echo: true });
    assert.equal(echoed.choices[0].text, prompt + plain.choices[0].text);
    const stream = await client.completions.create({ model, prompt, max_tokens: 5, temperature: 0, ignore_eos: true,
      echo: true, stream: true });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
    assert.equal(text, echoed.choices[0].text);
    const ids = await client.completions.create({ model, prompt: [9906, 11], max_tokens: 1, echo: true });
    assert.ok(ids.choices[0].text.startsWith('Hello,'), ids.choices[0].text);
  });

  await check('session_id and x-session-id are accepted', async () => {
    const r = await client.completions.create({ model, prompt: 'turn one', max_tokens: 2, session_id: 'agent-7' });
    assert.equal(r.choices.length, 1);
    const h = await client.completions.create({ model, prompt: 'turn two', max_tokens: 2 },
      { headers: { 'x-session-id': 'agent-7' } });
    assert.equal(h.choices.length, 1);
  });

  await check('curl -N: raw server-sent events end with [DONE]', async () => {
    const out = execFileSync('curl', ['-sS', '-N', `http://${http}/v1/chat/completions`, '-H',
      'Content-Type: application/json', '-d', JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }],
        max_tokens: 5, ignore_eos: true, stream: true })], { encoding: 'utf8', timeout: 60000 });
    const events = out.split('\n\n').filter((e) => e.length);
    assert.ok(events.every((e) => e.startsWith('data: ')), out);
    assert.equal(events[events.length - 1], 'data: [DONE]');
    const first = JSON.parse(events[0].slice(6));
    assert.equal(first.object, 'chat.completion.chunk');
  });
} catch (e) {
  failed = true;
  console.log(`FAIL setup: ${e.stack || e}`);
} finally {
  local.kill('SIGTERM');
  await new Promise((resolve) => { local.on('exit', resolve); setTimeout(resolve, 20000); });
}
process.exit(failed ? 1 : 0);
