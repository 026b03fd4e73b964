// Builds a small SentencePiece-style BPE tokenizer.json in the layout of the
// Llama 2 / Mistral Hugging Face files (Prepend + Replace "▁" normalizer, no
// pre-tokenizer, byte_fallback with <0xXX> tokens, fuse_unk, the Replace /
// ByteFallback / Fuse / Strip decoder, a <s> template), by training a few
// hundred merges on the given texts. Deterministic.
'use strict';

const SPACE = '\u2581';

function train(texts, numMerges) {
  const wordCounts = new Map();
  const charCounts = new Map();
  for (const text of texts) {
    const normalized = SPACE + text.replace(/ /g, SPACE);
    for (const word of normalized.split(new RegExp('(?=' + SPACE + ')'))) {
      if (!word) continue;
      wordCounts.set(word, (wordCounts.get(word) || 0) + 1);
      for (const c of word) charCounts.set(c, (charCounts.get(c) || 0) + 1);
    }
  }
  // Rare characters stay out of the vocabulary: they exercise byte fallback.
  const alphabet = [...charCounts].filter(([, n]) => n >= 3).sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))
      .map(([c]) => c);
  const known = new Set(alphabet);
  const words = [...wordCounts].map(([w, n]) => ({ symbols: Array.from(w), n }));
  const merges = [];
  for (let m = 0; m < numMerges; m++) {
    const pairs = new Map();
    for (const { symbols, n } of words) {
      for (let i = 0; i + 1 < symbols.length; i++) {
        if (!known.has(symbols[i]) || !known.has(symbols[i + 1])) continue;
        const key = symbols[i] + '\u0000' + symbols[i + 1];
        pairs.set(key, (pairs.get(key) || 0) + n);
      }
    }
    let best = null, bestCount = 1;
    for (const [key, count] of pairs) {
      if (count > bestCount || (count === bestCount && best !== null && key < best)) {
        best = key;
        bestCount = count;
      }
    }
    if (best === null) break;
    const [a, b] = best.split('\u0000');
    merges.push([a, b]);
    known.add(a + b);
    for (const word of words) {
      const s = word.symbols, out = [];
      for (let i = 0; i < s.length; i++) {
        if (i + 1 < s.length && s[i] === a && s[i + 1] === b) {
          out.push(a + b);
          i++;
        } else {
          out.push(s[i]);
        }
      }
      word.symbols = out;
    }
  }
  return { alphabet, merges };
}

function makeSpStyleTokenizer(texts, numMerges) {
  const { alphabet, merges } = train(texts, numMerges);
  const vocab = { '<unk>': 0, '<s>': 1, '</s>': 2 };
  let next = 3;
  for (let b = 0; b < 256; b++) vocab['<0x' + b.toString(16).toUpperCase().padStart(2, '0') + '>'] = next++;
  for (const c of alphabet) if (!(c in vocab)) vocab[c] = next++;
  for (const [a, b] of merges) if (!((a + b) in vocab)) vocab[a + b] = next++;
  const special = (id, content) => ({ id, content, single_word: false, lstrip: false, rstrip: false,
    normalized: false, special: true });
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: [special(0, '<unk>'), special(1, '<s>'), special(2, '</s>')],
    normalizer: { type: 'Sequence', normalizers: [{ type: 'Prepend', prepend: SPACE },
      { type: 'Replace', pattern: { String: ' ' }, content: SPACE }] },
    pre_tokenizer: null,
    post_processor: { type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
      pair: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
        { SpecialToken: { id: '<s>', type_id: 1 } }, { Sequence: { id: 'B', type_id: 1 } }],
      special_tokens: { '<s>': { id: '<s>', ids: [1], tokens: ['<s>'] } } },
    decoder: { type: 'Sequence', decoders: [
      { type: 'Replace', pattern: { String: SPACE }, content: ' ' }, { type: 'ByteFallback' }, { type: 'Fuse' },
      { type: 'Strip', content: ' ', start: 1, stop: 0 }] },
    model: { type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: null,
      end_of_word_suffix: null, fuse_unk: true, byte_fallback: true, vocab,
      merges: merges.map(([a, b]) => a + ' ' + b) },
  };
}

module.exports = { makeSpStyleTokenizer };
