// TLS and mTLS end to end, with certificates made by the openssl CLI at test
// time: `floe local` on the built-in tiny model applies --tls-* to every
// service it starts (router, worker, suffix-cache: their own calls go over
// TLS too), then real clients try it: `floe generate` over gRPC, Node's TLS
// stack over HTTPS (the OpenAI API and every /metrics), and the official
// `openai` npm client. A plaintext client is refused; under mTLS a client
// without a certificate, or with one signed by another CA, is refused. Exits non-zero on the first failed check.
import { spawn, execFileSync, spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';

const source = process.env.FLOE_SOURCE_DIR;
const binary = process.env.FLOE_BINARY_DIR;
const floe = path.join(binary, 'bin/floe');

// Child mode: the openai client in a process whose trust store holds the test
// CA (NODE_EXTRA_CA_CERTS is read at start-up only).
if (process.argv[2] === '--openai-client') {
  const require = createRequire(path.join(source, 'third_party/npm/package.json'));
  const OpenAI = require('openai');
  const client = new OpenAI({ baseURL: `https://${process.argv[3]}/v1`, apiKey: 'unused', maxRetries: 0,
    timeout: 60000 });
  const models = await client.models.list();
  const r = await client.completions.create({ model: models.data[0].id, prompt: 'Once upon a time',
    max_tokens: 8, temperature: 0, ignore_eos: true });
  process.stdout.write(JSON.stringify({ text: r.choices[0].text, tokens: r.usage.completion_tokens }));
  process.exit(0);
}

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'floe-tls-'));
const file = (name) => path.join(dir, name);
function openssl(...args) { execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] }); }
// A CA, and a certificate it signs for `cn` with the given extensions.
function makeCa(name) {
  openssl('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1',
    '-subj', `/CN=${name}`, '-keyout', file(`${name}.key`), '-out', file(`${name}.pem`));
}
function makeCert(name, ca, extensions) {
  fs.writeFileSync(file(`${name}.ext`), extensions);
  openssl('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-subj', `/CN=${name}`,
    '-keyout', file(`${name}.key`), '-out', file(`${name}.csr`));
  openssl('x509', '-req', '-in', file(`${name}.csr`), '-CA', file(`${ca}.pem`), '-CAkey', file(`${ca}.key`),
    '-CAcreateserial', '-days', '1', '-extfile', file(`${name}.ext`), '-out', file(`${name}.pem`));
}
makeCa('ca');
makeCa('rogue-ca');
// The services' certificate serves their listeners and their own calls to each other.
makeCert('server', 'ca', 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n');
makeCert('client', 'ca', 'extendedKeyUsage=clientAuth\n');
makeCert('rogue', 'rogue-ca', 'extendedKeyUsage=clientAuth\n');
// A self-signed certificate: its own CA.
openssl('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1',
  '-subj', '/CN=self', '-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost',
  '-addext', 'extendedKeyUsage=serverAuth,clientAuth', '-keyout', file('self.key'), '-out', file('self.pem'));

let failed = false;
async function check(name, body) {
  try {
    await body();
    console.log(`ok   ${name}`);
  } catch (e) {
    failed = true;
    console.log(`FAIL ${name}: ${e.stack || e}`);
  }
}

const serverTls = ['--tls-cert', file('server.pem'), '--tls-key', file('server.key'), '--tls-ca', file('ca.pem')];
function startLocal(extra, tls = serverTls) {
  const local = spawn(floe, ['local', '--builtin', 'tiny', '--workers', '1', '--port', '0', '--http-port', '0',
    ...tls, ...extra], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  local.stderr.on('data', (d) => { stderr += d; });
  const ready = new Promise((resolve, reject) => {
    let out = '';
    local.stdout.on('data', (d) => {
      out += d;
      const http = /^http listening on (\S+)$/m.exec(out);
      const grpc = /^router listening on (\S+)$/m.exec(out);
      // "metrics <service> <url>" lines come before the listening lines.
      const metrics = Object.fromEntries([...out.matchAll(/^metrics (\S+) (\S+)$/gm)].map((m) => [m[1], m[2]]));
      if (http && grpc) resolve({ http: http[1], grpc: grpc[1], metrics });
    });
    local.on('exit', (code) => reject(new Error(`floe local exited (${code}) before it was ready:\n${stderr}`)));
    setTimeout(() => reject(new Error(`floe local not ready in 300 s:\n${stderr}`)), 300000);
  });
  const stop = () => new Promise((resolve) => {
    if (local.exitCode !== null) return resolve();
    local.on('exit', resolve);
    local.kill('SIGTERM');
  });
  return { ready, stop };
}

// `floe generate` with the given TLS flags: { status, json, stderr }.
function generate(grpc, flags) {
  const r = spawnSync(floe, ['generate', '--addr', grpc, '--prompt', 'Once upon a time', '--max-tokens', '8',
    '--temperature', '0', '--ignore-eos', '--json', '--timeout-s', '20', ...flags], { encoding: 'utf8' });
  return { status: r.status, json: r.status === 0 ? JSON.parse(r.stdout) : null, stderr: r.stderr };
}

// GET over HTTPS with Node's TLS stack: the status code, or the error.
function httpsGet(address, pathname, tls) {
  const [host, port] = address.split(':');
  return new Promise((resolve) => {
    const req = https.request({ host, port, path: pathname, method: 'GET', timeout: 10000, ...tls }, (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode }));
    });
    req.on('error', (e) => resolve({ error: e.code || e.message }));
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.end();
  });
}

// Every service's /metrics URL: each must be https:// (three services).
function metricsAddresses(metrics) {
  const services = Object.keys(metrics).sort();
  assert.deepEqual(services, ['router', 'suffix-cache', 'worker-0']);
  return services.map((name) => {
    const url = new URL(metrics[name]);
    assert.equal(url.protocol, 'https:', `${name} metrics at ${metrics[name]}`);
    assert.equal(url.pathname, '/metrics');
    return { name, address: url.host };
  });
}

// Plain HTTP to a TLS port: the server must not answer it.
function plainHttpGet(address, pathname = '/v1/models') {
  const [host, port] = address.split(':');
  return new Promise((resolve) => {
    import('node:http').then(({ default: http }) => {
      const req = http.request({ host, port, path: pathname, timeout: 10000 }, (res) => {
        res.resume();
        resolve({ status: res.statusCode });
      });
      req.on('error', (e) => resolve({ error: e.code || e.message }));
      req.on('timeout', () => req.destroy(new Error('timeout')));
      req.end();
    });
  });
}

// Its own services verify each other's certificate: without a CA to do it
// with, floe local would start a cluster that never becomes ready, so it
// refuses at once, naming the flag.
await check('TLS: floe local refuses --tls-cert without --tls-ca, naming the flag', async () => {
  const r = spawnSync(floe, ['local', '--builtin', 'tiny', '--port', '0', '--tls-cert', file('server.pem'),
    '--tls-key', file('server.key')], { encoding: 'utf8', timeout: 60000 });
  assert.equal(r.status, 2, r.stderr);
  assert.match(r.stderr, /--tls-ca is required with --tls-cert/);
});
// What that message advises for a self-signed certificate works.
const selfSigned = startLocal(['--speculative', 'off'],
  ['--tls-cert', file('self.pem'), '--tls-key', file('self.key'), '--tls-ca', file('self.pem')]);
try {
  const { grpc } = await selfSigned.ready;
  await check('TLS: a self-signed certificate as its own --tls-ca serves', async () => {
    const r = generate(grpc, ['--tls-ca', file('self.pem')]);
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.json.usage.completion_tokens, 8);
  });
} catch (e) {
  failed = true;
  console.log(`FAIL self-signed cluster: ${e.stack || e}`);
} finally {
  await selfSigned.stop();
}

const ca = fs.readFileSync(file('ca.pem'));
let tlsText;
const tlsCluster = startLocal([]);
try {
  const { http, grpc, metrics } = await tlsCluster.ready;
  await check('TLS: floe generate --tls-ca is served', async () => {
    const r = generate(grpc, ['--tls-ca', file('ca.pem')]);
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.json.usage.completion_tokens, 8);
    tlsText = r.json.text;
  });
  await check('TLS: a plaintext gRPC client is refused', async () => {
    const r = generate(grpc, []);
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, /UNAVAILABLE/);
  });
  await check('TLS: a client that does not trust the CA is refused', async () => {
    const r = generate(grpc, ['--tls-ca', file('rogue-ca.pem')]);
    assert.notEqual(r.status, 0);
  });
  await check('TLS: HTTPS with the CA answers /v1/models', async () => {
    assert.deepEqual(await httpsGet(http, '/v1/models', { ca }), { status: 200 });
  });
  await check('TLS: plain HTTP to the HTTPS port gets no answer', async () => {
    const r = await plainHttpGet(http);
    assert.ok(r.error, `answered ${JSON.stringify(r)}`);
  });
  await check('TLS: every service serves /metrics over HTTPS only', async () => {
    for (const { name, address } of metricsAddresses(metrics)) {
      assert.deepEqual(await httpsGet(address, '/metrics', { ca }), { status: 200 }, name);
      const plain = await plainHttpGet(address, '/metrics');
      assert.ok(plain.error, `${name} answered plain HTTP: ${JSON.stringify(plain)}`);
      const untrusted = await httpsGet(address, '/metrics', {});
      assert.ok(untrusted.error, `${name}: a client that does not trust the CA was answered`);
    }
  });
  await check('TLS: the openai npm client over HTTPS', async () => {
    const r = spawnSync(process.execPath, [process.argv[1], '--openai-client', http], { encoding: 'utf8',
      env: { ...process.env, NODE_EXTRA_CA_CERTS: file('ca.pem') }, timeout: 120000 });
    assert.equal(r.status, 0, r.stderr);
    const out = JSON.parse(r.stdout);
    assert.equal(out.tokens, 8);
  });
} catch (e) {
  failed = true;
  console.log(`FAIL TLS cluster: ${e.stack || e}`);
} finally {
  await tlsCluster.stop();
}

const mtlsCluster = startLocal(['--tls-client-ca', file('ca.pem')]);
try {
  const { http, grpc, metrics } = await mtlsCluster.ready;
  const client = ['--tls-ca', file('ca.pem'), '--tls-cert', file('client.pem'), '--tls-key', file('client.key')];
  await check('mTLS: a client with a certificate the CA signed is served, same text as under TLS', async () => {
    const r = generate(grpc, client);
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.json.usage.completion_tokens, 8);
    assert.equal(r.json.text, tlsText);
  });
  await check('mTLS: floe bench with the client certificate completes every request and scrapes /metrics', async () => {
    const r = spawnSync(floe, ['bench', '--addr', grpc, '--num-requests', '4', '--input-len', '16', '--output-len', '4',
      '--ignore-eos', '--no-progress', '--timeout-s', '30', '--connect-timeout-s', '20', ...client,
      '--metrics', Object.values(metrics).join(',')],
    { encoding: 'utf8', timeout: 120000 });
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /completed\s+4\.00\n/);
    // Every https:// /metrics URL scraped with the client certificate.
    assert.doesNotMatch(r.stderr, /cannot scrape/);
    assert.match(r.stdout, /\[bench\] server \(/);
    const plain = spawnSync(floe, ['bench', '--addr', grpc, '--num-requests', '1', '--input-len', '16',
      '--output-len', '4', '--no-progress', '--connect-timeout-s', '3', '--timeout-s', '5'],
    { encoding: 'utf8', timeout: 60000 });
    assert.notEqual(plain.status, 0, 'a plaintext floe bench was served');
  });
  await check('mTLS: a client without a certificate is refused', async () => {
    const r = generate(grpc, ['--tls-ca', file('ca.pem')]);
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, /UNAVAILABLE/);
  });
  await check('mTLS: a client whose certificate another CA signed is refused', async () => {
    const r = generate(grpc, ['--tls-ca', file('ca.pem'), '--tls-cert', file('rogue.pem'), '--tls-key',
      file('rogue.key')]);
    assert.notEqual(r.status, 0);
  });
  await check('mTLS: a plaintext gRPC client is refused', async () => {
    assert.notEqual(generate(grpc, []).status, 0);
  });
  await check('mTLS: HTTPS needs the client certificate', async () => {
    const without = await httpsGet(http, '/v1/models', { ca });
    assert.ok(without.error, `answered without a certificate: ${JSON.stringify(without)}`);
    const rogue = await httpsGet(http, '/v1/models', { ca, cert: fs.readFileSync(file('rogue.pem')),
      key: fs.readFileSync(file('rogue.key')) });
    assert.ok(rogue.error, `answered a rogue certificate: ${JSON.stringify(rogue)}`);
    const withCert = await httpsGet(http, '/v1/models', { ca, cert: fs.readFileSync(file('client.pem')),
      key: fs.readFileSync(file('client.key')) });
    assert.deepEqual(withCert, { status: 200 });
  });
  await check('mTLS: /metrics of every service needs the client certificate', async () => {
    const cert = fs.readFileSync(file('client.pem'));
    const key = fs.readFileSync(file('client.key'));
    for (const { name, address } of metricsAddresses(metrics)) {
      const without = await httpsGet(address, '/metrics', { ca });
      assert.ok(without.error, `${name} answered a scraper without a certificate: ${JSON.stringify(without)}`);
      assert.deepEqual(await httpsGet(address, '/metrics', { ca, cert, key }), { status: 200 }, name);
    }
  });
} catch (e) {
  failed = true;
  console.log(`FAIL mTLS cluster: ${e.stack || e}`);
} finally {
  await mtlsCluster.stop();
  fs.rmSync(dir, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
