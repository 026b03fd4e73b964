// POST /v1/responses through the official `openai` npm client against
// `floe local --builtin tiny` (hermes tool calls; the model's text set by
// forced_output_ids where a check needs a given output):
//   - text input, whole and streamed: the stream's events come in OpenAI's
//     order (created, in_progress, item and part added, deltas, done events,
//     completed) with rising sequence numbers, and the deltas add up to the
//     whole response's output_text; max_output_tokens gives "incomplete";
//   - function tools: a call comes back as a function_call item (name,
//     call_id, arguments), whole and streamed (argument deltas add up);
//   - a history of items (instructions, a function_call, its
//     function_call_output) renders the prompt the equivalent chat messages
//     render: usage.input_tokens equals /tokenize's count of those messages;
//   - previous_response_id, store: true and built-in tools are refused by name;
//   - text.format json_schema: the output parses and ajv validates it.
// Exits 1 on any failed check, printing what failed.
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';
import path from 'node:path';
import { checks, sourceDir, startFloeLocal } from './floe_local.mjs';

const require = createRequire(path.join(sourceDir, 'third_party/npm/package.json'));
const OpenAI = require('openai');
const Ajv2020 = require('ajv/dist/2020').default;

const EOT = 128009;  // <|eot_id|>
const WEATHER = {
  type: 'function', name: 'get_weather', description: 'Weather in a city', strict: true,
  parameters: { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Tokyo'] } },
    required: ['city'], additionalProperties: false },
};

const checked = checks();
const check = checked.check;

// The whole response and the same request streamed; the stream's events
// must rebuild the whole response's output.
async function wholeAndStreamed(client, request) {
  const whole = await client.responses.create(request);
  const stream = await client.responses.create({ ...request, stream: true });
  const events = [];
  for await (const e of stream) events.push(e);
  const types = events.map((e) => e.type);
  assert.equal(types[0], 'response.created');
  assert.equal(types[1], 'response.in_progress');
  assert.ok(['response.completed', 'response.incomplete'].includes(types.at(-1)), types.join(','));
  events.forEach((e, i) => assert.equal(e.sequence_number, i, 'sequence numbers'));
  const text = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
  assert.equal(text, whole.output_text, 'streamed text');
  const args = {};
  for (const e of events)
    if (e.type === 'response.function_call_arguments.delta') args[e.output_index] = (args[e.output_index] ?? '') + e.delta;
  const final = events.at(-1).response;
  assert.equal(final.status, whole.status);
  assert.equal(final.output.length, whole.output.length, 'output items');
  whole.output.forEach((item, i) => {
    assert.equal(final.output[i].type, item.type);
    if (item.type === 'function_call') {
      assert.equal(final.output[i].name, item.name);
      assert.equal(args[i] ?? '', item.arguments, 'streamed arguments');
      assert.equal(final.output[i].arguments, item.arguments);
    }
  });
  for (const t of ['response.output_item.added', 'response.output_item.done'])
    assert.equal(types.filter((x) => x === t).length, whole.output.length, t);
  return whole;
}

const cluster = await startFloeLocal(['--builtin', 'tiny', '--workers', '1', '--http-port', '0',
  '--benchmark-forced-decoding', '--speculative', 'off', '--tool-call-parser', 'hermes']);
try {
  const base = `http://${cluster.http}`;
  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
  const model = (await client.models.list()).data[0].id;
  const tokenize = async (body) => {
    const r = await fetch(`${base}/tokenize`, { method: 'POST', body: JSON.stringify(body) });
    const out = await r.json();
    assert.equal(r.status, 200, JSON.stringify(out));
    return out;
  };
  const forced = async (text) => [...(await tokenize({ prompt: text, add_special_tokens: false })).tokens, EOT];

  await check('text input: whole and streamed, events in order, deltas add up', async () => {
    const r = await wholeAndStreamed(client, { model, input: 'Say hello.', max_output_tokens: 12, temperature: 0 });
    assert.match(r.id, /^resp_/);
    assert.equal(r.object, 'response');
    assert.equal(r.output[0].type, 'message');
    assert.equal(r.output[0].role, 'assistant');
    assert.ok(r.output_text.length > 0);
    assert.equal(r.usage.output_tokens, 12);
    assert.equal(r.usage.total_tokens, r.usage.input_tokens + 12);
    assert.equal(r.status, 'incomplete');
    assert.equal(r.incomplete_details.reason, 'max_output_tokens');
    const done = await client.responses.create({ model, input: 'Hi', forced_output_ids: await forced('Hello there.') });
    assert.equal(done.status, 'completed');
    assert.equal(done.output_text, 'Hello there.');
  });

  await check('function tools: a call as a function_call item, whole and streamed', async () => {
    const text = 'Checking.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Tokyo"}}\n</tool_call>';
    const r = await wholeAndStreamed(client, { model, input: 'Weather in Tokyo?', tools: [WEATHER],
      forced_output_ids: await forced(text) });
    assert.equal(r.status, 'completed');
    assert.deepEqual(r.output.map((i) => i.type), ['message', 'function_call']);
    assert.equal(r.output_text, 'Checking.');
    const call = r.output[1];
    assert.equal(call.name, 'get_weather');
    assert.match(call.call_id, /^call_/);
    assert.deepEqual(JSON.parse(call.arguments), { city: 'Tokyo' });
  });

  await check('a history of items renders as the equivalent chat messages', async () => {
    const input = [
      { role: 'user', content: 'Weather in Paris?' },
      { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city": "Paris"}' },
      { type: 'function_call_output', call_id: 'call_1', output: 'sunny' },
      { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'And so?' }] },
    ];
    const r = await client.responses.create({ model, instructions: 'Be brief.', input, tools: [WEATHER],
      max_output_tokens: 4 });
    const messages = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
        function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: 'sunny' },
      { role: 'user', content: 'And so?' },
    ];
    const chatTools = [{ type: 'function', function: { name: WEATHER.name, description: WEATHER.description,
      parameters: WEATHER.parameters, strict: true } }];
    const want = await tokenize({ model, messages, tools: chatTools, add_generation_prompt: true });
    assert.equal(r.usage.input_tokens, want.count);
    assert.equal(r.instructions, 'Be brief.');
  });

  await check('refused by name: previous_response_id, store true, built-in tools, unknown fields', async () => {
    const refused = async (body, param) => {
      const r = await fetch(`${base}/v1/responses`, { method: 'POST', body: JSON.stringify({ model, input: 'x', ...body }) });
      const out = await r.json();
      assert.equal(r.status, 400, JSON.stringify(out));
      assert.equal(out.error.param, param, JSON.stringify(out));
    };
    await refused({ previous_response_id: 'resp_1' }, 'previous_response_id');
    await refused({ store: true }, 'store');
    await refused({ tools: [{ type: 'web_search' }] }, 'tools[0].type');
    await refused({ max_output_tokens: -1 }, 'max_output_tokens');
    await refused({ inptu: 'typo' }, 'inptu');
    const ok = await fetch(`${base}/v1/responses`, { method: 'POST',
      body: JSON.stringify({ model, input: 'x', store: false, metadata: { a: '1' }, include: [], truncation: 'disabled',
        max_output_tokens: 2 }) });
    assert.equal(ok.status, 200);
  });

  await check('text.format json_schema: ajv validates the output', async () => {
    const schema = { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Lima'] },
      days: { type: 'integer', minimum: 1, maximum: 5 } }, required: ['city', 'days'], additionalProperties: false };
    const validate = new Ajv2020({ strict: false }).compile(schema);
    for (const seed of [1, 2]) {
      const r = await client.responses.create({ model, input: 'Plan a trip.', temperature: 1, seed,
        max_output_tokens: 200, text: { format: { type: 'json_schema', name: 'trip', schema, strict: true } } });
      assert.equal(r.status, 'completed');
      assert.ok(validate(JSON.parse(r.output_text)), JSON.stringify(validate.errors));
    }
  });
} catch (e) {
  checked.failed = true;
  console.log(`FAIL setup: ${e.stack || e}`);
} finally {
  await cluster.stop();
}
process.exit(checked.failed ? 1 : 0);
