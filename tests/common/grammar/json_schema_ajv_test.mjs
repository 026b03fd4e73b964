// The independent validator for the JSON Schema front end's tests: ajv with
// ajv-formats ("full" formats), written by others, sharing nothing with
// common/grammar/.
//
//   node json_schema_ajv_test.mjs CASES.json
//     CASES.json is {"cases": [{"name", "schema", "accept": [text...],
//     "reject": [text...]}]}: every text must parse as JSON; each "accept"
//     document must validate against its schema, each "reject" one must not.
//     json_schema_compiler_test writes it (documents sampled from the
//     compiled grammars, and the hand-picked ones).
//   node json_schema_ajv_test.mjs DIR
//     DIR holds the schema corpus (tests/common/grammar/schemas/*.json):
//     "valid" and "policy_rejected" documents must validate, "invalid" ones
//     must not, so the hand-picked expectations themselves are checked.
//
// Schemas declaring draft-07 use ajv's draft-07 class, the rest 2020-12.
// Prints one line per failure and "ajv: N passed, M failed"; exit 1 when any
// failed, 2 on a usage error.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const source = process.env.FLOE_SOURCE_DIR || path.resolve(here, '../../..');
const require = createRequire(path.join(source, 'third_party/npm/package.json'));
let Ajv2020, AjvDraft7, addFormats;
try {
  Ajv2020 = require('ajv/dist/2020').default;
  AjvDraft7 = require('ajv').default;
  addFormats = require('ajv-formats').default;
} catch (e) {
  console.error(`ajv or ajv-formats is missing from third_party/npm (run scripts/bootstrap.sh): ${e.message}`);
  process.exit(2);
}

function makeAjv(Cls) {
  const ajv = new Cls({ strict: false, allErrors: false, validateFormats: true });
  addFormats(ajv);
  return ajv;
}
const ajv2020 = makeAjv(Ajv2020);
const ajvDraft7 = makeAjv(AjvDraft7);

function loadCases(arg) {
  if (fs.statSync(arg).isDirectory()) {
    return fs.readdirSync(arg).filter((f) => f.endsWith('.json')).sort().map((f) => {
      const c = JSON.parse(fs.readFileSync(path.join(arg, f), 'utf8'));
      const text = (docs) => (docs || []).map((d) => JSON.stringify(d));
      return { name: f, schema: c.schema, accept: [...text(c.valid), ...text(c.policy_rejected)], reject: text(c.invalid) };
    });
  }
  return JSON.parse(fs.readFileSync(arg, 'utf8')).cases;
}

if (process.argv.length !== 3) {
  console.error('usage: node json_schema_ajv_test.mjs CASES.json|SCHEMA_DIR');
  process.exit(2);
}
let passed = 0;
let failed = 0;
const fail = (msg) => {
  failed++;
  if (failed <= 50) console.log(`FAIL ${msg}`);
};
for (const c of loadCases(process.argv[2])) {
  const draft7 = typeof c.schema === 'object' && String(c.schema.$schema || '').includes('draft-07');
  let validate;
  try {
    validate = (draft7 ? ajvDraft7 : ajv2020).compile(c.schema);
  } catch (e) {
    fail(`${c.name}: ajv cannot compile the schema: ${e.message}`);
    continue;
  }
  for (const [list, want] of [[c.accept || [], true], [c.reject || [], false]]) {
    for (const text of list) {
      let doc;
      try {
        doc = JSON.parse(text);
      } catch (e) {
        fail(`${c.name}: not JSON (${e.message}): ${JSON.stringify(text).slice(0, 300)}`);
        continue;
      }
      const ok = validate(doc);
      if (ok === want) {
        passed++;
      } else {
        const why = ok ? 'validates but should not' : `does not validate: ${ajvErrors(validate)}`;
        fail(`${c.name}: ${why}: ${text.slice(0, 300)}`);
      }
    }
  }
}
console.log(`ajv: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);

function ajvErrors(validate) {
  return (validate.errors || []).map((e) => `${e.instancePath || '/'} ${e.message}`).join('; ');
}
