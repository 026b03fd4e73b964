// Deterministic mixed-text corpus for the tokenizer conformance test and the
// tokenizer benchmark: prose with mixed-case contractions, code, CJK, emoji,
// whitespace runs, digit runs, accents (some decomposed), and special-token
// strings embedded in text. Same seed -> same documents, on any machine.
'use strict';

function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS = ('the of and to in is that it was for on are as with his they at be this from have or by ' +
  'one had not but what all were when we there can an your which their said if do will each about how up ' +
  'out them then she many some so these would other into has more her two like him see time could no make ' +
  'than first been its who now people my made over did down only way find use may water long little very ' +
  'after words called just where most know tokenizer throughput latency kernel batch GPU Transformer ' +
  'attention McDonald iPhone JavaScript HTTP2 UTF-8 x86_64 e.g. i.e. etc. Mr. Dr.').split(' ');
const CONTRACTIONS = ["don't", "DON'T", "Don'T", "I'm", "I'M", "you're", "You'Re", "YOU'RE", "we've", "We'VE",
  "she'll", "She'LL", "he'd", "He'D", "it's", "IT'S", "It'S", "they're", "can't", "won't", "o'clock",
  "rock'n'roll", "'s", "'T", "''", "'quoted'"];
const CJK = ['我们今天讨论分词器的实现细节', '机器学习模型需要大量的数据', '東京は日本の首都です', 'これはテストの文章です',
  'ひらがなとカタカナ', '한국어 문장도 포함됩니다', '서울특별시', '中文标点，逗号。句号！问号？', '「引用」『二重』',
  '繁體中文與简体中文混合'];
const OTHER_SCRIPTS = ['Привет, мир! Как дела?', 'Γειά σου Κόσμε', 'مرحبا بالعالم', 'שלום עולם',
  'नमस्ते दुनिया', 'สวัสดีชาวโลก', 'Xin chào thế giới', 'café naïve Ångström façade résumé',
  'cafe\u0301 nai\u0308ve A\u030angstro\u0308m', 'Straße ŉ ǅ ﬁ ﬀ', 'Ⅻ ½ ² ①②③ ٣٤٥ ४५६', 'ſ ß K Ω'];
const EMOJI = ['😀', '🦀', '👨‍👩‍👧‍👦', '👍🏽', '🇯🇵', '❤️', '✨', '🤖', '🙂🙃', '🏳️‍🌈', '😂😂😂', '🎉'];
const SPECIALS = ['<|eot_id|>', '<|begin_of_text|>', '<|start_header_id|>', '<|end_header_id|>',
  '<|im_start|>', '<|im_end|>', '<think>', '</think>', '<|endoftext|>', '<tool_call>',
  '<|reserved_special_token_17|>', '<|eot_id', '<|im_start', '<<|eot_id|>>', '<|eot_id|><|eot_id|>',
  ' <|im_end|>\n', '<|fim_prefix|>'];
const SPACES = [' ', '  ', '\t', '\n', '\r\n', '\n\n', ' \n', '\t\t', '\u00a0', '\u3000', '\u2009', '\u200b',
  '\u2028', '\u0085', '\v', '\f'];
const CODE = [
  'int main(int argc, char** argv) {\n  std::vector<int> v{1, 2, 3};\n  for (auto& x : v) x *= 2;\n  return 0;\n}\n',
  'def encode(self, text: str) -> list[int]:\n    """Encode text."""\n    if not text:\n        return []\n    return [self.vocab[t] for t in text.split()]\n',
  'const f = async (x) => { await g(x?.y ?? 0); return `${x}px`; };\n',
  '{"key": [1, 2.5e-3, null, true], "nested": {"a": "b\\n"}}\n',
  '\tif (a != b && c >= d || !e) {\n\t\tx += y << 2; // comment\n\t}\n',
  'SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;\n',
  '#include <stdio.h>\r\n#define MAX(a,b) ((a)>(b)?(a):(b))\r\n',
  '    return self._cache.get(key, default)  # noqa: E501\n\n\n',
  '$ ./configure --prefix=/usr/local && make -j$(nproc) 2>&1 | tee build.log\n',
  '<div class="row"><span id=\'x\'>&nbsp;&amp;</span></div>\n'];

function pick(rng, list) { return list[Math.floor(rng() * list.length)]; }
function int(rng, lo, hi) { return lo + Math.floor(rng() * (hi - lo + 1)); }

function fragment(rng) {
  const r = rng();
  if (r < 0.30) {
    const n = int(rng, 3, 25);
    let s = '';
    for (let i = 0; i < n; i++) {
      let w = rng() < 0.12 ? pick(rng, CONTRACTIONS) : pick(rng, WORDS);
      if (rng() < 0.1) w = w[0].toUpperCase() + w.slice(1);
      if (rng() < 0.03) w = w.toUpperCase();
      s += (i ? ' ' : '') + w;
      if (rng() < 0.08) s += pick(rng, [',', '.', ';', ':', '!', '?', '...', ' —', '!!!', '?!']);
    }
    return s + pick(rng, ['. ', '.\n', '! ', '? ', '\n\n', ' ']);
  }
  if (r < 0.45) return pick(rng, CODE);
  if (r < 0.55) {
    let s = '';
    const n = int(rng, 1, 12);
    for (let i = 0; i < n; i++) s += pick(rng, CJK);
    return s + pick(rng, ['', '\n', ' ', '。']);
  }
  if (r < 0.62) return pick(rng, OTHER_SCRIPTS) + pick(rng, [' ', '\n', '. ']);
  if (r < 0.68) {
    let s = '';
    const n = int(rng, 1, 6);
    for (let i = 0; i < n; i++) s += pick(rng, EMOJI) + (rng() < 0.5 ? ' ' : '');
    return s;
  }
  if (r < 0.76) {
    // Whitespace runs, including long ones and tab/newline mixes.
    const kind = rng();
    if (kind < 0.3) return ' '.repeat(int(rng, 1, rng() < 0.2 ? 200 : 40)) + pick(rng, WORDS);
    if (kind < 0.5) return '\t'.repeat(int(rng, 1, 8)) + pick(rng, WORDS) + '\n';
    let s = '';
    const n = int(rng, 1, 10);
    for (let i = 0; i < n; i++) s += pick(rng, SPACES);
    return s + (rng() < 0.5 ? pick(rng, WORDS) : '');
  }
  if (r < 0.82) {
    const digits = int(rng, 1, rng() < 0.2 ? 60 : 12);
    let s = '';
    for (let i = 0; i < digits; i++) s += String(int(rng, 0, 9));
    return pick(rng, ['', ' ', '$', '#', 'v', 'x']) + s + pick(rng, [' ', '.5 ', ',000 ', '%', 'px ', '\n']);
  }
  if (r < 0.88) return pick(rng, SPECIALS) + (rng() < 0.5 ? pick(rng, WORDS) : ' ');
  if (r < 0.93) {
    // Long unbroken runs (letters, base64, repeated chars) for the long-piece merge path.
    const alphabet = pick(rng, ['abcdefghijklmnopqrstuvwxyz', 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/',
      'a', '=', '-', 'ab', '字', 'é']);
    const chars = Array.from(alphabet);
    let s = '';
    const n = int(rng, 20, 400);
    for (let i = 0; i < n; i++) s += pick(rng, chars);
    return s + ' ';
  }
  return pick(rng, ['!!!', '...', '?!', '“quotes”', "'single'", '```\n', '==>', '->', '(a)', '[1]',
    '{}', '---\n', '***', '__init__', '//', '&&', '||', '~/', '@user', '#tag', '100%', '©®™']) + ' ';
}

// Documents of 200..8000 bytes until `totalBytes` UTF-8 bytes are reached.
function makeDocuments(seed, totalBytes) {
  const rng = mulberry32(seed);
  const docs = [];
  let total = 0;
  while (total < totalBytes) {
    const target = int(rng, 200, 8000);
    let doc = '';
    while (Buffer.byteLength(doc) < target) doc += fragment(rng);
    docs.push(doc);
    total += Buffer.byteLength(doc);
  }
  return docs;
}

function nodeModulesDir() {
  const path = require('path');
  const source = process.env.FLOE_SOURCE_DIR || path.resolve(__dirname, '../../..');
  return path.join(source, 'third_party/npm/node_modules');
}

module.exports = { makeDocuments, nodeModulesDir };
