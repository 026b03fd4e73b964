#!/usr/bin/env bash
# The trace benchmarks of docs/speculative-decoding.md ("End to end on the
# traces"), one JSON file each under OUT (default /tmp/floe-spec-traces).
# Each run holds the machine-wide build lock (quiet timings on shared boxes).
# Usage: bench/speculation/run_traces.sh [MAX_REQUESTS] [OUT] [COST_CURVE_JSON]
set -uo pipefail
cd "$(dirname "$0")/../.."
N=${1:-60}
OUT=${2:-/tmp/floe-spec-traces}
CURVE=${3:-}
mkdir -p "$OUT"
B=build/bin/bench_trace_speculation
run() {
  local name=$1; shift
  timeout 900 flock /tmp/floe-build.lock timeout 400 "$B" --max-requests "$N" ${CURVE:+--cost-curve "$CURVE"} "$@" \
    > "$OUT/$name.json" 2> "$OUT/$name.err"
  echo "$name rc=$?" >&2
}
for t in agentic chat; do
  T=../shared/traces/dev-$t.jsonl
  # As the replay: drafts limited only by k (cost model off, no threshold).
  for p in suffix ngram; do
    for c in 1 16; do run "$t-$p-c$c-replaylike" --trace "$T" --proposer $p --concurrency $c --overhead -1 --threshold 1000; done
  done
  # Worker defaults (cost model on, threshold 32) against speculation off.
  for p in suffix ngram off; do run "$t-$p-c16-default" --trace "$T" --proposer $p --concurrency 16; done
  run "$t-suffix-c1-default" --trace "$T" --proposer suffix --concurrency 1
done
# The model's own outputs, each request asked twice (an agent re-asking).
for p in off suffix; do
  run "own-agentic-$p" --trace ../shared/traces/dev-agentic.jsonl --proposer $p --mode own --passes 2 \
    --own-max-tokens 128 --concurrency 1 --max-requests 20
done
