// `floe local` as a child process, for Node tests and benches that drive a
// real cluster over its HTTP API.
//
//   const cluster = await startFloeLocal(['--builtin', 'tiny', '--http-port', '0']);
//   cluster.http     // "127.0.0.1:PORT" of the OpenAI API ('http listening on')
//   cluster.grpc     // the router's gRPC address ('router listening on')
//   cluster.metrics  // {"worker-0": URL, "router": URL, ...} ('metrics NAME URL')
//   await cluster.stop();
//
// startFloeLocal resolves once both listening lines are printed, and rejects
// when floe local exits first (with its stderr) or past `readyTimeoutMs`.
// stop() sends SIGTERM (floe local stops its services) and waits at most
// 20 s for the exit. The binary is $FLOE_BINARY_DIR/bin/floe, else
// build/bin/floe under $FLOE_SOURCE_DIR (or this file's tree).
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const sourceDir = process.env.FLOE_SOURCE_DIR || path.resolve(here, '../..');
export const binaryDir = process.env.FLOE_BINARY_DIR || path.join(sourceDir, 'build');

export function startFloeLocal(args, { readyTimeoutMs = 300000 } = {}) {
  const child = spawn(path.join(binaryDir, 'bin/floe'), ['local', '--port', '0', ...args],
    { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, FLOE_SOURCE_DIR: sourceDir } });
  let stderr = '';
  let out = '';
  child.stderr.on('data', (d) => { stderr = (stderr + d).slice(-20000); });
  const exited = new Promise((resolve) => child.on('exit', resolve));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 20000).unref())]);
  };
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      stop();
      reject(new Error(`floe local not ready in ${readyTimeoutMs / 1000} s:\n${stderr}`));
    }, readyTimeoutMs);
    child.stdout.on('data', (d) => {
      out += d;
      const http = /^http listening on (\S+)$/m.exec(out);
      const grpc = /^router listening on (\S+)$/m.exec(out);
      const wantHttp = args.includes('--http-port');
      if (grpc && (http || !wantHttp)) {
        clearTimeout(timer);
        const metrics = {};
        for (const m of out.matchAll(/^metrics (\S+) (\S+)$/gm)) metrics[m[1]] = m[2];
        resolve({ http: http && http[1], grpc: grpc[1], metrics, stop, stderr: () => stderr });
      }
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`floe local exited (${code}) before it was ready:\n${stderr}`));
    });
  });
}

// Named checks for a test script: check(name, body) runs one, printing
// "ok   NAME" or "FAIL NAME: why" and remembering the failure;
// checks.failed says whether any failed (the script's exit code).
export function checks() {
  const state = { failed: false };
  state.check = async (name, body) => {
    try {
      await body();
      console.log(`ok   ${name}`);
    } catch (e) {
      state.failed = true;
      console.log(`FAIL ${name}: ${e.stack || e}`);
    }
  };
  return state;
}

// Prometheus text from `url`, as {"name{labels}": value} for every sample.
export async function scrapeMetrics(url) {
  const res = await fetch(url, { signal: AbortSignal.timeout(10000) });
  if (!res.ok) throw new Error(`${url}: HTTP ${res.status}`);
  const samples = {};
  for (const line of (await res.text()).split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const cut = line.lastIndexOf(' ');
    samples[line.slice(0, cut)] = Number(line.slice(cut + 1));
  }
  return samples;
}

// The sum of every sample of metric `name` (all label sets) whose labels
// contain each of `match` (strings like 'proposer="suffix"').
export function sumMetric(samples, name, ...match) {
  let total = 0;
  for (const [key, value] of Object.entries(samples)) {
    const brace = key.indexOf('{');
    const base = brace < 0 ? key : key.slice(0, brace);
    if (base !== name) continue;
    if (match.every((m) => key.includes(m))) total += value;
  }
  return total;
}

// Runs `task(item)` over `items` with at most `limit` at once; results in
// the items' order. A task's rejection is its result's `error`.
export async function pool(items, limit, task) {
  const results = new Array(items.length);
  let next = 0;
  const runner = async () => {
    while (next < items.length) {
      const i = next++;
      try {
        results[i] = { value: await task(items[i], i) };
      } catch (error) {
        results[i] = { error };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, runner));
  return results;
}
