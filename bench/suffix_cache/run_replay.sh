#!/usr/bin/env bash
# Suffix Decoding replay benchmark: every preset (reference-compatible and
# Floe's default mode) plus the n-gram baseline on both dev traces, one JSON
# file with all results. Figures are reported, not asserted.
#
#   bench/suffix_cache/run_replay.sh [OUT.json] [TRACE_DIR]
#
# Builds floe-suffix-replay first (through scripts/build.sh). Timings are one
# thread; run on a quiet machine, or compare best-of-N runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-build/bench/suffix_replay.json}
TRACE_DIR=${2:-${FLOE_TRACE_DIR:-/work/shared/traces}}
scripts/build.sh floe-suffix-replay >/dev/null
BIN=build/bin/floe-suffix-replay
mkdir -p "$(dirname "$OUT")"

runs=()
add_run() {  # name, args...
  local name=$1
  shift
  echo "running $name" >&2
  runs+=("{\"name\":\"$name\",\"result\":$("$BIN" --json "$@")}")
}

for trace in dev-agentic dev-chat; do
  file="$TRACE_DIR/$trace.jsonl"
  [[ -f $file ]] || { echo "missing $file" >&2; exit 1; }
  for preset in arctic vllm arctic-spec32; do
    add_run "$trace/$preset/reference-compatible" --trace "$file" --preset "$preset" --reference-compatible
    add_run "$trace/$preset/floe" --trace "$file" --preset "$preset"
  done
  add_run "$trace/ngram" --trace "$file" --ngram
done

{
  printf '{"generated":"%s","host":"%s","runs":[' "$(date -u +%FT%TZ)" "$(hostname)"
  (IFS=,; printf '%s' "${runs[*]}")
  printf ']}\n'
} >"$OUT"
echo "wrote $OUT" >&2
