// Agent frameworks against `floe local --builtin tiny` (hermes tool calls),
// each running one tool loop as its users write it: the model is made to
// call the tool (tool_choice required, through the structured-output
// engine), the framework runs the tool and sends its result back in the
// history (an assistant turn with tool_calls and null content, a tool
// message), and the model's next turn is the final answer.
//   - the OpenAI Agents SDK (@openai/agents) over chat completions: its Runner
//     resets tool_choice to auto after a call, so the second turn answers;
//   - the same loop over the SDK's default, the Responses API
//     (POST /v1/responses), whole and streamed (Runner stream: true). An
//     incomplete response (max_output_tokens reached) is an error to the
//     SDK, so here the model's text is forced (forced_output_ids, sent as
//     providerData): under tool_choice "required" it is read as the call;
//     once the Runner resets tool_choice to auto, the same text is the
//     final answer, ended by <|eot_id|>;
//   - LangChain (@langchain/openai): bindTools(tool_choice "any"), the tool
//     invoked, a second invoke with its ToolMessage; withStructuredOutput()
//     returns an object its zod schema accepts.
// The random-weight model writes nonsense text; what is checked is the
// loop: calls parsed, arguments valid, histories accepted, an answer.
// Exits 1 on any failed check.
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';
import path from 'node:path';
import { checks, sourceDir, startFloeLocal } from './floe_local.mjs';

const require = createRequire(path.join(sourceDir, 'third_party/npm/package.json'));
const agents = require('@openai/agents');
const { ChatOpenAI } = require('@langchain/openai');
const { tool: lcTool } = require('@langchain/core/tools');
const { HumanMessage } = require('@langchain/core/messages');
const { z } = require('zod');
// The OpenAI client the Agents SDK itself depends on.
const AgentsOpenAI = require(require.resolve('openai', { paths: [path.dirname(require.resolve('@openai/agents-openai'))] }));
const OpenAIClient = AgentsOpenAI.default ?? AgentsOpenAI.OpenAI ?? AgentsOpenAI;

const checked = checks();
const check = checked.check;

const cluster = await startFloeLocal(['--builtin', 'tiny', '--workers', '1', '--http-port', '0', '--speculative', 'off',
  '--tool-call-parser', 'hermes', '--benchmark-forced-decoding']);
try {
  const base = `http://${cluster.http}/v1`;
  const model = (await (await fetch(`${base}/models`)).json()).data[0].id;

  await check('OpenAI Agents SDK: tool called, result sent back, final answer', async () => {
    agents.setTracingDisabled(true);
    const client = new OpenAIClient({ baseURL: base, apiKey: 'unused', maxRetries: 0 });
    const calls = [];
    const weather = agents.tool({
      name: 'get_weather', description: 'Weather in a city',
      parameters: z.object({ city: z.enum(['Paris', 'Tokyo']) }),
      execute: async ({ city }) => {
        calls.push(city);
        return `sunny in ${city}`;
      },
    });
    const agent = new agents.Agent({
      name: 'weather', instructions: 'Answer with the weather tool.',
      model: new agents.OpenAIChatCompletionsModel(client, model), tools: [weather],
      modelSettings: { toolChoice: 'required', parallelToolCalls: false, maxTokens: 200, temperature: 1 },
    });
    const result = await agents.run(agent, 'What is the weather in Paris?', { maxTurns: 4 });
    assert.equal(calls.length, 1, `tool calls: ${JSON.stringify(calls)}`);
    assert.ok(['Paris', 'Tokyo'].includes(calls[0]));
    assert.equal(typeof result.finalOutput, 'string');
    const items = result.newItems.map((i) => i.type);
    assert.deepEqual(items.slice(0, 2), ['tool_call_item', 'tool_call_output_item'], JSON.stringify(items));
    assert.equal(items.at(-1), 'message_output_item');
  });

  for (const stream of [false, true]) {
    await check(`OpenAI Agents SDK, default Responses model${stream ? ', streamed' : ''}: tool loop`, async () => {
      agents.setTracingDisabled(true);
      agents.setDefaultOpenAIClient(new OpenAIClient({ baseURL: base, apiKey: 'unused', maxRetries: 0 }));
      agents.setOpenAIAPI('responses');
      const calls = [];
      const weather = agents.tool({
        name: 'get_weather', description: 'Weather in a city',
        parameters: z.object({ city: z.enum(['Paris', 'Tokyo']) }),
        execute: async ({ city }) => {
          calls.push(city);
          return `sunny in ${city}`;
        },
      });
      const text = '[{"name": "get_weather", "parameters": {"city": "Tokyo"}}]';
      const tokens = await (await fetch(`http://${cluster.http}/tokenize`, { method: 'POST',
        body: JSON.stringify({ prompt: text, add_special_tokens: false }) })).json();
      const agent = new agents.Agent({
        name: 'weather', instructions: 'Answer with the weather tool.', model, tools: [weather],
        modelSettings: { toolChoice: 'required', parallelToolCalls: false, maxTokens: 200, temperature: 1,
          providerData: { forced_output_ids: [...tokens.tokens, 128009] } },
      });
      const result = await agents.run(agent, 'What is the weather in Tokyo?', { maxTurns: 4, stream });
      if (stream) {
        let text = '';
        for await (const e of result.toTextStream()) text += e;
        await result.completed;
        assert.equal(text, result.finalOutput);
      }
      assert.deepEqual(calls, ['Tokyo']);
      assert.equal(result.finalOutput, text);
      const items = result.newItems.map((i) => i.type);
      assert.deepEqual(items, ['tool_call_item', 'tool_call_output_item', 'message_output_item']);
    });
  }

  await check('LangChain: bindTools(tool_choice "any"), ToolMessage back, final answer', async () => {
    const llm = new ChatOpenAI({ model, apiKey: 'unused', configuration: { baseURL: base }, temperature: 1,
      maxTokens: 200, maxRetries: 0 });
    const weather = lcTool(async ({ city }) => `sunny in ${city}`, {
      name: 'get_weather', description: 'Weather in a city', schema: z.object({ city: z.enum(['Paris', 'Tokyo']) }),
    });
    const messages = [new HumanMessage('What is the weather in Paris?')];
    const ai = await llm.bindTools([weather], { tool_choice: 'any', parallel_tool_calls: false }).invoke(messages);
    assert.equal(ai.tool_calls.length, 1, JSON.stringify(ai.tool_calls));
    assert.equal(ai.tool_calls[0].name, 'get_weather');
    assert.ok(['Paris', 'Tokyo'].includes(ai.tool_calls[0].args.city));
    messages.push(ai);
    for (const call of ai.tool_calls) messages.push(await weather.invoke(call));
    const final = await llm.bindTools([weather]).invoke(messages);
    assert.equal(typeof final.content, 'string');
    assert.ok(final.content.length > 0);
  });

  await check('LangChain: withStructuredOutput returns what its zod schema accepts', async () => {
    const llm = new ChatOpenAI({ model, apiKey: 'unused', configuration: { baseURL: base }, temperature: 1,
      maxTokens: 200, maxRetries: 0 });
    const schema = z.object({ city: z.enum(['Paris', 'Tokyo']), celsius: z.number().int().min(-40).max(50) });
    for (let i = 0; i < 3; ++i) {
      const out = await llm.withStructuredOutput(schema).invoke(`Weather report ${i}?`);
      assert.ok(schema.safeParse(out).success, JSON.stringify(out));
    }
  });
} finally {
  await cluster.stop();
}
process.exit(checked.failed ? 1 : 0);
