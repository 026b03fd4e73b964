// Tool calls through the OpenAI HTTP API, with the official `openai` npm
// client against `floe local --builtin tiny`. The model's output is set by
// the forced-decoding benchmark mode (forced_output_ids: a tool call in the
// format's own text, tokenized by POST /tokenize), so each parser meets the
// shape its models write:
//   - hermes, llama3_json (picked by `auto` from the Llama 3.1 tools
//     template's <|python_tag|>), pythonic: tool_calls whole and streamed,
//     the stream's deltas adding up to the whole response, content before a
//     call kept, finish_reason "tool_calls", parallel_tool_calls false;
//   - mistral, deepseek_v3 and gpt_oss (markers that are special tokens in
//     their models' tokenizers): calls whole and streamed, and special
//     tokens kept in the decoded text for them unless the request sets
//     skip_special_tokens;
//   - a malformed call and tool_choice "none" come back as text;
//   - tool_choice "required" and a named function, unforced: the grammar
//     makes the random-weight model write calls whose arguments validate
//     against the tool's schema (ajv).
// Exits 1 on any failed check, printing what failed.
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';
import path from 'node:path';
import { checks, sourceDir, startFloeLocal } from './floe_local.mjs';

const require = createRequire(path.join(sourceDir, 'third_party/npm/package.json'));
const OpenAI = require('openai');
const Ajv2020 = require('ajv/dist/2020').default;

const EOT = 128009;  // <|eot_id|>: the tiny model's (Llama 3.1's) end of turn
const WEATHER = {
  type: 'function',
  function: {
    name: 'get_weather', description: 'Weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Tokyo', 'Lima'] },
      days: { type: 'integer', minimum: 1, maximum: 7 } }, required: ['city'], additionalProperties: false },
  },
};
const NOW = { type: 'function', function: { name: 'now', parameters: { type: 'object', properties: {},
  additionalProperties: false } } };
const TOOLS = [WEATHER, NOW];

const checked = checks();
const check = checked.check;

async function cluster(args) {
  const c = await startFloeLocal(['--builtin', 'tiny', '--workers', '1', '--http-port', '0',
    '--benchmark-forced-decoding', '--speculative', 'off', ...args]);
  const client = new OpenAI({ baseURL: `http://${c.http}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
  const model = (await client.models.list()).data[0].id;
  const forced = async (text) => {
    const r = await fetch(`http://${c.http}/tokenize`, { method: 'POST',
      body: JSON.stringify({ prompt: text, add_special_tokens: false }) });
    const body = await r.json();
    assert.equal(r.status, 200, JSON.stringify(body));
    return [...body.tokens, EOT];
  };
  return { ...c, client, model, forced };
}

// The whole response and the stream of the same request; the stream's
// content and tool_calls deltas, added up, must equal the whole.
async function wholeAndStreamed(c, request) {
  const body = { max_tokens: 300, ...request };
  const whole = await c.client.chat.completions.create({ model: c.model, ...body });
  const stream = await c.client.chat.completions.create({ model: c.model, ...body, stream: true });
  let content = '';
  let finish = null;
  const calls = [];
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    if (choice.delta.content) content += choice.delta.content;
    for (const d of choice.delta.tool_calls ?? []) {
      if (d.id) {
        assert.equal(calls[d.index], undefined, `call ${d.index} announced twice`);
        assert.equal(d.type, 'function');
        calls[d.index] = { id: d.id, name: d.function.name, arguments: '' };
      }
      assert.ok(calls[d.index], `arguments of call ${d.index} before its id and name`);
      calls[d.index].arguments += d.function.arguments ?? '';
    }
    if (choice.finish_reason) finish = choice.finish_reason;
  }
  const message = whole.choices[0].message;
  assert.equal(content, message.content ?? '', 'streamed content');
  assert.equal(finish, whole.choices[0].finish_reason, 'streamed finish_reason');
  const wholeCalls = message.tool_calls ?? [];
  assert.equal(calls.length, wholeCalls.length, 'streamed call count');
  wholeCalls.forEach((call, i) => {
    assert.equal(calls[i].name, call.function.name);
    assert.equal(calls[i].arguments, call.function.arguments);
    assert.match(call.id, /^chatcmpl-tool-/);
  });
  return whole.choices[0];
}

const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];

try {
  const hermes = await cluster(['--tool-call-parser', 'hermes']);
  try {
    await check('hermes: text then two calls, whole and streamed', async () => {
      const text = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n' +
        '</tool_call>\n<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>';
      const choice = await wholeAndStreamed(hermes, { messages, tools: TOOLS, forced_output_ids: await hermes.forced(text) });
      assert.equal(choice.finish_reason, 'tool_calls');
      assert.equal(choice.message.content, 'Let me check.\n');
      assert.equal(choice.message.tool_calls.length, 2);
      assert.deepEqual(JSON.parse(choice.message.tool_calls[0].function.arguments), { city: 'Paris', days: 3 });
      assert.equal(choice.message.tool_calls[1].function.name, 'now');
    });
    await check('hermes: parallel_tool_calls false keeps one call', async () => {
      const text = '<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>\n<tool_call>\n{"name": "get_weather", ' +
        '"arguments": {"city": "Lima"}}\n</tool_call>';
      const choice = await wholeAndStreamed(hermes, { messages, tools: TOOLS, parallel_tool_calls: false,
        forced_output_ids: await hermes.forced(text) });
      assert.equal(choice.message.tool_calls.length, 1);
      assert.equal(choice.message.tool_calls[0].function.name, 'now');
    });
    await check('hermes: a malformed call stays text; tool_choice none parses nothing', async () => {
      // Whole responses only: a stream had announced the call by its name
      // before the bad JSON came (docs/openai-api.md).
      const bad = '<tool_call>\n{"name": "get_weather", "arguments": {"city": }\n</tool_call>';
      const choice = (await hermes.client.chat.completions.create({ model: hermes.model, messages, tools: TOOLS,
        max_tokens: 300, forced_output_ids: await hermes.forced(bad) })).choices[0];
      assert.equal(choice.finish_reason, 'stop');
      assert.equal(choice.message.content, bad);
      assert.equal(choice.message.tool_calls, undefined);
      const good = '<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>';
      const none = await wholeAndStreamed(hermes, { messages, tools: TOOLS, tool_choice: 'none',
        forced_output_ids: await hermes.forced(good) });
      assert.equal(none.message.content, good);
      assert.equal(none.message.tool_calls, undefined);
    });
    await check('tool_choice required: the grammar makes the model call a tool', async () => {
      const ajv = new Ajv2020({ strict: false });
      const validate = { get_weather: ajv.compile(WEATHER.function.parameters),
        now: ajv.compile(NOW.function.parameters) };
      const calls = [];
      for (const seed of [1, 2, 3, 4]) {
        // One call (maxItems 1): a random model adds calls until max_tokens otherwise.
        const choice = await wholeAndStreamed(hermes, { messages, tools: TOOLS, tool_choice: 'required',
          parallel_tool_calls: false, temperature: 1, seed, max_tokens: 300 });
        assert.equal(choice.finish_reason, 'tool_calls', `seed ${seed}`);
        assert.equal(choice.message.tool_calls.length, 1);
        calls.push(...choice.message.tool_calls);
      }
      // Several calls: every complete one is valid (the last may be cut).
      const many = (await hermes.client.chat.completions.create({ model: hermes.model, messages, tools: TOOLS,
        tool_choice: 'required', temperature: 1, seed: 9, max_tokens: 400 })).choices[0];
      assert.ok(many.message.tool_calls.length >= 1);
      calls.push(...many.message.tool_calls);
      {
        for (const call of calls) {
          const args = JSON.parse(call.function.arguments);
          assert.ok(validate[call.function.name], `unknown tool ${call.function.name}`);
          assert.ok(validate[call.function.name](args), `${call.function.arguments}: ${JSON.stringify(validate[call.function.name].errors)}`);
        }
      }
    });
    await check('tool_choice naming a function: its arguments, validated', async () => {
      const validate = new Ajv2020({ strict: false }).compile(WEATHER.function.parameters);
      for (const seed of [5, 6, 7]) {
        const choice = await wholeAndStreamed(hermes, { messages, tools: TOOLS, temperature: 1, seed, max_tokens: 100,
          tool_choice: { type: 'function', function: { name: 'get_weather' } } });
        assert.equal(choice.message.tool_calls.length, 1);
        assert.equal(choice.message.tool_calls[0].function.name, 'get_weather');
        const args = JSON.parse(choice.message.tool_calls[0].function.arguments);
        assert.ok(validate(args), choice.message.tool_calls[0].function.arguments);
      }
      await assert.rejects(hermes.client.chat.completions.create({ model: hermes.model, messages, tools: TOOLS,
        tool_choice: { type: 'function', function: { name: 'fly' } } }), (e) =>
        e instanceof OpenAI.BadRequestError && e.param === 'tool_choice');
    });
  } finally {
    await hermes.stop();
  }

  const llama = await cluster(['--chat-template', path.join(sourceDir, 'tests/common/jinja/templates/llama3.1-tools.jinja')]);
  try {
    await check('auto picks llama3_json from the template; a call, whole and streamed', async () => {
      const text = '{"name": "get_weather", "parameters": {"city": "Tokyo", "days": 2}}';
      const choice = await wholeAndStreamed(llama, { messages, tools: TOOLS, forced_output_ids: await llama.forced(text) });
      assert.equal(choice.finish_reason, 'tool_calls');
      assert.equal(choice.message.content, null);
      assert.deepEqual(JSON.parse(choice.message.tool_calls[0].function.arguments), { city: 'Tokyo', days: 2 });
      const prose = 'It is sunny in Tokyo.';
      const text2 = await wholeAndStreamed(llama, { messages, tools: TOOLS, forced_output_ids: await llama.forced(prose) });
      assert.equal(text2.message.content, prose);
      assert.equal(text2.finish_reason, 'stop');
    });
  } finally {
    await llama.stop();
  }

  const pythonic = await cluster(['--tool-call-parser', 'pythonic']);
  try {
    await check('pythonic: two calls with Python literals', async () => {
      const text = '[get_weather(city="Lima", days=1), now()]';
      const choice = await wholeAndStreamed(pythonic, { messages, tools: TOOLS, forced_output_ids: await pythonic.forced(text) });
      assert.equal(choice.message.tool_calls.length, 2);
      assert.deepEqual(JSON.parse(choice.message.tool_calls[0].function.arguments), { city: 'Lima', days: 1 });
      assert.deepEqual(JSON.parse(choice.message.tool_calls[1].function.arguments), {});
    });
  } finally {
    await pythonic.stop();
  }

  const mistral = await cluster(['--tool-call-parser', 'mistral']);
  try {
    await check('mistral: text then two calls, whole and streamed; special tokens kept', async () => {
      const text = 'Both.[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "now", "arguments": {}}]';
      const choice = await wholeAndStreamed(mistral, { messages, tools: TOOLS, forced_output_ids: await mistral.forced(text) });
      assert.equal(choice.finish_reason, 'tool_calls');
      assert.equal(choice.message.content, 'Both.');
      assert.deepEqual(choice.message.tool_calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)]),
        [['get_weather', { city: 'Paris' }], ['now', {}]]);
      // <|begin_of_text|> is a special token of the tiny model's tokenizer:
      // the mistral parser decodes with special tokens (the stop token that
      // ends the output aside), unless the request says.
      const BOS = 128000;
      const ids = [BOS, ...await mistral.forced('Sure.')];
      const kept = await wholeAndStreamed(mistral, { messages, tools: TOOLS, forced_output_ids: ids });
      assert.equal(kept.message.content, '<|begin_of_text|>Sure.');
      const skipped = await wholeAndStreamed(mistral, { messages, tools: TOOLS, forced_output_ids: ids,
        skip_special_tokens: true });
      assert.equal(skipped.message.content, 'Sure.');
    });
  } finally {
    await mistral.stop();
  }

  const deepseek = await cluster(['--tool-call-parser', 'deepseek_v3']);
  try {
    await check('deepseek_v3: a call in its fenced form, whole and streamed', async () => {
      const text = 'Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n' +
        '{"city": "Tokyo", "days": 3}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>';
      const choice = await wholeAndStreamed(deepseek, { messages, tools: TOOLS, forced_output_ids: await deepseek.forced(text) });
      assert.equal(choice.finish_reason, 'tool_calls');
      assert.equal(choice.message.content, 'Checking.');
      assert.equal(choice.message.tool_calls[0].function.name, 'get_weather');
      assert.deepEqual(JSON.parse(choice.message.tool_calls[0].function.arguments), { city: 'Tokyo', days: 3 });
    });
  } finally {
    await deepseek.stop();
  }

  const gptOss = await cluster(['--tool-call-parser', 'gpt_oss']);
  try {
    await check('gpt_oss: analysis hidden, a commentary call; a final answer as content', async () => {
      const text = '<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary ' +
        'to=functions.get_weather <|constrain|>json<|message|>{"city": "Lima"}<|call|>';
      const choice = await wholeAndStreamed(gptOss, { messages, tools: TOOLS, forced_output_ids: await gptOss.forced(text) });
      assert.equal(choice.finish_reason, 'tool_calls');
      assert.equal(choice.message.content, null);
      assert.deepEqual(JSON.parse(choice.message.tool_calls[0].function.arguments), { city: 'Lima' });
      const answer = '<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>Sunny in Lima.';
      const final = await wholeAndStreamed(gptOss, { messages, tools: TOOLS, forced_output_ids: await gptOss.forced(answer) });
      assert.equal(final.message.content, 'Sunny in Lima.');
      assert.equal(final.finish_reason, 'stop');
    });
  } finally {
    await gptOss.stop();
  }
} catch (e) {
  checked.failed = true;
  console.log(`FAIL setup: ${e.stack || e}`);
}
process.exit(checked.failed ? 1 : 0);
