#!/usr/bin/env bash
# The LSTM speculator on the tiny built-in model (docs/speculative-decoding.md
# "The LSTM speculator"): trains one on the model's own greedy outputs
# (scripts/train_speculator.py, trace requests 40.. of each trace), then
# decodes the first N requests of each dev trace with the model's own greedy
# continuations (no forced ids: a speculator predicts its model, not a
# recording) through a real floe local cluster with --speculative off, lstm,
# suffix and suffix+lstm, and writes one JSON per run plus a summary
# (tokens/step, tokens/s, acceptance per draft position, output hashes)
# under OUT. Two settings: "open" drafts whatever the proposers offer (cost
# model off, no threshold: tokens/step as the replay counts them) and
# "default" the worker's defaults (cost model on: what wall clock rewards).
# Usage: bench/speculation/lstm_speculator.sh [N] [OUT] [SPECULATOR_DIR]
#   SPECULATOR_DIR: use this speculator instead of training one.
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-20}
OUT=${2:-/tmp/floe-lstm}
SPEC=${3:-}
mkdir -p "$OUT"
MODEL=build/models/builtin-tiny
if [[ ! -f $MODEL/config.json ]]; then
  echo "[lstm] $MODEL missing: run floe local --builtin tiny once (scripts/demo.sh)" >&2
  exit 1
fi
if [[ -z $SPEC ]]; then
  SPEC=$OUT/speculator
  echo "[lstm] training a speculator into $SPEC (progress below)" >&2
  /usr/bin/python3 scripts/train_speculator.py --model "$MODEL" --out "$SPEC" >"$OUT/train.json"
fi
for setting in open default; do
  for t in agentic chat; do
    for p in off lstm suffix suffix+lstm; do
      name=$setting-$t-${p/+/-}
      echo "[lstm] $name" >&2
      extra=()
      [[ $p == *lstm* ]] && extra+=(--speculator "$SPEC")
      [[ $setting == open ]] && extra+=(--overhead -1 --threshold 1000)
      build/bin/bench_trace_speculation --trace ../shared/traces/dev-$t.jsonl --max-requests "$N" --mode own \
        --own-max-tokens 64 --concurrency 1 --proposer "$p" "${extra[@]}" >"$OUT/$name.json" 2>"$OUT/$name.err"
    done
  done
done
/usr/bin/python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
summary = {}
for setting, t in [(s, t) for s in ("open", "default") for t in ("agentic", "chat")]:
    rows = {}
    for p in ("off", "lstm", "suffix", "suffix-lstm"):
        d = json.load(open(os.path.join(out, f"{setting}-{t}-{p}.json")))
        pas = d["passes"][0]
        row = {"tokens_per_step": round(pas["tokens_per_step"], 3), "tokens_per_s": round(pas["tokens_per_s"], 1),
               "output_hash": pas["output_hash"], "failed": pas["failed"]}
        for name, f in pas.get("by_proposer", {}).items():
            row[name] = {"drafts": f["drafts"], "draft_tokens": f["draft_tokens"], "accepted": f["accepted_tokens"],
                         "acceptance_per_position": [round(x, 3) for x in f["acceptance_per_position"][:3]]}
        rows[p] = row
    hashes = {r["output_hash"] for r in rows.values()}
    rows["same_outputs"] = len(hashes) == 1
    summary[f"{setting}-{t}"] = rows
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=2)
print(json.dumps(summary, indent=2))
PY
