// Structured outputs under load (issue 37, "Measured", serving): what the
// grammar costs a serving cluster, and what it gives speculation.
//
// 1. Throughput. One `floe local --builtin tiny --speculative off` (the
//    mask's cost alone); the OpenAI HTTP API at concurrency C (closed loop:
//    C clients, each sending its next request when one ends). A json_schema
//    phase sends N requests cycling over tests/common/grammar/schemas/ at
//    temperature 1 (seeded); an unconstrained phase sends the same prompts
//    and seeds with `ignore_eos` and max_tokens equal to the token count the
//    same json_schema request produced in the warm-up phase, so both phases
//    prefill and decode the same number of tokens per request and differ
//    only in the mask. A warm-up json_schema phase first (it compiles every
//    schema once: the cache's cold cost, reported apart). Then ROUNDS rounds,
//    alternating which phase goes first (J U, U J, ...) so drift on a shared
//    host hits both. Output tokens/s = completion tokens / the phase's wall
//    time; medians over rounds and the ratio json/unconstrained (issue:
//    >= 0.95x), and each round's ratio.
// 2. Speculation on schema-heavy traffic. `floe local --builtin tiny` per
//    mode, the same json_schema traffic (one untimed pass over the corpus
//    to fill the suffix tree, then PASSES timed ones with other seeds).
//    Tokens per step = output tokens / sequence-steps; a sequence-step
//    emits one sampled token plus the draft tokens it accepted, the
//    proposer's (floe_spec_decode_num_accepted_tokens_total) and the
//    grammar's forced ones
//    (floe_structured_output_forced_draft_accepted_tokens_total), so
//    sequence-steps = Δgeneration tokens - both (worker /metrics over the
//    timed passes). Modes: speculation off, and suffix as served (the
//    grammar cuts the proposer's drafts and drafts the forced tokens), and
//    suffix without the grammar's help (--structured-output-drafts=false:
//    the proposer's drafts verified as they come, no forced tokens).
//
//   node bench/serving/structured_outputs.mjs [--rounds 3] [--requests 64] [--concurrency 16]
//     [--max-tokens 256] [--passes 3] [--out /tmp/floe-structured-outputs.json] [--only throughput|speculation]
//     [--model DIR]   (default: the built-in tiny model; e.g. a folder written by
//                      floe make-model --preset llama-3.2-1b, where the forward, not the sampler, is the step's cost)
//
// Needs a built tree (scripts/build.sh floe floe-worker floe-router
// floe-suffix-cache) and scripts/bootstrap.sh's npm packages. Prints the
// JSON it writes to --out. Figures: bench/serving/README.md.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pool, scrapeMetrics, sourceDir, startFloeLocal, sumMetric } from '../../tests/integration/floe_local.mjs';

const require = createRequire(path.join(sourceDir, 'third_party/npm/package.json'));
const OpenAI = require('openai');

function parseArgs() {
  const opts = { rounds: 3, requests: 64, concurrency: 16, 'max-tokens': 256, passes: 3,
    out: '/tmp/floe-structured-outputs.json', only: '', model: '' };
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '');
    if (!(key in opts) || i + 1 >= argv.length) {
      console.error(`usage: structured_outputs.mjs [--${Object.keys(opts).join(' V] [--')} V]`);
      process.exit(2);
    }
    opts[key] = typeof opts[key] === 'number' ? Number(argv[i + 1]) : argv[i + 1];
  }
  return opts;
}
const opts = parseArgs();

const schemaDir = path.join(sourceDir, 'tests/common/grammar/schemas');
const schemas = fs.readdirSync(schemaDir).filter((f) => f.endsWith('.json')).sort().map((f) => {
  const c = JSON.parse(fs.readFileSync(path.join(schemaDir, f), 'utf8'));
  return { name: f.replace(/\.json$/, ''), schema: c.schema, strict: c.strict === true, description: c.description };
});

// The i-th json_schema request of a phase: schema i mod |corpus|, seed from
// i (and `salt`, so passes differ), a prompt naming the schema.
function jsonRequest(i, salt = 0) {
  const s = schemas[i % schemas.length];
  return { prompt: `Write the JSON for: ${s.description}`, seed: 1000 * salt + i,
    response_format: { type: 'json_schema', json_schema: { name: s.name, schema: s.schema, strict: s.strict } } };
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

// Sends `bodies` to /v1/completions at concurrency C; tokens, wall time,
// finish reasons and each request's completion tokens.
async function phase(client, model, bodies) {
  const t0 = performance.now();
  const results = await pool(bodies, opts.concurrency, (b) =>
    client.completions.create({ model, temperature: 1, max_tokens: opts['max-tokens'], ...b }));
  const seconds = (performance.now() - t0) / 1000;
  const failed = results.filter((r) => r.error);
  if (failed.length) throw new Error(`${failed.length} requests failed, first: ${failed[0].error.message}`);
  const lengths = results.map((r) => r.value.usage.completion_tokens);
  const tokens = lengths.reduce((a, b) => a + b, 0);
  const finish = {};
  for (const r of results) finish[r.value.choices[0].finish_reason] = (finish[r.value.choices[0].finish_reason] ?? 0) + 1;
  return { requests: bodies.length, tokens, seconds, output_tok_s: tokens / seconds, finish, lengths };
}

// Each schema's first request, one at a time (max_tokens 1): the worker
// compiles the grammar and its masks then, under a wall-clock limit
// (5 s), which 16 first compiles at once on a 2-core host can pass. The
// latencies are the compile cost as a client sees it (request overhead
// is ~20 ms here).
async function compileAll(client, model) {
  const perSchema = {};
  for (const [i, s] of schemas.entries()) {
    const { seed, max_tokens, ...body } = jsonRequest(i);
    const t0 = performance.now();
    await client.completions.create({ model, ...body, max_tokens: 1 });
    perSchema[s.name] = Math.round(performance.now() - t0);
  }
  const ms = Object.values(perSchema);
  return { p50_ms: median(ms), max_ms: Math.max(...ms), per_schema_ms: perSchema };
}

async function withCluster(args, body) {
  const model = opts.model ? ['--model', opts.model] : ['--builtin', 'tiny'];
  const cluster = await startFloeLocal([...model, '--workers', '1', '--http-port', '0', ...args]);
  try {
    const client = new OpenAI({ baseURL: `http://${cluster.http}/v1`, apiKey: 'unused', maxRetries: 0,
      timeout: 600000 });
    const model = (await client.models.list()).data[0].id;
    return await body(client, model, cluster);
  } finally {
    await cluster.stop();
  }
}

async function throughput() {
  return withCluster(['--speculative', 'off'], async (client, model) => {
    const firstUse = await compileAll(client, model);
    console.error(`[so] first use (compile) per schema: p50 ${firstUse.p50_ms} ms, max ${firstUse.max_ms} ms`);
    const json = Array.from({ length: opts.requests }, (_, i) => jsonRequest(i));
    const warmup = await phase(client, model, json);
    console.error(`[so] warm-up json_schema: ${warmup.output_tok_s.toFixed(1)} tok/s (compiles ${schemas.length} schemas)`);
    // Same prompts and seeds, each as long as its json_schema twin.
    const plain = json.map((b, i) => ({ prompt: b.prompt, seed: b.seed, max_tokens: warmup.lengths[i],
      ignore_eos: true }));
    const rounds = [];
    for (let r = 0; r < opts.rounds; ++r) {
      const order = r % 2 === 0 ? ['json_schema', 'unconstrained'] : ['unconstrained', 'json_schema'];
      const round = { order };
      for (const kind of order) {
        round[kind] = await phase(client, model, kind === 'json_schema' ? json : plain);
        console.error(`[so] round ${r + 1}/${opts.rounds} ${kind}: ${round[kind].output_tok_s.toFixed(1)} tok/s ` +
          `(${round[kind].tokens} tokens in ${round[kind].seconds.toFixed(2)} s)`);
      }
      round.ratio = round.json_schema.output_tok_s / round.unconstrained.output_tok_s;
      round.json_lengths_as_warmup = round.json_schema.lengths.every((n, i) => n === warmup.lengths[i]);
      for (const kind of order) delete round[kind].lengths;
      rounds.push(round);
    }
    const json_tok_s = median(rounds.map((r) => r.json_schema.output_tok_s));
    const plain_tok_s = median(rounds.map((r) => r.unconstrained.output_tok_s));
    const { lengths, ...warm } = warmup;
    return {
      cluster: `floe local ${opts.model ? `--model ${opts.model}` : '--builtin tiny'} --workers 1 --speculative off`,
      requests_per_phase: opts.requests, concurrency: opts.concurrency, max_tokens: opts['max-tokens'],
      mean_output_tokens: lengths.reduce((a, b) => a + b, 0) / lengths.length,
      first_use_latency_sequential: firstUse,
      warmup_json_schema: warm,
      json_schema_output_tok_s_median: json_tok_s,
      unconstrained_output_tok_s_median: plain_tok_s,
      ratio_of_medians: json_tok_s / plain_tok_s,
      ratio_median_of_rounds: median(rounds.map((r) => r.ratio)),
      target_ratio: 0.95,
      rounds,
    };
  });
}

// Speculation modes: floe local flags.
const SPEC_MODES = [
  { name: 'off', args: ['--speculative', 'off'] },
  { name: 'suffix_without_grammar_drafts', args: ['--speculative', 'suffix', '--structured-output-drafts=false'] },
  { name: 'suffix', args: ['--speculative', 'suffix'] },
];

async function speculation() {
  const modes = [];
  for (const mode of SPEC_MODES) {
    modes.push(await withCluster(mode.args, async (client, model, cluster) => {
      const url = cluster.metrics['worker-0'];
      await compileAll(client, model);
      // Pass 0 fills the suffix tree, untimed.
      await phase(client, model, Array.from({ length: opts.requests }, (_, i) => jsonRequest(i, 0)));
      const before = await scrapeMetrics(url);
      const passes = [];
      for (let p = 1; p <= opts.passes; ++p) {
        passes.push(await phase(client, model, Array.from({ length: opts.requests }, (_, i) => jsonRequest(i, p))));
      }
      const after = await scrapeMetrics(url);
      const delta = (name, ...match) => sumMetric(after, name, ...match) - sumMetric(before, name, ...match);
      const generated = delta('floe_generation_tokens_total');
      // The proposer's and the grammar's forced drafts are counted apart
      // (engine_core.cc: each side is credited with what it drafted).
      const accepted = delta('floe_spec_decode_num_accepted_tokens_total');
      const drafted = delta('floe_spec_decode_num_draft_tokens_total');
      const forced = delta('floe_structured_output_forced_draft_tokens_total');
      const forcedAccepted = delta('floe_structured_output_forced_draft_accepted_tokens_total');
      const steps = generated - accepted - forcedAccepted;
      const grammarMetrics = {};
      for (const key of Object.keys(after)) {
        const base = key.split('{')[0];
        if (/^floe_(grammar|structured)/.test(base) && !(base in grammarMetrics) && !/_bucket$/.test(base)) {
          grammarMetrics[base] = delta(base);
        }
      }
      const tokens = passes.reduce((a, p) => a + p.tokens, 0);
      const seconds = passes.reduce((a, p) => a + p.seconds, 0);
      const r = {
        mode: mode.name, flags: mode.args.join(' '), timed_requests: opts.requests * opts.passes,
        output_tokens: tokens, output_tok_s: tokens / seconds,
        generation_tokens: generated, sequence_steps: steps,
        proposer_draft_tokens: drafted, proposer_accepted_tokens: accepted,
        proposer_acceptance_rate: drafted ? accepted / drafted : null,
        forced_draft_tokens: forced, forced_accepted_tokens: forcedAccepted,
        proposer_draft_tokens_cut_by_grammar: delta('floe_structured_output_draft_tokens_cut_total'),
        tokens_per_step: generated / steps,
        engine_steps: delta('floe_engine_steps_total'),
        structured_output_metrics: grammarMetrics,
        finish: passes.reduce((acc, p) => {
          for (const [k, v] of Object.entries(p.finish)) acc[k] = (acc[k] ?? 0) + v;
          return acc;
        }, {}),
      };
      console.error(`[so] speculation ${mode.name}: ${r.tokens_per_step.toFixed(3)} tokens/step ` +
        `${r.output_tok_s.toFixed(1)} tok/s, forced accepted ${forcedAccepted} of ${forced}`);
      return r;
    }));
  }
  const by = Object.fromEntries(modes.map((m) => [m.mode, m]));
  return { traffic: `json_schema over ${schemas.length} schemas, temperature 1, ${opts.passes} timed passes of ` +
    `${opts.requests} requests after one untimed, concurrency ${opts.concurrency}`,
    tokens_per_step_grammar_drafts_over_without:
      by.suffix.tokens_per_step / by.suffix_without_grammar_drafts.tokens_per_step,
    output_tok_s_grammar_drafts_over_without: by.suffix.output_tok_s / by.suffix_without_grammar_drafts.output_tok_s,
    modes };
}

const cpu = os.cpus();
const result = {
  bench: 'bench/serving/structured_outputs.mjs', date: new Date().toISOString(),
  host: `${cpu[0]?.model ?? 'unknown'} x${cpu.length}`, schemas: schemas.length,
};
if (opts.only !== 'speculation') result.throughput = await throughput();
if (opts.only !== 'throughput') result.speculation = await speculation();
fs.writeFileSync(opts.out, JSON.stringify(result, null, 2));
console.log(JSON.stringify(result, null, 2));
